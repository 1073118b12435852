"""What the demo publishes before it runs: the catalogue, host limits and budget
(:func:`load_inputs`), and one fetch of every page (:func:`initial_crawl`).

Part of :mod:`streams.demo` (split by concern), which re-exports every name.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from streams.demo.config import DemoConfig, host_limit_of
from streams.fetcher.client import SafeClient
from streams.settings import Settings
from streams.store.redis_conn import AsyncRedis
from streams.testweb.expected import Imported
from streams.testweb.server import TestWeb

__all__ = ["import_history", "initial_crawl", "load_inputs"]


async def load_inputs(
    settings: Settings, web: TestWeb, cfg: DemoConfig, *, budget: bool = True
) -> None:
    """Publish the catalogue (pages), host limits and (``budget``) the budget."""
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
        for part in range(settings.partitions if budget else 0):
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


async def import_history(settings: Settings, web: TestWeb, cfg: DemoConfig, folder: Path
                         ) -> tuple[dict[str, Any], list[Imported]]:
    """The warm start: write the test web's past (``cfg.history_s`` seconds before now,
    :func:`streams.testweb.world.past_changes` as the web was given it) into ``folder`` as a
    history file, with (``cfg.history_pings``) the ping log of the pings the web sent for
    those changes (:func:`streams.testweb.world.past_pings`, seeded as the past), and import
    them into the running worker with ``recrawl import``'s code
    (:func:`streams.commands.importing.import_file`: page events, then the crawl outcomes,
    through Kafka), returning once the worker has applied every outcome.  The worker must
    not order (budget 0) meanwhile: a page's live crawl would make its older imported
    outcomes stale.  Returns what the summary reports and the crawls sent, as ``(page,
    unix time, changed, signals)`` in time order, for the simulator's mirror of the
    worker."""
    from streams.commands.importing import import_file
    from streams.testweb.history import PING_LOG, history_crawls, history_name, write_history
    from streams.testweb.world import past_pings

    if web.past is None:
        raise ValueError("the test web has no past to import (TestWeb(past=...))")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / history_name(cfg.history_format)
    anchor = time.time()
    log = folder / PING_LOG if cfg.history_pings else None
    pings = past_pings(web.world, list(web.past), cfg.history_s,
                       poll_interval_s=cfg.poll_interval_s,
                       flush_interval_s=web.flush_interval_s,
                       seed=cfg.web_seed) if cfg.history_pings else None
    write_history(path, web.world, web.urls(), web.past, anchor, cfg.history_s,
                  fmt=cfg.history_format, crawls_per_s=cfg.budget_per_s, pings=pings,
                  ping_log=log)
    crawls = history_crawls(path, web.urls(), log)
    started = time.monotonic()
    result = await import_file(settings, path, cfg.history_format, wait_s=300.0,
                               ping_log=log)
    took = time.monotonic() - started
    if result.code != 0 or not result.applied:
        raise RuntimeError(f"the demo's history import failed (exit {result.code}, applied "
                           f"{result.applied}); see the output above")
    if result.sent != len(crawls):
        raise RuntimeError(f"the import sent {result.sent} outcomes, the history holds "
                           f"{len(crawls)} crawls")
    info = {"history_s": cfg.history_s, "format": cfg.history_format, "file": str(path),
            "pages": result.pages, "records": result.records, "outcomes": result.sent,
            "intervals": sum(1 for c in crawls if c[2] is not None),
            "changes": int(sum(len(c) for c in web.past)), "import_s": took,
            "ping_log": None if log is None else str(log),
            "pings": None if pings is None else int(sum(len(p) for p in pings))}
    return info, crawls
