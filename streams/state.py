"""Per-page, per-host and per-shard state in Redis: the source of truth.

Key layout (``P`` = ``settings.key_prefix``; ``{...}`` is a Redis Cluster hash tag: only
the text between the braces decides a key's slot, so every key of one host lives in one
slot, the two control keys share one, and every script below touches one slot only; the
same code runs on one Redis node and on a Redis Cluster, :mod:`streams.redis_conn`)::

    P:{host}:pages      HASH  url -> page value "importance|prior|last_crawl|n_sitemap,..."
    P:{host}:inflight   HASH  url -> "order_id|issued_at"   (only pages with an order out)
    P:{host}:est        HASH  url -> "estimates|base64 estimator state" (pages with at least
                              one observed crawl interval; streams/estimation.py)
    P:{host}:seen       ZSET  ping fingerprint -> received_at (duplicates, trimmed by age and
                              to the newest ``ping_dedup_max_per_host``)
    P:{host}:host       HASH  rate, mif (capacity), tokens, ts (the token bucket); rate is
                              the smallest of rate_operator, rate_robots, rate_pushback (who
                              set it: HostEvent.source) with reason_<source>; robots: the
                              digest of the host's robots.txt as last announced
    P:{host}:blocked    SET   urls the host's robots.txt disallows (never ordered; emptied
                              when the robots.txt digest changes)
    P:{host}:offsets    HASH  "<topic>:<partition>[~<epoch>]" -> last applied offset
    P:shard:{p}:hosts   SET   hosts whose events arrive on partition p (find a shard's pages
                              without SCAN)
    P:control:{ctl}     HASH  budget_per_s, paused, t_delay_s, order_timeout_s, max_interval_s
                              (``P:control`` before the hash tag: read when this is empty)
    P:control:{ctl}:offsets  HASH  "<topic>:<partition>[~<epoch>]" -> last applied offset
    P:{logs}            HASH  "<topic>:<partition>" -> "epoch|offset|timestamp_ms": which
                              incarnation of each input partition's log the offsets
                              belong to (a topic created again: streams/logs.py)
    P:sched:shards      HASH  partition -> JSON {weight, log_threshold, share_per_s, ts
                              (Redis's clock), worker, ready, web (the worker's HTTP
                              address), budget_per_s (the budget the worker runs with),
                              worker_emitted_per_s}
    P:truth             STRING JSON {accuracy, fresh_now, t_s, measuring, source}: the live
                              accuracy measured by a test web's truth (``recrawl demo``
                              writes it every second with a 10 s expiry); ``/stats`` and
                              ``/dashboard`` show it only while it exists

Each event's change is one Lua script that first compares the event's offset with the last
applied offset of its (host, topic, partition) and records it, so a redelivered event
(Faust is at-least-once) changes nothing.  A page value is plain text so ``HGET`` in
``redis-cli`` is readable; ``last_crawl`` 0 means never crawled.  No decision text is
stored: why a page was or wasn't crawled is kept by the worker that decided it
(:mod:`streams.decisions`, a bounded ring served by ``GET /pages``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from redis.asyncio.cluster import ClusterPipeline
from redis.commands.core import AsyncScript

from streams.records import MAX_IN_FLIGHT, MAX_RATE_PER_S, SOURCES
from streams.redis_conn import AsyncRedis, connect

__all__ = [
    "N_SOURCES",
    "HostDump",
    "HostInfo",
    "PageState",
    "PingItem",
    "Store",
    "ping_fingerprint",
    "put_truth",
    "truth_key",
]

N_SOURCES = len(SOURCES)


@dataclass(frozen=True, slots=True)
class PageState:
    """One page as stored in ``P:{host}:pages`` (see the module docstring)."""

    importance: float = 1.0
    prior_change_rate_per_s: float | None = None
    last_crawl_s: float = 0.0
    signals: tuple[int, ...] = (0,) * N_SOURCES

    @property
    def crawled(self) -> bool:
        return self.last_crawl_s > 0.0

    def encode(self) -> str:
        prior = "" if self.prior_change_rate_per_s is None else repr(self.prior_change_rate_per_s)
        last = "0" if self.last_crawl_s == 0 else f"{self.last_crawl_s:.3f}"
        counts = ",".join(str(n) for n in self.signals)
        return f"{self.importance!r}|{prior}|{last}|{counts}"

    @classmethod
    def decode(cls, value: str) -> PageState:
        imp, prior, last, counts = value.split("|")
        signals = tuple(int(n) for n in counts.split(","))
        return cls(float(imp), float(prior) if prior else None, float(last), signals)

    def after_crawl(self, fetched_at_s: float) -> PageState:
        return replace(self, last_crawl_s=fetched_at_s, signals=(0,) * N_SOURCES)


_LIB = r"""
local function parts(v)
  local a, b, c, d = string.match(v, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  return a, b, c, d
end
local function applied(okey, field, offset)
  local last = redis.call('HGET', okey, field)
  return last and tonumber(last) >= tonumber(offset)
end
"""

# KEYS: pages, offsets, inflight, est
# ARGV: offset field, offset, url, deleted 0/1, importance, prior ('' = keep)
_APPLY_PAGE = _LIB + r"""
if applied(KEYS[2], ARGV[1], ARGV[2]) then
  return {'dup-offset', redis.call('HGET', KEYS[1], ARGV[3]) or ''}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local url = ARGV[3]
if ARGV[4] == '1' then
  redis.call('HDEL', KEYS[1], url)
  redis.call('HDEL', KEYS[3], url)
  redis.call('HDEL', KEYS[4], url)
  return {'deleted', ''}
end
local cur = redis.call('HGET', KEYS[1], url)
local v
if cur then
  local imp, prior, last, counts = parts(cur)
  if ARGV[6] ~= '' then prior = ARGV[6] end
  v = ARGV[5] .. '|' .. prior .. '|' .. last .. '|' .. counts
else
  v = ARGV[5] .. '|' .. ARGV[6] .. '|0|' .. string.rep('0,', __N - 1) .. '0'
end
redis.call('HSET', KEYS[1], url, v)
return {cur and 'updated' or 'added', v}
""".replace("__N", str(N_SOURCES))

# A batch of pings of one host from one (topic, partition), in offset order: the stored
# offset is read once and written once (a ping at or below it is 'dup-offset').
# KEYS: pages, offsets, seen
# ARGV: offset field, t_delay_s, dedup window s, most fingerprints kept, then per ping 6
#       values: offset, url, source index (1-based), changed_at ('' = unknown),
#       received_at, fingerprint
# Returns code, page value per ping.  The rule is models.decision.pings' "live"
# (tests/streams/test_ping_rule_lua.py).  Duplicates: a fingerprint seen within the window;
# the window is trimmed once at the end, and an entry the sequential trims would already
# have removed (score below ``cut``) does not count, so a batch decides exactly as the
# pings one at a time would.
_APPLY_PINGS = _LIB + r"""
local stored = redis.call('HGET', KEYS[2], ARGV[1])
local done = stored and tonumber(stored) or -1
local top, top_s = done, nil
local t_delay, window, most = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local cut = nil
local res = {}
for i = 5, #ARGV, 6 do
  local off, url = tonumber(ARGV[i]), ARGV[i + 1]
  local cur = redis.call('HGET', KEYS[1], url)
  local code, v = nil, cur or ''
  if off <= done then
    code = 'dup-offset'
  else
    if off > top then top, top_s = off, ARGV[i] end
    if not cur then
      code = 'unknown'
    else
      local received, fp = tonumber(ARGV[i + 4]), ARGV[i + 5]
      local seen = redis.call('ZSCORE', KEYS[3], fp)
      if seen and (cut == nil or tonumber(seen) >= cut) then
        code = 'duplicate'
      else
        redis.call('ZADD', KEYS[3], received, fp)
        if cut == nil or received - window > cut then cut = received - window end
        local imp, prior, last_s, counts = parts(cur)
        local last = tonumber(last_s)
        local changed = tonumber(ARGV[i + 3])
        if last > 0 and ((changed and changed < last) or received < last) then
          code = 'before-crawl'
        elseif last > 0 and received <= last + t_delay then
          code = 'within-delay'
        else
          local n, k, out = tonumber(ARGV[i + 2]), 0, {}
          for c in string.gmatch(counts, '[^,]+') do
            k = k + 1
            if k == n then c = tostring(tonumber(c) + 1) end
            out[#out + 1] = c
          end
          v = imp .. '|' .. prior .. '|' .. last_s .. '|' .. table.concat(out, ',')
          redis.call('HSET', KEYS[1], url, v)
          code = 'applied'
        end
      end
    end
  end
  res[#res + 1] = code
  res[#res + 1] = v
end
if top_s then redis.call('HSET', KEYS[2], ARGV[1], top_s) end
if cut then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. cut)
  -- and at most `most` fingerprints per host (the oldest go first): a flood of distinct
  -- pings cannot grow the set toward Redis OOM; an old duplicate may then count again
  local over = redis.call('ZCARD', KEYS[3]) - most
  if over > 0 then redis.call('ZREMRANGEBYRANK', KEYS[3], 0, over - 1) end
end
return res
"""

# KEYS: pages, offsets, inflight, est, blocked, host
# ARGV: offset field, offset, url, order_id ('' = any), fetched_at, new estimator record
#       ('' = keep), compare-and-set '1'/'0', expected page value, expected estimator
#       record ('' = none), disallowed '1'/'0', robots digest
# The page's last crawl becomes the fetch time and its signal counts restart (an outcome
# not newer than the last crawl changes neither: 'stale'; one at the same millisecond is
# that crawl's record written twice, e.g. by a producer retry); the matching order leaves
# flight.
# A new estimator record was computed in Python from the page value and record read before;
# with compare-and-set, if either changed since (a ping, another worker) nothing is written,
# not even the offset ('conflict': the agent re-reads and recomputes).  The offset check
# comes first, so a redelivered outcome never adds its interval twice.
_APPLY_OUTCOME = _LIB + r"""
if applied(KEYS[2], ARGV[1], ARGV[2]) then
  return {'dup-offset', redis.call('HGET', KEYS[1], ARGV[3]) or '', 0}
end
local url = ARGV[3]
local cur = redis.call('HGET', KEYS[1], url)
if ARGV[7] == '1' then
  local est = redis.call('HGET', KEYS[4], url) or ''
  if (cur or '') ~= ARGV[8] or est ~= ARGV[9] then return {'conflict', cur or '', 0} end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if not cur then return {'unknown', '', 0} end
local imp, prior, last_s, counts = parts(cur)
local code, v = 'stale', cur
if ARGV[10] == '1' then
  -- not fetched (robots.txt): no crawl; blocked unless a newer robots.txt was announced
  local robots = redis.call('HGET', KEYS[6], 'robots')
  if not robots or robots == ARGV[11] then
    redis.call('SADD', KEYS[5], url)
    code = 'blocked'
  else
    code = 'stale-robots'
  end
elseif tonumber(ARGV[5]) > tonumber(last_s) then
  code = 'applied'
  v = imp .. '|' .. prior .. '|' .. ARGV[5] .. '|' .. string.rep('0,', __N - 1) .. '0'
  redis.call('HSET', KEYS[1], url, v)
  if ARGV[6] ~= '' then redis.call('HSET', KEYS[4], url, ARGV[6]) end
end
local cleared = 0
local fl = redis.call('HGET', KEYS[3], url)
if fl then
  local oid = string.match(fl, '^([^|]*)|')
  if ARGV[4] == '' or oid == ARGV[4] then
    redis.call('HDEL', KEYS[3], url)
    cleared = 1
  end
end
return {code, v, cleared}
""".replace("__N", str(N_SOURCES))

# KEYS: host, offsets, blocked
# ARGV: offset field, offset, rate ('' = lift this source's limit), max in flight ('' =
#       unset; operator only), source (operator|robots|pushback), reason, robots digest
#       ('' = none), default rate
# Each source keeps its own rate; ``rate`` (what _ISSUE reads) is the operator's (else the
# default) lowered by the robots.txt's and the push-back's: absent when that is the default
# (a Crawl-delay never raises a host above it).  A hash written before sources existed has
# ``rate`` only: it is the operator's.  A robots digest other than the stored one empties
# the blocked set.  Returns code, the rate now ('' = default), 1 if the blocked set was emptied.
_APPLY_HOST = _LIB + r"""
if applied(KEYS[2], ARGV[1], ARGV[2]) then
  return {'dup-offset', redis.call('HGET', KEYS[1], 'rate') or '', 0}
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local sources = {'rate_operator', 'rate_robots', 'rate_pushback'}
local h = redis.call('HMGET', KEYS[1], 'rate', sources[1], sources[2], sources[3])
if h[1] and not h[2] and not h[3] and not h[4] then
  redis.call('HSET', KEYS[1], 'rate_operator', h[1])
end
local src = ARGV[5]
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], 'rate_' .. src, 'reason_' .. src)
else
  redis.call('HSET', KEYS[1], 'rate_' .. src, ARGV[3])
  if ARGV[6] == '' then redis.call('HDEL', KEYS[1], 'reason_' .. src)
  else redis.call('HSET', KEYS[1], 'reason_' .. src, ARGV[6]) end
end
if src == 'operator' then
  if ARGV[4] == '' then redis.call('HDEL', KEYS[1], 'mif')
  else redis.call('HSET', KEYS[1], 'mif', ARGV[4]) end
end
-- the operator's rate (else the default: best_s nil), lowered by the others
local op_s = redis.call('HGET', KEYS[1], 'rate_operator')
local best, best_s = tonumber(op_s) or tonumber(ARGV[8]), op_s
for i = 2, 3 do
  local r_s = redis.call('HGET', KEYS[1], sources[i])
  local r = r_s and tonumber(r_s)
  if r and r < best then best, best_s = r, r_s end
end
if best_s then redis.call('HSET', KEYS[1], 'rate', best_s)
else redis.call('HDEL', KEYS[1], 'rate') end
local cleared = 0
if ARGV[7] ~= '' and redis.call('HGET', KEYS[1], 'robots') ~= ARGV[7] then
  redis.call('HSET', KEYS[1], 'robots', ARGV[7])
  redis.call('DEL', KEYS[3])
  cleared = 1
end
return {'applied', best_s or '', cleared}
"""

# KEYS: control, offsets;  ARGV: offset field, offset, field, value, ...
_APPLY_CONTROL = _LIB + r"""
if applied(KEYS[2], ARGV[1], ARGV[2]) then return 'dup-offset' end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
return 'applied'
"""

# Issue a tick's orders of one host: each page exists and has none in flight, the host
# has a token and room.  The bucket is read once and written once (when anything left).
# KEYS: pages, inflight, host, blocked
# ARGV: now, default rate, default max in flight, burst, then (url, order_id) pairs
# Returns code, payload per pair: 'ok' page value | 'gone' | 'in-flight' "oid|at" |
# 'blocked' (robots.txt) | 'no-token' seconds until the next token | 'max-in-flight'.
_ISSUE = _LIB + r"""
local now = tonumber(ARGV[1])
local h = redis.call('HMGET', KEYS[3], 'rate', 'mif', 'tokens', 'ts')
local rate = tonumber(h[1]) or tonumber(ARGV[2])
local mif = tonumber(h[2]) or tonumber(ARGV[3])
local burst = tonumber(ARGV[4])
local tokens = tonumber(h[3]) or burst
local ts = tonumber(h[4]) or now
if now > ts then tokens = math.min(burst, tokens + (now - ts) * rate) end
local nfl = redis.call('HLEN', KEYS[2])
local out, took = {}, false
for i = 5, #ARGV, 2 do
  local url = ARGV[i]
  local page = redis.call('HGET', KEYS[1], url)
  local fl = page and redis.call('HGET', KEYS[2], url)
  if not page then
    out[#out + 1] = 'gone'; out[#out + 1] = ''
  elseif fl then
    out[#out + 1] = 'in-flight'; out[#out + 1] = fl
  elseif redis.call('SISMEMBER', KEYS[4], url) == 1 then
    out[#out + 1] = 'blocked'; out[#out + 1] = ''
  elseif tokens < 1 then
    out[#out + 1] = 'no-token'; out[#out + 1] = tostring((1 - tokens) / rate)
  elseif mif > 0 and nfl >= mif then
    out[#out + 1] = 'max-in-flight'; out[#out + 1] = ''
  else
    tokens, nfl, took = tokens - 1, nfl + 1, true
    redis.call('HSET', KEYS[2], url, ARGV[i + 1] .. '|' .. ARGV[1])
    out[#out + 1] = 'ok'; out[#out + 1] = page
  end
end
if took then redis.call('HSET', KEYS[3], 'tokens', tostring(tokens), 'ts', ARGV[1]) end
return out
"""

# KEYS: inflight;  ARGV: url, order_id
_EXPIRE = _LIB + r"""
local fl = redis.call('HGET', KEYS[1], ARGV[1])
if not fl or string.match(fl, '^([^|]*)|') ~= ARGV[2] then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
"""


#: one ping of :meth:`Store.queue_pings`: offset, url, source, changed_at, received_at,
#: fingerprint (the event's identity, digested here)
PingItem = tuple[int, str, str, float | None, float, str]


def ping_fingerprint(fp: str) -> str:
    """A short stable digest of a ping's identity (12 base64 characters)."""
    return base64.b64encode(hashlib.blake2b(fp.encode(), digest_size=9).digest()).decode()


@dataclass(frozen=True, slots=True)
class HostInfo:
    rate_per_s: float | None = None
    max_in_flight: int | None = None
    tokens: float | None = None
    updated_s: float | None = None
    #: source (operator, robots, pushback) -> (rate, reason) as stored
    limits: dict[str, tuple[float | None, str | None]] | None = None
    robots_digest: str | None = None


@dataclass(slots=True)
class HostDump:
    """Everything about one host that a shard needs to schedule it."""

    host: str
    pages: dict[str, str]  #: url -> stored value (PageState.encode), decoded by the caller
    in_flight: dict[str, tuple[str, float]]
    estimators: dict[str, str]
    info: HostInfo
    #: urls its robots.txt disallows
    blocked: set[str] = field(default_factory=set)


def _host_info(raw: dict[str, str]) -> HostInfo:
    """A host's stored capacity and bucket; a stored value outside the schema's bounds (or
    unreadable: written before the bounds existed) is read as the nearest bound or unset,
    so that a host can never stop its shard from loading."""
    def f(k: str, hi: float = math.inf) -> float | None:
        try:
            x = float(raw[k]) if k in raw else None
        except ValueError:
            return None
        return None if x is None or math.isnan(x) else max(-hi, min(hi, x))

    rate, mif = f("rate", MAX_RATE_PER_S), f("mif", MAX_IN_FLIGHT)
    limits = {src: (f(f"rate_{src}", MAX_RATE_PER_S), raw.get(f"reason_{src}"))
              for src in ("operator", "robots", "pushback") if f"rate_{src}" in raw}
    return HostInfo(rate if rate is None or rate > 0 else None,
                    None if mif is None else max(0, int(mif)), f("tokens", 1e18), f("ts", 1e18),
                    limits, raw.get("robots"))


def _in_flight(value: str) -> tuple[str, float]:
    oid, _, at = value.partition("|")
    return oid, float(at or 0.0)


async def _run(script: AsyncScript, keys: list[Any], args: list[Any], client: Any) -> Any:
    """Call ``script`` on ``client`` (a client or a pipeline, one node or a cluster).

    On a cluster pipeline redis-py refuses ``evalsha()`` but queues the plain command, routed
    by the keys' slot; a NOSCRIPT reply (a master that lost its scripts) then comes back in
    the results, and the caller loads the scripts and retries (every script here is
    offset- or id-guarded).  Elsewhere the script object itself checks and loads."""
    if isinstance(client, ClusterPipeline):
        return client.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
    return await script(keys=keys, args=args, client=client)


def truth_key(prefix: str) -> str:
    return f"{prefix}:truth"


async def put_truth(
    client: AsyncRedis, prefix: str, truth: dict[str, Any], ttl_s: float = 10.0
) -> None:
    """Publish what a test web knows (the live accuracy) for ``/stats`` and ``/dashboard``;
    it expires after ``ttl_s`` so a stopped demo leaves no stale number on show."""
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
             for k, v in truth.items()}
    await client.set(truth_key(prefix), json.dumps(clean, allow_nan=False),
                     px=max(1, int(ttl_s * 1000)))


class Store:
    """Async access to the state; every mutation is one Lua script (see module docstring)."""

    def __init__(self, client: AsyncRedis, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix
        #: the epoch of an input partition's log (streams.logs.LogEpochs sets it)
        self.epoch_of: Callable[[str, int], int] = lambda _topic, _partition: 0
        self.apply_page_script = client.register_script(_APPLY_PAGE)
        self.apply_pings_script = client.register_script(_APPLY_PINGS)
        self.apply_outcome_script = client.register_script(_APPLY_OUTCOME)
        self.apply_host_script = client.register_script(_APPLY_HOST)
        self.apply_control_script = client.register_script(_APPLY_CONTROL)
        self.issue_script = client.register_script(_ISSUE)
        self.expire_script = client.register_script(_EXPIRE)

    async def load_scripts(self) -> None:
        """Load every script into Redis (after a start or a Redis restart: NOSCRIPT)."""
        for sc in (self.apply_page_script, self.apply_pings_script, self.apply_outcome_script,
                   self.apply_host_script, self.apply_control_script, self.issue_script,
                   self.expire_script):
            sc.sha = await self.redis.script_load(sc.script)

    @classmethod
    def from_url(cls, url: str, prefix: str) -> Store:
        """One Redis node or a Redis Cluster (``redis+cluster://``, :mod:`streams.redis_conn`)."""
        return cls(connect(url, decode_responses=True), prefix)

    async def close(self) -> None:
        await self.redis.aclose()

    # -- keys ----------------------------------------------------------------------------
    def key(self, host: str, kind: str) -> str:
        return f"{self.prefix}:{{{host}}}:{kind}"

    def shard_key(self, partition: int) -> str:
        return f"{self.prefix}:shard:{{{partition}}}:hosts"

    @property
    def control_key(self) -> str:
        return f"{self.prefix}:control:{{ctl}}"

    @property
    def control_offsets_key(self) -> str:
        """Shares ``control_key``'s hash tag: the control script touches both (one slot)."""
        return f"{self.prefix}:control:{{ctl}}:offsets"

    @property
    def legacy_control_key(self) -> str:
        """Where the control hash was before it had a hash tag (read when the new one is
        empty, so that an upgrade keeps the budget set by ``recrawl.control``)."""
        return f"{self.prefix}:control"

    @property
    def shards_key(self) -> str:
        return f"{self.prefix}:sched:shards"

    @property
    def truth_key(self) -> str:
        return truth_key(self.prefix)

    def offset_field(self, topic: str, partition: int) -> str:
        """The offsets hash field of ``topic``'s ``partition``: ``<topic>:<partition>``, or
        ``<topic>:<partition>~<epoch>`` once the partition's log was replaced (a topic
        deleted and created again: :mod:`streams.logs`)."""
        e = self.epoch_of(topic, partition)
        return f"{topic}:{partition}" if e == 0 else f"{topic}:{partition}~{e}"

    # -- queued mutations (``client`` may be a pipeline) ------------------------------------
    async def queue_page(
        self, client: Any, url: str, host: str, *, importance: float,
        prior: float | None, deleted: bool, topic: str, partition: int, offset: int,
    ) -> Any:
        keys = [self.key(host, k) for k in ("pages", "offsets", "inflight", "est")]
        args: list[Any] = [
            self.offset_field(topic, partition), offset, url, "1" if deleted else "0",
            repr(float(importance)), "" if prior is None else repr(float(prior)),
        ]
        return await _run(self.apply_page_script, keys, args, client)

    def queue_pings(
        self, client: Any, host: str, pings: Sequence[PingItem], *, t_delay_s: float,
        window_s: float, topic: str, partition: int, max_seen: int = 10_000,
    ) -> Any:
        """One script call for a batch of one host's pings from one partition, in offset
        order (``_APPLY_PINGS``); the result has ``code, page value`` per ping."""
        keys = [self.key(host, k) for k in ("pages", "offsets", "seen")]
        args: list[Any] = [self.offset_field(topic, partition), repr(t_delay_s),
                           repr(window_s), max_seen]
        for offset, url, source, changed_at, received_at, fingerprint in pings:
            args += [offset, url, SOURCES.index(source) + 1,
                     "" if changed_at is None else repr(changed_at), repr(received_at),
                     ping_fingerprint(fingerprint)]
        # straight EVALSHA (no SCRIPT EXISTS per pipeline); the caller reloads on NOSCRIPT
        return client.execute_command(
            "EVALSHA", self.apply_pings_script.sha, len(keys), *keys, *args)

    async def queue_outcome(
        self, client: Any, url: str, host: str, *, order_id: str | None, fetched_at: float,
        new_estimator: str | None, topic: str, partition: int, offset: int,
        expect: tuple[str | None, str | None] | None = None,
        disallowed: bool = False, robots_digest: str | None = None,
    ) -> Any:
        """``expect``: (page value, estimator record) the new record was computed from;
        given, nothing is written unless both are still stored ('conflict').
        ``disallowed``: robots.txt forbade the fetch: no crawl, the page is blocked
        ('blocked'; 'stale-robots' if a robots.txt other than ``robots_digest`` was
        announced since)."""
        keys = [self.key(host, k)
                for k in ("pages", "offsets", "inflight", "est", "blocked", "host")]
        args: list[Any] = [
            self.offset_field(topic, partition), offset, url, order_id or "",
            f"{fetched_at:.3f}", new_estimator or "",
            "0" if expect is None else "1",
            "" if expect is None else expect[0] or "",
            "" if expect is None else expect[1] or "",
            "1" if disallowed else "0", robots_digest or "",
        ]
        return await _run(self.apply_outcome_script, keys, args, client)

    async def queue_host(
        self, client: Any, host: str, *, rate_per_s: float | None, max_in_flight: int | None,
        topic: str, partition: int, offset: int, source: str = "operator",
        reason: str | None = None, robots_digest: str | None = None,
        default_rate_per_s: float = 1.0,
    ) -> Any:
        """Returns code, the host's rate now ('' = default), 1 if its blocked set was
        emptied (``_APPLY_HOST``)."""
        keys = [self.key(host, "host"), self.key(host, "offsets"), self.key(host, "blocked")]
        args: list[Any] = [
            self.offset_field(topic, partition), offset,
            "" if rate_per_s is None else repr(float(rate_per_s)),
            "" if max_in_flight is None else str(max_in_flight),
            source, reason or "", robots_digest or "", repr(float(default_rate_per_s)),
        ]
        return await _run(self.apply_host_script, keys, args, client)

    async def queue_control(
        self, client: Any, fields: dict[str, str], *, topic: str, partition: int, offset: int
    ) -> Any:
        args: list[Any] = [self.offset_field(topic, partition), offset]
        for k, v in fields.items():
            args += [k, v]
        return await _run(self.apply_control_script,
                          [self.control_key, self.control_offsets_key], args, client)

    def queue_issue(
        self, client: Any, host: str, orders: Sequence[tuple[str, str]], *, now_s: float,
        default_rate: float, default_mif: int, burst: float,
    ) -> Any:
        """One script call for all of a tick's ``(url, order_id)`` of one host (``_ISSUE``)."""
        keys = [self.key(host, k) for k in ("pages", "inflight", "host", "blocked")]
        args: list[Any] = [repr(now_s), repr(default_rate), default_mif, repr(burst)]
        for url, oid in orders:
            args += [url, oid]
        # straight EVALSHA: a pipeline would ask SCRIPT EXISTS first (a round trip per tick);
        # the scheduler loads the scripts at start and again on NOSCRIPT
        return client.execute_command("EVALSHA", self.issue_script.sha, len(keys), *keys, *args)

    async def queue_expire(self, client: Any, url: str, host: str, *, order_id: str) -> Any:
        return await _run(self.expire_script, [self.key(host, "inflight")], [url, order_id],
                          client)

    # -- reads ---------------------------------------------------------------------------
    async def get_page(self, host: str, url: str) -> PageState | None:
        v: Any = await self.redis.hget(self.key(host, "pages"), url)
        return PageState.decode(v) if v else None

    async def get_page_raw(self, host: str, url: str) -> str | None:
        v: Any = await self.redis.hget(self.key(host, "pages"), url)
        return str(v) if v else None

    async def explain_data(self, host: str, url: str) -> dict[str, Any]:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(self.key(host, "pages"), url)
        pipe.hget(self.key(host, "inflight"), url)
        pipe.hget(self.key(host, "est"), url)
        pipe.hgetall(self.key(host, "host"))
        pipe.sismember(self.key(host, "blocked"), url)
        page, fl, est, hinfo, blocked = await pipe.execute()
        return {
            "page": PageState.decode(page) if page else None,
            "in_flight": _in_flight(fl) if fl else None,
            "estimator": est,
            "host": _host_info(hinfo),
            "blocked": bool(blocked),
        }

    async def get_host(self, host: str) -> HostInfo:
        raw: Any = await self.redis.hgetall(self.key(host, "host"))
        return _host_info(raw)

    async def host_stats(self, host: str) -> dict[str, Any]:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.key(host, "host"))
        pipe.hlen(self.key(host, "pages"))
        pipe.hgetall(self.key(host, "inflight"))
        pipe.scard(self.key(host, "blocked"))
        info, n, fl, blocked = await pipe.execute()
        return {"info": _host_info(info), "pages": int(n), "in_flight": dict(fl),
                "blocked": int(blocked)}

    async def shard_hosts(self, partition: int) -> list[str]:
        members: Any = await self.redis.smembers(self.shard_key(partition))
        return sorted(members)

    async def dump_hosts(self, hosts: Sequence[str]) -> list[HostDump]:
        pipe = self.redis.pipeline(transaction=False)
        for h in hosts:
            pipe.hgetall(self.key(h, "pages"))
            pipe.hgetall(self.key(h, "inflight"))
            pipe.hgetall(self.key(h, "est"))
            pipe.hgetall(self.key(h, "host"))
            pipe.smembers(self.key(h, "blocked"))
        res = await pipe.execute()
        out = []
        for i, h in enumerate(hosts):
            pages, fl, est, info, blocked = res[5 * i : 5 * i + 5]
            out.append(
                HostDump(
                    h,
                    dict(pages),
                    {u: _in_flight(v) for u, v in fl.items()},
                    dict(est),
                    _host_info(info),
                    set(blocked),
                )
            )
        return out

    async def get_pages(self, host: str, urls: Sequence[str]) -> dict[str, tuple[str | None, ...]]:
        """For each url: (page value, in flight, estimator) as stored (None when absent)."""
        if not urls:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(self.key(host, "pages"), list(urls))
        pipe.hmget(self.key(host, "inflight"), list(urls))
        pipe.hmget(self.key(host, "est"), list(urls))
        pages, fl, est = await pipe.execute()
        return {u: (pages[i], fl[i], est[i]) for i, u in enumerate(urls)}

    async def blocked_among(self, host: str, urls: Sequence[str]) -> set[str]:
        """The ``urls`` that the host's robots.txt disallows (``P:{host}:blocked``)."""
        if not urls:
            return set()
        flags: Any = await self.redis.smismember(self.key(host, "blocked"), list(urls))
        return {u for u, f in zip(urls, flags, strict=True) if f}

    async def server_time(self) -> float:
        """Redis's clock (s): one clock for every worker, whatever their own skew."""
        sec, usec = await self.redis.time()
        return float(sec) + float(usec) / 1e6

    async def get_control(self) -> dict[str, str]:
        raw: Any = await self.redis.hgetall(self.control_key)
        if not raw:
            raw = await self.redis.hgetall(self.legacy_control_key)
        return dict(raw)

    async def get_truth(self) -> dict[str, Any] | None:
        """The live accuracy a test web measured (:func:`put_truth`), None when unknown."""
        raw: Any = await self.redis.get(self.truth_key)
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    async def get_shards(self) -> dict[int, dict[str, Any]]:
        raw: Any = await self.redis.hgetall(self.shards_key)
        return {int(k): json.loads(v) for k, v in raw.items()}

    async def put_shards(self, entries: dict[int, dict[str, Any]]) -> None:
        if entries:
            await self.redis.hset(
                self.shards_key, mapping={str(k): json.dumps(v) for k, v in entries.items()}
            )
