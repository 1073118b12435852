"""Helpers of the edges' integration tests: topic readers and writers, a loopback policy."""

from __future__ import annotations

import json
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from streams.fetcher.egress import EgressPolicy
from streams.settings import Settings

LOOPBACK = EgressPolicy(loopback_only=True, overrides={".test": "127.0.0.1"})


async def read_topic(
    s: Settings, topic: str, n: int, timeout_s: float = 20.0, *, settle_s: float = 0.0
) -> list[tuple[bytes | None, dict[str, Any]]]:
    """Read ``n`` messages (or what came within ``timeout_s``), then ``settle_s`` more."""
    consumer = AIOKafkaConsumer(
        s.topic(topic), bootstrap_servers=s.kafka_bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    out: list[tuple[bytes | None, dict[str, Any]]] = []
    try:
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=300)
            out.extend((r.key, json.loads(r.value)) for rs in batch.values() for r in rs)
        end = time.monotonic() + settle_s
        while time.monotonic() < end:
            batch = await consumer.getmany(timeout_ms=200)
            out.extend((r.key, json.loads(r.value)) for rs in batch.values() for r in rs)
    finally:
        await consumer.stop()
    return out


async def produce(s: Settings, topic: str, items: list[tuple[bytes, dict[str, Any]]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap)
    await producer.start()
    try:
        for key, value in items:
            await producer.send_and_wait(s.topic(topic), json.dumps(value).encode(), key=key)
    finally:
        await producer.stop()
