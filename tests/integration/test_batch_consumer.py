"""Both ways the worker takes its input from Kafka (``RECRAWL_BATCH_CONSUMER``: a fetch at a
time through :class:`streams.worker.consumer.BatchConsumer`, the default; or one message at
a time through Faust's streams) apply every event once, in its partition's order, send the
bad ones to the rejects with their reason, and commit the offsets of everything.  A real
worker process, a real broker and Redis; the events are published by aiokafka's producer."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from faults import lag

from streams.settings import Settings
from streams.store.page_record import PageState
from streams.store.redis_conn import connect_sync as connect_redis_sync
from streams.store.redis_store import page_url

pytestmark = pytest.mark.integration

HOSTS = [f"h{i}.batch.test" for i in range(4)]
PER_HOST = 40


async def _produce(s: Settings, topic: str, items: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, linger_ms=5)
    await producer.start()
    try:
        for key, value in items:
            await producer.send(s.topic(topic), value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


async def _rejects(s: Settings, n: int, timeout_s: float) -> list[dict]:
    consumer = AIOKafkaConsumer(s.topic("rejects"), bootstrap_servers=s.kafka_bootstrap,
                                auto_offset_reset="earliest")
    await consumer.start()
    out: list[dict] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                out.extend(json.loads(r.value) for r in records)
    finally:
        await consumer.stop()
    return out


def _pages(s: Settings) -> dict[str, PageState]:
    r = connect_redis_sync(s.redis_url)
    out: dict[str, PageState] = {}
    for h in HOSTS:
        for f, v in r.hgetall(f"{s.key_prefix}:{{{h}}}:pages").items():
            out[page_url(h, f.decode())] = PageState.decode(v)
    return out


def _until(check, timeout_s: float = 60.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.3)
    return check()


@pytest.mark.parametrize("batch", ["1", "0"], ids=["batch-consumer", "faust-streams"])
def test_each_event_applied_once_in_order_bad_ones_rejected_offsets_committed(
        settings: Settings, start_worker, batch: str) -> None:
    w = start_worker(settings, {"RECRAWL_BATCH_CONSUMER": batch})
    urls = [f"https://{h}/p{i}" for h in HOSTS for i in range(PER_HOST)]
    # every page twice: the second event (importance 3) must win, as in its partition's order
    pages = [(u.split("/")[2].encode(), json.dumps({"url": u, "importance": imp}).encode())
             for imp in (2.0, 3.0) for u in urls]
    bad_pages = [(b"h0.batch.test", b"{not json"),
                 (b"h1.batch.test", json.dumps({"importance": 1.0}).encode())]
    asyncio.run(_produce(settings, "pages", pages[:len(urls)] + bad_pages + pages[len(urls):]))
    assert _until(lambda: len(got := _pages(settings)) == len(urls) and all(
        p.importance == 3.0 for p in got.values())), w.log()[-3000:]

    # two pings per page, distinct ids (not duplicates of each other): each counted once
    now = time.time()
    pings = [(u.split("/")[2].encode(), json.dumps({
        "url": u, "source": "sitemap", "received_at": now, "id": f"{k}-{u}"}).encode())
        for k in range(2) for u in urls]
    bad_ping = (b"h2.batch.test", json.dumps({"url": 7, "source": "sitemap"}).encode())
    asyncio.run(_produce(settings, "pings", [*pings[:50], bad_ping, *pings[50:]]))
    sitemap = 0  # SOURCES order: sitemap first
    assert _until(lambda: all(p.signals[sitemap] == 2 for p in _pages(settings).values())), (
        sorted({p.signals for p in _pages(settings).values()}))

    rejects = asyncio.run(_rejects(settings, 3, 30))
    assert sorted(r["topic"].rsplit(".", 1)[1] for r in rejects) == ["pages", "pages", "pings"]
    assert all(r["reason"] for r in rejects)
    # everything acked and committed (Faust commits every 2 s)
    assert _until(lambda: not any(lag(settings, ("pages", "pings")).values()), 30), lag(
        settings, ("pages", "pings"))
    w.stop()
    assert w.proc.returncode == 0, w.log()[-3000:]
    # nothing was applied twice (the counts above still hold after the stop)
    assert all(p.signals[sitemap] == 2 for p in _pages(settings).values())
