"""Producing to and consuming from the real broker in integration tests."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams.settings import Settings


async def produce(s: Settings, topic: str, items: list[tuple[bytes | None, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, linger_ms=5)
    await producer.start()
    try:
        futs = [await producer.send(s.topic(topic), value, key=key) for key, value in items]
        await asyncio.gather(*futs)
    finally:
        await producer.stop()


def produce_json(s: Settings, topic: str, items: list[tuple[str, dict[str, Any]]]) -> None:
    asyncio.run(produce(s, topic, [(k.encode(), json.dumps(v).encode()) for k, v in items]))


async def _consume(s: Settings, topic: str, n: int | None, timeout_s: float) -> list[Any]:
    consumer = AIOKafkaConsumer(
        s.topic(topic), bootstrap_servers=s.kafka_bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    out: list[Any] = []
    try:
        deadline = time.monotonic() + timeout_s
        while (n is None or len(out) < n) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=300)
            for records in batch.values():
                out.extend(json.loads(r.value) for r in records)
    finally:
        await consumer.stop()
    return out


def consume(s: Settings, topic: str, n: int | None, timeout_s: float) -> list[Any]:
    """Up to ``n`` JSON values from the start of ``topic`` (all within ``timeout_s`` if None)."""
    return asyncio.run(_consume(s, topic, n, timeout_s))


def wait_for(pred: Any, timeout_s: float, what: str, interval_s: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
