"""Scrapy as recrawl's fetcher: a spider that consumes ``recrawl.orders`` and publishes
``recrawl.outcomes``.

Run it on its own (the recrawl settings come from the ``RECRAWL_*`` environment, as for
every ``recrawl`` command; Scrapy settings with ``-s``)::

    python -m streams.integrations.scrapy -s ROBOTSTXT_OBEY=True -s CONCURRENT_REQUESTS=32

or in a Scrapy project (``SPIDER_MODULES = ["streams.integrations.scrapy", ...]``, then
``scrapy crawl recrawl``), or subclass :class:`RecrawlSpider` and override
:meth:`~RecrawlSpider.handle_page` to extract items from the pages fetched.

Each order becomes a ``scrapy.Request`` (``dont_filter``: a re-crawl is the point); its
callback or errback publishes one outcome, failures included, as the reference fetcher
(:mod:`streams.fetcher.service`) does::

    {"url", "order_id", "fetched_at", "status", "error", "changed": true|false|null, "digest"}

``digest`` is the SHA-256 of the body; ``changed`` compares it with the URL's previous
digest in the reference fetcher's :class:`~streams.fetcher.service.DigestStore` (Redis, so
the two fetchers can take turns), null on a URL's first fetch and on failures.

Orders are consumed in batches in a consumer group (``<app_id>-fetcher`` by default, the
reference fetcher's: run one or the other, or give ``-a group_id=...``); a batch's offsets
are committed once all its outcomes are acknowledged, so an order is fetched at least once.

Politeness is Scrapy's: ``ROBOTSTXT_OBEY`` (on by default here), its delays and
AutoThrottle.  A URL robots.txt forbids is not fetched; its outcome has ``"error":
"robots.txt disallows (Scrapy ROBOTSTXT_OBEY)"``, ``"disallowed": true`` and the digest of
the robots.txt (SHA-256 of its body, as the reference fetcher's), so the worker stops
ordering it.  A robots.txt whose digest differs from the one last announced for the host
(Redis ``P:{host}:fetch:robots``, shared with the reference fetcher) is announced on
``recrawl.hosts`` with its Crawl-delay as the host's capacity, so the worker orders the
pages an older copy disallowed again.  A robots.txt that redirects (at most 5 times,
RFC 9309 Sec. 2.3.1.2; ``REDIRECT_MAX_TIMES``, for pages too) holds for the host it was
asked of: its digest and Crawl-delay are that host's, not the redirect target's.  Scrapy
reads each robots.txt once per crawl: a change is seen when the spider starts again.

Bodies are capped at 5 MiB (``DOWNLOAD_MAXSIZE``, the reference fetcher's
``FetchLimits.max_body_bytes``), compressed or decompressed: Scrapy's HTTP compression
middleware stops inflating at the cap, so a 510 kB gzip body inflating to 512 MiB is
refused after 5 MiB of it, per request.  Its outcome says why: ``"error": "body larger
than 5242880 bytes (Scrapy DOWNLOAD_MAXSIZE)"``.  Scrapy's downloader has no egress policy:
unlike the reference fetcher it fetches private addresses if the orders name them.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import sys
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import scrapy
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import ConsumerStoppedError
from protego import Protego
from scrapy import signals
from scrapy.crawler import CrawlerProcess
from scrapy.exceptions import IgnoreRequest
from scrapy.http import Response
from scrapy.resolver import CachingThreadedResolver
from scrapy.settings import Settings as ScrapySettings
from twisted.internet import defer
from twisted.python.failure import Failure

from streams.events.records import MAX_RATE_PER_S, HostEvent, host_of
from streams.fetcher.client import FetchLimits
from streams.fetcher.service import DigestStore
from streams.settings import Settings
from streams.store.redis_conn import connect as connect_redis

log = logging.getLogger(__name__)

__all__ = ["ASYNCIO_REACTOR", "MAX_BODY_BYTES", "ROBOTS_ERROR", "OverrideResolver",
           "RecrawlSpider", "digest_of", "error_of", "main", "outcome"]

ASYNCIO_REACTOR = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"
ROBOTS_ERROR = "robots.txt disallows (Scrapy ROBOTSTXT_OBEY)"
#: the body cap, decompressed bytes included (the reference fetcher's)
MAX_BODY_BYTES = FetchLimits().max_body_bytes

#: The Scrapy settings the spider needs (``custom_settings``; ``-s`` overrides them).
SPIDER_SETTINGS: dict[str, Any] = {
    "TWISTED_REACTOR": ASYNCIO_REACTOR,  # aiokafka and redis.asyncio run on its loop
    "ROBOTSTXT_OBEY": True,
    "HTTPERROR_ALLOW_ALL": True,  # every status reaches the callback and gets its outcome
    "RETRY_ENABLED": False,  # a failure is an outcome; the worker orders the page again
    "COOKIES_ENABLED": False,  # a re-crawl carries no cookies (and no public-suffix download)
    "TELNETCONSOLE_ENABLED": False,
    # compressed and decompressed (HttpCompressionMiddleware stops inflating there)
    "DOWNLOAD_MAXSIZE": MAX_BODY_BYTES,
    "DOWNLOAD_WARNSIZE": MAX_BODY_BYTES // 2,
    "REDIRECT_MAX_TIMES": 5,  # RFC 9309 Sec. 2.3.1.2 for robots.txt; the reference fetcher's
}


def digest_of(body: bytes) -> str:
    """The content digest, as the reference fetcher's (SHA-256 of the body, hex)."""
    return hashlib.sha256(body).hexdigest()


