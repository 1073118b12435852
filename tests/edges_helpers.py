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


def gzip_bomb(inflated_bytes: int) -> bytes:
    """A gzip stream of ``inflated_bytes`` zeros (512 MiB -> ~510 kB), built in pieces."""
    import zlib

    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = bytes(1 << 20)
    out = [z.compress(piece) for _ in range(inflated_bytes >> 20)]
    out.append(z.compress(bytes(inflated_bytes & ((1 << 20) - 1))))
    out.append(z.flush())
    return b"".join(out)


def rss_peak_reset() -> None:
    """Reset this process's peak RSS (``VmHWM``; Linux ``/proc/self/clear_refs``)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def rss_kib(field: str = "VmHWM", pid: int | str = "self") -> int:
    """``VmHWM`` (peak) or ``VmRSS`` of a process, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)
