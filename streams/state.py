"""Per-page, per-host and per-shard state in Redis: the source of truth.

Key layout (``P`` = ``settings.key_prefix``; ``{...}`` is a Redis Cluster hash tag: only
the text between the braces decides a key's slot, so every key of one host lives in one
slot, the two control keys share one, and every script below touches one slot only; the
same code runs on one Redis node and on a Redis Cluster, :mod:`streams.redis_conn`)::

    P:{host}:pages      HASH  url -> page record (streams/page_record.py), followed by the page's
                              estimator record once it has an observed crawl interval
                              (streams/estimation.py)
    P:{host}:inflight   HASH  url -> "order_id|issued_at"   (only pages with an order out)
    P:{host}:est        HASH  url -> estimator record in the old text form (only state
                              written before record version 1: read, and deleted when the
                              page's next estimator record is written into its page value)
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

The page record's layout and the ping dedup: :mod:`streams.page_record`.

Redis configuration: a crawled page's value (page and estimator record) is ~200 bytes;
above ``hash-max-listpack-value`` (Redis's default 64) a host's hash is a hashtable
(304 B per page instead of 248 B in ``docs/benchmarks.md "Compact binary records"``): run Redis
with ``hash-max-listpack-value 256`` (hosts up to ``hash-max-listpack-entries``, 128 by
default, pages stay listpack-encoded; a larger host is a hashtable, as before).

Each event's change is one Lua script that first compares the event's offset with the last
applied offset of its (host, topic, partition) and records it, so a redelivered event
(Faust is at-least-once) changes nothing.  ``recrawl explain`` shows a page's record
decoded (``HGET`` in ``redis-cli`` shows bytes).  No decision text is
stored: why a page was or wasn't crawled is kept by the worker that decided it
(:mod:`streams.decisions`, a bounded ring served by ``GET /pages``).
"""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio.cluster import ClusterPipeline
from redis.commands.core import AsyncScript

from streams.page_record import (
    N_SEEN,
    N_SOURCES,
    PAGE_DTYPE,
    PAGE_FORMAT,
    PAGE_STRUCT,
    PAGE_VERSION,
    PageState,
    estimator_of,
    estimator_part,
    ping_fingerprint,
    record_bytes,
)
from streams.records import MAX_IN_FLIGHT, MAX_RATE_PER_S, SOURCES
from streams.redis_conn import AsyncRedis, connect

__all__ = [
    "N_SEEN",
    "N_SOURCES",
    "PAGE_DTYPE",
    "PAGE_FORMAT",
    "PAGE_STRUCT",
    "PAGE_VERSION",
    "HostDump",
    "HostInfo",
    "PageState",
    "PingItem",
    "Store",
    "estimator_of",
    "estimator_part",
    "ping_fingerprint",
    "put_truth",
    "record_bytes",
    "truth_key",
]

_DECODE = operator.methodcaller("decode", "utf-8", "surrogateescape")


def _text_keys(values: dict[Any, Any]) -> dict[str, Any]:
    """A hash read through the bytes client with its fields as text (a shard's rebuild:
    10^6 fields, so decoded by ``map``, not one Python step each)."""
    if not values or isinstance(next(iter(values)), str):
        return values
    return dict(zip(map(_DECODE, values), values.values(), strict=True))


def _lua(name: str) -> str:
    """A script of ``streams/lua/`` (what its keys and arguments are: the file's header)."""
    # next to this file (importlib.resources.files("streams") found tests/streams, a
    # namespace portion earlier on sys.path, under pytest with an editable install)
    return (Path(__file__).resolve().parent / "lua" / name).read_text(encoding="utf-8")


# The scripts live in streams/lua/ (each file's header: its KEYS, ARGV and replies); every
# one starts with lib.lua's helpers; ``__N`` is the number of ping sources, ``__PFMT`` the
# page record's struct format, ``__PVER`` its version byte.
# (Redis's struct takes no repeat counts: "5H" is written "HHHHH")
_LIB = (_lua("lib.lua").replace("__PFMT", "<Bffd" + "H" * (N_SOURCES + N_SEEN))
        .replace("__SEEN", str(N_SEEN))
        .replace("__PVER", str(PAGE_VERSION)).replace("__PSIZE", str(PAGE_STRUCT.size))
        .replace("__N", str(N_SOURCES)))
_APPLY_PAGE = (_LIB + _lua("apply_page.lua").replace("__N", str(N_SOURCES))
               .replace("__SEEN", str(N_SEEN)))