def outcome(url: str, order_id: str | None, fetched_at: float, status: int | None,
            error: str | None, digest: str | None, previous: str | None) -> dict[str, Any]:
    """An ``OutcomeEvent`` (docs/schemas): ``changed`` is null without a previous digest
    or on a failure."""
    changed = None if digest is None or previous is None else digest != previous
    return {"url": url, "order_id": order_id, "fetched_at": fetched_at, "status": status,
            "error": error, "changed": changed, "digest": digest}


def error_of(failure: Failure, max_body_bytes: int = MAX_BODY_BYTES) -> str:
    exc = failure.value
    text = str(exc)
    if isinstance(exc, IgnoreRequest) and "robots.txt" in text:
        return ROBOTS_ERROR
    if "DOWNLOAD_MAXSIZE" in text or "download max size" in text:
        # HttpCompressionMiddleware (decompressed) or the download handler (received)
        return f"body larger than {max_body_bytes} bytes (Scrapy DOWNLOAD_MAXSIZE)"
    return f"{type(exc).__name__}: {text}"[:2000]


class OverrideResolver(CachingThreadedResolver):
    """Scrapy's resolver, except that names ending in a suffix of the setting
    ``RECRAWL_RESOLVE`` (``{".test": "127.0.0.1"}``) resolve to its address (the test web's
    virtual hosts; the reference fetcher's ``EgressPolicy.overrides``).  Use with
    ``DNS_RESOLVER = "streams.integrations.scrapy.OverrideResolver"``."""

    overrides: dict[str, str] = {}  # noqa: RUF012 (set per crawler in from_crawler)

    @classmethod
    def from_crawler(cls, crawler: Any, reactor: Any) -> OverrideResolver:
        r = super().from_crawler(crawler, reactor)
        r.overrides = dict(crawler.settings.getdict("RECRAWL_RESOLVE"))
        return r

    def getHostByName(self, name: str, timeout: Sequence[int] = ()) -> defer.Deferred[str]:
        for suffix, address in self.overrides.items():
            if name == suffix.lstrip(".") or name.endswith(suffix):
                return defer.succeed(address)
        return super().getHostByName(name, timeout)


