"""Several workers, one budget (issue 15): three ``recrawl worker`` processes share six
partitions and R with their state on a real three-master Redis Cluster; one is killed
(SIGKILL) and its partitions move to the others."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
from kafka_io import consume, produce_json, wait_for

from infra.kafka import create_topics
from streams.redis_conn import connect_sync as connect_redis_sync
from streams.settings import Settings

pytestmark = pytest.mark.integration

RATE = 30.0
TICK = 0.1


def _worst(times: list[float], length: float) -> int:
    j = worst = 0
    for i in range(len(times)):
        while times[i] - times[j] > length:
            j += 1
        worst = max(worst, i - j + 1)
    return worst


def test_three_workers_share_one_budget_and_survive_a_kill(
        settings: Settings, start_worker, redis_cluster_url: str) -> None:
    tag = uuid.uuid4().hex[:8]
    s = settings.model_copy(update={"partitions": 6, "topic_prefix": f"w{tag}",
                                    "app_id": f"appw{tag}", "redis_url": redis_cluster_url})
    asyncio.run(create_topics(s.kafka_bootstrap, s.topic_names(), s.partitions))
    pages = [(f"w{i % 60}.org", {"url": f"https://w{i % 60}.org/{i}"}) for i in range(3000)]
    produce_json(s, "pages", pages)
    env = {"RECRAWL_BUDGET_PER_S": "0", "RECRAWL_TICK_S": str(TICK),
           "RECRAWL_DEFAULT_HOST_CRAWLS_PER_S": "1000"}
    workers = [start_worker(s, env) for _ in range(3)]
    r = connect_redis_sync(s.redis_url, decode_responses=True)
    key = s.key_prefix

    def shards() -> dict[int, dict[str, Any]]:
        import json
        return {int(p): json.loads(v) for p, v in r.hgetall(f"{key}:sched:shards").items()}

    def all_ready(n_workers: int) -> bool:
        now = float(r.time()[0])
        live = {p: e for p, e in shards().items() if now - e["ts"] < 3 and e["ready"]}
        return len(live) == 6 and len({e["worker"] for e in live.values()}) == n_workers

    wait_for(lambda: all_ready(3), 90, "six ready shards on three workers")
    produce_json(s, "control", [("control", {"budget_per_s": RATE})])
    t_start = time.time()
    killed_at: list[float] = []

    def kill_later() -> None:
        time.sleep(20.0)
        killed_at.append(time.time())
        workers[2].kill()

    killer = threading.Thread(target=kill_later)
    killer.start()
    orders = consume(s, "orders", None, timeout_s=58)
    killer.join()
    times = sorted(o["issued_at"] for o in orders)
    assert len({o["url"] for o in orders}) == len(orders)  # never a page twice in flight
    assert len({o["order_id"] for o in orders}) == len(orders)

    def count(a: float, b: float) -> int:
        return sum(1 for t in times if a <= t < b)

    steady = count(t_start + 5, t_start + 15) / 10.0
    after = count(killed_at[0] + 25, killed_at[0] + 35) / 10.0
    gap = count(killed_at[0], killed_at[0] + 25) / 25.0
    print(f"3 workers: {steady:.2f}/s; after the kill {gap:.2f}/s for 25 s, then "
          f"{after:.2f}/s (R = {RATE})")
    # the shares of the three workers add up to R: no worker takes all of it, none is lost
    assert 0.8 * RATE <= steady <= 1.05 * RATE, steady
    # the killed worker's partitions move to the two others, which spend all of R again
    assert 0.8 * RATE <= after <= 1.05 * RATE, after
    # no window holds more than its budget (plus each worker's one-order credit slack)
    for length in (1.0, 5.0):
        worst = _worst(times, length)
        assert worst <= RATE * (length + TICK) * 1.05 + 3, (length, worst)
    assert all_ready(2)  # six ready shards, on the two workers left
