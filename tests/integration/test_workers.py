"""Several workers, one budget: three ``recrawl worker`` processes share six
partitions and R with their state on a real three-master Redis Cluster; one is killed
(SIGKILL) and its partitions move to the others.  R is held within 1% over the minutes
that contain the kill: the workers' shard entries are re-stamped by a heartbeat thread
every 0.2 s, so a dead worker's share moves after ~1 s (``SHARD_ALIVE_S``)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

import pytest
from kafka_io import consume, produce_json, wait_for

from infra.kafka import create_topics
from streams.settings import Settings
from streams.store.redis_conn import connect_sync as connect_redis_sync

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
    pages = [(f"w{i % 60}.org", {"url": f"https://w{i % 60}.org/{i}"}) for i in range(4000)]
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
    orders = consume(s, "orders", None, timeout_s=80)
    killer.join()
    # counted by the orders' own issued_at (the workers' clocks, on this machine): a slow
    # consumer or a late kill moves no order from one window to another
    times = sorted(o["issued_at"] for o in orders)
    assert len({o["url"] for o in orders}) == len(orders)  # never a page twice in flight
    assert len({o["order_id"] for o in orders}) == len(orders)

    def rate(a: float, b: float) -> float:
        return sum(1 for t in times if a <= t < b) / (b - a)

    kill = killed_at[0]
    steady = rate(t_start + 5, t_start + 15)
    gap = rate(kill, kill + 25)
    after = rate(kill + 25, kill + 45)
    # two 60 s windows that contain the kill, its detection (~1 s) and the rebalance that
    # moves the dead worker's partitions (after the 10 s session timeout)
    minutes = [rate(kill - 15, kill + 45), rate(kill - 8, kill + 52)]
    worst = {length: _worst(times, length) for length in (1.0, 5.0, 60.0)}
    print(f"3 workers: {steady:.2f}/s; after the kill {gap:.2f}/s for 25 s, then "
          f"{after:.2f}/s; 60 s windows containing the kill: "
          f"{', '.join(f'{m:.2f}/s' for m in minutes)} (R = {RATE}); most orders in a "
          f"window of 1/5/60 s: {worst[1.0]}/{worst[5.0]}/{worst[60.0]}")
    # the shares of the three workers add up to R: no worker takes all of it, none is lost
    assert 0.8 * RATE <= steady <= 1.05 * RATE, steady
    # the killed worker's share is spent by the two others: R within 1% over each minute
    # that contains the kill
    for m in minutes:
        assert 0.99 * RATE <= m <= 1.01 * RATE, minutes
    assert 0.8 * RATE <= after <= 1.05 * RATE, after
    # no window holds more than its budget: R (L + tick), plus one order of credit slack
    # for each worker's pacer
    for length, most in worst.items():
        assert most <= RATE * (length + TICK) + 3, (length, most)
    assert all_ready(2)  # six ready shards, on the two workers left
