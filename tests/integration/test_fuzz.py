"""Fuzz campaign: hypothesis-generated events of every input topic, schema-valid
extremes and malformed ones mixed (tests/integration/fuzz_events.py), published to the real
Kafka and consumed by a real worker process writing to the real Redis.

Checked: every event is applied (a result counter of its topic) or rejected (a message on
``recrawl.rejects`` with a reason; never an "internal error"), the worker does not crash
(alive, no traceback in its log), every shard is ``ready`` afterwards and again after a
restart (the shards rebuild from what the fuzz left in Redis), and orders still leave.

``RECRAWL_FUZZ_EVENTS`` (default 10,000 per topic), ``RECRAWL_FUZZ_SEED`` (default random,
0 under CI; printed), ``RECRAWL_FUZZ_REPORT=path.json`` writes the figures
(docs/reliability.md "Fuzzing").
"""

from __future__ import annotations

import asyncio
import json
import math
import multiprocessing
import os
import random
import re
import time
import urllib.request
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from fuzz_events import Record, generate
from worker_process import IN_CI, Worker

from infra.proc import free_port
from streams.events.records import MAX_REJECT_KEY_BYTES, MAX_REJECT_RECORD_BYTES, Order
from streams.settings import INPUT_TOPICS, KAFKA_MAX_MESSAGE_BYTES, Settings
from streams.store.redis_conn import connect_sync as connect_redis_sync

pytestmark = pytest.mark.integration

EVENTS_PER_TOPIC = int(os.environ.get("RECRAWL_FUZZ_EVENTS", "10000"))
#: the order of publication: pages first, so that pings and outcomes find most of them
ORDER = ("pages", "hosts", "pings", "outcomes", "control")
#: result counters that are not an event's end (a move to its host's partition, or a
#: stored page the scheduler could not use when loading)
NOT_AN_END = {"rerouted", "unusable"}
#: what the fuzz leaves the worker with: a budget, not paused, ordinary delays
SANE_CONTROL = {"budget_per_s": 50.0, "paused": False, "t_delay_s": 60.0,
                "order_timeout_s": 600.0, "max_interval_s": 30 * 86400.0}


def _seed() -> int:
    env = os.environ.get("RECRAWL_FUZZ_SEED")
    if env:
        return int(env)
    return 0 if IN_CI else random.randrange(1 << 30)


async def _publish(s: Settings, topic: str, items: list[Record]) -> int:
    """Send every record (batched); returns how many the broker acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, linger_ms=20,
                                max_batch_size=256 * 1024, acks=1,
                                max_request_size=KAFKA_MAX_MESSAGE_BYTES)
    await producer.start()
    try:
        futs = [await producer.send(s.topic(topic), value, key=key, partition=partition,
                                    headers=headers)
                for key, value, partition, headers in items]
        done = await asyncio.gather(*futs, return_exceptions=True)
    finally:
        await producer.stop()
    failed = [d for d in done if isinstance(d, BaseException)]
    assert not failed, f"{len(failed)} records not accepted by the broker: {failed[:3]!r}"
    return len(done)


def _stats(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats/", timeout=5) as resp:
        out: dict[str, Any] = json.loads(resp.read())
    return out


def _ends(counters: dict[str, int], topic: str) -> tuple[int, int]:
    """(applied, rejected) events of ``topic`` by the worker's counters."""
    applied = sum(v for k, v in counters.items() if k.startswith(f"{topic}.")
                  and k.split(".", 1)[1] not in NOT_AN_END | {"rejected"})
    return applied, counters.get(f"{topic}.rejected", 0)


