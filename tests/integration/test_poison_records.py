"""Poison records: a record the broker accepted but the worker cannot copy as it is (a key
of about a megabyte, a value at the broker's size limit) never stops the consumer group.
Produced from outside (aiokafka with the broker's own size limit) to a real worker process.

Checked: the worker stays up and keeps consuming (a valid page sent after the poison is
applied), the poison lands in ``recrawl.rejects`` with its reason, its key and value cut with
their sizes and digests; when the rejects topic refuses even that, the record's pointer goes
to ``recrawl.deadletter``; a valid event too large to be moved to its host's partition is one
reject, its batch-mates applied.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

import pytest
import redis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError
from aiokafka.record.default_records import DefaultRecordBatchBuilder as Batch
from faust.exceptions import ProducerSendError

from streams.events.records import shard_of
from streams.settings import INPUT_TOPICS, KAFKA_MAX_MESSAGE_BYTES, Settings
from streams.store.redis_conn import connect_sync as connect_redis_sync
from streams.store.redis_store import page_url
from streams.worker.agents import REROUTED_HEADER, kafka_cause, kafka_transient

pytestmark = pytest.mark.integration

#: a key of about a megabyte (with its value, within the broker's message.max.bytes)
HUGE_KEY = b"k" * 1_000_000


async def _send(s: Settings, topic: str, records: list[tuple[bytes | None, bytes | None,
                                                             int | None]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap,
                                max_request_size=KAFKA_MAX_MESSAGE_BYTES, linger_ms=20)
    await producer.start()
    try:
        futs = [await producer.send(s.topic(topic), value, key=key, partition=partition)
                for key, value, partition in records]
        await asyncio.gather(*futs)
    finally:
        await producer.stop()


async def _read(s: Settings, topic: str, want: int, timeout_s: float) -> list[tuple[Any, Any]]:
    consumer = AIOKafkaConsumer(s.topic(topic), bootstrap_servers=s.kafka_bootstrap,
                                auto_offset_reset="earliest", enable_auto_commit=False,
                                max_partition_fetch_bytes=4 * 1024 * 1024)
    await consumer.start()
    out: list[tuple[Any, Any]] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(out) < want and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=300)
            for records in batch.values():
                out.extend((r.key, json.loads(r.value)) for r in records)
    finally:
        await consumer.stop()
    return out


def _page(host: str, path: str) -> tuple[bytes, bytes, None]:
    return host.encode(), json.dumps({"url": f"https://{host}{path}"}).encode(), None


def _wait_pages(r: redis.Redis, s: Settings, urls: list[str], timeout_s: float) -> set[str]:
    deadline = time.monotonic() + timeout_s
    have: set[str] = set()
    while time.monotonic() < deadline:
        have = set()
        for u in urls:
            host = u.split("/")[2]
            have |= {page_url(host, f) for f in r.hkeys(f"{s.key_prefix}:{{{host}}}:pages")}
        if have >= set(urls):
            break
        time.sleep(0.3)
    return have & set(urls)


def _alive(worker: Any) -> None:
    assert worker.proc.poll() is None, f"worker exited:\n{worker.log()[-4000:]}"
    log = worker.log()
    assert "Traceback" not in log, log[log.index("Traceback") - 2000:][:6000]


def test_a_megabyte_key_on_every_input_topic_is_rejected_cut_and_the_group_goes_on(
        settings: Settings, start_worker: Any) -> None:
    s = settings
    worker = start_worker(s)
    r = connect_redis_sync(s.redis_url, decode_responses=True)
    poison = {topic: (HUGE_KEY, f"not json on {topic}".encode(), None) for topic in INPUT_TOPICS}
    for topic, rec in poison.items():
        asyncio.run(_send(s, topic, [rec]))
    urls = [f"https://after-poison-{i}.example/p" for i in range(3)]
    asyncio.run(_send(s, "pages", [_page(u.split("/")[2], "/p") for u in urls]))
    assert _wait_pages(r, s, urls, 40) == set(urls)
    rejects = asyncio.run(_read(s, "rejects", len(INPUT_TOPICS), 30))
    _alive(worker)
    by_topic = {v["topic"].rsplit(".", 1)[-1]: (k, v) for k, v in rejects}
    assert set(by_topic) == set(INPUT_TOPICS), rejects
    digest = hashlib.sha256(HUGE_KEY).hexdigest()
    for topic, (key, v) in by_topic.items():
        assert v["reason"] and not v["reason"].startswith("internal error"), v
        assert v["raw"] == f"not json on {topic}"
        assert v["key_truncated"] is True and v["key_bytes"] == len(HUGE_KEY)
        assert v["key_sha256"] == digest
        assert HUGE_KEY.decode().startswith(v["key"]) and 0 < len(v["key"]) < 10_000
        assert key is not None and len(key) < 10_000  # the reject's own key is cut too


def test_an_oversized_event_on_a_wrong_partition_is_one_reject_not_its_batch(
        settings: Settings, start_worker: Any) -> None:
    """A valid page event at the broker's limit, without a key, on a partition that is not
    its host's: moving it would exceed the limit (a key and a header more); it alone is
    rejected with that reason, the 30 pages sent with it are applied."""
    s = settings
    big_host = "big.example"
    wrong = 1 - shard_of(big_host, s.partitions)
    url = f"https://{big_host}/" + "a" * 100

    def value_of(n: int) -> bytes:
        return json.dumps({"url": url, "x": "y" * n}).encode()

    # the largest such event the broker takes as it is (a record batch of one record)
    n = KAFKA_MAX_MESSAGE_BYTES - 1000
    while Batch.estimate_size_in_bytes(None, value_of(n + 1), []) <= KAFKA_MAX_MESSAGE_BYTES:
        n += 1
    value = value_of(n)
    moved = Batch.estimate_size_in_bytes(big_host.encode(), value, [(REROUTED_HEADER, b"1")])
    assert moved > KAFKA_MAX_MESSAGE_BYTES  # keyed by its host, with the header: too large
    mates = [_page(f"mate-{i}.example", f"/{i}") for i in range(30)]
    worker = start_worker(s)
    r = connect_redis_sync(s.redis_url, decode_responses=True)
    asyncio.run(_send(s, "pages", [mates[0], (None, value, wrong), *mates[1:]]))
    urls = [json.loads(v)["url"] for _k, v, _p in mates]
    assert _wait_pages(r, s, urls, 40) == set(urls)
    rejects = asyncio.run(_read(s, "rejects", 1, 30))
    _alive(worker)
    assert len(rejects) == 1, rejects
    v = rejects[0][1]
    assert "partition" in v["reason"] and not v["reason"].startswith("internal error"), v
    assert v["raw_truncated"] is True and v["raw_bytes"] == len(value)
    assert v["raw_sha256"] == hashlib.sha256(value).hexdigest()


async def _tiny_rejects_topic(s: Settings) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([s.topic("rejects")])
        deadline = time.monotonic() + 30
        while True:  # deletion is asynchronous
            try:
                await admin.create_topics([NewTopic(s.topic("rejects"), s.partitions, 1,
                                                    topic_configs={"max.message.bytes": "300"})])
                return
            except Exception:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.5)
    finally:
        await admin.close()


def test_a_reject_the_rejects_topic_refuses_goes_to_the_dead_letter_topic(
        settings: Settings, start_worker: Any) -> None:
    s = settings
    asyncio.run(_tiny_rejects_topic(s))
    worker = start_worker(s)
    r = connect_redis_sync(s.redis_url, decode_responses=True)
    bad = b'{"url": "https://dead.example/' + b"z" * 2000 + b'", "importance": -1}'
    asyncio.run(_send(s, "pages", [(b"dead.example", bad, None)]))
    asyncio.run(_send(s, "control", [(HUGE_KEY, b"[]", None)]))
    asyncio.run(_send(s, "pages", [_page("after-dead.example", "/ok")]))
    assert _wait_pages(r, s, ["https://after-dead.example/ok"], 40)
    dead = asyncio.run(_read(s, "deadletter", 2, 30))
    _alive(worker)
    assert sorted(v["topic"].rsplit(".", 1)[-1] for _k, v in dead) == ["control", "pages"]
    for _k, v in dead:
        assert v["reason"] and "MessageSizeTooLarge" in v["reject_error"], v
        assert isinstance(v["offset"], int) and isinstance(v["partition"], int)
        assert len(json.dumps(v)) < 4096
    ctl = next(v for _k, v in dead if v["topic"].endswith("control"))
    assert ctl["key_bytes"] == len(HUGE_KEY)
    assert ctl["key_sha256"] == hashlib.sha256(HUGE_KEY).hexdigest()
    assert "dead-letter" in worker.log()


def test_a_kafka_error_wrapped_by_faust_is_classified_by_its_cause() -> None:
    def wrapped(exc: Exception) -> ProducerSendError:
        try:
            raise ProducerSendError(f"Error while sending: {exc!r}") from exc
        except ProducerSendError as out:
            return out

    too_large, timeout = wrapped(MessageSizeTooLargeError()), wrapped(KafkaTimeoutError())
    assert isinstance(kafka_cause(too_large), MessageSizeTooLargeError)
    assert not kafka_transient(too_large)
    assert kafka_transient(timeout)  # an outage behind Faust's error: retried
    assert not kafka_transient(ValueError("x"))
