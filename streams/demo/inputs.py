"""What the demo publishes before it runs: the catalogue, host limits and budget
(:func:`load_inputs`), and one fetch of every page (:func:`initial_crawl`).

Part of :mod:`streams.demo` (split by concern), which re-exports every name.
"""

from __future__ import annotations

import json
from typing import Any

from aiokafka import AIOKafkaProducer

from streams.demo.config import DemoConfig, host_limit_of
from streams.fetcher.client import SafeClient
from streams.settings import Settings
from streams.store.redis_conn import AsyncRedis
from streams.testweb.server import TestWeb

__all__ = ["initial_crawl", "load_inputs"]


async def load_inputs(
    settings: Settings, web: TestWeb, cfg: DemoConfig
) -> None:
    """Publish the catalogue (pages), host limits and the budget."""
    world = web.world
    host_limit = host_limit_of(cfg, world)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for host in world.hosts:
            # No cap on orders in flight per host: the fetcher already fetches one page
            # of a host at a time, and a cap of 1 holds a host's next order until the
            # worker has *applied* the previous outcome (Kafka + agent latency), which
            # starves the hosts with the most valuable pages (see docs/edges.md).
            v = {"host": host, "max_crawls_per_s": host_limit}
            await producer.send(settings.topic("hosts"), json.dumps(v).encode(), key=host.encode())
        for i, p in enumerate(world.pages):
            page: dict[str, Any] = {"url": web.url(i), "importance": p.importance}
            if cfg.give_rates:
                page["change_rate_per_s"] = p.change_rate_per_s
            await producer.send(
                settings.topic("pages"), json.dumps(page).encode(), key=p.host.encode()
            )
        ctl = {"budget_per_s": cfg.budget_per_s}
        for part in range(settings.partitions):
            # one control message per partition: every shard hears the budget
            await producer.send(
                settings.topic("control"), json.dumps(ctl).encode(), key=b"control",
                partition=part,
            )  # fmt: skip
        await producer.flush()
    finally:
        await producer.stop()


async def initial_crawl(
    settings: Settings, web: TestWeb, http: SafeClient, rclient: AsyncRedis
) -> list[float]:
    """Fetch every page once and report it, so the run starts with a full cache, as the
    simulator does (every page fresh at ``t = 0``); returns each page's fetch time."""
    from streams.fetcher.service import DigestStore, outcome_for

    digests = DigestStore(rclient, settings.key_prefix)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    fetched: list[float] = []
    try:
        for i, page in enumerate(web.world.pages):
            result, _ = await http.get(web.url(i))
            fetched.append(result.fetched_at)
            prev = await digests.swap(result.url, result.digest) if result.digest else None
            out = outcome_for(result, prev, None)
            await producer.send(
                settings.topic("outcomes"), json.dumps(out).encode(), key=page.host.encode()
            )
        await producer.flush()
    finally:
        await producer.stop()
    return fetched