def _wait_processed(port: int, published: dict[str, int], timeout_s: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    counters: dict[str, int] = {}
    while time.monotonic() < deadline:
        try:
            counters = _stats(port)["counters"]
        except (TimeoutError, OSError):  # the worker busy with a batch of huge records: the
            continue  # deadline bounds the wait; how long one answer takes is not a check here
        if all(sum(_ends(counters, t)) >= n for t, n in published.items()):
            return counters
        time.sleep(0.5)
    missing = {t: n - sum(_ends(counters, t)) for t, n in published.items()}
    raise AssertionError(f"events neither applied nor rejected after {timeout_s}s: {missing}; "
                         f"counters {counters}")


async def _rejects(s: Settings, want: int, timeout_s: float,
                   topic: str = "rejects") -> list[dict[str, Any]]:
    """The records of ``topic``: their JSON values, with ``_record_bytes`` (the value's
    length) and ``_key_bytes`` (the record's own key's) added."""
    consumer = AIOKafkaConsumer(s.topic(topic), bootstrap_servers=s.kafka_bootstrap,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    out: list[dict[str, Any]] = []

    def add(records: list[Any]) -> None:
        for r in records:
            out.append({**json.loads(r.value), "_record_bytes": len(r.value),
                        "_key_bytes": len(r.key) if r.key is not None else None})

    try:
        deadline = time.monotonic() + timeout_s
        while len(out) < want and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=5000)
            for records in batch.values():
                add(records)
        # anything beyond what the counters say would be a reject counted nowhere
        batch = await consumer.getmany(timeout_ms=1000)
        for records in batch.values():
            add(records)
    finally:
        await consumer.stop()
    return out


async def _orders_sent(s: Settings) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=s.kafka_bootstrap)
    await consumer.start()
    try:
        tps = [TopicPartition(s.topic("orders"), p) for p in range(s.partitions)]
        ends = await consumer.end_offsets(tps)
    finally:
        await consumer.stop()
    return sum(ends.values())


def _shapes(items: list[Record]) -> dict[str, int]:
    """How many records of a topic have a key over the 1 KiB a reject copies, headers, a
    value over 64 KiB, and the largest record's key + value bytes."""
    return {
        "key_over_1k": sum(len(k or b"") > MAX_REJECT_KEY_BYTES for k, _v, _p, _h in items),
        "with_headers": sum(bool(h) for _k, _v, _p, h in items),
        "value_over_64k": sum(len(v or b"") > 64 * 1024 for _k, v, _p, _h in items),
        "largest_bytes": max((len(k or b"") + len(v or b"") for k, v, _p, _h in items),
                             default=0),
    }


def _reason_class(reason: str) -> str:
    """A reject's reason without its values (for counting by kind)."""
    first = reason.split("; ")[0]
    first = re.sub(r"'[^']*'|\"[^\"]*\"|-?\d+(\.\d+)?(e[+-]?\d+)?", "_", first)
    first = re.sub(r"\[type=.*", "", first)
    return first[:90]


def _shards_ready(r: redis.Redis, s: Settings, worker: str) -> dict[int, bool]:
    raw = r.hgetall(f"{s.key_prefix}:sched:shards")
    entries = {int(k): json.loads(v) for k, v in raw.items()}
    return {p: bool(entries.get(p, {}).get("ready")) and entries[p].get("worker") == worker
            for p in range(s.partitions)}


