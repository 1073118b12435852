"""The foundation's end-to-end check: real broker, real Redis, a real worker process."""

from __future__ import annotations

import asyncio
import json
import struct
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams.settings import Settings
from streams.store.page_record import PageState
from streams.store.redis_conn import connect_sync as connect_redis_sync
from streams.store.redis_store import page_url

pytestmark = pytest.mark.integration


async def _produce(s: Settings, topic: str, items: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap)
    await producer.start()
    try:
        for key, value in items:
            await producer.send_and_wait(s.topic(topic), value, key=key)
    finally:
        await producer.stop()


async def _consume(s: Settings, topic: str, n: int, timeout_s: float) -> list[dict]:
    consumer = AIOKafkaConsumer(
        s.topic(topic), bootstrap_servers=s.kafka_bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    out: list[dict] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                out.extend(json.loads(r.value) for r in records)
    finally:
        await consumer.stop()
    return out


def test_page_event_reaches_redis_through_a_worker(settings: Settings, start_worker) -> None:
    start_worker(settings)
    event = {"url": "https://example.org/a", "importance": 2.5}
    asyncio.run(_produce(settings, "pages", [(b"example.org", json.dumps(event).encode())]))

    r = connect_redis_sync(settings.redis_url)  # bytes: the page record is binary
    # one hash per host, field = the url without https://<host> (redis_store's "Short fields")
    key = f"{settings.key_prefix}:{{example.org}}:pages"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not r.hexists(key, "/a"):
        time.sleep(0.2)
    # version 3, the shape byte (0: no fingerprint, no prior, no counts), importance, last
    # crawl (0: never) (streams/store/page_record.py's docstring); the trailing zero bytes
    # (the last crawl) are not stored
    assert r.hkeys(key) == [b"/a"]
    raw = r.hget(key, "/a")
    assert len(raw) == 6
    assert struct.unpack("<BBfd", raw.ljust(14, b"\0")) == (0xA3, 0, 2.5, 0.0)
    assert PageState.decode(raw) == PageState(importance=2.5)


def test_bad_page_events_go_to_rejects_with_reason(settings: Settings, start_worker) -> None:
    start_worker(settings)
    bad = [
        (b"x", b"{not json"),
        (b"x", b'{"url": "ftp://x.org/f"}'),
        (b"x", b'{"url": "https://x.org/", "importance": -1}'),
    ]
    asyncio.run(_produce(settings, "pages", bad))
    rejects = asyncio.run(_consume(settings, "rejects", 3, timeout_s=30))
    assert len(rejects) == 3
    by_raw = {r["raw"]: r for r in rejects}
    assert "json" in by_raw["{not json"]["reason"].lower()
    assert "scheme" in by_raw['{"url": "ftp://x.org/f"}']["reason"]
    assert "importance" in by_raw['{"url": "https://x.org/", "importance": -1}']["reason"]
    assert all(r["topic"] == settings.topic("pages") for r in rejects)
    assert sorted(r["offset"] for r in rejects) == [0, 1, 2]  # all keyed x: one partition


async def _produce_to(s: Settings, topic: str,
                      items: list[tuple[bytes | None, bytes, int]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap)
    await producer.start()
    try:
        for key, value, partition in items:
            await producer.send_and_wait(s.topic(topic), value, key=key, partition=partition)
    finally:
        await producer.stop()


def test_events_on_the_wrong_partition_are_moved_to_their_hosts_partition(
        settings: Settings, start_worker) -> None:
    """A producer with another partitioner (librdkafka's default, kcat) or without a key
    puts a host's events on any partition: the worker sends each again keyed by its host,
    so all of a host's events are applied from its own partition (one shard, in order)."""
    from streams.events.records import shard_of

    start_worker(settings)
    host = "moved.example"
    home = shard_of(host, settings.partitions)
    away = (home + 1) % settings.partitions
    urls = [f"https://{host}/{i}" for i in range(3)]
    asyncio.run(_produce_to(settings, "pages", [
        (None, json.dumps({"url": urls[0]}).encode(), away),  # no key, wrong partition
        (host.encode(), json.dumps({"url": urls[1]}).encode(), away),  # keyed, wrong one
        (None, json.dumps({"url": urls[2]}).encode(), home),  # no key, right partition
    ]))
    r = connect_redis_sync(settings.redis_url, decode_responses=True)
    key = f"{settings.key_prefix}:{{{host}}}:"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and r.hlen(key + "pages") < 3:
        time.sleep(0.2)
    assert sorted(page_url(host, f) for f in r.hkeys(key + "pages")) == urls
    # applied from the host's own partition only
    assert list(r.hgetall(key + "offsets")) == [f"{settings.topic('pages')}:{home}"]
    assert asyncio.run(_consume(settings, "rejects", 1, timeout_s=2)) == []


def test_spellings_of_one_url_are_one_page(settings: Settings, start_worker) -> None:
    """Pages, pings and outcomes name a page in any spelling (case, default
    port, fragment, dot segments, %-escapes, trailing dot, credentials, IDN); the worker
    keeps one page under its canonical URL and host, keyed by the raw spelling's producer."""
    start_worker(settings)
    spellings = ["http://User:pw@Example.COM:80/./a#f", "http://example.com./%61",
                 "HTTP://example.com/b/../a"]
    idn = "http://Bücher.example/x"
    now = time.time()
    events = [(b"Example.COM", json.dumps({"url": spellings[0], "importance": 2.0}).encode()),
              (b"b\xc3\xbccher.example", json.dumps({"url": idn}).encode())]
    asyncio.run(_produce(settings, "pages", events))
    # binary records: decoded with surrogateescape, as streams.store.redis_store.Store reads them
    r = connect_redis_sync(settings.redis_url, decode_responses=True,
                           encoding_errors="surrogateescape")
    key = f"{settings.key_prefix}:{{example.com}}:pages"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not r.hexists(key, "http://example.com/a"):
        time.sleep(0.2)
    pings = [(b"example.com", json.dumps({"url": u, "source": "cdn", "received_at": now,
                                           "id": f"p{i}"}).encode())
             for i, u in enumerate(spellings[1:])]
    asyncio.run(_produce(settings, "pings", pings))
    while time.monotonic() < deadline and PageState.decode(
            r.hget(key, "http://example.com/a")).signals != (0, 0, 0, 2, 0):
        time.sleep(0.2)
    stored = r.hgetall(key)
    assert list(stored) == ["http://example.com/a"]
    assert PageState.decode(stored["http://example.com/a"]) == PageState(
        importance=2.0, signals=(0, 0, 0, 2, 0))
    idn_key = f"{settings.key_prefix}:{{xn--bcher-kva.example}}:pages"
    while time.monotonic() < deadline and not r.hlen(idn_key):  # perhaps rerouted first
        time.sleep(0.2)
    assert r.hkeys(idn_key) == ["http://xn--bcher-kva.example/x"]
    assert not [k for k in r.scan_iter(f"{settings.key_prefix}:*") if "Example" in k
                or "ü" in k]
    assert asyncio.run(_consume(settings, "rejects", 1, timeout_s=2)) == []
