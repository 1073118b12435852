"""models.sim.live on tiny hand-built inputs whose answers are worked out by hand."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from models.sim.events import Events
from models.sim.live import (
    EngineAlgorithm1,
    LiveRuleAlgorithm1,
    live_ping_ok,
    run_timed,
    windowed_accuracy,
)
from models.sim.live import testweb_events as draw_testweb_events  # not a test
from models.sim.policies import PingedPages, value_params
from models.values import crawl_value

INF = math.inf


def events(changes: list[list[float]], pings: list[tuple[int, float, float]] = (),  # type: ignore[assignment]
           horizon: float = 10.0) -> Events:  # fmt: skip
    """Events from per-page change times and ``(page, arrival, emitted)`` pings."""
    counts = [len(c) for c in changes]
    pings = sorted(pings, key=lambda p: p[1])
    return Events(
        change_time=np.array([t for c in changes for t in sorted(c)], dtype=np.float64),
        change_start=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        ping_arrival=np.array([p[1] for p in pings], dtype=np.float64),
        ping_emitted=np.array([p[2] for p in pings], dtype=np.float64),
        ping_page=np.array([p[0] for p in pings], dtype=np.int64),
        ping_true=np.ones(len(pings), dtype=bool),
        horizon=horizon,
    )


# ---------------------------------------------------------------- live_ping_ok
def test_live_ping_rule() -> None:
    assert live_ping_ok(-INF, arrival=0.5, emitted=0.1, t_delay=5.0)  # never crawled
    assert live_ping_ok(10.0, arrival=12.0, emitted=11.0, t_delay=1.0)
    assert not live_ping_ok(10.0, arrival=12.0, emitted=9.9, t_delay=1.0)  # change before
    assert not live_ping_ok(10.0, arrival=9.5, emitted=10.5, t_delay=0.0)  # arrived before
    assert not live_ping_ok(10.0, arrival=10.5, emitted=10.2, t_delay=1.0)  # within t_delay
    assert not live_ping_ok(10.0, arrival=11.0, emitted=10.2, t_delay=1.0)  # boundary: >
    assert live_ping_ok(10.0, arrival=10.0, emitted=10.0, t_delay=0.0) is False
    assert live_ping_ok(10.0, arrival=10.001, emitted=10.0, t_delay=0.0)


# ---------------------------------------------------------------- windowed_accuracy
def acc(
    mu: list[float], ev: Events, fetches: list[tuple[int, float]], *,
    initial: list[float] | None = None, start: float = 0.0, stop: float = 10.0,
) -> float:  # fmt: skip
    return windowed_accuracy(
        np.array(mu, dtype=np.float64), ev,
        np.array([t for _, t in fetches], dtype=np.float64),
        np.array([p for p, _ in fetches], dtype=np.int64),
        initial_copy=np.array(initial if initial is not None else [0.0] * len(mu)),
        start=start, stop=stop,
    )  # fmt: skip


def test_accuracy_of_a_page_never_crawled_is_its_time_to_first_change() -> None:
    assert acc([1.0], events([[2.0, 6.0]]), []) == pytest.approx(0.2)
    assert acc([1.0], events([[]]), []) == pytest.approx(1.0)  # never changes
    assert acc([1.0], events([[0.0]]), []) == pytest.approx(1.0)  # changed before the copy
    assert acc([1.0], events([[]]), [], initial=[4.0]) == pytest.approx(0.6)  # copy at 4


def test_accuracy_of_a_page_crawled_right_after_each_change_is_one() -> None:
    ev = events([[2.0, 6.0]])
    # a copy taken at the change time includes the change
    assert acc([1.0], ev, [(0, 2.0), (0, 6.0)]) == pytest.approx(1.0)
    # one second late each time: stale over [2, 3] and [6, 7]
    assert acc([1.0], ev, [(0, 3.0), (0, 7.0)]) == pytest.approx(0.8)
    assert acc([1.0], ev, [(0, 7.0), (0, 3.0)]) == pytest.approx(0.8)  # any order
    # the window [4, 10]: fresh over [4, 6] and [7, 10]
    assert acc([1.0], ev, [(0, 3.0), (0, 7.0)], start=4.0) == pytest.approx(5.0 / 6.0)
    # extra crawls of an unchanged copy add nothing
    assert acc([1.0], events([[]]), [(0, 1.0), (0, 2.0), (0, 3.0)]) == pytest.approx(1.0)


def test_accuracy_is_importance_weighted() -> None:
    ev = events([[], [5.0]])  # a never changes; b changes at 5 and is never crawled
    assert acc([3.0, 1.0], ev, []) == pytest.approx((3 * 1.0 + 1 * 0.5) / 4)
    # b fetched at 8: fresh over [0, 5] and [8, 10]
    assert acc([3.0, 1.0], ev, [(1, 8.0)]) == pytest.approx((3 * 1.0 + 1 * 0.7) / 4)


# ---------------------------------------------------------------- run_timed
class Recorder:
    """A policy that orders the first eligible page of ``prefer`` and records its calls."""

    name = "recorder"

    def __init__(self, prefer: list[int]) -> None:
        self.prefer = prefer
        self.calls: list[tuple[Any, ...]] = []

    def on_ping(self, page: int, arrival: float, emitted: float) -> None:
        self.calls.append(("ping", page, arrival, emitted))

    def choose(self, t: float, eligible: Any) -> int | None:
        for p in self.prefer:
            if eligible is None or eligible(p):
                self.calls.append(("order", p, t))
                return p
        self.calls.append(("none", t))
        return None

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None:
        self.calls.append(("crawl", page, t, changed, last_modified))

    def crawls(self) -> list[tuple[Any, ...]]:
        return [c[1:] for c in self.calls if c[0] == "crawl"]


def orders(*t: float) -> np.ndarray:
    return np.array(t, dtype=np.float64)


def test_run_timed_reports_changed_and_last_modified_at_the_fetch_time() -> None:
    pol = Recorder([0])
    res = run_timed(events([[1.0, 2.5]]), pol, orders(0.5, 1.5, 3.0, 3.2), fetch_lag=0.1)
    assert res.order_time.tolist() == [0.5, 1.5, 3.0, 3.2]
    assert res.fetch_time == pytest.approx([0.6, 1.6, 3.1, 3.3])
    assert res.page.tolist() == [0, 0, 0, 0] and res.lost_slots == 0
    got = pol.crawls()
    assert [(c[0], c[2], c[3]) for c in got] == [
        (0, False, -INF),  # nothing changed by 0.6
        (0, True, 1.0),
        (0, True, 2.5),
        (0, False, 2.5),  # unchanged since the last fetch; last change still 2.5
    ]
    assert [c[1] for c in got] == pytest.approx([0.6, 1.6, 3.1, 3.3])


def test_run_timed_a_page_in_flight_is_not_ordered_again() -> None:
    pol = Recorder([0])
    res = run_timed(events([[]]), pol, orders(0.0, 0.5, 1.5), outcome_lag=1.0)
    assert res.order_time.tolist() == [0.0, 1.5] and res.lost_slots == 1
    assert pol.calls == [
        ("order", 0, 0.0),
        ("none", 0.5),  # the outcome of the first order is applied at 1.0
        ("crawl", 0, 0.0, False, -INF),
        ("order", 0, 1.5),
        ("crawl", 0, 1.5, False, -INF),
    ]
    # the outcome cannot come before the copy: applied at max(outcome_lag, fetch_lag)
    pol = Recorder([0])
    res = run_timed(events([[]]), pol, orders(0.0, 0.5, 2.5), fetch_lag=2.0, outcome_lag=0.1)
    assert res.order_time.tolist() == [0.0, 2.5] and res.lost_slots == 1


def test_run_timed_host_token_bucket() -> None:
    # pages 0 and 1 on host 0, page 2 on host 1; one crawl per unit time per host, burst 1
    pol = Recorder([0, 1, 2])
    res = run_timed(events([[], [], []]), pol, orders(0.0, 0.5, 1.0, 1.2, 2.0),
                    host=np.array([0, 0, 1]), host_rate=1.0, host_burst=1.0)  # fmt: skip
    # 0.5: host 0 has half a token -> page 2; 1.2: host 0 0.2, host 1 0.7 tokens -> lost
    assert res.page.tolist() == [0, 2, 0, 0]
    assert res.order_time.tolist() == [0.0, 0.5, 1.0, 2.0]
    assert res.lost_slots == 1


def test_run_timed_host_in_flight_cap() -> None:
    ev = events([[], []])
    hosts = np.array([0, 0])
    capped = run_timed(ev, Recorder([0, 1]), orders(0.0, 0.5, 1.5), outcome_lag=1.0,
                       host=hosts, host_max_in_flight=1)  # fmt: skip
    assert capped.page.tolist() == [0, 0] and capped.lost_slots == 1
    free = run_timed(ev, Recorder([0, 1]), orders(0.0, 0.5, 1.5), outcome_lag=1.0,
                     host=hosts, host_max_in_flight=0)  # fmt: skip
    assert free.page.tolist() == [0, 1, 0] and free.lost_slots == 0


def test_run_timed_initial_copy_skips_older_changes() -> None:
    ev = events([[1.0, 2.0]])
    pol = Recorder([0])
    run_timed(ev, pol, orders(3.0), last_crawl=np.array([1.5]))
    assert pol.crawls() == [(0, 3.0, True, 2.0)]
    pol = Recorder([0])
    run_timed(ev, pol, orders(3.0), last_crawl=np.array([2.5]))
    assert pol.crawls() == [(0, 3.0, False, 2.0)]  # both changes were in the first copy


def test_run_timed_event_order_outcome_then_ping_then_order() -> None:
    ev = events([[]], pings=[(0, 1.0, 0.9), (0, 5.0, 4.0)])
    pol = Recorder([0])
    run_timed(ev, pol, orders(0.0, 1.0), outcome_lag=1.0)
    assert pol.calls == [
        ("order", 0, 0.0),
        ("crawl", 0, 0.0, False, -INF),  # due at 1.0, before the ping arriving at 1.0
        ("ping", 0, 1.0, 0.9),  # arrived at the order's time: seen before choosing
        ("order", 0, 1.0),
        ("crawl", 0, 1.0, False, -INF),
        ("ping", 0, 5.0, 4.0),  # pings after the last order are still delivered
    ]


# ---------------------------------------------------------------- LiveRuleAlgorithm1
def _policy(kind: str, t_delay: float = 1.0) -> LiveRuleAlgorithm1:
    delta = np.array([1.0, 1.0, 1.0])
    lam = np.array([0.5, 0.5, 0.0])
    nu = np.array([0.2, 0.2, 0.0]) if kind == "greedy-ncis" else np.zeros(3)
    a, b, g, terms = value_params(kind, delta, lam, nu)
    pol = LiveRuleAlgorithm1(kind, np.ones(3), a, b, g, terms=terms, t_delay=t_delay)
    for i in range(3):
        pol.on_crawl(i, 10.0, False, -INF)
    return pol


def test_live_rule_algorithm1_applies_the_worker_ping_rule() -> None:
    pol = _policy("greedy-ncis")
    beta = float(pol.beta[0])
    assert 0.0 < beta < INF and pol.gamma[2] == 0.0
    pol.on_ping(0, 10.5, 10.4)  # within t_delay of the crawl at 10
    pol.on_ping(0, 11.5, 9.0)  # announces a change before the crawl
    assert pol.origin[0] == 10.0
    pol.on_ping(0, 11.5, 11.0)
    assert pol.origin[0] == pytest.approx(10.0 - beta)
    pol.on_ping(0, 11.6, 11.5)
    assert pol.origin[0] == pytest.approx(10.0 - 2 * beta)
    pol.on_ping(2, 11.5, 11.0)  # gamma = 0: pings say nothing about this page
    assert pol.origin[2] == 10.0
    # the index follows: of two identical pages, the pinged one is worth more (page 2,
    # another kind, is in flight: out of the pick)
    pol.book.start_flight(2, ("o", 11.9))
    assert pol.choose(12.0, None) == 0
    # a crawl resets the page
    pol.on_crawl(0, 13.0, True, 12.0)
    assert pol.origin[0] == 13.0 and pol.last_crawl[0] == 13.0
    # the page in flight comes back into the index with its crawl
    assert 2 not in pol.index
    pol.book.end_flight(2)
    pol.on_crawl(2, 14.0, False, -INF)
    assert 2 in pol.index and pol.index.value(2, 15.0) == pytest.approx(
        float(crawl_value(1.0, pol.alpha[2], pol.beta[2], pol.gamma[2], 1.0)))


def test_live_rule_algorithm1_batch_pings_use_the_same_rule() -> None:
    pol = _policy("greedy-ncis")
    pol.on_pings(np.array([0, 0, 1]), np.array([10.5, 11.5, 10.9]), np.array([10.4, 11.0, 10.5]))
    assert pol.origin[0] == pytest.approx(10.0 - float(pol.beta[0]))  # only the second
    assert pol.origin[1] == 10.0


def test_live_rule_algorithm1_noiseless_pings_jump_to_minus_infinity() -> None:
    pol = _policy("greedy-cis", t_delay=0.0)
    assert pol.beta[0] == INF
    pol.on_ping(1, 10.2, 10.1)
    assert pol.origin[1] == -INF and pol.origin[0] == 10.0


# ---------------------------------------------------------------- testweb_events
class ScriptedRng:
    """Returns scripted draws, in the order ``testweb_events`` makes them."""

    def __init__(self, script: list[tuple[str, list[float]]]) -> None:
        self.script = list(script)

    def _next(self, name: str, shape: tuple[int, ...] | None) -> np.ndarray:
        assert self.script, f"unexpected draw: {name}"
        want, value = self.script.pop(0)
        assert want == name, f"drew {name} where the script has {want}"
        v = np.asarray(value, dtype=np.float64)
        if shape is not None:
            assert v.shape == shape, f"{name}: shape {shape}, script {v.shape}"
        return v

    def poisson(self, lam: Any, size: Any = None) -> np.ndarray:
        return self._next("poisson", np.shape(lam)).astype(np.int64)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None) -> np.ndarray:
        return self._next(f"uniform({low:g},{high:g})", (size,) if size is not None else None)

    def exponential(self, scale: Any = 1.0, size: Any = None) -> np.ndarray:
        return self._next("exponential", np.shape(scale))


def _hand_world(lag: float = 0.0) -> Events:
    """Page 0 announces through its sitemap (polled at 1, 2, 3, ...), page 1 through
    IndexNow (POSTed at multiples of 0.2)."""
    rng = ScriptedRng([
        ("poisson", [3, 1]),  # changes: 3 of page 0, 1 of page 1
        ("uniform(0,10)", [0.5, 2.2, 0.3, 1.05]),  # their times
        ("uniform(0,1)", [0.1, 0.1, 0.1, 0.1]),  # all announced (recall 1)
        ("exponential", [1.0, 0.1, 0.3, 0.02]),  # delays of 0.3, 0.5, 2.2 | 1.05
        ("poisson", [2, 2]),  # false announcements: 2 per page
        ("uniform(0,10)", [3.6, 3.4, 1.15, 9.5]),
    ])  # fmt: skip
    ev = draw_testweb_events(
        np.array([0.3, 0.1]), np.array([1.0, 1.0]), np.array([0.2, 0.2]),
        np.array([1.0, 1.0]), np.array([True, False]), 10.0, rng,  # type: ignore[arg-type]
        poll_interval=1.0, flush_interval=0.2, poll_phase=0.0, lag=lag,
    )  # fmt: skip
    assert rng.script == []
    return ev


def test_testweb_events_sitemap_polling_and_indexnow_batching() -> None:
    ev = _hand_world()
    assert ev.change_time.tolist() == [0.3, 0.5, 2.2, 1.05]
    assert ev.change_start.tolist() == [0, 3, 4]
    # page 0 announcements (time, lastmod): (0.6, 0.5) (1.3, 0.3) (2.5, 2.2), false
    # (3.4, 3.4) (3.6, 3.6).  Poll 1 sees lastmod 0.5; poll 2 sees it unchanged (the
    # late announcement of the change at 0.3 does not move it): no ping; poll 3 sees
    # 2.2; poll 4 sees 3.6 (two false announcements collapse into one ping).
    # page 1: announcements at 1.07 (true), 1.15 and 9.5 (false) -> POSTs at 1.2, 9.6.
    assert ev.ping_arrival == pytest.approx([1.0, 1.2, 3.0, 4.0, 9.6])
    assert ev.ping_emitted == pytest.approx([0.5, 1.2, 2.2, 3.6, 9.6])
    assert ev.ping_page.tolist() == [0, 1, 0, 0, 1]
    assert ev.ping_true.tolist()[:4] == [True, True, True, False]
    assert ev.horizon == 10.0


def test_testweb_events_lag_and_horizon() -> None:
    ev = _hand_world(lag=0.5)
    # every arrival 0.5 later; the POST at 9.6 now arrives at 10.1, after the horizon
    assert ev.ping_arrival == pytest.approx([1.5, 1.7, 3.5, 4.5])
    # a sitemap ping keeps its lastmod; an IndexNow ping's emission is its arrival
    assert ev.ping_emitted == pytest.approx([0.5, 1.7, 2.2, 3.6])


def test_testweb_events_without_announcements_has_no_pings() -> None:
    rng = np.random.default_rng(3)
    m = 6
    ev = draw_testweb_events(np.full(m, 2.0), np.zeros(m), np.zeros(m), np.full(m, 0.1),
                        np.arange(m) % 2 == 0, 5.0, rng, poll_interval=1.0,
                        flush_interval=0.2)  # fmt: skip
    assert ev.ping_arrival.size == 0 and ev.change_time.size > 0
    assert all(np.all(np.diff(ev.changes_of(i)) >= 0) for i in range(m))
    assert ev.change_time.min() >= 0.0 and ev.change_time.max() <= 5.0


def test_testweb_events_pings_arrive_at_poll_and_flush_times() -> None:
    rng = np.random.default_rng(5)
    m = 8
    sitemap = np.arange(m) < 4
    ev = draw_testweb_events(np.full(m, 1.0), np.full(m, 0.8), np.full(m, 0.5), np.full(m, 0.2),
                        sitemap, 20.0, rng, poll_interval=1.0, flush_interval=0.25,
                        poll_phase=0.5)  # fmt: skip
    assert ev.ping_arrival.size > 0
    assert np.all(np.diff(ev.ping_arrival) >= 0)  # sorted by arrival
    assert np.all(ev.ping_arrival <= 20.0)
    on_sitemap = sitemap[ev.ping_page]
    polls = ev.ping_arrival[on_sitemap] - 0.5
    assert polls == pytest.approx(np.round(polls))  # at 0.5 + k
    assert np.all(ev.ping_emitted[on_sitemap] <= ev.ping_arrival[on_sitemap])
    flushes = ev.ping_arrival[~on_sitemap] / 0.25
    assert flushes == pytest.approx(np.round(flushes))
    assert np.array_equal(ev.ping_emitted[~on_sitemap], ev.ping_arrival[~on_sitemap])
    for i in np.flatnonzero(sitemap):  # a page's lastmod only increases
        assert np.all(np.diff(ev.ping_emitted[ev.ping_page == i]) > 0)
    for i in np.flatnonzero(~sitemap):  # one URL per POST
        assert np.all(np.diff(ev.ping_arrival[ev.ping_page == i]) > 0)


# ---------------------------------------------------------------- EngineAlgorithm1
def _engine_world(seed: int, m: int = 40, hosts: int = 4) -> tuple[Any, ...]:
    rng = np.random.default_rng(seed)
    delta = rng.uniform(0.05, 1.0, m)
    lam = rng.uniform(0.0, 1.0, m)
    nu = rng.uniform(0.0, 0.5, m)
    mu = rng.uniform(0.1, 1.0, m)
    host = (np.arange(m) % hosts).astype(np.int64)
    ev = draw_testweb_events(delta, lam, nu, np.full(m, 0.2), rng.uniform(size=m) < 0.5, 60.0,
                             rng, poll_interval=1.0, flush_interval=0.2)
    return mu, delta, lam, nu, host, ev


class _BruteGreedy(PingedPages):
    """Algorithm 1 by brute force: every page's crawl value at each order, the largest
    positive one among the pages ``run_timed`` allows (not in flight, host with room)."""

    def __init__(self, mu: np.ndarray, a: np.ndarray, b: np.ndarray, g: np.ndarray,
                 terms: int | None, last_crawl: np.ndarray, t_delay: float) -> None:
        super().__init__("brute", mu, a, b, g, ping_rule="live", t_delay=t_delay)
        self.terms = terms
        self.last_crawl = last_crawl.copy()
        self.origin = last_crawl.copy()

    def on_ping(self, page: int, arrival: float, emitted: float) -> None:
        o = self.pinged_origin(page, arrival, emitted)
        if o is not None:
            self.origin[page] = o

    def choose(self, t: float, eligible: Any) -> int | None:
        v = crawl_value(np.maximum(t - self.origin, 0.0), self.alpha, self.beta, self.gamma,
                        self.mu, terms=self.terms)
        for p in np.argsort(-v, kind="stable").tolist():
            if v[p] > 0.0 and eligible(p):
                return int(p)
        return None

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None:
        self.last_crawl[page] = t
        self.origin[page] = t


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_engine_algorithm1_orders_as_the_brute_force_under_the_same_limits(seed: int) -> None:
    """Algorithm 1 on the worker's engine (:func:`models.decision.core.choose` over a
    ShardBook, its HostBuckets and flights), with the worker's host index
    (:class:`EngineAlgorithm1`) or the simulator's (:class:`LiveRuleAlgorithm1`), orders
    exactly what a brute-force argmax orders under the same host buckets, in-flight cap
    and lags (``run_timed``'s per-page filter)."""
    mu, delta, lam, nu, host, ev = _engine_world(seed)
    a, b, g, terms = value_params("greedy-ncis", delta, lam, nu)
    initial = np.zeros(mu.size)
    order_t = np.arange(1, 240) / 4.0
    kw: dict[str, Any] = {"fetch_lag": 0.3, "outcome_lag": 0.6, "last_crawl": initial,
                          "host": host, "host_rate": 0.8, "host_burst": 2.0,
                          "host_max_in_flight": 1}
    want = run_timed(ev, _BruteGreedy(mu, a, b, g, terms, initial, 0.5), order_t, **kw)
    got = run_timed(ev, EngineAlgorithm1("engine", mu, a, b, g, host=host, last_crawl=initial,
                                         terms=terms, t_delay=0.5), order_t, **kw)
    sim = run_timed(ev, LiveRuleAlgorithm1("sim", mu, a, b, g, terms=terms, t_delay=0.5,
                                           host=host, last_crawl=initial), order_t, **kw)
    assert got.page.size > 100 and got.lost_slots > 0  # the limits bind
    assert got.page.tolist() == want.page.tolist()
    assert got.order_time.tolist() == want.order_time.tolist()
    assert sim.page.tolist() == want.page.tolist()
