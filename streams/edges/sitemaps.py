"""A sitemap poller: a changed ``lastmod`` becomes a ping with the change time.

Polls sitemaps and sitemap indexes (plain or gzip) with conditional GET (``If-None-Match``
from the last ETag, ``If-Modified-Since`` from the last ``Last-Modified``), parses them
safely (defusedxml: no DTD, no entities, no external references; the sitemaps protocol's
limits of 50,000 URLs and 50 MB uncompressed, checked while reading and while
decompressing) and remembers what it saw in Redis, so a restart does not re-ping:

- ``<prefix>:sitemaps:{<host>}:http:<sitemap url>`` — ETag, Last-Modified;
- ``<prefix>:sitemaps:{<host>}:lastmod:<sitemap url>`` — hash ``url -> lastmod`` (epoch
  seconds) of the URLs the sitemap listed at its last poll: a URL it no longer lists is
  dropped, so the memory is bounded by the sitemap's own size (at most 50,000), however
  many new URLs each poll brings;
- ``<prefix>:sitemaps:{<host>}:children:<index url>`` — the same for an index's sitemaps
  (``-inf`` for one without a lastmod or whose last poll failed: polled again).  A sitemap
  the index no longer lists loses its ``http:`` and ``lastmod:`` keys at once, so an index
  that rotates its sitemaps' names leaves no hash behind.

Every key expires ``state_ttl_s`` (30 days) after the last poll that saw its sitemap (an
index's unchanged sitemaps included), so a sitemap nobody polls any more costs nothing.

A ``lastmod`` in the future is pinged with the poll time as its change time, and does not
hide the URL's later changes: after one, any other ``lastmod`` counts as a change.

A URL seen for the first time is remembered without a ping (there is no earlier lastmod
to compare with) unless ``ping_new``.  Pings are published before the memory is updated:
a crash in between re-pings (at least once), never loses one. URLs are compared in their
canonical form (:mod:`streams.events.urls`). The protocol's location rule holds: a sitemap
lists only URLs under its own folder with its scheme, host and port
(``http://h:8080/~bob/sitemap.xml`` cannot list ``http://h:8080/``, nor the pages of
``http://h/``); an index lists sitemaps under its folder, and those may list any URL
under the index's folder (the index's site vouches for them: ``/sitemaps/1.xml`` listed
by ``/sitemap_index.xml`` may list ``/p/1``).  Other entries are ignored and counted
(``foreign_entries``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import iterparse

from streams.edges.pings import Ping, PingProducer, new_ping_id
from streams.edges.timeparse import parse_w3c_datetime
from streams.errors import RecrawlError
from streams.events.records import check_url, host_of
from streams.events.urls import in_scope
from streams.fetcher.client import SafeClient
from streams.store.redis_conn import AsyncRedis

__all__ = [
    "FUTURE_SLACK_S",
    "GZIP_MAGIC",
    "MAX_BYTES",
    "MAX_URLS",
    "Entry",
    "Parsed",
    "PollResult",
    "SitemapPoller",
    "SitemapRefused",
    "gunzip_capped",
    "parse_sitemap",
]

log = logging.getLogger(__name__)

MAX_URLS = 50_000
MAX_BYTES = 50 * 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"


#: how far in the future a stored ``lastmod`` may be and still be a normal one (clock skew)
FUTURE_SLACK_S = 300.0

class SitemapRefused(RecrawlError):
    """The sitemap was not used: too big, too many entries, unsafe or malformed XML."""


@dataclass(frozen=True, slots=True)
class Entry:
    loc: str
    lastmod: float | None


@dataclass(frozen=True)
class Parsed:
    kind: str  # "urlset" or "sitemapindex"
    entries: list[Entry]


def gunzip_capped(data: bytes, max_bytes: int) -> bytes:
    """Decompress gzip ``data``, refusing output beyond ``max_bytes`` (a gzip bomb stops
    after ``max_bytes``, not after inflating everything)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    out = bytearray()
    buf = data
    try:
        while buf:
            out += d.decompress(buf, max_bytes + 1 - len(out))
            if len(out) > max_bytes:
                raise SitemapRefused(f"uncompressed size over {max_bytes} bytes")
            buf = d.unconsumed_tail
            if d.eof:
                break
    except zlib.error as exc:
        raise SitemapRefused(f"bad gzip data: {exc}") from None
    return bytes(out)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_sitemap(
    data: bytes, *, max_urls: int = MAX_URLS, max_bytes: int = MAX_BYTES
) -> Parsed:
    """Parse a sitemap or sitemap index (gzip detected by its magic bytes)."""
    if data[:2] == GZIP_MAGIC:
        data = gunzip_capped(data, max_bytes)
    if len(data) > max_bytes:
        raise SitemapRefused(f"size {len(data)} over {max_bytes} bytes")
    entries: list[Entry] = []
    kind: str | None = None
    root: Any = None
    depth = 0
    try:
        for event, elem in iterparse(
            io.BytesIO(data), events=("start", "end"),
            forbid_dtd=True, forbid_entities=True, forbid_external=True,
        ):  # fmt: skip
            if event == "start":
                depth += 1
                if root is None:
                    name = _local(elem.tag)
                    if name not in ("urlset", "sitemapindex"):
                        raise SitemapRefused(f"root element is {name!r}, not urlset/sitemapindex")
                    kind, root = name, elem
                continue
            depth -= 1
            if depth != 1:
                continue
            # a child of the root ended: read it if it is an entry, then drop every child
            # of the root, so that memory stays that of one entry whatever else the file
            # holds (unknown elements were kept to the end: ~23x the input)
            if _local(elem.tag) in ("url", "sitemap"):
                loc = lastmod = None
                for child in elem:
                    cname = _local(child.tag)
                    if cname == "loc":
                        loc = (child.text or "").strip()
                    elif cname == "lastmod":
                        lastmod = (child.text or "").strip()
                if loc:
                    try:
                        lm = parse_w3c_datetime(lastmod) if lastmod else None
                    except ValueError:
                        lm = None
                    entries.append(Entry(loc, lm))
                    if len(entries) > max_urls:
                        raise SitemapRefused(f"more than {max_urls} entries")
            root.clear()
    except DefusedXmlException as exc:
        raise SitemapRefused(f"unsafe XML: {type(exc).__name__}") from None
    except SyntaxError as exc:  # ElementTree.ParseError
        raise SitemapRefused(f"malformed XML: {exc}") from None
    if kind is None:
        raise SitemapRefused("empty document")
    return Parsed(kind, entries)


