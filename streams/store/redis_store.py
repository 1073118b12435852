"""Per-page, per-host and per-shard state in Redis: the source of truth.

Over 600 lines on purpose: this docstring is the reference of the key layout, the page
buckets and the short fields (~160 lines, read with the Lua scripts that follow it), and
:class:`Store` is the Redis half of :class:`streams.store.protocol.StateStore`, whose
methods it must all implement; the admin and demo reads among them (``explain_data``,
``host_stats``, ``get_truth``, ``delete_all``) are a few lines each and leave with the
protocol's, not apart from it.

Key layout (``P`` = ``settings.key_prefix``; ``{...}`` is a Redis Cluster hash tag: only
the text between the braces decides a key's slot, so every key of one host lives in one
slot, the two control keys share one, and every script below touches one slot only; the
same code runs on one Redis node and on a Redis Cluster, :mod:`streams.store.redis_conn`)::

    P:{host}:pages      HASH  field -> page record (streams/store/page_record.py), followed by the
                              page's estimator record once it has an observed crawl interval
                              (streams/estimates/record.py); bucket 0 of the host's pages;
                              the field is the url without https://<host> ("Short fields")
    P:{host}:pages:<b>  HASH  the same, bucket b >= 1 (only hosts past 120 pages: "Page
                              buckets" below)
    P:{host}:buckets    HASH  l, p (the buckets' layout), n (pages in them); absent: one
                              bucket
    P:{host}:inflight   HASH  url -> "order_id|issued_at"   (only pages with an order out)
    P:{host}:host       HASH  rate, mif (capacity), tokens, ts (the token bucket); rate is
                              the smallest of rate_operator, rate_robots, rate_pushback (who
                              set it: HostEvent.source) with reason_<source>; robots: the
                              digest of the host's robots.txt as last announced
    P:{host}:prior      HASH  n, mean, log: the sums of the host's pages' contributions to its
                              change-rate prior (streams/store/host_prior.py); absent: none
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
                              belong to (a topic created again: streams/store/logs.py)
    P:sched:shards      HASH  partition -> JSON {weight, log_threshold, share_per_s, ts
                              (Redis's clock), worker, ready, web (the worker's HTTP
                              address), budget_per_s (the budget the worker runs with),
                              t_delay_s (its ping rule's), worker_emitted_per_s}
    P:truth             STRING JSON {accuracy, fresh_now, t_s, measuring, source}: the live
                              accuracy measured by a test web's truth (``recrawl demo``
                              writes it every second with a 10 s expiry); ``/stats`` and
                              ``/dashboard`` show it only while it exists

The page record's layout and the ping dedup: :mod:`streams.store.page_record`.

Redis configuration: a crawled page's value (page and estimator record) is ~200 bytes;
above ``hash-max-listpack-value`` (Redis's default 64) a host's hash is a hashtable
(304 B per page instead of 248 B, ``docs/benchmarks.md "Design decisions"``): run Redis
with ``hash-max-listpack-value 256``.

Page buckets: a hash of more than ``hash-max-listpack-entries`` fields (128 by default) is a
hashtable too (309-321 B per crawled page instead of 262 B, ``docs/benchmarks.md``), and
real hosts have thousands of pages.  So a host's pages are spread over buckets of at most
128 by linear hashing (Litwin 1980): a page's bucket is ``h mod 2^l``, or ``h mod 2^(l+1)``
below the split pointer ``p``, where ``h`` is the first 4 bytes of ``sha1(field)``
(:func:`page_hash`; ``redis.sha1hex`` in the scripts).  A host stays in its one hash
(bucket 0, ``P:{host}:pages`` as before) up to :data:`BUCKET_FIRST` = 120 pages; past that,
the script that adds a page splits bucket ``p`` (its pages whose ``h mod 2^(l+1)`` is not
``p`` move to bucket ``p + 2^l``) while the host holds more than :data:`BUCKET_FILL` = 40
pages per bucket, at most two splits per added page (a script moves at most two buckets'
pages; 40-80 each, except the first splits of a host stored in one hash before).  Each
bucket then holds 40-80 pages on average and, at 4 standard deviations,
fewer than 128: listpack-encoded.  Every script finds a page's bucket itself (lib.lua's
``page_key``: the layout read once per call, the bucket keys share the host's hash tag, so
one slot); Python reads pages through ``read_pages.lua`` and the rebuild reads every bucket
(:meth:`Store.dump_hosts`).  Buckets never merge (a host that shrinks keeps them).  A host
stored in one hash before the buckets is read whole, and splits as pages are added; a bucket
that was a hashtable stays one (Redis does not convert back).

Short fields: the host is only in the key.  A page whose url starts with ``https://<host>/``
(``<host>`` the one in the key, so the url's canonical host: ``streams.events.urls``) is stored
under the rest of its url, ``/path?query`` (:func:`page_field`; lib.lua's ``field_of``); any
other url (``http://``, an explicit port) under the url itself: a field that starts with ``/``
is never a url (:func:`page_url` maps it back; the rebuild maps every field).  The bucket
hash is of the stored field.  A page stored before short fields (under its url, in the
bucket of ``sha1(url)``) is still found (lib.lua's ``find``: a second ``HGET`` when the short
field is absent) and moves to its short field at its next write, in the same script.  23 of
the bench's 37-byte urls (``docs/benchmarks.md``); the other per-url hashes (``inflight``,
``blocked``, few entries each) keep the url.

Each event's change is one Lua script that first compares the event's offset with the last
applied offset of its (host, topic, partition) and records it, so a redelivered event
(Faust is at-least-once) changes nothing.  ``recrawl explain`` shows a page's record
decoded (``HGET`` in ``redis-cli`` shows bytes).  No decision text is
stored: why a page was or wasn't crawled is kept by the worker that decided it
(:mod:`streams.telemetry.decisions`, a bounded ring served by ``GET /pages``).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    MasterDownError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from streams.events.records import SOURCES
from streams.store.host_prior import EST_ESCAPE, EST_VERSION, PRIOR_FIELDS, Sums
from streams.store.page_record import (
    COUNTS,
    FP_BYTES,
    N_SEEN,
    N_SOURCES,
    PAGE_HEAD,
    PAGE_HEAD_DTYPE,
    PAGE_HEAD_FORMAT,
    PAGE_VERSION,
    SHAPE_COUNTS,
    SHAPE_PRIOR,
    PageState,
    estimator_part,
    ping_fingerprint,
    record_bytes,
)
from streams.store.protocol import (
    ControlOp,
    HostDump,
    HostInfo,
    HostOp,
    IssueBatch,
    OutcomeOp,
    PageOp,
    PingBatch,
    StoreUnavailable,
    _host_info,
    _in_flight,
)
from streams.store.redis_conn import AsyncRedis, connect, run_commands

__all__ = [
    "TRANSIENT_REPLY_PREFIXES",
    "TRANSIENT_REPLY_TYPES",
    "Store",
    "page_field",
    "page_url",
    "put_truth",
    "transient_reply",
    "truth_key",
]


def _url_keys(host: str, fields: list[Any], values: list[Any]) -> dict[str, Any]:
    """A host's page buckets as read (fields as bytes through the bytes client, or text)
    keyed by url (:func:`page_url`).  A shard's rebuild reads 10^6 fields: when every field
    is a path (``/...``, no newline: a canonical url has no whitespace) they are joined,
    prefixed and split again in C, else one comprehension."""
    if not fields:
        return {}
    origin = f"https://{host}"
    joined = (b"\n".join(fields).decode("utf-8", "surrogateescape")
              if isinstance(fields[0], bytes) else "\n".join(fields))
    if joined[:1] == "/" and joined.count("\n/") == len(values) - 1:
        urls = (origin + joined.replace("\n", "\n" + origin)).split("\n")
        if len(urls) == len(values):
            return dict(zip(urls, values, strict=True))
    return {(origin + k if k[:1] == "/" else k): v
            for k, v in zip(map(_text, fields), values, strict=True)}


def _hash_pairs(reply: Any) -> tuple[list[Any], list[Any]]:
    """``HGETALL``'s reply as (fields, values): a flat list (RESP2, as read off the
    connection) or a dict (RESP3, or through a cluster client's pipeline)."""
    if isinstance(reply, dict):
        return list(reply), list(reply.values())
    return list(reply[0::2]), list(reply[1::2])


def _hash_dict(reply: Any) -> dict[Any, Any]:
    """``HGETALL``'s reply as a dict (see :func:`_hash_pairs`)."""
    return reply if isinstance(reply, dict) else dict(zip(reply[0::2], reply[1::2], strict=True))


def _raise_errors(replies: list[Any]) -> list[Any]:
    """``replies``, or the first error reply among them raised (a read that must be whole)."""
    for r in replies:
        if isinstance(r, Exception):
            raise r
    return replies


def _lua(name: str) -> str:
    """A script of ``streams/store/lua/`` (what its keys and arguments are: the file's header)."""
    # next to this file (importlib.resources.files("streams") found tests/streams, a
    # namespace portion earlier on sys.path, under pytest with an editable install)
    return (Path(__file__).resolve().parent / "lua" / name).read_text(encoding="utf-8")


#: Page buckets (module docstring): a host's single hash splits when it holds more than
#: BUCKET_FIRST pages; after that, while the host holds more than BUCKET_FILL pages per
#: bucket; at most BUCKET_SPLITS splits per added page.  Under Redis's default
#: ``hash-max-listpack-entries 128``: a bucket not yet split holds up to twice BUCKET_FILL
#: pages on average (linear hashing), 80 + 4 standard deviations = 116 < 128.
BUCKET_FIRST = 120
BUCKET_FILL = 40
BUCKET_SPLITS = 2


def page_field(host: str, url: str) -> str:
    """The field ``url``'s page is stored under in ``host``'s buckets (module docstring,
    "Short fields"; lib.lua's ``field_of``): the url without ``https://<host>`` when it
    starts with ``https://<host>/``, else the url."""
    origin = f"https://{host}/"
    return url[len(origin) - 1 :] if url.startswith(origin) else url


def page_url(host: str, field: str) -> str:
    """The url of a page stored under ``field`` in ``host``'s buckets (:func:`page_field`'s
    inverse: a url never starts with ``/``)."""
    return f"https://{host}{field}" if field[:1] == "/" else field


def page_hash(field: str) -> int:
    """The 32-bit hash that places a page in its host's buckets: the first 4 bytes of
    ``sha1(field)`` (the stored field, :func:`page_field`), big-endian (lib.lua's
    ``page_hash``: ``redis.sha1hex``, first 8 hex)."""
    return int.from_bytes(hashlib.sha1(field.encode("utf-8", "surrogateescape")).digest()[:4],
                          "big")


def bucket_of(field: str, layout: tuple[int, int]) -> int:
    """The bucket of the page stored under ``field`` (:func:`page_field`) in a host of
    layout ``(l, p)`` (linear hashing, lib.lua's ``page_key``)."""
    level, split = layout
    if level == 0 and split == 0:
        return 0
    h = page_hash(field)
    b = h % (1 << level)
    return h % (1 << (level + 1)) if b < split else b


def layout_after(n_pages: int) -> tuple[int, int]:
    """The layout ``(l, p)`` of a host after ``n_pages`` pages were added one by one to an
    empty host (apply_page.lua's splits): what a bulk load writes (benchmarks)."""
    level = split = 0
    for n in range(1, n_pages + 1):
        for _ in range(BUCKET_SPLITS):
            limit = BUCKET_FILL * ((1 << level) + split)
            if (level, split) == (0, 0):
                limit = BUCKET_FIRST
            if n <= limit:
                break
            split += 1
            if split >= 1 << level:
                level, split = level + 1, 0
    return level, split


def _layout(values: Sequence[Any]) -> tuple[int, int]:
    """``(l, p)`` from ``HMGET buckets l p`` (absent: one bucket)."""
    return (int(values[0] or 0), int(values[1] or 0))


def _pos(name: str) -> str:
    """Where a page record's head field starts, 1-based (a Lua string position)."""
    fields = PAGE_HEAD_DTYPE.fields
    assert fields is not None
    return str(fields[name][1] + 1)


# The scripts live in streams/store/lua/ (each file's header: its KEYS, ARGV and replies); every
# one starts with lib.lua's helpers; ``__N`` is the number of ping sources, ``__HFMT`` the
# page record's fixed head struct format, ``__HSIZE`` its bytes, ``__PVER`` its version
# byte, ``__LPOS`` where its last crawl starts, ``__SPRI`` and ``__SCNT`` the shape byte's
# bits of a stored prior and of stored counts, ``__CB`` the counts' bytes, ``__FPB`` a
# fingerprint's bytes, ``__SEEN`` the most fingerprints kept.
_SUBS = (("__HFMT", PAGE_HEAD_FORMAT), ("__HSIZE", str(PAGE_HEAD.size)),
         ("__FPB", str(FP_BYTES)), ("__SEEN", str(N_SEEN)), ("__PVER", str(PAGE_VERSION)),
         ("__LPOS", _pos("last_crawl")), ("__SPRI", str(SHAPE_PRIOR)),
         ("__SCNT", str(SHAPE_COUNTS)), ("__CB", str(COUNTS.size)),
         ("__SPLITS", str(BUCKET_SPLITS)), ("__FILL", str(BUCKET_FILL)),
         ("__FIRST", str(BUCKET_FIRST)), ("__EVER", str(EST_VERSION)),
         ("__EESC", str(EST_ESCAPE)), ("__N", str(N_SOURCES)))


def _script(name: str) -> str:
    """lib.lua's helpers and the script ``name``, placeholders substituted."""
    text = _lua("lib.lua") + _lua(name)
    for key, value in _SUBS:
        text = text.replace(key, value)
    return text


_APPLY_PAGE = _script("apply_page.lua")
_APPLY_PINGS = _script("apply_pings.lua")
_APPLY_OUTCOME = _script("apply_outcome.lua")
_APPLY_HOST = _script("apply_host.lua")
_APPLY_CONTROL = _script("apply_control.lua")
_ISSUE = _script("issue.lua")
_EXPIRE = _script("expire.lua")
_READ_PAGES = _script("read_pages.lua")


#: one script call: the script, its keys, its arguments
_Call = tuple[AsyncScript, list[Any], list[Any]]

#: Error replies of a Redis that cannot write now but will (out of memory, a replica after
#: a failover, loading, cluster resharding or failover, a busy script): the batch is
#: retried, never rejected (rejecting would let the state diverge from the topics).
TRANSIENT_REPLY_TYPES = (OutOfMemoryError, ReadOnlyError, BusyLoadingError, TryAgainError,
                         ClusterDownError, MasterDownError, RedisConnectionError,
                         RedisTimeoutError)
#: the same for replies redis-py does not map to a type (the prefix is kept in the text)
TRANSIENT_REPLY_PREFIXES = ("BUSY", "NOREPLICAS", "OOM", "READONLY", "LOADING")


#: the longest a batch's pipeline may take, all replies together.  The batch clients have
#: no per-reply socket timeout: redis-py arms one timer per reply, about 13% of an
#: outcome's cost in the agents (docs/benchmarks.md "Design decisions"); a
#: Redis that stops answering still fails the batch (``TimeoutError``, an ``OSError``:
#: retried).
BATCH_TIMEOUT_S = 10.0


async def _execute(pipe: Any, *, raise_on_error: bool = False) -> list[Any]:
    """A pipeline's replies, within :data:`BATCH_TIMEOUT_S` (a timeout closes the
    connection: redis-py drops one whose read was cancelled, so no reply is left behind)."""
    async with asyncio.timeout(BATCH_TIMEOUT_S):
        return list(await pipe.execute(raise_on_error=raise_on_error))


async def _run(client: AsyncRedis, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """:func:`streams.store.redis_conn.run_commands` within :data:`BATCH_TIMEOUT_S` (a
    timeout drops the connection, as :func:`_execute`)."""
    async with asyncio.timeout(BATCH_TIMEOUT_S):
        return await run_commands(client, commands)


def transient_reply(res: Any) -> bool:
    """Whether a pipeline result is an error reply that a retry will get past."""
    if isinstance(res, TRANSIENT_REPLY_TYPES):
        return True
    return isinstance(res, ResponseError) and str(res).lstrip().upper().startswith(
        TRANSIENT_REPLY_PREFIXES)


def _pairs(flat: Sequence[Any]) -> list[tuple[str, str]]:
    """A script's flat ``code, payload, code, payload, ...`` reply as pairs (the client
    decodes replies: they are text already)."""
    it = iter(flat)
    return list(zip(it, it, strict=True))


def _text(x: Any) -> str:
    if isinstance(x, bytes):
        return x.decode("utf-8", "surrogateescape")
    return x if isinstance(x, str) else str(x)


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
    """The Redis backend of :class:`streams.store.StateStore`: every mutation is one Lua
    script (see module docstring), a batch one pipeline."""

    def __init__(self, client: AsyncRedis, prefix: str, raw: AsyncRedis | None = None,
                 batch: AsyncRedis | None = None) -> None:
        self.redis = client
        #: a client that returns bytes (the rebuild's bulk reads: no text decoding of the
        #: records); None: ``client`` is used
        self.raw = raw
        #: the client of the batches (no per-reply timeout: :data:`BATCH_TIMEOUT_S`);
        #: None: ``client`` is used
        self.batch = batch if batch is not None else client
        self.prefix = prefix
        #: the epoch of an input partition's log (streams.store.logs.LogEpochs sets it)
        self.epoch_of: Callable[[str, int], int] = lambda _topic, _partition: 0
        #: how many times the scripts were loaded (at start, and after NOSCRIPT)
        self.script_loads = 0
        self.apply_page_script = client.register_script(_APPLY_PAGE)
        self.apply_pings_script = client.register_script(_APPLY_PINGS)
        self.apply_outcome_script = client.register_script(_APPLY_OUTCOME)
        self.apply_host_script = client.register_script(_APPLY_HOST)
        self.apply_control_script = client.register_script(_APPLY_CONTROL)
        self.issue_script = client.register_script(_ISSUE)
        self.expire_script = client.register_script(_EXPIRE)
        self.read_pages_script = client.register_script(_READ_PAGES)

    async def load_scripts(self) -> None:
        """Load every script into Redis (after a start or a Redis restart: NOSCRIPT)."""
        self.script_loads += 1
        for sc in (self.apply_page_script, self.apply_pings_script, self.apply_outcome_script,
                   self.apply_host_script, self.apply_control_script, self.issue_script,
                   self.expire_script, self.read_pages_script):
            sc.sha = await self.redis.script_load(sc.script)

    @classmethod
    def from_url(cls, url: str, prefix: str) -> Store:
        """One Redis node or a Redis Cluster (``redis+cluster://``,
        :mod:`streams.store.redis_conn`); replies decoded with ``surrogateescape``, so a
        binary record is a ``str`` that encodes back to the same bytes (:func:`record_bytes`)."""
        return cls(connect(url, decode_responses=True, encoding_errors="surrogateescape"),
                   prefix, raw=connect(url, decode_responses=False, socket_timeout=None),
                   batch=connect(url, decode_responses=True, encoding_errors="surrogateescape",
                                 socket_timeout=None))

    async def close(self) -> None:
        await self.redis.aclose()
        if self.raw is not None:
            await self.raw.aclose()
        if self.batch is not self.redis:
            await self.batch.aclose()

    # -- keys ----------------------------------------------------------------------------
    def key(self, host: str, kind: str) -> str:
        return f"{self.prefix}:{{{host}}}:{kind}"

    def bucket_key(self, host: str, bucket: int) -> str:
        """The hash of one of ``host``'s page buckets (bucket 0 is ``key(host, "pages")``)."""
        base = self.key(host, "pages")
        return base if bucket == 0 else f"{base}:{bucket}"

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
        deleted and created again: :mod:`streams.store.logs`)."""
        e = self.epoch_of(topic, partition)
        return f"{topic}:{partition}" if e == 0 else f"{topic}:{partition}~{e}"

    # -- the scripts' calls: (script, keys, args) of one item ------------------------------
    def _page_call(self, op: PageOp) -> _Call:
        keys = [self.key(op.host, k)
                for k in ("pages", "offsets", "inflight", "buckets", "prior")]
        args: list[Any] = [
            self.offset_field(op.topic, op.partition), op.offset, op.url,
            "1" if op.deleted else "0", repr(float(op.importance)),
            "" if op.prior is None else repr(float(op.prior)),
        ]
        return self.apply_page_script, keys, args

    def _pings_call(self, b: PingBatch, t_delay_s: float) -> _Call:
        """One script call for a batch of one host's pings from one partition, in offset
        order (``_APPLY_PINGS``).  Duplicates are found in the page record (each source's
        last fingerprints); the two arguments after ``t_delay_s`` are no longer used."""
        keys = [self.key(b.host, k) for k in ("pages", "offsets", "buckets")]
        args: list[Any] = [self.offset_field(b.topic, b.partition), repr(t_delay_s), "0", 0]
        for offset, url, source, changed_at, received_at, fingerprint in b.pings:
            args += [offset, url, SOURCES.index(source) + 1,
                     "" if changed_at is None else repr(changed_at), repr(received_at),
                     ping_fingerprint(fingerprint)]
        return self.apply_pings_script, keys, args

    def _outcome_call(self, op: OutcomeOp) -> _Call:
        keys = [self.key(op.host, k)
                for k in ("pages", "offsets", "inflight", "blocked", "host", "buckets",
                          "prior")]
        expect = op.expect
        args: list[Any] = [
            self.offset_field(op.topic, op.partition), op.offset, op.url, op.order_id or "",
            # the records as their bytes: hiredis packs them as they are (as text they hold
            # surrogate escapes, which it cannot encode)
            f"{op.fetched_at:.3f}", record_bytes(op.new_estimator or ""),
            "0" if expect is None else "1",
            b"" if expect is None else record_bytes(expect),
            "1" if op.disallowed else "0", op.robots_digest or "",
        ]
        return self.apply_outcome_script, keys, args

    def _host_call(self, op: HostOp) -> _Call:
        keys = [self.key(op.host, "host"), self.key(op.host, "offsets"),
                self.key(op.host, "blocked")]
        args: list[Any] = [
            self.offset_field(op.topic, op.partition), op.offset,
            "" if op.rate_per_s is None else repr(float(op.rate_per_s)),
            "" if op.max_in_flight is None else str(op.max_in_flight),
            op.source, op.reason or "", op.robots_digest or "", repr(float(op.default_rate_per_s)),
        ]
        return self.apply_host_script, keys, args

    def _control_call(self, op: ControlOp) -> _Call:
        args: list[Any] = [self.offset_field(op.topic, op.partition), op.offset]
        for k, v in op.fields.items():
            args += [k, v]
        return self.apply_control_script, [self.control_key, self.control_offsets_key], args

    # -- batches (StateStore): one pipeline each -------------------------------------------
    async def _batch(self, calls: Sequence[_Call], *,
                     shards: Sequence[PageOp | HostOp] | None = None) -> list[Any]:
        """Run ``calls`` in one pipeline, each as a straight EVALSHA (no ``SCRIPT EXISTS``
        round trip; on a cluster the command is routed by its keys' slot).  Calls that
        Redis answers NOSCRIPT (a restart, a master that lost its scripts) run again once
        the scripts are loaded: each is offset- or id-guarded.  A transient error reply
        raises :class:`StoreUnavailable` (run the batch again).  ``shards``: the events of the
        calls, each host then recorded as one of its partition's (``SADD``, reply dropped)."""
        out: list[Any] = [None] * len(calls)
        todo = list(range(len(calls)))
        for _attempt in range(3):
            commands: list[tuple[Any, ...]] = []
            for i in todo:
                script, keys, args = calls[i]
                commands.append(("EVALSHA", script.sha, len(keys), *keys, *args))
                if shards is not None:
                    commands.append(("SADD", self.shard_key(shards[i].partition),
                                     shards[i].host))
            step = 1 if shards is None else 2
            results = await _run(self.batch, commands)
            bad = next((r for r in results if transient_reply(r)), None)
            if bad is not None:
                raise StoreUnavailable(repr(bad))
            missing = []
            for i, res in zip(todo, results[::step], strict=True):
                if isinstance(res, NoScriptError):
                    missing.append(i)
                else:
                    out[i] = res
            if not missing:
                return out
            await self.load_scripts()
            todo = missing
        raise StoreUnavailable("NOSCRIPT after loading the scripts")

    async def apply_pages(self, ops: Sequence[PageOp]) -> list[Any]:
        return [r if isinstance(r, Exception) else (_text(r[0]), _text(r[1]))
                for r in await self._batch([self._page_call(op) for op in ops], shards=ops)]

    async def apply_pings(self, batches: Sequence[PingBatch], *, t_delay_s: float
                          ) -> list[Any]:
        res = await self._batch([self._pings_call(b, t_delay_s) for b in batches])
        return [r if isinstance(r, Exception) else _pairs(r) for r in res]

    def _read_call(self, host: str, urls: Sequence[str], *, prior: bool = False) -> _Call:
        keys = [self.key(host, k) for k in ("pages", "buckets", "prior")[: 2 + prior]]
        return self.read_pages_script, keys, list(urls)

    async def _read(self, items: Sequence[tuple[str, str]], *, prior: bool
                    ) -> tuple[list[str | None], dict[str, Sums]]:
        """One read script call per host (its pages may be in several buckets), all in one
        pipeline; ``prior``: each call returns the host's prior sums after its pages."""
        by_host: dict[str, list[int]] = {}
        for i, (host, _url) in enumerate(items):
            by_host.setdefault(host, []).append(i)
        hosts = list(by_host)
        res = await self._batch([self._read_call(h, [items[i][1] for i in by_host[h]],
                                                 prior=prior) for h in hosts])
        out: list[str | None] = [None] * len(items)
        sums: dict[str, Sums] = {}
        for h, r in zip(hosts, res, strict=True):
            if isinstance(r, Exception):
                raise r
            idx = by_host[h]
            for j, i in enumerate(idx):
                out[i] = r[j] or None
            if prior:
                n, m, lg = (float(x) if x else 0.0 for x in r[len(idx) : len(idx) + 3])
                sums[h] = (n, m, lg)
        return out, sums

    async def read_pages(self, items: Sequence[tuple[str, str]]) -> list[str | None]:
        return (await self._read(items, prior=False))[0]

    async def read_outcome_inputs(self, items: Sequence[tuple[str, str]]
                                  ) -> tuple[list[str | None], dict[str, Sums]]:
        """The pages and their hosts' prior sums in one round trip: ``read_pages.lua`` given
        the host's ``prior`` key (same hash tag: one slot) answers both."""
        return await self._read(items, prior=True)

    async def _read_host(self, host: str, urls: Sequence[str]) -> list[str | None]:
        """:meth:`read_pages` of one host's urls through the decoded client."""
        r: Any = await self.read_pages_script(keys=self._read_call(host, urls)[1],
                                              args=list(urls), client=self.redis)
        return [r[j] or None for j in range(len(urls))]

    async def apply_outcomes(self, ops: Sequence[OutcomeOp]) -> list[Any]:
        return [r if isinstance(r, Exception) else (_text(r[0]), _text(r[1]), int(r[2]))
                for r in await self._batch([self._outcome_call(op) for op in ops])]

    async def apply_hosts(self, ops: Sequence[HostOp]) -> list[Any]:
        return [r if isinstance(r, Exception) else (_text(r[0]), _text(r[1]), int(r[2]))
                for r in await self._batch([self._host_call(op) for op in ops], shards=ops)]

    async def apply_control(self, ops: Sequence[ControlOp]) -> list[Any]:
        return [r if isinstance(r, Exception) else _text(r)
                for r in await self._batch([self._control_call(op) for op in ops])]

    async def issue(self, batches: Sequence[IssueBatch], *, now_s: float, default_rate: float,
                    default_mif: int, burst: float) -> list[Any]:
        """One pipeline, one script call per host; not run again (not guarded): a host
        whose script Redis lacked gets NoScriptError (scripts loaded for the next tick),
        and no reply at all raises."""
        # KEYS pages, inflight, host, blocked, buckets; ARGV now, default rate, default max in
        # flight, burst, then (url, order id) pairs (streams/store/lua/issue.lua).  Built here in
        # one loop (10^4 hosts a tick at 10^4 orders/s): straight EVALSHA, no SCRIPT EXISTS
        head = (repr(now_s), repr(default_rate), default_mif, repr(burst))
        sha, p = self.issue_script.sha, self.prefix
        commands = [
            ("EVALSHA", sha, 5, f"{p}:{{{b.host}}}:pages", f"{p}:{{{b.host}}}:inflight",
             f"{p}:{{{b.host}}}:host", f"{p}:{{{b.host}}}:blocked", f"{p}:{{{b.host}}}:buckets",
             *head, *itertools.chain.from_iterable(b.orders))
            for b in batches]
        results = await _run(self.batch, commands)
        if any(isinstance(r, NoScriptError) for r in results):
            await self.load_scripts()
        return [r if isinstance(r, Exception) else _pairs(r) for r in results]

    async def expire(self, orders: Sequence[tuple[str, str, str]]) -> list[Any]:
        return await self._batch([(self.expire_script, [self.key(host, "inflight")], [url, oid])
                                  for url, host, oid in orders])

    # -- reads ---------------------------------------------------------------------------
    async def get_page(self, host: str, url: str) -> PageState | None:
        (v,) = await self._read_host(host, [url])
        return PageState.decode(v) if v else None

    async def get_page_raw(self, host: str, url: str) -> str | None:
        (v,) = await self._read_host(host, [url])
        return str(v) if v else None

    async def explain_data(self, host: str, url: str) -> dict[str, Any]:
        (page,) = await self._read_host(host, [url])
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(self.key(host, "inflight"), url)
        pipe.hgetall(self.key(host, "host"))
        pipe.sismember(self.key(host, "blocked"), url)
        pipe.hmget(self.key(host, "prior"), *PRIOR_FIELDS)
        fl, hinfo, blocked, prior = await pipe.execute()
        n, m, lg = (float(x) if x else 0.0 for x in prior)
        return {
            "page": PageState.decode(page) if page else None,
            "in_flight": _in_flight(fl) if fl else None,
            "estimator": estimator_part(page),
            "host": _host_info(hinfo),
            "blocked": bool(blocked),
            "host_prior": (n, m, lg),
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
        pipe.hget(self.key(host, "buckets"), "n")
        info, n, fl, blocked, n_buckets = await pipe.execute()
        # one bucket: its length; several: the count the buckets hash keeps
        return {"info": _host_info(info), "pages": int(n_buckets or n), "in_flight": dict(fl),
                "blocked": int(blocked)}

    async def shard_hosts(self, partition: int) -> list[str]:
        members: Any = await self.redis.smembers(self.shard_key(partition))
        return sorted(members)

    async def dump_hosts(self, hosts: Sequence[str]) -> list[HostDump]:
        """Everything of ``hosts`` a shard needs, in one round trip (through :attr:`raw` when
        there is one: page values stay bytes, for ``numpy.frombuffer``), its replies read
        straight off the connection (:func:`_run`: no redis-py pipeline per command, five
        commands per host)."""
        client = self.raw or self.batch
        commands: list[tuple[str, ...]] = []
        for h in hosts:
            commands += [("HGETALL", self.key(h, "pages")), ("HGETALL", self.key(h, "inflight")),
                         ("HGETALL", self.key(h, "host")),
                         ("SMEMBERS", self.key(h, "blocked")),
                         ("HMGET", self.key(h, "buckets"), "l", "p")]
        res = _raise_errors(await _run(client, commands))
        pages = [_hash_pairs(res[5 * i]) for i in range(len(hosts))]
        # hosts in several buckets: the other buckets in a second round trip
        more = [(i, (1 << lv) + sp) for i in range(len(hosts))
                for lv, sp in [_layout(res[5 * i + 4])] if (lv, sp) != (0, 0)]
        if more:
            rest = iter(_raise_errors(await _run(client, [
                ("HGETALL", self.bucket_key(hosts[i], b)) for i, count in more
                for b in range(1, count)])))
            for i, count in more:
                for _b in range(1, count):
                    f, v = _hash_pairs(next(rest))
                    pages[i][0].extend(f)
                    pages[i][1].extend(v)
        out = []
        for i, h in enumerate(hosts):
            fl, info = (_hash_dict(res[5 * i + k]) for k in (1, 2))
            out.append(
                HostDump(
                    h,
                    _url_keys(h, *pages[i]),
                    {_text(u): _in_flight(_text(v)) for u, v in fl.items()},
                    _host_info({_text(k): _text(v) for k, v in info.items()}),
                    {_text(u) for u in res[5 * i + 3]},
                )
            )
        return out

    async def get_pages(self, host: str, urls: Sequence[str]) -> dict[str, tuple[str | None, ...]]:
        """For each url: (page value, in flight, estimator record) as stored (None when
        absent; the estimator record is the page value's tail)."""
        if not urls:
            return {}
        read = await self._read_host(host, urls)
        fl: Any = await self.redis.hmget(self.key(host, "inflight"), list(urls))
        return {u: (read[i], fl[i], estimator_part(read[i])) for i, u in enumerate(urls)}

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
