"""Redis emptied under a worker (FLUSHALL: a restart without the append-only file does the
same) must be found and the catalogue rebuilt from Kafka (streams/store/logs.py,
streams/worker/recovery.py): every page back with its value, orders again, nothing silent.
The same when the worker was down while Redis lost its state."""

from __future__ import annotations

import time

import pytest
from kafka_io import consume, produce_json, wait_for

from streams.settings import Settings
from streams.store.redis_conn import connect_sync as connect_redis_sync

pytestmark = pytest.mark.integration

HOSTS = [f"lost{i}.example" for i in range(12)]


def _pages(r, s: Settings) -> dict[str, dict[str, str]]:  # type: ignore[no-untyped-def]
    return {h: r.hgetall(f"{s.key_prefix}:{{{h}}}:pages") for h in HOSTS}


def _count(pages: dict[str, dict[str, str]]) -> int:
    return sum(len(v) for v in pages.values())


def test_redis_emptied_under_a_running_worker_is_rebuilt_from_kafka(
        settings: Settings, start_worker) -> None:
    s = settings
    r = connect_redis_sync(s.redis_url, decode_responses=False)
    n_first = 240
    produce_json(s, "hosts", [(h, {"host": h, "max_crawls_per_s": 50.0}) for h in HOSTS])
    produce_json(s, "pages", [(HOSTS[i % len(HOSTS)],
                               {"url": f"https://{HOSTS[i % len(HOSTS)]}/p/{i}",
                                "importance": 1.0 + i % 7})
                              for i in range(n_first)])
    produce_json(s, "control", [("control", {"budget_per_s": 20.0})])
    worker = start_worker(s, {"RECRAWL_TICK_S": "0.05"})
    wait_for(lambda: _count(_pages(r, s)) == n_first, 60, "the first pages applied")
    before = _pages(r, s)
    assert consume(s, "orders", 5, timeout_s=30), "no order before the fault"

    r.flushall()  # under the running worker
    # found within seconds, said loudly, and every page comes back with the same record
    wait_for(lambda: "REDIS LOST ITS STATE" in worker.log(), 20, "the loss reported")
    wait_for(lambda: _pages(r, s) == before, 60, "every page back as it was")
    # (the last partition's pages are visible a moment before its anchors are written and
    # the replay says it is done)
    wait_for(lambda: "rebuilt from Kafka" in worker.log(), 30, "the rebuild reported")
    assert r.hget(f"{s.key_prefix}:control:{{ctl}}".encode(), b"budget_per_s") is not None

    # events after the loss are applied on the rebuilt catalogue, orders go on
    produce_json(s, "pages", [(HOSTS[0], {"url": f"https://{HOSTS[0]}/after/{i}"})
                              for i in range(10)])
    wait_for(lambda: _count(_pages(r, s)) == n_first + 10, 60, "the later pages applied")
    t_fault = time.time()
    late = [o for o in consume(s, "orders", None, timeout_s=8) if o["issued_at"] > t_fault]
    assert late, "no order after the rebuild"

    # the worker down while Redis lost its state: found at the restart, rebuilt the same way
    before = _pages(r, s)
    worker.stop()
    r.flushall()
    worker = start_worker(s, {"RECRAWL_TICK_S": "0.05"})
    produce_json(s, "pages", [(h, {"url": f"https://{h}/restart"}) for h in HOSTS])
    wait_for(lambda: "REDIS LOST ITS STATE" in worker.log(), 30, "the loss found at start")
    expected = {h: set(v) | {b"/restart"} for h, v in before.items()}
    wait_for(lambda: {h: set(v) for h, v in _pages(r, s).items()} == expected, 60,
             "every page back after the restart")
