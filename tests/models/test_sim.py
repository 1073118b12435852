"""Simulator: budget, accuracy metric, ping rules, host limits, peers' rules, and the
qualitative claims of paper 004 Sec. 6 on a fixed-seed world."""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.sim import (
    Budget,
    NutchAdaptive,
    RoundRobin,
    StormCrawlerAdaptive,
    accuracy,
    algorithm1,
    assign_hosts,
    run,
    simulate_events,
    synthetic_world,
)
from models.sim.engine import RunResult


def test_budget_slots_follow_rate_changes() -> None:
    t = Budget(100.0, ((1.0, 150.0), (2.0, 100.0))).slot_times(3.0)
    assert t.size == 100 + 150 + 100
    assert np.all(np.diff(t) > 0)
    assert np.sum(t <= 1.0 + 1e-9) == 100


def test_accuracy_without_crawls_is_time_to_first_change() -> None:
    rng = np.random.default_rng(0)
    w = synthetic_world(50, rng, lam_beta=None, nu_range=None)
    ev = simulate_events(w, 5.0, rng)
    res = RunResult("none", np.zeros(0), np.zeros(0, dtype=np.int64), 0)
    first = np.array([min([*ev.changes_of(i).tolist(), 5.0]) for i in range(w.m)])
    want = float((w.mu * first).sum() / (w.mu.sum() * 5.0))
    assert accuracy(w, ev, res) == pytest.approx(want, rel=1e-12)


def _world(seed: int, m: int = 100):
    rng = np.random.default_rng(seed)
    w = synthetic_world(m, rng)
    return w, simulate_events(w, 12.0, rng)


def test_paper_claims_on_fixed_worlds() -> None:
    """Sec. 6.6: Greedy-NCIS beats Greedy with noisy pings; peers lose to Greedy."""
    gains, peer_gap = [], []
    for seed in range(2):
        w, ev = _world(seed)
        acc = {}
        for kind in ("greedy", "greedy-ncis"):
            res = run(w, ev, algorithm1(kind, w.mu, w.delta, w.lam, w.nu), Budget(100.0))
            acc[kind] = accuracy(w, ev, res, start=2.0)
        nutch = NutchAdaptive(w.m, initial_interval=1.0, min_interval=0.01, max_interval=12.0,
                              rng=np.random.default_rng(seed))
        acc["nutch"] = accuracy(w, ev, run(w, ev, nutch, Budget(100.0)), start=2.0)
        gains.append(acc["greedy-ncis"] - acc["greedy"])
        peer_gap.append(acc["greedy"] - acc["nutch"])
    assert min(gains) > 0.01
    assert min(peer_gap) > 0.0


def test_host_limits_are_respected() -> None:
    rng = np.random.default_rng(3)
    w = assign_hosts(synthetic_world(200, rng), rng, n_hosts=10, limit_per_page=0.05)
    ev = simulate_events(w, 5.0, rng)
    res = run(w, ev, algorithm1("greedy", w.mu, w.delta, w.lam, w.nu), Budget(100.0),
              host_limits=True)
    for h in np.nonzero(np.isfinite(w.host_rate))[0]:
        t = res.crawl_time[w.host[res.crawl_page] == h]
        assert np.all(np.diff(t) >= 1.0 / w.host_rate[h] - 1e-9)


def test_ping_rules() -> None:
    rng = np.random.default_rng(4)
    w = synthetic_world(3, rng)
    for rule, expect_moved in (("accept", True), ("tdelay", False), ("strict", False)):
        pol = algorithm1("greedy-ncis", w.mu, w.delta, np.full(3, 0.5), np.full(3, 0.3),
                         ping_rule=rule, t_delay=0.5)
        pol.on_crawl(0, 1.0, False, -math.inf)
        pol.on_ping(0, 1.2, 0.9)  # arrives 0.2 after the crawl, emitted before it
        assert bool(pol.origin[0] < 1.0) is expect_moved, rule


def test_peer_interval_rules() -> None:
    rng = np.random.default_rng(5)
    n = NutchAdaptive(1, initial_interval=10.0, min_interval=1.0, max_interval=100.0, rng=rng,
                      sync_delta=False)
    n.on_crawl(0, 0.0, False, -math.inf)
    assert n.interval[0] == pytest.approx(14.0)
    n.on_crawl(0, 14.0, True, 13.0)
    assert n.interval[0] == pytest.approx(14.0 * 0.8)
    s = StormCrawlerAdaptive(1, initial_interval=10.0, min_interval=2.0, max_interval=12.0,
                             rng=rng)
    s.on_crawl(0, 0.0, True, 0.0)
    assert s.interval[0] == pytest.approx(6.0)
    s.on_crawl(0, 6.0, False, 0.0)
    s.on_crawl(0, 15.0, False, 0.0)
    assert s.interval[0] == pytest.approx(12.0)
    rr = RoundRobin(4, rng=rng)
    seen = [rr.choose(0.0, None) for _ in range(4)]
    for p in seen:
        assert p is not None
        rr.on_crawl(p, 0.0, False, 0.0)
    assert sorted(seen) == [0, 1, 2, 3]


class _OneAtATime:
    """Algorithm 1 without its batch methods: the engine falls back to per-item calls."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name

    def on_ping(self, page: int, arrival: float, emitted: float) -> None:
        self.inner.on_ping(page, arrival, emitted)

    def choose(self, t, eligible):
        return self.inner.choose(t, eligible)

    def on_crawl(self, page, t, changed, last_modified) -> None:
        self.inner.on_crawl(page, t, changed, last_modified)


@pytest.mark.parametrize("kind", ["greedy-ncis", "greedy-cis", "ncis-approx-1"])
def test_batched_pings_and_steps_match_one_at_a_time(kind: str) -> None:
    # on_pings (a slot's pings at once) and choose_many (a step's k best pages) give
    # exactly the crawls of per-ping / per-page calls
    rng = np.random.default_rng(11)
    w = synthetic_world(120, rng)
    ev = simulate_events(w, 4.0, rng)
    for budget in (Budget(30.0), Budget(30.0, batch=10)):
        a = run(w, ev, algorithm1(kind, w.mu, w.delta, w.lam, w.nu), budget)
        b = run(w, ev, _OneAtATime(algorithm1(kind, w.mu, w.delta, w.lam, w.nu)), budget)
        assert a.crawl_page.size == b.crawl_page.size > 0
        np.testing.assert_array_equal(a.crawl_time, b.crawl_time)
        np.testing.assert_array_equal(a.crawl_page, b.crawl_page)


def test_batched_budget_crawls_k_distinct_pages_per_step() -> None:
    rng = np.random.default_rng(12)
    w = synthetic_world(80, rng)
    ev = simulate_events(w, 3.0, rng)
    res = run(w, ev, algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu),
              Budget(40.0, batch=20))
    times, counts = np.unique(res.crawl_time, return_counts=True)
    np.testing.assert_allclose(times, np.arange(1, 7) * 0.5)
    assert (counts == 20).all()
    for t in times:
        assert np.unique(res.crawl_page[res.crawl_time == t]).size == 20
    with pytest.raises(ValueError, match="batch"):
        run(w, ev, algorithm1("greedy", w.mu, w.delta, w.lam, w.nu), Budget(40.0, batch=0))