def _wait(pred: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def _orders_flow(s: Settings, timeout_s: float, tag: str) -> int:
    """Orders leave: a new page of a new host (capacity 1/s by default) is ordered."""
    before = asyncio.run(_orders_sent(s))
    host = f"fresh-{tag}.example"
    asyncio.run(_publish(s, "pages", [(host.encode(), json.dumps(
        {"url": f"https://{host}/new"}).encode(), None, None)]))
    return int(_wait(lambda: asyncio.run(_orders_sent(s)) - before, timeout_s,
                     "new orders on the orders topic"))


def _no_crash(worker: Any) -> None:
    assert worker.proc.poll() is None, f"worker exited:\n{worker.log()[-4000:]}"
    log = worker.log()
    assert "Traceback" not in log, log[log.index("Traceback") - 2000:][:6000]


def _warnings(worker: Any) -> dict[str, int]:
    """The worker's WARNING and ERROR lines, counted by their text without numbers."""
    out: Counter[str] = Counter()
    for line in worker.log().splitlines():
        m = re.search(r"\[(WARNING|ERROR|CRITICAL)\] (.*)", line)
        if m:
            out[f"{m[1]} {re.sub(r'[0-9.]+', '_', m[2])[:120]}"] += 1
    return dict(out.most_common(15))


def test_fuzzed_events_of_every_topic_are_applied_or_rejected(
        settings: Settings, start_worker: Any, tmp_path: Path) -> None:
    t_start = time.monotonic()
    base_seed = _seed()
    print(f"fuzz seed {base_seed} (RECRAWL_FUZZ_SEED={base_seed} repeats it)")
    s = settings.model_copy(update={"web_enabled": True, "web_port": free_port()})
    # the worker starts (a process) while hypothesis generates the first topics' events (in
    # two processes of their own: hypothesis warns when another thread draws from
    # ``random`` while it generates), and consumes each topic while the next is generated
    worker = Worker(s, tmp_path / "worker-fuzz.log")
    try:
        figures = _fuzz(s, worker, base_seed)
    finally:
        worker.stop()
    _restart(s, start_worker, figures)
    figures["worker_crashes"] = 0
    figures["total_s"] = round(time.monotonic() - t_start, 1)
    print(json.dumps(figures, indent=1))
    report = os.environ.get("RECRAWL_FUZZ_REPORT")
    if report:
        Path(report).write_text(json.dumps(figures, indent=1) + "\n")


def _generate(topic: str, now_s: float, topic_seed: int) -> tuple[list[Record], float]:
    t0 = time.monotonic()
    out = generate(topic, EVENTS_PER_TOPIC, now_s, topic_seed)
    return out, time.monotonic() - t0


def _fuzz(s: Settings, worker: Worker, base_seed: int) -> dict[str, Any]:
    now_s = time.time()
    figures: dict[str, Any] = {"seed": base_seed, "events_per_topic": EVENTS_PER_TOPIC}
    published: dict[str, int] = {}
    shapes: dict[str, dict[str, int]] = {}
    gen_s: dict[str, float] = {}
    t0 = time.monotonic()
    # two generator processes (hypothesis is CPU-bound); each topic is published as soon as
    # it is generated, in ORDER
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_generate, topic, now_s, base_seed + 1000 * i)
                   for i, topic in enumerate(ORDER)]
        worker.wait_ready()
        for topic, fut in zip(ORDER, futures, strict=True):
            items, took_s = fut.result()
            gen_s[topic] = round(took_s, 1)
            shapes[topic] = _shapes(items)
            published[topic] = asyncio.run(_publish(s, topic, items))
    figures["generate_s"] = gen_s
    figures["generate_and_publish_s"] = round(time.monotonic() - t0, 1)
    figures["published"] = published
    figures["record_shapes"] = shapes
    t_published = time.monotonic()

    counters = _wait_processed(s.web_port, published, timeout_s=180)
    figures["drain_after_publish_s"] = round(time.monotonic() - t_published, 1)
    _no_crash(worker)

    # every end accounted once: applied + rejected == published, per topic
    for topic in INPUT_TOPICS:
        applied, rejected = _ends(counters, topic)
        assert applied + rejected == published[topic], (topic, applied, rejected, counters)
    figures["results"] = {t: {k.split(".", 1)[1]: v for k, v in counters.items()
                              if k.startswith(f"{t}.")} for t in INPUT_TOPICS}

    # every reject is on the rejects topic with a reason, none an internal error
    n_rejected = {t: _ends(counters, t)[1] for t in INPUT_TOPICS}
    rejects = asyncio.run(_rejects(s, sum(n_rejected.values()), timeout_s=60))
    by_topic = Counter(r["topic"].rsplit(".", 1)[-1] for r in rejects)
    assert by_topic == Counter({t: n for t, n in n_rejected.items() if n}), (by_topic,
                                                                             n_rejected)
    assert all(r["reason"] for r in rejects)
    internal = [r for r in rejects if r["reason"].startswith("internal error")]
    assert not internal, internal[:5]
    # every reject bounded, whatever its input's key and value; a cut key says so
    assert all(r["_record_bytes"] <= MAX_REJECT_RECORD_BYTES for r in rejects)
    assert all((r["_key_bytes"] or 0) <= MAX_REJECT_KEY_BYTES for r in rejects)
    cut = [r for r in rejects if r.get("key_truncated")]
    assert all(r["key_bytes"] > MAX_REJECT_KEY_BYTES and len(r["key_sha256"]) == 64
               for r in cut)
    # (a key over 1 KiB is never its host: every such record of a keyed topic is rejected)
    for t in ("pages", "pings", "outcomes", "hosts"):
        assert sum(r["topic"] == s.topic(t) for r in cut) == shapes[t]["key_over_1k"], t
    figures["rejects_key_cut"] = len(cut)
    figures["rejects_largest_bytes"] = max((r["_record_bytes"] for r in rejects), default=0)
    # nothing needed the dead-letter topic, nothing was lost, no batch failed
    dead = asyncio.run(_rejects(s, 0, timeout_s=2, topic="deadletter"))
    assert not dead, dead[:3]
    figures["rejects_key_or_partition"] = {
        t: {"key does not match the host": sum(
                r["reason"].startswith("key ") for r in rejects if r["topic"] == s.topic(t)),
            "rerouted, still on a wrong partition": sum(
                "another partition count" in r["reason"] for r in rejects
                if r["topic"] == s.topic(t)),
            "too large to be moved to its partition": sum(
                "could not be sent there" in r["reason"] for r in rejects
                if r["topic"] == s.topic(t))}
        for t in INPUT_TOPICS}
    figures["reject_reasons"] = {
        t: dict(Counter(_reason_class(r["reason"]) for r in rejects
                        if r["topic"] == s.topic(t)).most_common(12)) for t in INPUT_TOPICS}

    # the fuzzed control events may have paused the worker or set absurd delays: set sane
    # ones, then every shard is ready and orders leave
    asyncio.run(_publish(s, "control", [(None, json.dumps(SANE_CONTROL).encode(), None,
                                         None)]))
    r = connect_redis_sync(s.redis_url, decode_responses=True)
    worker_id = _stats(s.web_port)["worker"]
    _wait(lambda: all(_shards_ready(r, s, worker_id).values()), 30, "every shard ready")
    figures["new_orders_after"] = _orders_flow(s, 30, "after-fuzz")
    _no_crash(worker)
    stats = _stats(s.web_port)
    figures["retries"] = {k: v for k, v in stats["counters"].items()
                          if k.startswith(("retries.", "orders."))}
    for bad in ("rejects.lost", "rejects.dead-lettered", "batches.failed"):
        assert not stats["counters"].get(bad), (bad, stats["counters"])
    figures["worker_warnings"] = _warnings(worker)
    return figures


