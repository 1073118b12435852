"""The numbers ``/stats/`` gained for the dashboard, as plain logic (no Redis, no Kafka; the
monotonic clock is passed in): the emitted rate over the last ``RATE_WINDOW_S``, the rates
of all workers summed once per worker, the top hosts, and pings by source."""

from __future__ import annotations

import pytest

from streams.scheduler import RATE_WINDOW_S, Scheduler
from streams.settings import Settings
from streams.telemetry.metrics import Metrics


def _scheduler(clock: list[float]) -> Scheduler:
    async def sink(k: bytes, v: bytes) -> None:
        return None

    st = Settings(web_enabled=False, default_host_crawls_per_s=3.0)
    return Scheduler(st, store=None, metrics=Metrics(), send_order=sink,  # type: ignore[arg-type]
                     clock=lambda: 1000.0 + clock[0], monotonic=lambda: clock[0])


def test_emitted_rate_counts_the_orders_of_the_last_window_only() -> None:
    clock = [0.0]
    sch = _scheduler(clock)
    assert sch.emitted_per_s() is None  # before the first sample
    # 5 orders per second for 30 s, sampled every 0.5 s (as resplit does)
    for k in range(60):
        clock[0] = 0.5 * k
        sch.orders_total += 0 if k == 0 else 5 // 2 + (k % 2)  # 2, 3, 2, 3, ... per 0.5 s
        sch._sample_rate()
    assert sch.emitted_per_s() == pytest.approx(5.0, rel=0.06)
    # then nothing for a whole window: the rate falls to exactly 0
    for k in range(1, int(2 * RATE_WINDOW_S) + 2):
        clock[0] = 29.5 + 0.5 * k
        sch._sample_rate()
    assert sch.emitted_per_s() == 0.0
    assert len(sch._rate_samples) <= 2 * RATE_WINDOW_S + 2  # old samples are dropped


def test_cluster_sums_each_workers_rate_once_and_prefers_its_own_live_value() -> None:
    clock = [0.0]
    sch = _scheduler(clock)
    sch._sample_rate()
    clock[0] = 2.0
    sch.orders_total = 8  # 4/s now; its published entries still say 1.0
    sch.global_shards = {
        0: {"worker": sch.worker_id, "worker_emitted_per_s": 1.0},
        1: {"worker": sch.worker_id, "worker_emitted_per_s": 1.0},
        2: {"worker": "other", "worker_emitted_per_s": 2.5},
        3: {"worker": "other", "worker_emitted_per_s": 2.5},
    }
    c = sch.cluster()
    assert c == {"workers": 2, "shards": 4, "emitted_per_s": pytest.approx(6.5)}


def test_top_hosts_by_orders_in_flight_then_capacity() -> None:
    sch = _scheduler([0.0])
    a, b = sch.new_shard(0), sch.new_shard(1)
    sch.shards = {0: a, 1: b}
    a.hosts.set_capacity("slow.org", 0.5, 2)
    a.hosts.set_capacity("fast.org", 9.0, None)
    b.hosts.set_capacity("busy.org", 1.0, None)
    b.hosts.bucket("idle.org")
    b.hosts.add_in_flight("busy.org", 3)
    a.hosts.add_in_flight("slow.org", 1)
    top = sch.top_hosts(3)
    assert top["count"] == 4 and top["in_flight"] == 4
    assert [h["host"] for h in top["top"]] == ["busy.org", "slow.org", "fast.org"]
    slow = top["top"][1]
    assert (slow["shard"], slow["max_crawls_per_s"], slow["max_in_flight"]) == (0, 0.5, 2)
    assert top["top"][2]["max_crawls_per_s"] == 9.0
    assert sch.top_hosts(10)["top"][-1]["max_crawls_per_s"] == 3.0  # the default rate
    assert sch.top_hosts(0)["top"] == []


def test_pings_by_source_counts_each_result_and_a_total() -> None:
    m = Metrics()
    for source, result in [("sitemap", "applied"), ("sitemap", "applied"),
                           ("sitemap", "within-delay"), ("indexnow", "unknown")]:
        m.ping(source, result)
    assert m.pings_by_source() == {
        "indexnow": {"unknown": 1, "total": 1},
        "sitemap": {"applied": 2, "within-delay": 1, "total": 3},
    }
    text = m.exposition().decode()
    assert 'recrawl_pings_total{result="applied",source="sitemap"} 2.0' in text