@dataclass
class PollResult:
    url: str
    status: str  # "changed", "not-modified", "refused", "error"
    pings: int = 0
    entries: int = 0
    error: str | None = None


class SitemapPoller:
    """Polls sitemaps; ``await poller.poll(url)`` once, or ``await poller.run(urls, ...)``."""

    def __init__(
        self,
        client: SafeClient,
        redis: AsyncRedis,
        key_prefix: str,
        producer: PingProducer,
        *,
        ping_new: bool = False,
        max_urls: int = MAX_URLS,
        max_bytes: int = MAX_BYTES,
        state_ttl_s: float = 30 * 86_400.0,
    ) -> None:
        self.client = client
        self.redis = redis
        self.prefix = key_prefix
        self.producer = producer
        self.ping_new = ping_new
        self.max_urls = max_urls
        self.max_bytes = max_bytes
        self.state_ttl_ms = max(1000, int(state_ttl_s * 1000))
        self.stats: Counter[str] = Counter()

    def _http_key(self, url: str) -> str:
        return f"{self.prefix}:sitemaps:{{{host_of(url)}}}:http:{url}"

    def _lastmod_key(self, sitemap_url: str) -> str:
        return f"{self.prefix}:sitemaps:{{{host_of(sitemap_url)}}}:lastmod:{sitemap_url}"

    def _children_key(self, index_url: str) -> str:
        return f"{self.prefix}:sitemaps:{{{host_of(index_url)}}}:children:{index_url}"

    async def poll(self, url: str, *, _depth: int = 0, _scope: str | None = None) -> PollResult:
        """Poll one sitemap or index.  ``_scope``: for a sitemap of an index, the index's
        folder (the index's site vouches for its sitemaps)."""
        self.stats["polls"] += 1
        try:
            url = check_url(url)
        except ValueError as exc:
            self.stats["errors"] += 1
            return PollResult(url, "error", error=f"bad sitemap URL: {exc}")
        scope = _scope or url[: url.rindex("/") + 1]
        raw_memo = await self.redis.hgetall(self._http_key(url))
        memo: dict[str, str] = {_s(k): _s(v) for k, v in raw_memo.items()}
        headers: dict[str, str] = {}
        if memo.get("etag"):
            headers["If-None-Match"] = memo["etag"]
        if memo.get("last_modified"):
            headers["If-Modified-Since"] = memo["last_modified"]
        result, resp_headers = await self.client.get(
            url, headers=headers, max_body_bytes=self.max_bytes, keep_body=True
        )
        if result.status == 304:
            self.stats["not_modified"] += 1
            await self._touch([url])
            return PollResult(url, "not-modified")
        if not result.ok or result.body is None:
            self.stats["errors"] += 1
            return PollResult(url, "error", error=result.error)
        try:
            parsed = parse_sitemap(result.body, max_urls=self.max_urls, max_bytes=self.max_bytes)
        except SitemapRefused as exc:
            self.stats["refused"] += 1
            log.warning("sitemap %s refused: %s", url, exc)
            return PollResult(url, "refused", error=str(exc))
        if parsed.kind == "sitemapindex":
            if _depth > 0:
                self.stats["refused"] += 1
                return PollResult(url, "refused", error="a sitemap index inside an index")
            total = PollResult(url, "changed", entries=len(parsed.entries))
            failed: set[str] = set()
            for e in await self._changed_children(url, scope, parsed.entries):
                child = await self.poll(e.loc, _depth=1, _scope=scope)
                total.pings += child.pings
                if child.status in ("refused", "error"):
                    total.error = f"{e.loc}: {child.error}"
                    failed.add(e.loc)
            await self._remember_children(url, scope, parsed.entries, failed)
        else:
            pings = await self._apply_urlset(url, scope, parsed.entries)
            total = PollResult(url, "changed", pings=pings, entries=len(parsed.entries))
        if total.error is None:
            fresh: dict[Any, Any] = {k: v for k, v in (
                ("etag", resp_headers.get("ETag")),
                ("last_modified", resp_headers.get("Last-Modified")),
            ) if v}  # fmt: skip
            if fresh:
                await self.redis.hset(self._http_key(url), mapping=fresh)
        await self._touch([url])
        return total

    async def _touch(self, sitemap_urls: list[str]) -> None:
        """Keep the state of these sitemaps another ``state_ttl_s``."""
        pipe = self.redis.pipeline(transaction=False)
        for u in sitemap_urls:
            for key in (self._http_key(u), self._lastmod_key(u), self._children_key(u)):
                pipe.pexpire(key, self.state_ttl_ms)
        await pipe.execute()

    async def _forget(self, sitemap_urls: list[str]) -> None:
        """Drop the state of sitemaps an index no longer lists."""
        pipe = self.redis.pipeline(transaction=False)
        for u in sitemap_urls:
            for key in (self._http_key(u), self._lastmod_key(u)):
                pipe.delete(key)
        await pipe.execute()
        self.stats["sitemaps_forgotten"] += len(sitemap_urls)

    def _own(self, scope: str, entries: list[Entry]) -> list[Entry]:
        """The entries under ``scope`` (a canonical folder URL), in canonical form (module
        docstring); others are counted and ignored."""
        own = []
        for e in entries:
            loc = _canonical(e.loc)
            if loc is not None and in_scope(loc, scope):
                own.append(Entry(loc, e.lastmod))
        self.stats["foreign_entries"] += len(entries) - len(own)
        return own

    async def _changed_children(
        self, index_url: str, scope: str, entries: list[Entry]
    ) -> list[Entry]:
        same_host = self._own(scope, entries)
        if not same_host:
            return []
        stored = await self.redis.hmget(self._children_key(index_url),
                                        [e.loc for e in same_host])
        out = []
        for e, s in zip(same_host, stored, strict=True):
            if e.lastmod is None or s is None or e.lastmod > float(_s(s)):
                out.append(e)
        return out

    async def _remember_children(self, index_url: str, scope: str, entries: list[Entry],
                                 failed: set[str]) -> None:
        """Record the index's sitemaps (their lastmod; ``-inf`` for one without, or whose
        poll failed: polled again next time) and forget those it no longer lists."""
        mapping: dict[Any, Any] = {
            e.loc: "-inf" if e.lastmod is None or e.loc in failed else repr(e.lastmod)
            for e in self._own(scope, entries)
        }
        gone = await self._replace(self._children_key(index_url), mapping.keys(), mapping)
        if gone:
            await self._forget(gone)
        await self._touch(list(mapping))

    async def _replace(self, key: str, keep: Any, changed: dict[Any, Any]) -> list[str]:
        """Write ``changed`` into the hash ``key`` and drop its fields not in ``keep`` (the
        URLs the last poll listed): its size is the last poll's, never the sum of every
        poll's.  Returns the fields dropped."""
        old = {_s(k) for k in await self.redis.hkeys(key)}
        gone = list(old - set(keep))
        pipe = self.redis.pipeline(transaction=False)
        for i in range(0, len(gone), 5000):
            pipe.hdel(key, *gone[i : i + 5000])
        if changed:
            pipe.hset(key, mapping=changed)
        await pipe.execute()
        return gone

    async def _apply_urlset(self, sitemap_url: str, scope: str, entries: list[Entry]) -> int:
        own = self._own(scope, [e for e in entries if e.lastmod is not None])
        key = self._lastmod_key(sitemap_url)
        if not own:
            await self._replace(key, (), {})
            return 0
        own = list({e.loc: e for e in own}.values())  # one entry per page (the last)
        stored = await self.redis.hmget(key, [e.loc for e in own])
        now = time.time()
        listed: set[str] = set()
        updates: dict[Any, Any] = {}
        pings = []
        for e, s in zip(own, stored, strict=True):
            assert e.lastmod is not None
            prev = float(_s(s)) if s is not None else None
            # a lastmod that moved forward is a change; so is any other value after one in
            # the future (a site that once said 2099 and then fixes its dates), else that
            # URL would never ping again
            if prev is not None and (e.lastmod == prev or (
                    e.lastmod < prev and prev <= now + FUTURE_SLACK_S)):
                listed.add(e.loc)
                continue
            listed.add(e.loc)
            updates[e.loc] = repr(e.lastmod)
            if prev is None and not self.ping_new:
                continue
            pings.append(
                Ping(
                    url=e.loc, source="sitemap", changed_at=min(e.lastmod, now),
                    received_at=now, id=new_ping_id("sitemap"),
                )
            )
        for p in pings:
            await self.producer.send(p)
        if pings:
            await self.producer.flush()
        await self._replace(key, listed, updates)
        self.stats["pings"] += len(pings)
        return len(pings)

    async def run(
        self, urls: list[str], interval_s: float, stop: asyncio.Event | None = None
    ) -> None:
        """Poll every URL each ``interval_s`` seconds until ``stop`` is set."""
        stop = stop or asyncio.Event()
        while not stop.is_set():
            started = time.monotonic()
            for u in urls:
                try:
                    await self.poll(u)
                except Exception:
                    self.stats["crashes"] += 1
                    log.exception("polling %s failed", u)
            wait = interval_s - (time.monotonic() - started)
            if wait > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)


def _canonical(u: str) -> str | None:
    try:
        return check_url(u)
    except ValueError:
        return None


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