_APPLY_PINGS = _LIB + _lua("apply_pings.lua").replace("__SEEN", str(N_SEEN))
_APPLY_OUTCOME = _LIB + _lua("apply_outcome.lua").replace("__N", str(N_SOURCES))
_APPLY_HOST = _LIB + _lua("apply_host.lua")
_APPLY_CONTROL = _LIB + _lua("apply_control.lua")
_ISSUE = _LIB + _lua("issue.lua")
_EXPIRE = _LIB + _lua("expire.lua")


#: one ping of :meth:`Store.queue_pings`: offset, url, source, changed_at, received_at,
#: fingerprint (the event's identity, digested here)
PingItem = tuple[int, str, str, float | None, float, str]


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
    #: url -> stored value (page record, then its estimator record), decoded by the caller
    #: (bytes when read through :attr:`Store.raw`)
    pages: dict[str, str | bytes]
    in_flight: dict[str, tuple[str, float]]
    #: url -> estimator record still in the old ``est`` hash (state written before record
    #: version 1); the current ones are in the page values: :meth:`estimator`
    estimators: dict[str, str]
    info: HostInfo
    #: urls its robots.txt disallows
    blocked: set[str] = field(default_factory=set)

    def estimator(self, url: str) -> str | None:
        """The page's estimator record (its value's tail, else an old one)."""
        v = self.pages.get(url)
        return estimator_of(v if v is None or isinstance(v, str) else
                            v.decode("utf-8", "surrogateescape"), self.estimators.get(url))


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


def _text(x: str | bytes) -> str:
    return x if isinstance(x, str) else x.decode("utf-8", "surrogateescape")


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

    def __init__(self, client: AsyncRedis, prefix: str, raw: AsyncRedis | None = None) -> None:
        self.redis = client
        #: a client that returns bytes (the rebuild's bulk reads: no text decoding of the
        #: records); None: ``client`` is used
        self.raw = raw
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
        """One Redis node or a Redis Cluster (``redis+cluster://``, :mod:`streams.redis_conn`);
        replies decoded with ``surrogateescape``, so a binary record is a ``str`` that
        encodes back to the same bytes (:func:`record_bytes`)."""
        return cls(connect(url, decode_responses=True, encoding_errors="surrogateescape"),
                   prefix, raw=connect(url, decode_responses=False))

    async def close(self) -> None:
        await self.redis.aclose()
        if self.raw is not None:
            await self.raw.aclose()

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
        order (``_APPLY_PINGS``); the result has ``code, page value`` per ping.  Duplicates
        are found in the page record (each source's last fingerprint): ``window_s`` and
        ``max_seen`` are kept for callers and no longer used."""
        keys = [self.key(host, k) for k in ("pages", "offsets")]
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
            "estimator": estimator_of(page, est),
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
        """Everything of ``hosts`` a shard needs, in one pipeline (through :attr:`raw` when
        there is one: page values stay bytes, for ``numpy.frombuffer``)."""
        pipe = (self.raw or self.redis).pipeline(transaction=False)
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
                    _text_keys(pages),
                    {_text(u): _in_flight(_text(v)) for u, v in fl.items()},
                    {_text(u): _text(v) for u, v in est.items()},
                    _host_info({_text(k): _text(v) for k, v in info.items()}),
                    {_text(u) for u in blocked},
                )
            )
        return out

    async def get_pages(self, host: str, urls: Sequence[str]) -> dict[str, tuple[str | None, ...]]:
        """For each url: (page value, in flight, estimator record) as stored (None when
        absent; the estimator record is the page value's tail, or an old one in ``est``)."""
        if not urls:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        pipe.hmget(self.key(host, "pages"), list(urls))
        pipe.hmget(self.key(host, "inflight"), list(urls))
        pipe.hmget(self.key(host, "est"), list(urls))
        pages, fl, est = await pipe.execute()
        return {u: (pages[i], fl[i], estimator_of(pages[i], est[i])) for i, u in enumerate(urls)}

    async def blocked_among(self, host: str, urls: Sequence[str]) -> set[str]:
        """The ``urls`` that the host's robots.txt disallows (``P:{host}:blocked``)."""
        if not urls:
            return set()
        flags: Any = await self.redis.smismember(self.key(host, "blocked"), list(urls))
        return {u for u, f in zip(urls, flags, strict=True) if f}

    async def delete_all(self) -> int:
        """Delete every key of this prefix (benchmarks and tools; SCAN, so on a cluster
        every master); returns how many."""
        n = 0
        batch: list[Any] = []
        async for k in self.redis.scan_iter(match=f"{self.prefix}:*", count=10_000):
            batch.append(k)
            if len(batch) >= 1000:
                for key in batch:  # one key per call: keys of several slots on a cluster
                    n += int(await self.redis.delete(key))
                batch.clear()
        for key in batch:
            n += int(await self.redis.delete(key))
        return n

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
