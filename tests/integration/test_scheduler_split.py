"""The budget split between workers on a real Redis (issue 15): liveness on Redis's clock,
a shard that changes workers keeps its weight.  Two Scheduler objects stand for two worker
processes (their Kafka side is not involved: ``resplit`` reads and writes Redis only)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from streams.metrics import Metrics
from streams.scheduler import Scheduler
from streams.settings import Settings
from streams.state import Store

pytestmark = pytest.mark.integration


def _worker(redis_url: str, prefix: str, skew_s: float) -> Scheduler:
    st = Settings(web_enabled=False, budget_per_s=10.0, redis_url=redis_url, key_prefix=prefix)

    async def sink(k: bytes, v: bytes) -> None:
        return None

    return Scheduler(st, Store.from_url(redis_url, prefix), Metrics(), sink,
                     clock=lambda: time.time() + skew_s)


async def _split(redis_url: str) -> None:
    prefix = f"rc{uuid.uuid4().hex[:8]}"
    ahead = _worker(redis_url, prefix, skew_s=3600.0)  # its clock is an hour ahead
    behind = _worker(redis_url, prefix, skew_s=-7.0)
    try:
        for sch, p in ((ahead, 0), (behind, 1)):
            sch.shards[p] = sch.new_shard(p)
            sch.shards[p].ready = True
        for _ in range(3):
            await ahead.resplit(0.5)
            await behind.resplit(0.5)
        # each sees the other alive: R is split, not taken twice
        assert ahead.shards[0].share_per_s == pytest.approx(5.0)
        assert behind.shards[1].share_per_s == pytest.approx(5.0)
        # shard 1 moves to `ahead` with the weight the split gave it, not 1 again
        behind.shards[1].weight = 4.0
        await behind.resplit(0.5)
        await ahead.resplit(0.5)
        ahead.sync_assignment({0, 1})
        assert ahead.shards[1].weight == pytest.approx(4.0, rel=0.05)
    finally:
        for sch in (ahead, behind):
            for task in sch._loaders.values():
                task.cancel()
            await sch.store.close()


def test_workers_with_skewed_clocks_split_the_budget(redis_url: str) -> None:
    asyncio.run(_split(redis_url))
