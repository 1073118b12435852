"""A tick's orders through a batch sink (:data:`streams.scheduler.BatchSink`), on the
memory store: orders the sink answered as sent are in flight; the ones it refused, or
never answered because it raised, are not, in the store nor in the book, and are ordered
again on a later tick."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from streams.scheduler import Scheduler
from streams.settings import Settings
from streams.store import MemoryStore
from streams.store.protocol import PageOp
from streams.telemetry.metrics import Metrics

URLS = [(f"h{i}.example", f"https://h{i}.example/p") for i in range(6)]


async def _scheduler(sink_mode: list[str], sent: list[str]
                     ) -> tuple[Scheduler, MemoryStore, list[float]]:
    st = Settings(web_enabled=False, partitions=1, default_host_crawls_per_s=1e6,
                  host_burst=1e6, budget_per_s=1e6, order_timeout_s=1e6)
    store = MemoryStore()
    await store.apply_pages([PageOp(u, h, 1.0, None, False, "pages", 0, k)
                             for k, (h, u) in enumerate(URLS)])

    async def sink(records: list[tuple[bytes, bytes]]
                   ) -> AsyncIterator[tuple[list[int], Exception | None, None]]:
        # the first two as one batch, sent; then as the mode says
        sent.extend(json.loads(v)["url"] for _k, v in records[:2])
        yield [0, 1], None, None
        if sink_mode[0] == "raise":
            raise RuntimeError("a sink that breaks its contract")
        if sink_mode[0] == "refuse":
            yield list(range(2, len(records))), RuntimeError("producer stopping"), None
        if sink_mode[0] == "ok":
            sent.extend(json.loads(v)["url"] for _k, v in records[2:])
            yield list(range(2, len(records))), None, None
        # "short": returns without answering the rest

    now = [1000.0]
    sch = Scheduler(st, store=store, metrics=Metrics(), send_order=None, send_orders=sink,
                    clock=lambda: now[0], monotonic=lambda: now[0])
    sch.sync_assignment({0})
    await sch.wait_loaded({0}, timeout_s=5.0)
    sch.shards[0].share_per_s = 100.0 / st.tick_s
    sch.pacer.advance(now[0], 0.0)  # the pacer's first look starts its clock
    return sch, store, now


async def _in_flight(store: MemoryStore) -> set[str]:
    got = set()
    for h, u in URLS:
        page = (await store.get_pages(h, [u]))[u]
        if page[1] is not None:
            got.add(u)
    return got


async def test_orders_the_sink_did_not_send_are_not_left_in_flight() -> None:
    for mode in ("raise", "refuse", "short"):
        sent: list[str] = []
        sink_mode = [mode]
        sch, store, now = await _scheduler(sink_mode, sent)
        shard = sch.shards[0]
        now[0] += 10.0  # credit for this tick (the pacer's time is passed in)
        assert await sch.tick_all([shard]) == 2, mode
        assert len(sent) == 2
        assert set(shard.in_flight) == set(sent) == await _in_flight(store), mode
        assert sch.metrics.tally["orders.unsent"] == len(URLS) - 2
        sink_mode[0] = "ok"  # the rest are ordered on a later tick
        now[0] += 10.0
        assert await sch.tick_all([shard]) == len(URLS) - 2, mode
        assert set(shard.in_flight) == {u for _h, u in URLS} == await _in_flight(store)
        sch.sync_assignment(set())


async def test_orders_whose_delivery_fails_after_the_producer_took_them_are_ordered_again(
) -> None:
    """A group the sink took (error None) whose delivery then fails: its marks end, in the
    store and in the book, and its pages are ordered again on a later tick; a group
    delivered keeps its marks."""
    st = Settings(web_enabled=False, partitions=1, default_host_crawls_per_s=1e6,
                  host_burst=1e6, budget_per_s=1e6, order_timeout_s=1e6)
    store = MemoryStore()
    await store.apply_pages([PageOp(u, h, 1.0, None, False, "pages", 0, k)
                             for k, (h, u) in enumerate(URLS)])
    loop = asyncio.get_running_loop()
    deliveries: list[tuple[list[str], asyncio.Future[None]]] = []

    async def sink(records: list[tuple[bytes, bytes]]
                   ) -> AsyncIterator[tuple[list[int], Exception | None, asyncio.Future[None]]]:
        for lo in range(0, len(records), 3):
            idx = list(range(lo, min(lo + 3, len(records))))
            fut: asyncio.Future[None] = loop.create_future()
            deliveries.append(([json.loads(records[i][1])["url"] for i in idx], fut))
            yield idx, None, fut

    now = [1000.0]
    sch = Scheduler(st, store=store, metrics=Metrics(), send_order=None, send_orders=sink,
                    clock=lambda: now[0], monotonic=lambda: now[0])
    sch.sync_assignment({0})
    await sch.wait_loaded({0}, timeout_s=5.0)
    shard = sch.shards[0]
    shard.share_per_s = 100.0 / st.tick_s
    sch.pacer.advance(now[0], 0.0)
    now[0] += 10.0
    assert await sch.tick_all([shard]) == len(URLS)
    assert await _in_flight(store) == {u for _h, u in URLS} == set(shard.in_flight)
    (lost, failed), (kept, delivered) = deliveries
    delivered.set_result(None)
    failed.set_exception(TimeoutError("request timed out"))
    for _ in range(50):  # the watch ends the marks in a task of its own
        await asyncio.sleep(0)
        if not set(lost) & await _in_flight(store):
            break
    while sch.issuer._undelivery:
        await asyncio.gather(*sch.issuer._undelivery)
    assert await _in_flight(store) == set(kept) == set(shard.in_flight)
    assert sch.metrics.tally["orders.undelivered"] == len(lost)
    now[0] += 10.0
    assert await sch.tick_all([shard]) == len(lost)  # ordered again
    assert await _in_flight(store) == {u for _h, u in URLS} == set(shard.in_flight)
    sch.sync_assignment(set())
