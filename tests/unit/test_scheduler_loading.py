"""A shard's rebuild and the agents' wait for it (no Redis, no Kafka: the memory store).

The agents call :meth:`Scheduler.wait_loaded` before a batch of a sharded input: it returns
once the batch's loading shards are rebuilt, at once for shards not loading, and after
``timeout_s`` at the latest (a load stuck on an unreachable store never stalls the agents).
"""

from __future__ import annotations

import asyncio
from typing import Any

from streams.events.records import shard_of
from streams.scheduler import Scheduler
from streams.settings import Settings
from streams.store import MemoryStore
from streams.store.protocol import PageOp
from streams.worker.metrics import Metrics


class GatedStore(MemoryStore):
    """The memory store whose shard listing waits for ``gate`` (a slow rebuild)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = asyncio.Event()

    async def shard_hosts(self, partition: int) -> list[str]:
        await self.gate.wait()
        return await super().shard_hosts(partition)


async def _scheduler() -> tuple[Scheduler, GatedStore]:
    st = Settings(web_enabled=False, partitions=2)
    store = GatedStore()

    async def sink(k: bytes, v: bytes) -> None:
        return None

    url = "https://a.example/x"
    p = shard_of("a.example", 2)
    await store.apply_pages([PageOp(url, "a.example", 1.0, None, False, "pages", p, 0)])
    return Scheduler(st, store=store, metrics=Metrics(), send_order=sink), store


async def test_wait_loaded_returns_when_the_shard_is_rebuilt() -> None:
    sch, store = await _scheduler()
    sch.sync_assignment({0, 1})
    waiting = asyncio.ensure_future(sch.wait_loaded({0, 1}, timeout_s=30.0))
    await asyncio.sleep(0.05)
    assert not waiting.done() and not sch.shards[0].ready
    store.gate.set()
    await asyncio.wait_for(waiting, 5.0)
    assert sch.shards[0].ready and sch.shards[1].ready
    assert sum(len(s.book) for s in sch.shards.values()) == 1


async def test_wait_loaded_is_bounded_and_ignores_shards_not_loading() -> None:
    sch, store = await _scheduler()
    sch.sync_assignment({0})
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await sch.wait_loaded({0}, timeout_s=0.1)  # stuck: returns after the timeout
    assert 0.1 <= loop.time() - t0 < 5.0 and not sch.shards[0].ready
    t0 = loop.time()
    await sch.wait_loaded({1, 7}, timeout_s=30.0)  # not this worker's, nothing to wait for
    assert loop.time() - t0 < 1.0
    store.gate.set()
    await sch.wait_loaded({0})
    assert sch.shards[0].ready
    sch.sync_assignment(set())
