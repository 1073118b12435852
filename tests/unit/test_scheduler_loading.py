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
from streams.telemetry.metrics import Metrics


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


async def test_a_rebuild_over_many_reads_restores_every_order_in_flight_with_its_time_out(
        monkeypatch: Any) -> None:
    """Orders in flight when a shard is rebuilt (a restart): each is in flight again with
    its time-out ``issued_at + order_timeout_s``, once, and the time-outs form one heap
    (built at the end of the load, not after each read) from which the earliest expire
    first."""
    import heapq
    import json

    from streams.scheduler import loading

    monkeypatch.setattr(loading, "LOAD_PAGES", 7)  # a read of a few pages: many reads
    monkeypatch.setattr(loading, "LOAD_HOSTS", 1)
    monkeypatch.setattr(loading, "MAX_LOAD_HOSTS", 2)
    st = Settings(web_enabled=False, partitions=1, default_host_crawls_per_s=1e6,
                  host_burst=1e6, budget_per_s=1e6, order_timeout_s=100.0)
    store = MemoryStore()
    urls = [(f"h{i % 9}.example", f"https://h{i % 9}.example/{i}") for i in range(60)]
    await store.apply_pages([PageOp(u, h, 1.0, None, False, "pages", 0, k)
                             for k, (h, u) in enumerate(urls)])
    orders: list[dict[str, Any]] = []

    async def sink(k: bytes, v: bytes) -> None:
        orders.append(json.loads(v))

    now = [1000.0]
    first = Scheduler(st, store=store, metrics=Metrics(), send_order=sink,
                      clock=lambda: now[0], monotonic=lambda: now[0])
    first.sync_assignment({0})
    await first.wait_loaded({0}, timeout_s=5.0)
    shard = first.shards[0]
    shard.share_per_s = 8.0 / st.tick_s  # at most 9 orders a tick
    for k in range(5):  # orders issued at 5 times (time-outs tied within a tick)
        now[0] = 1000.0 + 10 * k
        await first.tick_all([shard])
    assert 20 <= len(orders) < len(urls)

    again = Scheduler(st, store=store, metrics=Metrics(), send_order=sink,
                      clock=lambda: now[0])
    again.sync_assignment({0})
    await again.wait_loaded({0}, timeout_s=5.0)
    rebuilt = again.shards[0]
    assert rebuilt.ready and len(rebuilt.book) == len(urls)
    want = sorted((o["issued_at"] + 100.0, o["url"], o["order_id"]) for o in orders)
    assert sorted(rebuilt.timeouts) == want
    assert {u: f[0] for u, f in rebuilt.in_flight.items()} == {
        o["url"]: o["order_id"] for o in orders}
    heap = list(rebuilt.timeouts)
    assert [heapq.heappop(heap) for _ in range(len(heap))] == want
    assert all(rebuilt.timeouts[0] <= x for x in rebuilt.timeouts)
    again.sync_assignment(set())
    first.sync_assignment(set())