class RecrawlSpider(scrapy.Spider):
    """Fetches recrawl's orders and publishes their outcomes.

    Spider arguments (``-a``): ``group_id`` (the Kafka consumer group), ``batch`` (orders
    per batch, committed together; 64)."""

    name = "recrawl"
    custom_settings = SPIDER_SETTINGS

    def __init__(self, *args: Any, group_id: str | None = None, batch: str | int = 64,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recrawl = Settings()
        self.group_id = group_id or f"{self.recrawl.app_id}-fetcher"
        self.batch_size = int(batch)
        self._pending: set[asyncio.Future[None]] = set()
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._digests: DigestStore | None = None
        #: netloc -> (digest, Crawl-delay) of its robots.txt as Scrapy read it
        self._robots: dict[str, tuple[str, float | None]] = {}
        self._announced: dict[str, str] = {}
        self._announcing: dict[str, asyncio.Future[None]] = {}
        self._announce_locks: dict[str, asyncio.Lock] = {}
        self._closing = False

    @classmethod
    def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> RecrawlSpider:
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider._robots_downloaded, signal=signals.response_downloaded)
        return spider

    def _robots_downloaded(self, response: Response, request: scrapy.Request,
                           spider: scrapy.Spider) -> None:
        """Keep the digest of each robots.txt that Scrapy's RobotsTxtMiddleware reads, for
        the origin it was asked of (after redirects: the first URL of ``redirect_urls``;
        RobotsTxtMiddleware applies the rules to that origin too)."""
        asked = (request.meta.get("redirect_urls") or [request.url])[0]
        if not request.meta.get("dont_obey_robotstxt") or not asked.endswith("/robots.txt"):
            return
        netloc = asked.split("/")[2]
        status = response.status
        if 400 <= status < 500 and status != 429:  # RFC 9309 2.3.1.3: every URL allowed
            self._robots[netloc] = (f"unavailable-{status}", None)
        elif 200 <= status < 300:
            agent = (self.settings.get("ROBOTSTXT_USER_AGENT")
                     or self.settings.get("USER_AGENT") or "*")
            try:
                text = response.body.decode("utf-8", "replace")
                delay = Protego.parse(text).crawl_delay(agent)
            except Exception:
                delay = None
            self._robots[netloc] = (digest_of(response.body),
                                    None if delay is None else float(delay))
        else:
            return
        # announced at once (the page requests wait for their robots.txt, so before any
        # outcome of the origin); the outcomes wait for it (_robots_seen)
        self._announcing[netloc] = asyncio.ensure_future(
            self._announce_now(host_of(asked), *self._robots[netloc]))

    # -- orders in -------------------------------------------------------------------------
    async def start(self) -> AsyncIterator[Any]:
        s = self.recrawl
        self._consumer = AIOKafkaConsumer(
            s.topic("orders"), bootstrap_servers=s.kafka_bootstrap, group_id=self.group_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            max_poll_records=self.batch_size)
        self._producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, acks="all",
                                          linger_ms=5)
        self._redis = connect_redis(s.redis_url)
        self._digests = DigestStore(self._redis, s.key_prefix)
        await self._consumer.start()
        await self._producer.start()
        self.logger.info("consuming %s as %s", s.topic("orders"), self.group_id)
        while not self._closing:
            try:
                batch = await self._consumer.getmany(timeout_ms=500)
            except ConsumerStoppedError:  # the spider is closing (closed() stopped it)
                return
            records = [r for rs in batch.values() for r in rs]
            loop = asyncio.get_running_loop()
            for r in records:
                request = self.request_for(r.value)
                if request is None:
                    continue
                done: asyncio.Future[None] = loop.create_future()
                request.meta["recrawl_done"] = done
                self._pending.add(done)
                yield request
            if self._pending:  # the batch's outcomes are sent: its offsets can be committed
                await asyncio.gather(*self._pending)
                self._pending.clear()
                await self._producer.flush()
            if records:
                await self._consumer.commit()

    def request_for(self, raw: bytes | None) -> scrapy.Request | None:
        """The request of one order (None for an unreadable order: logged, counted)."""
        try:
            order = json.loads(raw or b"")
            url = order["url"]
            if not isinstance(url, str) or not host_of(url):
                raise TypeError(f"url {url!r} is not an http(s) URL")
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            self.crawler.stats.inc_value("recrawl/bad_orders")
            self.logger.warning("unreadable order skipped: %s (%r)", exc, (raw or b"")[:200])
            return None
        self.crawler.stats.inc_value("recrawl/orders")
        oid = order.get("order_id")
        return scrapy.Request(
            url, callback=self.parse, errback=self.on_error, dont_filter=True,
            meta={"recrawl_order": order,
                  "recrawl_order_id": oid if isinstance(oid, str) else None})

    # -- outcomes out ----------------------------------------------------------------------
    async def parse(self, response: Response, **kwargs: Any) -> AsyncIterator[Any]:
        meta = response.meta
        url: str = meta["recrawl_order"]["url"]
        status = response.status
        digest: str | None = None
        previous: str | None = None
        error = None if 200 <= status < 300 else f"http status {status}"
        try:
            if error is None:
                digest = digest_of(response.body)
                try:
                    assert self._digests is not None
                    previous = await self._digests.swap(url, digest)
                except Exception as exc:  # Redis down: report the fetch, not a wrong "changed"
                    self.logger.warning("digest store failed: %r", exc)
                    digest, error = None, f"digest store error: {exc!r}"
            out = outcome(url, meta["recrawl_order_id"], time.time(), status, error, digest,
                          previous)
            await self._robots_seen(url)
            await self.publish(out)
        finally:
            self._done(meta)
        for item in self.handle_page(response) or ():
            yield item

    async def on_error(self, failure: Failure) -> None:
        meta = failure.request.meta  # type: ignore[attr-defined]
        try:
            url = meta["recrawl_order"]["url"]
            out = outcome(url, meta["recrawl_order_id"], time.time(), None,
                          error_of(failure, self.settings.getint("DOWNLOAD_MAXSIZE")), None, None)
            # the request that failed: the order's, or a redirect's (RobotsTxtMiddleware
            # checks every redirect target against the robots.txt of the target's origin)
            failed_url: str = failure.request.url  # type: ignore[attr-defined]
            netloc = failed_url.split("/")[2]
            robots = self._robots.get(netloc)
            if out["error"] == ROBOTS_ERROR and netloc != url.split("/")[2]:
                # another origin's rules: the page stays a candidate
                out["error"] = f"robots.txt disallows the redirect target {failed_url[:500]}"
            elif out["error"] == ROBOTS_ERROR and robots is not None:
                out["disallowed"], out["robots_digest"] = True, robots[0]
            await self._robots_seen(url)
            await self.publish(out)
        finally:
            self._done(meta)

    async def publish(self, out: dict[str, Any]) -> None:
        assert self._producer is not None
        await self._producer.send_and_wait(
            self.recrawl.topic("outcomes"), json.dumps(out).encode(),
            key=(host_of(out["url"]) or "invalid").encode())
        stats = self.crawler.stats
        if out["error"] == ROBOTS_ERROR:
            stats.inc_value("recrawl/outcomes/robots_disallowed")
        elif out["error"] is not None:
            stats.inc_value("recrawl/outcomes/failed")
        else:
            kind = {None: "first_seen", True: "changed", False: "unchanged"}[out["changed"]]
            stats.inc_value(f"recrawl/outcomes/{kind}")

    async def _robots_seen(self, url: str) -> None:
        """Wait until the robots.txt of the URL's origin is announced (if it is new): the
        worker hears of a robots.txt before the outcomes it decided."""
        task = self._announcing.get(url.split("/")[2])
        if task is not None:
            await asyncio.shield(task)

    async def _announce_now(self, host: str, digest: str, delay_s: float | None) -> None:
        try:
            await self._announce(host, digest, delay_s)
        except Exception as exc:  # Redis or Kafka down: the worker keeps the old copy's
            self.logger.warning("robots.txt of %s not announced: %r", host, exc)

    async def _announce(self, host: str, digest: str, delay_s: float | None) -> None:
        """Publish a host's robots.txt digest and Crawl-delay once per change (as the
        reference fetcher's ``FetcherService._announce``)."""
        async with self._announce_locks.setdefault(host, asyncio.Lock()):
            if self._announced.get(host) != digest:
                await self._announce_locked(host, digest, delay_s)

    async def _announce_locked(self, host: str, digest: str, delay_s: float | None) -> None:
        key = f"{self.recrawl.key_prefix}:{{{host}}}:fetch:robots"
        if await self._redis.get(key) not in (digest, digest.encode()):
            event = HostEvent(
                host=host, source="robots", robots_digest=digest,
                max_crawls_per_s=None if delay_s is None else min(
                    MAX_RATE_PER_S, max(1.0 / max(delay_s, 1e-9), 1e-9)),
                reason=None if delay_s is None else f"Crawl-delay {delay_s:g}")
            assert self._producer is not None
            await self._producer.send_and_wait(self.recrawl.topic("hosts"),
                                               event.model_dump_json().encode(),
                                               key=host.encode())
            await self._redis.set(key, digest)
            self.crawler.stats.inc_value("recrawl/robots_announced")
            self.logger.info("robots.txt of %s announced (digest %s, Crawl-delay %s)", host,
                             digest[:12] if len(digest) == 64 else digest, delay_s)
        self._announced[host] = digest

    def _done(self, meta: dict[str, Any]) -> None:
        done = meta.get("recrawl_done")
        if done is not None and not done.done():
            done.set_result(None)

    def handle_page(self, response: Response) -> Iterable[Any] | None:
        """Override to extract items or follow-up work from a fetched page (its outcome is
        already published)."""
        return None

    async def closed(self, reason: str) -> None:
        """Stop the Kafka clients; the offsets of a batch not finished are not committed
        (its orders are consumed again by the next fetcher of the group)."""
        self._closing = True
        for stop in (getattr(self._consumer, "stop", None), getattr(self._producer, "stop", None)):
            if stop is not None:
                with contextlib.suppress(Exception):
                    await stop()
        if getattr(self, "_redis", None) is not None:
            with contextlib.suppress(Exception):
                await self._redis.aclose()


def main(argv: list[str] | None = None) -> int:
    """``python -m streams.integrations.scrapy [-s NAME=VALUE]... [-a NAME=VALUE]...``"""
    import argparse

    p = argparse.ArgumentParser(prog="python -m streams.integrations.scrapy",
                                description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("-s", dest="settings", action="append", default=[], metavar="NAME=VALUE",
                   help="a Scrapy setting (repeatable)")
    p.add_argument("-a", dest="args", action="append", default=[], metavar="NAME=VALUE",
                   help="a spider argument: group_id, batch (repeatable)")
    ns = p.parse_args(argv)
    settings = ScrapySettings()
    settings.setdict(SPIDER_SETTINGS, priority="project")
    for kv in ns.settings:
        name, _, value = kv.partition("=")
        settings.set(name, value, priority="cmdline")
    process = CrawlerProcess(settings)
    process.crawl(RecrawlSpider, **dict(a.partition("=")[::2] for a in ns.args))
    process.start()
    return 0


if __name__ == "__main__":
    sys.exit(main())
