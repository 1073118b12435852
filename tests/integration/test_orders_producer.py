"""The orders' producer hands a tick's orders to Kafka as record batches
(:meth:`streams.worker.app.OrdersProducer.send_many`): checked against the real broker,
read back with kcat (librdkafka, not our client)."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections import defaultdict

import pytest
from aiokafka import TopicPartition

from infra.kafka import create_topics
from streams.worker.app import OrdersProducer

pytestmark = pytest.mark.integration
PARTITIONS = 4


def _read(bootstrap: str, topic: str, n: int) -> list[tuple[int, str, str]]:
    """(partition, key, value) of the first ``n`` records of ``topic``, by kcat."""
    p = subprocess.run(["kcat", "-b", bootstrap, "-C", "-q", "-e", "-o", "beginning",
                        "-t", topic, "-f", "%p\t%k\t%s\n"],
                       capture_output=True, check=True, timeout=60)
    rows = [line.split("\t") for line in p.stdout.decode().splitlines() if line]
    assert len(rows) == n, p.stderr[-500:]
    return [(int(a), b, c) for a, b, c in rows]


Answer = tuple[list[int], Exception | None, asyncio.Future[list[int]] | None]


async def _send(producer: OrdersProducer, topic: str, records: list[tuple[bytes, bytes]]
                ) -> list[Answer]:
    return [x async for x in producer.send_many(topic, records)]


def test_send_many_lands_each_order_where_kafkas_partitioner_puts_its_host(
        kafka_bootstrap: str) -> None:
    """Every order is answered once, on the partition Kafka's murmur2 gives its key (as
    kcat's ``murmur2_random`` puts the same keys), in the order given within a partition,
    also when a partition's orders take several batches."""
    tag = uuid.uuid4().hex[:8]
    ours, theirs = f"orders-{tag}", f"orders-kcat-{tag}"
    asyncio.run(create_topics(kafka_bootstrap, [ours, theirs], PARTITIONS))
    records = [(f"host{i % 37}.example".encode(), f'{{"n":{i},"pad":"{"x" * 200}"}}'.encode())
               for i in range(3000)]
    producer = OrdersProducer(kafka_bootstrap)
    producer.MAX_BATCH_BYTES = 16 * 1024  # several batches per partition

    async def run() -> tuple[list[Answer], list[object]]:
        try:
            answers = await _send(producer, ours, records)
        finally:
            await producer.stop()  # flushes
        # each batch's outcome: no order given up
        return answers, [d.result() if d is not None and d.done() else d
                         for _i, _e, d in answers]

    answers, outcomes = asyncio.run(run())
    assert all(err is None for _idx, err, _d in answers)
    assert outcomes == [[]] * len(answers)
    assert sorted(i for idx, _err, _d in answers for i in idx) == list(range(len(records)))
    assert len(answers) > PARTITIONS  # more than one batch for some partition
    got = _read(kafka_bootstrap, ours, len(records))

    subprocess.run(["kcat", "-b", kafka_bootstrap, "-X", "topic.partitioner=murmur2_random",
                    "-P", "-t", theirs, "-K", "\t"],
                   input=b"".join(k + b"\t" + v + b"\n" for k, v in records),
                   check=True, timeout=60)
    kcat_partition = {k: p for p, k, _v in _read(kafka_bootstrap, theirs, len(records))}
    assert {k: p for p, k, _v in got} == kcat_partition
    assert len(set(kcat_partition.values())) > 1
    by_partition: dict[int, list[int]] = defaultdict(list)
    for p, _k, v in got:
        by_partition[p].append(int(v.split(",")[0].split(":")[1]))
    for ns in by_partition.values():
        assert ns == sorted(ns)


def test_send_many_after_stop_answers_every_order_with_the_error(kafka_bootstrap: str) -> None:
    """A stopped producer (the worker shutting down) sends nothing: every order comes back
    with the error, so the scheduler takes them out of flight again."""
    tag = uuid.uuid4().hex[:8]
    topic = f"orders-{tag}"
    asyncio.run(create_topics(kafka_bootstrap, [topic], PARTITIONS))
    producer = OrdersProducer(kafka_bootstrap)
    records = [(f"h{i}".encode(), b"{}") for i in range(10)]

    async def run() -> list[Answer]:
        await producer.stop()
        return await _send(producer, topic, records)

    answers = asyncio.run(run())
    assert sorted(i for idx, _err, _d in answers for i in idx) == list(range(10))
    assert all(isinstance(err, RuntimeError) and d is None for _idx, err, d in answers)


def test_orders_refused_for_their_sequence_are_sent_again_on_a_new_producer(
        kafka_bootstrap: str) -> None:
    """After a broker restart the broker may refuse an idempotent producer's batches with
    OutOfOrderSequenceNumber (its sequence no longer follows what the broker holds), and
    every later batch of that producer too.  Made here at will by opening a gap in the
    producer's sequence for one partition: the orders handed over after it must still all
    reach the topic, each once (the refused batches were not written)."""
    tag = uuid.uuid4().hex[:8]
    topic = f"orders-{tag}"
    asyncio.run(create_topics(kafka_bootstrap, [topic], 1))
    producer = OrdersProducer(kafka_bootstrap)
    first = [(f"h{i}".encode(), f"first {i}".encode()) for i in range(5)]
    after = [(f"h{i}".encode(), f"after {i}".encode()) for i in range(20)]

    outcomes: list[object] = []

    async def run() -> None:
        assert all(err is None for _i, err, _d in await _send(producer, topic, first))
        await producer.flush()
        p = producer._producer
        assert p is not None and p._txn_manager is not None
        tp = TopicPartition(topic, 0)
        p._txn_manager.increment_sequence_number(tp, 7)  # the broker expects another
        for k in range(0, len(after), 5):  # several batches, each refused
            answers = await _send(producer, topic, after[k:k + 5])
            assert all(err is None for _i, err, _d in answers)
            outcomes.extend(d for _i, _e, d in answers)
            await asyncio.sleep(0.05)
        # every delivery settled: the refused batches' orders sent again and delivered
        deadline = asyncio.get_running_loop().time() + 60
        while producer.pending() and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
        # the refused batches' outcomes: nothing given up (the scheduler keeps their marks)
        outcomes[:] = [d.result() if isinstance(d, asyncio.Future) and d.done() else d
                       for d in outcomes]
        await producer.stop()

    asyncio.run(run())
    got = sorted(v for _p, _k, v in _read(kafka_bootstrap, topic, len(first) + len(after)))
    assert got == sorted(v.decode() for _k, v in first + after)
    assert producer.resent > 0 and producer.undelivered == 0
    assert outcomes == [[]] * (len(after) // 5)