def _restart(s: Settings, start_worker: Any, figures: dict[str, Any]) -> None:
    """A new worker rebuilds every shard from what the fuzz left in Redis, and orders."""
    t0 = time.monotonic()
    s2 = s.model_copy(update={"web_port": free_port()})
    worker = start_worker(s2)  # stopped by the fixture
    worker_id = _stats(s2.web_port)["worker"]
    r = connect_redis_sync(s.redis_url, decode_responses=True)
    _wait(lambda: all(_shards_ready(r, s2, worker_id).values()), 90,
          "every shard ready after a restart")
    figures["restart_ready_s"] = round(time.monotonic() - t0, 1)
    # the first worker may have ordered every page there was (in flight for 10 minutes now)
    figures["new_orders_after_restart"] = _orders_flow(s2, 30, "restarted")
    _no_crash(worker)
    # every order is strict JSON (no NaN / Infinity) with finite numbers
    orders = asyncio.run(_all_orders(s2))
    assert orders
    for raw in orders:
        o = Order.model_validate(json.loads(raw, parse_constant=_no_constant))
        assert math.isfinite(o.crawl_value) and math.isfinite(o.threshold), raw
        assert o.tau_eff is None or math.isfinite(o.tau_eff), raw
    figures["orders_checked"] = len(orders)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} in an order: not JSON")


async def _all_orders(s: Settings) -> list[bytes]:
    want = await _orders_sent(s)
    consumer = AIOKafkaConsumer(s.topic("orders"), bootstrap_servers=s.kafka_bootstrap,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    out: list[bytes] = []
    try:
        deadline = time.monotonic() + 60
        while len(out) < want and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500, max_records=10_000)
            for records in batch.values():
                out.extend(r.value for r in records)
    finally:
        await consumer.stop()
    return out
