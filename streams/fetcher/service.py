"""The fetcher's loop: orders in, outcomes out.

Consumes ``<prefix>.orders`` in a consumer group (several fetchers share the partitions),
fetches with :class:`~streams.fetcher.client.SafeClient`, decides *changed* by comparing the
body's SHA-256 with the previous digest of that URL (kept in Redis, swapped atomically), and
publishes one outcome per order — failures included, with the error::

    {"url", "order_id", "fetched_at", "status", "error", "changed": true|false|null, "digest"}

``changed`` is ``null`` for the first successful fetch of a URL (nothing to compare with)
and for failures.  Offsets are committed after a batch's outcomes are acknowledged, so an
order is fetched at least once.

Politeness (:mod:`streams.fetcher.robots`, :mod:`streams.fetcher.pushback`):

* robots.txt (RFC 9309), cached per origin: a disallowed URL is not fetched; its outcome
  has ``"error": "robots.txt disallows"``, ``"disallowed": true`` and the copy's
  ``robots_digest``, and the worker stops ordering it.  An unreachable robots.txt
  disallows everything for a while (the outcome's error says so; not ``disallowed``:
  the pages stay candidates).  A redirect is followed only where the robots.txt of its
  target's origin allows it (``"error": "robots.txt disallows the redirect target ..."``;
  ``disallowed`` when the target is on the page's own origin, whose copy it names).
* A robots.txt whose digest differs from the one last announced for the host (Redis
  ``P:{host}:fetch:robots``, shared by the fetchers) is announced on ``recrawl.hosts``:
  ``{"host", "source": "robots", "max_crawls_per_s": 1/Crawl-delay or null,
  "robots_digest"}``: the capacity follows its Crawl-delay and the worker orders the
  pages the older copy disallowed again.  Hosts with disallowed pages are asked for
  their robots.txt again when their copy expires (``P:fetch:robots-recheck``), so a
  change is seen even when the worker orders nothing there.
* 429, and 503 with Retry-After, lower the host's capacity (AIMD, ``"source":
  "pushback"``) and it recovers step by step; hosts under push-back are kept in
  ``P:fetch:pushback`` so that a restarted fetcher finishes their recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams.events.records import MAX_RATE_PER_S, HostEvent, host_of
from streams.fetcher.client import FetchLimits, FetchResult, SafeClient
from streams.fetcher.egress import EgressPolicy
from streams.fetcher.pushback import Change, HostThrottle, PushbackPolicy, pushback_of
from streams.fetcher.robots import RobotsCache, RobotsPolicy, RobotsRules, origin_of
from streams.settings import Settings
from streams.store.redis_conn import AsyncRedis
from streams.store.redis_conn import connect as connect_redis

__all__ = ["DigestStore", "FetcherService", "FetcherStats", "outcome_for", "robots_outcome"]

log = logging.getLogger(__name__)


class DigestStore:
    """Last content digest per URL: ``<prefix>:{host}:fetch:digest:<url>``."""

    def __init__(self, client: AsyncRedis, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix

    def key(self, url: str) -> str:
        return f"{self.prefix}:{{{host_of(url)}}}:fetch:digest:{url}"

    async def swap(self, url: str, digest: str) -> str | None:
        """Store ``digest`` and return the previous one (atomic ``SET ... GET``)."""
        prev = await self.redis.set(self.key(url), digest, get=True)
        if isinstance(prev, bytes):
            return prev.decode()
        return prev if isinstance(prev, str) else None


def outcome_for(
    result: FetchResult, previous_digest: str | None, order_id: str | None
) -> dict[str, Any]:
    changed: bool | None = None
    if result.ok and result.digest is not None and previous_digest is not None:
        changed = result.digest != previous_digest
    return {
        "url": result.url,
        "order_id": order_id,
        "fetched_at": result.fetched_at,
        "status": result.status,
        "error": result.error,
        "changed": changed,
        "digest": result.digest if result.ok else None,
    }


def robots_outcome(url: str, order_id: str | None, rules: RobotsRules, now_s: float
                   ) -> dict[str, Any]:
    """The outcome of an order that robots.txt forbids (not fetched)."""
    disallowed = rules.kind == "rules"
    return {
        "url": url,
        "order_id": order_id,
        "fetched_at": now_s,
        "status": None,
        "error": rules.why_not(),
        "changed": None,
        "digest": None,
        "disallowed": disallowed,
        "robots_digest": rules.digest if disallowed else None,
    }


@dataclass
class FetcherStats:
    orders: int = 0
    bad_orders: int = 0
    fetched_ok: int = 0
    failed: int = 0
    changed: int = 0
    unchanged: int = 0
    first_seen: int = 0
    disallowed: int = 0
    robots_unreachable: int = 0
    pushbacks: int = 0
    host_events: int = 0
    last_threshold: float | None = None
    order_times: list[float] = field(default_factory=list)

    def orders_per_s(self, window_s: float = 10.0, now_s: float | None = None) -> float:
        now_s = time.time() if now_s is None else now_s
        recent = [t for t in self.order_times if t >= now_s - window_s]
        self.order_times = recent
        return len(recent) / window_s


class FetcherService:
    """Run with ``await FetcherService(settings, policy).run()``; ``stop()`` ends it."""

    def __init__(
        self,
        settings: Settings,
        policy: EgressPolicy,
        limits: FetchLimits | None = None,
        *,
        group_id: str | None = None,
        auto_offset_reset: str = "earliest",
        on_outcome: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
        obey_robots: bool = True,
        robots: RobotsPolicy | None = None,
        pushback: PushbackPolicy | None = None,
        politeness_interval_s: float = 0.5,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.limits = limits or FetchLimits()
        self.obey_robots = obey_robots
        self.robots_policy = robots or RobotsPolicy()
        self.pushback_policy = pushback or PushbackPolicy()
        self.politeness_interval_s = politeness_interval_s
        self.robots: RobotsCache | None = None
        #: host -> its push-back state (AIMD)
        self.throttles: dict[str, HostThrottle] = {}
        #: host -> robots digest announced (a cache of P:{host}:fetch:robots)
        self._announced: dict[str, str] = {}
        self._announce_locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.group_id = group_id or f"{settings.app_id}-fetcher"
        self.auto_offset_reset = auto_offset_reset
        self.on_outcome = on_outcome
        self.stats = FetcherStats()
        self._host_locks: dict[str, asyncio.Semaphore] = defaultdict(
            lambda: asyncio.Semaphore(self.limits.per_host_concurrency)
        )
        self._in_flight = asyncio.Semaphore(self.limits.max_in_flight)
        self._stopping = asyncio.Event()
        self.ready = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        s = self.settings
        consumer = AIOKafkaConsumer(
            s.topic("orders"),
            bootstrap_servers=s.kafka_bootstrap,
            group_id=self.group_id,
            enable_auto_commit=False,
            auto_offset_reset=self.auto_offset_reset,
            max_poll_records=256,
        )
        producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, acks="all", linger_ms=5)
        rclient = connect_redis(s.redis_url)
        digests = DigestStore(rclient, s.key_prefix)
        self._redis, self._producer = rclient, producer
        await consumer.start()
        await producer.start()
        polite: asyncio.Task[None] | None = None
        try:
            async with SafeClient(self.policy, self.limits) as client:
                self.robots = RobotsCache(client, self.robots_policy)
                await self._resume_pushback()
                polite = asyncio.create_task(self._politeness_loop())
                self.ready.set()
                while not self._stopping.is_set():
                    batch = await consumer.getmany(timeout_ms=200)
                    records = [r for rs in batch.values() for r in rs]
                    if not records:
                        continue
                    await asyncio.gather(
                        *(self._handle(r.value, client, digests, producer) for r in records)
                    )
                    await producer.flush()
                    await consumer.commit()
        finally:
            if polite is not None:
                polite.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await polite
            with contextlib.suppress(Exception):
                await consumer.stop()
            with contextlib.suppress(Exception):
                await producer.stop()
            await rclient.aclose()

    async def _handle(
        self,
        raw: bytes | None,
        client: SafeClient,
        digests: DigestStore,
        producer: AIOKafkaProducer,
    ) -> None:
        try:
            order = json.loads(raw or b"")
            url = order["url"]
            if not isinstance(url, str):
                raise TypeError("url is not a string")
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            self.stats.bad_orders += 1
            log.warning("unreadable order skipped: %s (%r)", exc, (raw or b"")[:200])
            return
        self.stats.orders += 1
        self.stats.order_times.append(time.time())
        th = order.get("threshold")
        if isinstance(th, int | float):
            self.stats.last_threshold = float(th)
        order_id = order.get("order_id")
        oid = order_id if isinstance(order_id, str) else None
        host = host_of(url) if "://" in url else ""
        async with self._in_flight, self._host_locks[host]:
            rules = await self._robots_for(url, host)
            if rules is not None and not rules.allows(url, self.robots.token):  # type: ignore[union-attr]
                outcome = robots_outcome(url, oid, rules, time.time())
                if rules.kind == "unreachable" and (rules.error or "").startswith("refused:"):
                    # the policy refuses the host itself: the page's fetch would say so
                    outcome["error"] = rules.error
                    self.stats.failed += 1
                elif rules.kind == "unreachable":
                    self.stats.robots_unreachable += 1
                else:
                    self.stats.disallowed += 1
                    await self._recheck_later(rules)
                await self._send_outcome(producer, host, order, outcome)
                return
            hop_rules: dict[str, RobotsRules] = {}
            result, headers = await client.get(
                url, check_redirect=lambda target: self._redirect_allowed(target, hop_rules))
            if hop_rules and result.error is not None and result.final_url in hop_rules:
                target_rules = hop_rules[result.final_url]
                if target_rules.origin == origin_of(url) and target_rules.kind == "rules":
                    # a redirect into a path of the same origin that robots.txt disallows:
                    # the page is disallowed by that copy (the worker blocks it until the
                    # host's robots.txt changes)
                    outcome = robots_outcome(url, oid, target_rules, time.time())
                    outcome["error"] = result.error
                    self.stats.disallowed += 1
                    await self._send_outcome(producer, host, order, outcome)
                    return
        await self._maybe_pushback(host, result, headers)
        previous = None
        if result.ok and result.digest is not None:
            try:
                previous = await digests.swap(url, result.digest)
            except Exception as exc:  # Redis down: report the fetch, not a wrong "changed"
                log.warning("digest store failed: %r", exc)
                result = FetchResult(
                    result.url, result.final_url, result.fetched_at, result.status, None,
                    f"digest store error: {exc!r}",
                )  # fmt: skip
        outcome = outcome_for(result, previous, oid)
        if result.ok:
            self.stats.fetched_ok += 1
            if outcome["changed"] is None:
                self.stats.first_seen += 1
            elif outcome["changed"]:
                self.stats.changed += 1
            else:
                self.stats.unchanged += 1
        else:
            self.stats.failed += 1
        await self._send_outcome(producer, host, order, outcome)

    async def _send_outcome(self, producer: AIOKafkaProducer, host: str,
                            order: dict[str, Any], outcome: dict[str, Any]) -> None:
        key = (host or "invalid").encode()
        await producer.send(
            self.settings.topic("outcomes"), json.dumps(outcome).encode(), key=key
        )
        if self.on_outcome is not None:
            self.on_outcome(order, outcome)

    # -- politeness ------------------------------------------------------------------------
    def _key(self, host: str, kind: str) -> str:
        return f"{self.settings.key_prefix}:{{{host}}}:{kind}"

    @property
    def _recheck_key(self) -> str:
        return f"{self.settings.key_prefix}:fetch:robots-recheck"

    @property
    def _pushback_key(self) -> str:
        return f"{self.settings.key_prefix}:fetch:pushback"

    async def _robots_for(self, url: str, host: str) -> RobotsRules | None:
        """The URL's origin's robots.txt (None: not obeyed, or not an http(s) URL)."""
        if not self.obey_robots or self.robots is None or not host:
            return None
        try:
            rules = await self.robots.rules_for(url)
        except Exception as exc:  # a bug (the client never raises): disallow, say why
            log.exception("robots.txt of %s", url)
            now = time.time()
            return RobotsRules(origin_of(url), "unreachable", None, "", now, now,
                               error=f"robots.txt error: {exc!r}")
        if rules.digest and self._announced.get(host) != rules.digest:
            try:
                await self._announce(host, rules)
            except Exception as exc:  # Redis or Kafka down: announced with a later order
                log.warning("robots.txt of %s not announced: %r", host, exc)
        return rules

    async def _redirect_allowed(self, target: str,
                                hop_rules: dict[str, RobotsRules]) -> str | None:
        """None if robots.txt of the redirect target's origin allows it, else why not
        (``hop_rules`` keeps the copy that refused it)."""
        host = host_of(target)
        rules = await self._robots_for(target, host)
        if rules is None or rules.allows(target, self.robots.token):  # type: ignore[union-attr]
            return None
        hop_rules[target] = rules
        if rules.kind == "unreachable":
            return f"redirect to {target[:500]}: {rules.why_not()}"
        return f"robots.txt disallows the redirect target {target[:500]}"

    async def _announce(self, host: str, rules: RobotsRules) -> None:
        """Publish a host's new robots.txt digest and Crawl-delay once per change (the
        digest last announced is in Redis, shared by all fetchers)."""
        async with self._announce_locks[host]:
            if self._announced.get(host) == rules.digest:
                return
            key = self._key(host, "fetch:robots")
            prev = await self._redis.get(key)
            if (prev.decode() if isinstance(prev, bytes) else prev) != rules.digest:
                delay = rules.crawl_delay_s(self.robots.token)  # type: ignore[union-attr]
                await self._publish_host(HostEvent(
                    host=host, source="robots", robots_digest=rules.digest,
                    max_crawls_per_s=None if delay is None else min(
                        MAX_RATE_PER_S, max(1.0 / delay, 1e-9)),
                    reason=None if delay is None else f"Crawl-delay {delay:g}"))
                await self._redis.set(key, rules.digest)
                log.info("robots.txt of %s: %s (digest %s, Crawl-delay %s)", host, rules.kind,
                         rules.digest[:12], delay)
            self._announced[host] = rules.digest

    async def _publish_host(self, event: HostEvent) -> None:
        await self._producer.send(self.settings.topic("hosts"),
                                  event.model_dump_json().encode(), key=event.host.encode())
        self.stats.host_events += 1

    async def _recheck_later(self, rules: RobotsRules) -> None:
        """Ask an origin that disallows pages for its robots.txt again when the copy
        expires, even if no order comes for it (its pages are no longer ordered)."""
        with contextlib.suppress(Exception):
            await self._redis.zadd(self._recheck_key, {rules.origin: rules.expires_at_s})

    async def _recheck_due(self, now_s: float) -> None:
        due = await self._redis.zrangebyscore(self._recheck_key, "-inf", now_s, 0, 20)
        for raw in due:
            origin = raw.decode() if isinstance(raw, bytes) else str(raw)
            url = origin + "/"
            host = host_of(url)
            announced = self._announced.get(host)
            async with self._host_locks[host]:
                rules = await self._robots_for(url, host)
            if rules is None:
                await self._redis.zrem(self._recheck_key, origin)
            elif announced is not None and rules.digest and rules.digest != announced:
                await self._redis.zrem(self._recheck_key, origin)  # changed: announced
            else:
                await self._redis.zadd(self._recheck_key, {origin: rules.expires_at_s})

    async def _capacity(self, host: str) -> float:
        """The host's capacity before push-back, as the worker computes it (its
        ``P:{host}:host``): the operator's rate (else the default), lowered by the
        robots.txt's Crawl-delay."""
        raw = await self._redis.hmget(self._key(host, "host"),
                                      ["rate_operator", "rate_robots", "rate_pushback", "rate"])
        op, rob, pb, rate = (None if v is None else float(v) for v in raw)
        if op is None and rob is None and pb is None:
            op = rate  # written before sources existed: the operator's
        base = op if op is not None else self.settings.default_host_crawls_per_s
        return base if rob is None else min(base, rob)

    async def _maybe_pushback(self, host: str, result: FetchResult,
                              headers: Any) -> None:
        now = time.time()
        retry_after = headers.get("Retry-After") if headers else None
        is_pb, ra = pushback_of(result.status, retry_after, now,
                                self.pushback_policy.max_retry_after_s)
        if not is_pb or not host:
            return
        self.stats.pushbacks += 1
        th = self.throttles.get(host)
        if th is None:
            th = self.throttles[host] = HostThrottle(self.pushback_policy)
        try:
            capacity = th.baseline_per_s if th.limited else await self._capacity(host)
            change = th.on_pushback(now, capacity, int(result.status or 0), ra)
            if change is not None:
                await self._redis.sadd(self._pushback_key, host)
                await self._publish_pushback(host, change)
        except Exception as exc:
            log.warning("push-back of %s not published: %r", host, exc)

    async def _publish_pushback(self, host: str, change: Change) -> None:
        log.info("push-back %s: %s (%s)", host, change.rate_per_s, change.reason)
        await self._publish_host(HostEvent(host=host, source="pushback",
                                           max_crawls_per_s=change.rate_per_s,
                                           reason=change.reason))

    async def _resume_pushback(self) -> None:
        """Hosts left under push-back by an earlier run recover from where they are."""
        try:
            hosts = await self._redis.smembers(self._pushback_key)
            now = time.time()
            for raw in hosts:
                host = raw.decode() if isinstance(raw, bytes) else str(raw)
                rate = await self._redis.hget(self._key(host, "host"), "rate_pushback")
                if rate is None:
                    await self._redis.srem(self._pushback_key, host)
                    continue
                self.throttles[host] = HostThrottle(
                    self.pushback_policy, float(rate), await self._capacity(host), now, now)
        except Exception as exc:
            log.warning("push-back state not resumed: %r", exc)

    async def _politeness_loop(self) -> None:
        """Push-back recovery steps and robots.txt re-checks."""
        while not self._stopping.is_set():
            await asyncio.sleep(self.politeness_interval_s)
            now = time.time()
            try:
                for host, th in list(self.throttles.items()):
                    change = th.tick(now)
                    if change is not None:
                        await self._publish_pushback(host, change)
                    if not th.limited:
                        del self.throttles[host]
                        await self._redis.srem(self._pushback_key, host)
                await self._producer.flush()
                if self.obey_robots:
                    await self._recheck_due(now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("politeness loop: %r", exc)
