"""An input topic deleted and created again (offsets restart at 0) must not
make its events look like redeliveries of the old log's (streams/store/logs.py)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from infra.errors import InfraError
from infra.kafka import create_topics
from streams.settings import Settings
from streams.store.redis_conn import connect_sync as connect_redis_sync
from streams.store.redis_store import page_url

pytestmark = pytest.mark.integration

HOST = "recreated.example"


async def _produce(s: Settings, urls: list[str]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap)
    await producer.start()
    try:
        for u in urls:
            await producer.send_and_wait(s.topic("pages"), json.dumps({"url": u}).encode(),
                                         key=HOST.encode())
    finally:
        await producer.stop()


async def _recreate(s: Settings) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([s.topic("pages")])
    finally:
        await admin.close()
    deadline = time.monotonic() + 30
    last: Exception | None = None
    while True:  # deletion is asynchronous: retry until the name is free again
        try:
            if await create_topics(s.kafka_bootstrap, [s.topic("pages")], s.partitions):
                return
        except (KafkaError, InfraError) as exc:  # e.g. still marked for deletion
            last = exc
        assert time.monotonic() < deadline, f"the topic was not created again ({last!r})"
        await asyncio.sleep(0.5)


def _wait_for(r: redis.Redis, key: str, urls: list[str], timeout_s: float = 40) -> set[str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        have = {page_url(HOST, f) for f in r.hkeys(key)}
        if have >= set(urls):
            return have
        time.sleep(0.3)
    return {page_url(HOST, f) for f in r.hkeys(key)}


@pytest.mark.parametrize("n_new", [2, 8], ids=["shorter-log", "longer-log"])
def test_events_of_a_recreated_topic_are_applied(settings: Settings, start_worker,
                                                 n_new: int) -> None:
    """Old log: 5 events (offsets 0-4).  New log: ``n_new`` events from offset 0, either
    ending before the old anchor (the broker says the log ends there) or passing it (the
    record at the anchor's offset has another timestamp)."""
    r = connect_redis_sync(settings.redis_url, decode_responses=True)
    key = f"{settings.key_prefix}:{{{HOST}}}:pages"
    old = [f"https://{HOST}/old/{i}" for i in range(5)]
    worker = start_worker(settings)
    asyncio.run(_produce(settings, old))
    assert _wait_for(r, key, old) == set(old)
    time.sleep(1.0)  # the anchor is written after the batch
    worker.stop()

    asyncio.run(_recreate(settings))
    new = [f"https://{HOST}/new/{i}" for i in range(n_new)]
    asyncio.run(_produce(settings, new))
    worker = start_worker(settings)
    assert _wait_for(r, key, new) == set(old) | set(new)
    offsets = r.hgetall(f"{settings.key_prefix}:{{{HOST}}}:offsets")
    new_fields = [f for f in offsets if f.endswith("~1")]
    assert len(new_fields) == 1 and int(offsets[new_fields[0]]) == n_new - 1
    assert "is a new log" in worker.log()
    worker.stop()

    # a restart on the same (new) log is not a new log again: nothing re-applied
    worker = start_worker(settings)
    asyncio.run(_produce(settings, [f"https://{HOST}/after"]))
    assert f"https://{HOST}/after" in _wait_for(r, key, [f"https://{HOST}/after"])
    assert "is a new log" not in worker.log()
    # (the anchor is written a moment after the batch's pages, as above)
    logs_key, field = f"{settings.key_prefix}:{{logs}}", new_fields[0].removesuffix("~1")
    deadline = time.monotonic() + 15.0
    anchor = r.hget(logs_key, field)
    while not (anchor or "").startswith(f"1|{n_new}|") and time.monotonic() < deadline:
        time.sleep(0.2)
        anchor = r.hget(logs_key, field)
    assert anchor is not None and anchor.startswith(f"1|{n_new}|")


async def _partition_count(s: Settings, name: str) -> int | None:
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap)
    await admin.start()
    try:
        if name not in set(await admin.list_topics()):
            return None
        (desc,) = await admin.describe_topics([name])
        return len(desc.get("partitions", [])) or None
    finally:
        await admin.close()


def test_an_input_topic_deleted_under_a_running_worker_is_not_created_again_by_it(
        settings: Settings, start_worker) -> None:
    """The broker runs without topic auto-creation: the running worker's consumer and
    producer do not bring a deleted input topic back with the broker's default partition
    count (1), on which every event would be rejected for being on another partition; the
    operator creates it again with recrawl's count and the worker applies its events."""
    s = settings
    r = connect_redis_sync(s.redis_url, decode_responses=True)
    key = f"{s.key_prefix}:{{{HOST}}}:pages"
    worker = start_worker(s)
    old = [f"https://{HOST}/before/{i}" for i in range(3)]
    asyncio.run(_produce(s, old))
    assert _wait_for(r, key, old) == set(old)
    admin_deleted = asyncio.run(_delete(s))
    assert admin_deleted
    time.sleep(8)  # the worker's consumer and producer refresh their metadata meanwhile
    assert asyncio.run(_partition_count(s, s.topic("pages"))) is None
    asyncio.run(_recreate_only(s))
    assert asyncio.run(_partition_count(s, s.topic("pages"))) == s.partitions
    new = [f"https://{HOST}/after/{i}" for i in range(3)]
    asyncio.run(_produce(s, new))
    assert _wait_for(r, key, new, timeout_s=90) >= set(new)
    assert worker.proc.poll() is None, worker.log()[-3000:]


async def _delete(s: Settings) -> bool:
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([s.topic("pages")])
    finally:
        await admin.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # deletion is asynchronous
        if await _partition_count(s, s.topic("pages")) is None:
            return True
        await asyncio.sleep(0.3)
    return False


async def _recreate_only(s: Settings) -> None:
    deadline = time.monotonic() + 30
    last: Exception | None = None
    while True:
        try:
            if await create_topics(s.kafka_bootstrap, [s.topic("pages")], s.partitions):
                return
        except (KafkaError, InfraError) as exc:
            last = exc
        assert time.monotonic() < deadline, f"the topic was not created again ({last!r})"
        await asyncio.sleep(0.5)
