"""The fetcher's loop: orders in, outcomes out.

Consumes ``<prefix>.orders`` in a consumer group (several fetchers share the partitions),
fetches with :class:`~streams.fetcher.client.SafeClient`, decides *changed* by comparing the
body's SHA-256 with the previous digest of that URL (kept in Redis, swapped atomically), and
publishes one outcome per order — failures included, with the error::

    {"url", "order_id", "fetched_at", "status", "error", "changed": true|false|null, "digest"}

``changed`` is ``null`` for the first successful fetch of a URL (nothing to compare with)
and for failures.  Offsets are committed after a batch's outcomes are acknowledged, so an
order is fetched at least once.
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

from streams.fetcher.client import FetchLimits, FetchResult, SafeClient
from streams.fetcher.egress import EgressPolicy
from streams.records import host_of
from streams.redis_conn import AsyncRedis
from streams.redis_conn import connect as connect_redis
from streams.settings import Settings

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


@dataclass
class FetcherStats:
    orders: int = 0
    bad_orders: int = 0
    fetched_ok: int = 0
    failed: int = 0
    changed: int = 0
    unchanged: int = 0
    first_seen: int = 0
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
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.limits = limits or FetchLimits()
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
        await consumer.start()
        await producer.start()
        try:
            async with SafeClient(self.policy, self.limits) as client:
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
        host = host_of(url) if "://" in url else ""
        async with self._in_flight, self._host_locks[host]:
            result, _ = await client.get(url)
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
        outcome = outcome_for(result, previous, order_id if isinstance(order_id, str) else None)
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
        key = (host or "invalid").encode()
        await producer.send(
            self.settings.topic("outcomes"), json.dumps(outcome).encode(), key=key
        )
        if self.on_outcome is not None:
            self.on_outcome(order, outcome)
