"""Tests of models.estimators: validation, degenerate data, bounded state, consistency.

Over 600 lines on purpose: one module of tests per package under test, the scalar and batch
estimators checked against the same closed forms and generated observations.
"""

from __future__ import annotations

import ast
import itertools
import math
import pathlib
from dataclasses import astuple, replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.estimators import (
    GRIMES_FORD,
    MAX_STATE_BYTES,
    ChangeRateEstimator,
    CrawlInterval,
    HostPool,
    PseudoDatapoints,
    RequestRateEstimator,
    SignalEstimate,
    SignalEstimator,
    SignalState,
    batch_alpha_kappa,
    batch_from_bytes,
    batch_init,
    batch_result,
    batch_to_bytes,
    batch_to_states,
    batch_update,
    cho_garcia_molina_mle,
    conservative_change_rate,
    fit_pseudo_datapoints,
    fit_signal_mle,
    importance_from_score,
    naive_change_rate,
    naive_precision_recall,
    pseudo_datapoint_log_density,
    states_to_batch,
    update_many,
)
from models.simulate_estimation import SimulatedIntervals, simulate_page_intervals

HOUR = 3600.0


def feed(
    est: SignalEstimator, sim: SimulatedIntervals, state: SignalState | None = None
) -> SignalState:
    st_ = est.init() if state is None else state
    for tau, ch, n in zip(
        sim.interval_s.tolist(), sim.changed.tolist(), sim.n_signals.tolist(), strict=True
    ):
        st_ = est.update(st_, CrawlInterval(tau, ch, tuple(n)))
    return st_


def all_finite(r: SignalEstimate) -> bool:
    vals: list[float] = []
    for f in astuple(r):
        if isinstance(f, tuple):
            for x in f:
                vals.extend(x if isinstance(x, tuple) else (x,))
        else:
            vals.append(float(f))
    return all(math.isfinite(v) for v in vals)


# --- validation ---------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_bad_interval_names_field(bad: float) -> None:
    est = SignalEstimator(1)
    with pytest.raises(ValueError, match="interval_s"):
        est.update(est.init(), CrawlInterval(bad, True, (0,)))


@pytest.mark.parametrize("bad", [(-1.0,), (math.nan,), (), (1.0, 2.0)])
def test_bad_signals_names_field(bad: tuple[float, ...]) -> None:
    est = SignalEstimator(1)
    with pytest.raises(ValueError, match="n_signals"):
        est.update(est.init(), CrawlInterval(10.0, True, bad))


def test_crawl_before_previous_names_end_s() -> None:
    est = SignalEstimator(0)
    s = est.update(est.init(), CrawlInterval(10.0, False, end_s=1000.0))
    with pytest.raises(ValueError, match="end_s"):
        est.update(s, CrawlInterval(10.0, False, end_s=999.0))
    with pytest.raises(ValueError, match="end_s"):
        est.update(s, CrawlInterval(10.0, False, end_s=math.nan))


def test_batch_validation_names_fields() -> None:
    est = SignalEstimator(1)
    b = batch_init(est, 3)
    with pytest.raises(ValueError, match="interval_s"):
        batch_update(est, b, np.array([1.0, -1.0, 2.0]), np.zeros(3, bool), np.zeros((3, 1)))
    with pytest.raises(ValueError, match="n_signals"):
        batch_update(est, b, np.ones(3), np.zeros(3, bool), np.full((3, 1), np.nan))
    batch_update(est, b, np.ones(3), np.zeros(3, bool), np.zeros((3, 1)), end_s=np.full(3, 5.0))
    with pytest.raises(ValueError, match="end_s"):
        batch_update(est, b, np.ones(3), np.zeros(3, bool), np.zeros((3, 1)), end_s=np.full(3, 4.0))


def test_full_data_validation_names_fields() -> None:
    with pytest.raises(ValueError, match="changed_interval_s"):
        cho_garcia_molina_mle([-1.0], [1.0])
    with pytest.raises(ValueError, match="unchanged_interval_s"):
        cho_garcia_molina_mle([1.0], [math.nan])
    with pytest.raises(ValueError, match="interval_s"):
        fit_signal_mle(np.array([1.0, -2.0]), np.zeros(2), np.array([True, False]))
    with pytest.raises(ValueError, match="changed_interval_s"):
        PseudoDatapoints(changed_interval_s=0.0)


# --- degenerate data ----------------------------------------------------------------------
def test_new_page_gives_the_prior() -> None:
    est = SignalEstimator(1)
    r = est.result(est.init())
    assert all_finite(r)
    assert r.change_rate_per_s == pytest.approx(GRIMES_FORD.prior_rate_per_s, rel=1e-9)
    assert r.change_rate_per_s == pytest.approx(math.log1p(1 / 57) / HOUR, rel=1e-9)
    assert r.precision[0] == pytest.approx(0.5, rel=1e-9)
    assert r.gamma_per_s == (0.0,)


@pytest.mark.parametrize("n_sources", [0, 1, 3])
def test_all_changed_and_never_changed_are_finite_and_ordered(n_sources: int) -> None:
    est = SignalEstimator(n_sources)
    sig = (1.0,) * n_sources
    hi, lo = est.init(), est.init()
    rates_lo = []
    for i in range(200):
        hi = est.update(hi, CrawlInterval(HOUR, True, sig))
        lo = est.update(lo, CrawlInterval(HOUR, False, sig))
        if i % 50 == 49:
            rates_lo.append(est.result(lo).change_rate_per_s)
    rh, rl = est.result(hi), est.result(lo)
    assert all_finite(rh) and all_finite(rl)
    # every hourly crawl changed: far above the prior; never changed: far below it
    assert rh.change_rate_per_s > 20 * GRIMES_FORD.prior_rate_per_s
    assert 0.0 < rl.alpha_per_s < 0.3 * GRIMES_FORD.prior_rate_per_s
    if n_sources == 0:  # eq. (2) with the pseudo-points, on all the data
        # the representative interval summarises intervals of one length exactly
        assert rh.change_rate_per_s == pytest.approx(
            cho_garcia_molina_mle([HOUR] * 200, []), rel=1e-9)
        assert rl.change_rate_per_s == pytest.approx(
            cho_garcia_molina_mle([], [HOUR] * 200), rel=1e-6
        )
    assert all(b < a for a, b in itertools.pairwise(rates_lo))


def test_cgm_substitutes_without_pseudo_points() -> None:
    # paper 003 Sec. 4.3: never changed -> 1/sum(t); always changed -> 1/min(t)
    assert cho_garcia_molina_mle([], [2.0, 3.0], pseudo=None) == pytest.approx(1 / 5)
    assert cho_garcia_molina_mle([2.0, 3.0], [], pseudo=None) == pytest.approx(1 / 2)
    assert cho_garcia_molina_mle([], [], pseudo=None) == 0.0
    assert cho_garcia_molina_mle([], []) == pytest.approx(GRIMES_FORD.prior_rate_per_s)


def test_cgm_solves_equation_2() -> None:
    rng = np.random.default_rng(3)
    tc = rng.exponential(5.0, 40)
    tu = rng.exponential(5.0, 60)
    rate = cho_garcia_molina_mle(tc, tu, pseudo=None)
    lhs = np.sum(tc / np.expm1(rate * tc))
    assert lhs == pytest.approx(tu.sum(), rel=1e-10)
    # and fit_signal_mle without sources is the same estimator
    f = fit_signal_mle(np.concatenate([tc, tu]), None, np.r_[np.ones(40), np.zeros(60)], prior=None)
    assert f.change_rate_per_s == pytest.approx(rate, rel=1e-7)


def test_naive_estimators_degenerate() -> None:
    np.testing.assert_array_equal(
        naive_change_rate(np.array([3.0, 0.0]), np.array([6.0, 0.0])), [0.5, 0.0]
    )
    p, r = naive_precision_recall(np.zeros(4), np.zeros(4, bool))
    assert p[0] == 0.0 and r[0] == 0.0


intervals = st.floats(min_value=0.0, max_value=1e9, allow_nan=False)
counts = st.integers(min_value=0, max_value=50)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(intervals, st.booleans(), counts, counts), min_size=0, max_size=40),
    st.sampled_from([math.inf, 1e4]),
)
def test_never_nan_and_bounded_bytes(
    obs: list[tuple[float, bool, int, int]], half_life: float
) -> None:
    est = SignalEstimator(2, half_life_s=half_life, ring_capacity=3)
    s = est.init()
    for tau, ch, n1, n2 in obs:
        s = est.update(s, CrawlInterval(tau, ch, (n1, n2)))
    r = est.result(s)
    assert all_finite(r)
    assert r.alpha_per_s > 0.0 and all(k > 0.0 for k in r.kappa)
    assert all(0.0 <= p <= 1.0 for p in r.precision + r.recall)
    data = s.to_bytes()
    assert len(data) <= MAX_STATE_BYTES
    r2 = est.result(SignalState.from_bytes(data))
    assert r2.alpha_per_s == pytest.approx(r.alpha_per_s, rel=1e-3)


# --- bounded state ------------------------------------------------------------------------
@pytest.mark.parametrize(("n_sources", "n_updates"), [(1, 100_000), (3, 10_000)])
def test_state_stays_within_its_byte_bound(n_sources: int, n_updates: int) -> None:
    rng = np.random.default_rng(11)
    est = SignalEstimator(n_sources, half_life_s=30 * 86400.0)
    sim = simulate_page_intervals(
        rng,
        change_rate_per_s=1 / (10 * HOUR),
        crawl_rate_per_s=1 / (5 * HOUR),
        n_intervals=n_updates,
        recall=(0.2,) * n_sources,
        precision=(0.5,) * n_sources,
    )
    s = feed(est, sim)
    data = s.to_bytes()
    assert len(data) <= MAX_STATE_BYTES
    assert s.n_intervals == n_updates
    r, r2 = est.result(s), est.result(SignalState.from_bytes(data))
    assert r2.change_rate_per_s == pytest.approx(r.change_rate_per_s, rel=1e-4)
    assert np.allclose(r2.precision, r.precision, rtol=1e-4)


def test_oversized_configuration_is_refused() -> None:
    with pytest.raises(ValueError, match="ring_capacity"):
        SignalEstimator(3, ring_capacity=8)


# --- consistency on simulated pages ---------------------------------------------------------
@pytest.mark.parametrize("crawl_over_change", [0.25, 1.0, 4.0])
def test_change_rate_converges(crawl_over_change: float) -> None:
    rng = np.random.default_rng(int(crawl_over_change * 100))
    rate = 1.0 / (24 * HOUR)
    sim = simulate_page_intervals(
        rng, change_rate_per_s=rate, crawl_rate_per_s=rate * crawl_over_change, n_intervals=4000
    )
    est = ChangeRateEstimator()
    r = est.result(feed(est.signal_estimator, sim))
    full = cho_garcia_molina_mle(sim.interval_s[sim.changed], sim.interval_s[~sim.changed])
    # converges to the truth: within 4 standard errors and 8 %
    assert abs(r.change_rate_per_s - rate) < 4 * r.change_rate_se_per_s
    assert r.change_rate_per_s == pytest.approx(rate, rel=0.08)
    # the bounded state tracks the full-data MLE (the quadratic summary): within 1 se here,
    # the gap shrinks relative to the se as data grows (see test_streaming_gap_shrinks)
    assert abs(r.change_rate_per_s - full) < 1.0 * r.change_rate_se_per_s
    # the naive estimator is biased low when crawls are sparse (censoring)
    naive = float(naive_change_rate(sim.changed.sum(), sim.interval_s.sum()))
    if crawl_over_change <= 1.0:
        assert naive < 0.8 * rate


@pytest.mark.parametrize(("recall", "precision"), [((0.6,), (0.4,)), ((0.3, 0.4), (0.8, 0.3))])
def test_signal_parameters_converge(
    recall: tuple[float, ...], precision: tuple[float, ...]
) -> None:
    rng = np.random.default_rng(7)
    rate = 1.0 / (10 * HOUR)
    sim = simulate_page_intervals(
        rng,
        change_rate_per_s=rate,
        crawl_rate_per_s=rate,
        n_intervals=20_000,
        recall=recall,
        precision=precision,
    )
    est = SignalEstimator(len(recall))
    r = est.result(feed(est, sim))
    full = fit_signal_mle(sim.interval_s, sim.n_signals, sim.changed)
    for s in range(len(recall)):
        assert r.precision[s] == pytest.approx(precision[s], abs=0.04)
        assert r.recall[s] == pytest.approx(recall[s], abs=0.04)
        assert abs(r.precision[s] - precision[s]) < 4 * r.precision_se[s]
        assert abs(r.recall[s] - recall[s]) < 4 * r.recall_se[s]
        assert abs(r.precision[s] - full.precision[s]) < 0.6 * full.precision_se[s]
        assert abs(r.recall[s] - full.recall[s]) < 0.6 * full.recall_se[s]
        gamma = recall[s] * rate / precision[s]
        assert r.gamma_per_s[s] == pytest.approx(gamma, rel=0.05)
        assert r.beta_s[s] == pytest.approx(r.kappa[s] / r.alpha_per_s)
    assert r.change_rate_per_s == pytest.approx(rate, rel=0.06)


def test_streaming_gap_shrinks() -> None:
    """The quadratic summary's gap to the full-data MLE falls relative to the se."""
    rate = 1.0 / (24 * HOUR)
    gaps = []
    for m in (1000, 30_000):
        sim = simulate_page_intervals(
            np.random.default_rng(0), change_rate_per_s=rate, crawl_rate_per_s=rate, n_intervals=m
        )
        est = ChangeRateEstimator()
        r = est.result(feed(est.signal_estimator, sim))
        full = cho_garcia_molina_mle(sim.interval_s[sim.changed], sim.interval_s[~sim.changed])
        gaps.append(abs(r.change_rate_per_s - full) / r.change_rate_se_per_s)
    assert gaps[1] < 0.5 * gaps[0]
    assert gaps[1] < 0.3


def test_standard_errors_are_calibrated() -> None:
    rng = np.random.default_rng(5)
    rate = 1.0 / (24 * HOUR)
    est = ChangeRateEstimator(PseudoDatapoints(weight=0.1))
    z = []
    for _ in range(60):
        sim = simulate_page_intervals(
            rng, change_rate_per_s=rate, crawl_rate_per_s=rate, n_intervals=300
        )
        r = est.result(feed(est.signal_estimator, sim))
        z.append((r.change_rate_per_s - rate) / r.change_rate_se_per_s)
    cover = np.mean(np.abs(z) < 1.96)
    assert 0.85 <= cover <= 1.0
    assert abs(np.mean(z)) < 0.5


def test_forgetting_follows_a_change_of_behaviour() -> None:
    rng = np.random.default_rng(9)
    fast, slow = 1 / (5 * HOUR), 1 / (100 * HOUR)
    crawl = 1 / (10 * HOUR)
    a = simulate_page_intervals(
        rng, change_rate_per_s=fast, crawl_rate_per_s=crawl, n_intervals=2000
    )
    b = simulate_page_intervals(
        rng, change_rate_per_s=slow, crawl_rate_per_s=crawl, n_intervals=2000
    )
    forget = ChangeRateEstimator(half_life_s=30 * 86400.0)
    keep = ChangeRateEstimator()
    sf = feed(forget.signal_estimator, b, feed(forget.signal_estimator, a))
    sk = feed(keep.signal_estimator, b, feed(keep.signal_estimator, a))
    rf, rk = forget.result(sf).change_rate_per_s, keep.result(sk).change_rate_per_s
    assert rf == pytest.approx(slow, rel=0.3)
    assert abs(math.log(rf / slow)) < abs(math.log(rk / slow))
    assert forget.result(sf).change_rate_se_per_s > keep.result(sk).change_rate_se_per_s


@pytest.mark.parametrize("n_sources", [0, 1, 2])
def test_batch_matches_scalar(n_sources: int) -> None:
    rng = np.random.default_rng(n_sources)
    est = SignalEstimator(n_sources, half_life_s=200 * HOUR, ring_capacity=4)
    n_pages, m = 4, 120
    sims = [
        simulate_page_intervals(
            rng,
            change_rate_per_s=(i + 1) / (10 * HOUR),
            crawl_rate_per_s=1 / (10 * HOUR),
            n_intervals=m,
            recall=(0.3,) * n_sources,
            precision=(0.6,) * n_sources,
        )
        for i in range(n_pages)
    ]
    b = batch_init(est, n_pages)
    scal = [est.init() for _ in range(n_pages)]
    for j in range(m):
        sel = np.array([i for i in range(n_pages) if (i + j) % 3])  # a subset of pages each step
        batch_update(
            est,
            b,
            np.array([sims[i].interval_s[j] for i in sel]),
            np.array([sims[i].changed[j] for i in sel]),
            np.array([sims[i].n_signals[j] for i in sel]).reshape(len(sel), n_sources),
            pages=sel,
        )
        for i in sel:
            scal[i] = est.update(
                scal[i],
                CrawlInterval(
                    float(sims[i].interval_s[j]),
                    bool(sims[i].changed[j]),
                    tuple(sims[i].n_signals[j].tolist()),
                ),
            )
    br = batch_result(est, b)
    # the stream's lean solve: the same three numbers, bit for bit
    alpha, alpha_se, kappa = batch_alpha_kappa(est, b)
    np.testing.assert_array_equal(alpha, br.alpha_per_s)
    np.testing.assert_array_equal(alpha_se, br.alpha_se_per_s)
    np.testing.assert_array_equal(kappa, br.kappa)
    for i in range(n_pages):
        r = est.result(scal[i])
        assert br.change_rate_per_s[i] == pytest.approx(r.change_rate_per_s, rel=1e-8)
        assert br.change_rate_se_per_s[i] == pytest.approx(r.change_rate_se_per_s, rel=1e-6)
        np.testing.assert_allclose(br.precision[i], r.precision, rtol=1e-8)
        np.testing.assert_allclose(b.theta[i], scal[i].theta, rtol=1e-8)
        ps = b.page_state(i, est.ring_capacity)
        assert len(ps.ring) == len(scal[i].ring)
        np.testing.assert_allclose(ps.ring, scal[i].ring, rtol=1e-12)
        np.testing.assert_allclose(ps.quad_a, scal[i].quad_a, rtol=1e-8)
        np.testing.assert_allclose(ps.totals, scal[i].totals, rtol=1e-12)


def assert_states_close(a: SignalState, b: SignalState, rtol: float) -> None:
    """Same shape exactly, same numbers to ``rtol`` (summation order and the small solves
    differ between the scalar and the vectorised arithmetic)."""
    assert (a.n_sources, a.n_intervals, a.ring_capacity, len(a.ring)) == (
        b.n_sources, b.n_intervals, b.ring_capacity, len(b.ring))
    assert a.end_s == b.end_s
    for name in ("theta", "unchanged", "totals", "quad_b", "quad_a", "rep", "unknown"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=rtol, atol=0,
                                   err_msg=name)
    if a.ring:
        np.testing.assert_allclose(a.ring, b.ring, rtol=rtol, atol=0, err_msg="ring")


def random_interval(rng: np.random.Generator, state: SignalState, n_sources: int) -> CrawlInterval:
    """An interval of every kind: zero-length (with or without signals), 0..3 sources' counts,
    changed or not, ``end_s`` omitted, after the previous crawl, or the first crawl's time,
    signals recorded or (a fifth, without signals) not."""
    kind = rng.integers(8)
    tau = 0.0 if kind == 0 else float(rng.exponential(10 * HOUR))
    sig = tuple(float(x) for x in rng.poisson(rng.choice([0.0, 0.5, 3.0]), n_sources))
    changed = bool(rng.random() < 0.6) and (tau > 0 or any(sig))
    end: float | None = None
    if kind >= 5:
        prev = state.end_s if state.end_s > -math.inf else 1e6
        end = prev + tau + float(rng.choice([0.0, rng.exponential(HOUR)]))
    if rng.random() < 0.2:
        return CrawlInterval(tau, changed and tau > 0, (0.0,) * n_sources, end_s=end,
                             signals_known=False)
    return CrawlInterval(tau, changed, sig, end_s=end)


@pytest.mark.parametrize("n_sources", [0, 1, 2, 3])
@pytest.mark.parametrize("half_life_s", [math.inf, 50 * HOUR])
@pytest.mark.parametrize("ring_capacity", [2, None])
def test_update_many_equals_scalar_updates(
    n_sources: int, half_life_s: float, ring_capacity: int | None
) -> None:
    """``update_many`` over randomised histories is ``SignalEstimator.update`` then ``.result``
    page by page, to float rounding, with and without a page's own prior rate: every step
    starts both from the same (stored, float32) states, so every case is hit from many
    histories (ring not full, full, first and later evictions, unchanged, zero-length
    intervals, end_s given or not)."""
    rng = np.random.default_rng(100 * n_sources + (ring_capacity or 0))
    est = SignalEstimator(n_sources, half_life_s=half_life_s, ring_capacity=ring_capacity)
    n_pages, n_steps = 24, 30
    states = [est.init() for _ in range(n_pages)]
    # a third of the pages with their own prior rate (the operator's), as the service has
    rates = [None if i % 3 else float(10.0 ** rng.uniform(-7, -2)) for i in range(n_pages)]
    seen = {"grow": 0, "first_eviction": 0, "eviction": 0, "unchanged": 0, "empty": 0,
            "unknown": 0}
    for step in range(n_steps):
        obs = [replace(random_interval(rng, st_, n_sources), prior_rate_per_s=r)
               for st_, r in zip(states, rates, strict=True)]
        for st_, o in zip(states, obs, strict=True):
            informative = o.interval_s > 0 or any(o.n_signals)
            if not informative:
                seen["empty"] += 1
            elif not o.signals_known:
                seen["unknown"] += 1
            elif not o.changed:
                seen["unchanged"] += 1
            elif len(st_.ring) < est.ring_capacity:
                seen["grow"] += 1
            else:
                summarised = st_.quad_a[0] != 0.0 or st_.rep[0] > 0.0
                seen["eviction" if summarised else "first_eviction"] += 1
        new_b, res = update_many(est, states, obs)
        new_s = [est.update(st_, o) for st_, o in zip(states, obs, strict=True)]
        for a, b in zip(new_b, new_s, strict=True):
            assert_states_close(a, b, rtol=1e-9)
        if step % 10 == 9 or step == n_steps - 1:
            for i, b in enumerate(new_s):
                r = est.result(b, prior_rate_per_s=rates[i])
                assert res.change_rate_per_s[i] == pytest.approx(r.change_rate_per_s, rel=1e-8)
                assert res.alpha_se_per_s[i] == pytest.approx(r.alpha_se_per_s, rel=1e-6)
                np.testing.assert_allclose(res.kappa[i], r.kappa, rtol=1e-8)
                np.testing.assert_allclose(res.precision[i], r.precision, rtol=1e-8)
                np.testing.assert_allclose(res.recall[i], r.recall, rtol=1e-8)
                np.testing.assert_allclose(res.gamma_per_s[i], r.gamma_per_s, rtol=1e-12)
        # what the service stores (float32 parts), as the next step's input
        states = [SignalState.from_bytes(b.to_bytes()) for b in new_s]
    assert all(n > 0 for n in seen.values()), seen


def test_update_many_validates_as_the_scalar_update() -> None:
    est = SignalEstimator(1)
    st_ = est.update(est.init(), CrawlInterval(5.0, True, (1.0,), end_s=100.0))
    bad = [CrawlInterval(-1.0, True, (0.0,)), CrawlInterval(1.0, True, (1.0, 2.0)),
           CrawlInterval(1.0, True, (math.nan,)), CrawlInterval(1.0, True, (0.0,), end_s=99.0)]
    for o, field in zip(bad, ["interval_s", "n_signals", "n_signals", "end_s"], strict=True):
        with pytest.raises(ValueError, match=field):
            est.update(st_, o)
        with pytest.raises(ValueError, match=field):
            update_many(est, [est.init(), st_], [CrawlInterval(1.0, False, (0.0,)), o])
    with pytest.raises(ValueError, match="sources"):
        update_many(est, [SignalEstimator(2).init()], [CrawlInterval(1.0, False, (0.0, 0.0))])
    hidden = CrawlInterval(1.0, True, (2.0,), signals_known=False)
    with pytest.raises(ValueError, match="signals_known"):
        est.update(st_, hidden)
    with pytest.raises(ValueError, match="signals_known"):
        update_many(est, [st_], [hidden])
    out, res = update_many(est, [], [])
    assert out == [] and res.alpha_per_s.shape == (0,)


def test_states_round_trip_through_arrays() -> None:
    rng = np.random.default_rng(7)
    est = SignalEstimator(3, ring_capacity=3)
    states = [est.init()]
    for _ in range(40):
        states.append(est.update(states[-1], random_interval(rng, states[-1], 3)))
    batch = states_to_batch(states, est.ring_capacity)
    assert batch_to_states(batch, est.ring_capacity) == states
    # a ring stored circularly (the simulator's layout) comes back oldest first
    batch.ring = np.roll(batch.ring, 1, axis=1)
    batch.ring_pos = (batch.ring_pos + 1) % est.ring_capacity
    assert batch_to_states(batch, est.ring_capacity) == states
    with pytest.raises(ValueError, match="capacity"):
        states_to_batch(states, 1)


@pytest.mark.parametrize("n_sources", [0, 1, 2, 3])
def test_bytes_of_many_states_are_to_bytes(n_sources: int) -> None:
    """``batch_to_bytes`` writes ``SignalState.to_bytes`` byte for byte and
    ``batch_from_bytes`` reads what ``from_bytes`` reads; bad records are new pages."""
    rng = np.random.default_rng(11 + n_sources)
    est = SignalEstimator(n_sources, half_life_s=100 * HOUR)
    states = [est.init()]
    for _ in range(60):  # every ring length, evictions, a never-crawled page
        states.append(est.update(states[-1], random_interval(rng, states[-1], n_sources)))
    blobs = batch_to_bytes(states_to_batch(states, est.ring_capacity), est.ring_capacity)
    assert blobs == [s_.to_bytes() for s_ in states]
    stored = [SignalState.from_bytes(b) for b in blobs]
    other = SignalEstimator((n_sources + 1) % 4).init().to_bytes()
    bad: list[bytes | None] = [None, b"", blobs[5][:-3], b"\x07" + blobs[5][1:], other]
    batch, ok = batch_from_bytes(est, [*blobs, *bad])
    assert ok.tolist() == [True] * len(blobs) + [False] * len(bad)
    assert batch_to_states(batch, est.ring_capacity) == [*stored, *[est.init()] * len(bad)]
    # a ring longer than this estimator keeps is not read either
    small = SignalEstimator(n_sources, ring_capacity=1)
    _, ok = batch_from_bytes(small, blobs)
    assert ok.tolist() == [len(s_.ring) <= 1 for s_ in states]


def test_batch_update_of_all_pages_forgets() -> None:
    """``pages=None`` (arrays updated in place) decays by the time since the last crawl, as
    the scalar update does (it once read the new crawl time as the previous one)."""
    est = SignalEstimator(1, half_life_s=HOUR)
    b = batch_init(est, 1)
    st_ = est.init()
    for end in (HOUR, 3 * HOUR):
        batch_update(est, b, np.array([HOUR]), np.array([False]), np.array([[1.0]]),
                     end_s=np.array([end]))
        st_ = est.update(st_, CrawlInterval(HOUR, False, (1.0,), end_s=end))
    np.testing.assert_allclose(b.unchanged[0], st_.unchanged, rtol=1e-12)
    assert st_.unchanged[0] == pytest.approx(HOUR * 0.25 + HOUR)


# --- pseudo-datapoints, conservative rate, importance, host pool ------------------------------
def sample_pseudo(rng: np.random.Generator, tc: float, tu: float, n: int) -> np.ndarray:
    """Exact sampler: the normalised pseudo-likelihood is a log-uniform mixture of exponentials."""
    s = np.exp(rng.uniform(np.log(tu), np.log(tu + tc), n))
    return rng.exponential(1.0, n) / s


def test_pseudo_density_is_normalised() -> None:
    u = np.linspace(-25, 5, 200_001)
    p = np.exp(pseudo_datapoint_log_density(np.exp(u), PseudoDatapoints(3.0, 7.0)))
    assert np.trapezoid(p, u) == pytest.approx(1.0, rel=1e-6)


def test_fit_pseudo_datapoints_recovers_them() -> None:
    rng = np.random.default_rng(0)
    rates = sample_pseudo(rng, 10 * HOUR, 20 * HOUR, 20_000)
    fit = fit_pseudo_datapoints(rates)
    truth = PseudoDatapoints(10 * HOUR, 20 * HOUR)
    # a maximum-likelihood fit: at least as likely as the truth
    assert (
        pseudo_datapoint_log_density(rates, fit).mean()
        >= pseudo_datapoint_log_density(rates, truth).mean()
    )
    # the likelihood is flat in t_c (the width), sharp in t_u (the location)
    assert fit.changed_interval_s == pytest.approx(10 * HOUR, rel=0.35)
    assert fit.unchanged_interval_s == pytest.approx(20 * HOUR, rel=0.1)
    rates = sample_pseudo(rng, HOUR, 57 * HOUR, 20_000)
    gf = fit_pseudo_datapoints(rates)
    assert (
        pseudo_datapoint_log_density(rates, gf).mean()
        >= pseudo_datapoint_log_density(rates, GRIMES_FORD).mean()
    )
    assert gf.prior_rate_per_s == pytest.approx(GRIMES_FORD.prior_rate_per_s, rel=0.15)


def test_conservative_rate() -> None:
    out = conservative_change_rate(np.array([1.0, 1.0, 0.0]), np.array([0.5, 0.0, 1.0]), 0.9)
    assert out[0] > 1.0 and out[1] == 1.0 and out[2] == 0.0
    assert conservative_change_rate(1.0, 0.5, 0.99) > out[0]


def test_request_rate_converges_and_validates() -> None:
    rng = np.random.default_rng(4)
    est = RequestRateEstimator()
    s = est.init()
    for _ in range(2000):
        s = est.update(s, float(rng.poisson(0.01 * 600)), 600.0)
    r = est.result(s)
    assert r.mu == pytest.approx(0.01, rel=0.03)
    assert abs(r.mu - 0.01) < 4 * r.mu_se
    assert type(s).from_bytes(s.to_bytes()) == s
    with pytest.raises(ValueError, match="n_requests"):
        est.update(s, -1.0, 1.0)
    with pytest.raises(ValueError, match="score"):
        importance_from_score(math.nan)
    assert importance_from_score(3.0).mu == 3.0


def test_host_pool_prior_helps_young_pages() -> None:
    rng = np.random.default_rng(8)
    rate, prec = 1 / (10 * HOUR), 0.85
    est = SignalEstimator(1)
    pool = HostPool(1)
    ps = pool.init()
    for _ in range(5):
        sim = simulate_page_intervals(
            rng,
            change_rate_per_s=rate,
            crawl_rate_per_s=rate,
            n_intervals=2000,
            recall=(0.5,),
            precision=(prec,),
        )
        ps = pool.update(ps, est.result(feed(est, sim)))
    host = pool.result(ps)
    assert host.precision[0] == pytest.approx(prec, abs=0.05)
    young = simulate_page_intervals(
        rng,
        change_rate_per_s=rate,
        crawl_rate_per_s=rate,
        n_intervals=5,
        recall=(0.5,),
        precision=(prec,),
    )
    sy = feed(est, young)
    with_pool = est.result(sy, prior=host.prior(4.0))
    without = est.result(sy)
    assert abs(with_pool.precision[0] - prec) < abs(without.precision[0] - prec)
    assert pool.result(pool.init()).n_pages == 0


def test_models_estimators_are_pure() -> None:
    root = pathlib.Path(__file__).resolve().parents[2] / "models"
    files = [*(root / "estimators").glob("*.py"), root / "simulate_estimation.py"]
    allowed = {"numpy", "scipy", "math", "struct", "dataclasses", "collections", "__future__",
               "models"}
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for n in names:
                assert n.split(".")[0] in allowed, f"{f.name} imports {n}"


# --- intervals with signals unknown (an imported history) --------------------------------
def test_unknown_intervals_give_the_exact_map() -> None:
    """A page's estimate from recorded intervals and intervals with signals unknown is the
    mode of the exact posterior: recorded intervals under App. E, unknown ones under
    ``exp(-tau*Delta)``, ``Delta = alpha + gamma*(1 - e^-kappa)`` with ``gamma`` = signals
    over recorded time, plus the prior's pseudo-intervals (minimised here by scipy).  The
    ring holds every recorded changed interval and the unknown changed ones have one length,
    so the streaming state is exact and so must be the mode."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(3)
    est = SignalEstimator(1)
    st_ = est.init()
    known: list[tuple[float, bool, float]] = []
    for i in range(40):
        ch = i % 5 == 0  # 8 changed: the ring keeps them all
        n = float(rng.poisson(2.0 if ch else 0.3))
        known.append((float(rng.exponential(HOUR)), ch, n))
    hidden = [(600.0, bool(rng.random() < 0.3)) for _ in range(400)]
    for tau, ch in hidden:
        st_ = est.update(st_, CrawlInterval(tau, ch, (0.0,), signals_known=False))
    for tau, ch, n in known:
        st_ = est.update(st_, CrawlInterval(tau, ch, (n,)))
    assert len(st_.ring) == 8 and st_.quad_a == (0.0, 0.0, 0.0)
    r = est.result(st_)
    t_known = sum(k[0] for k in known)
    gamma = sum(k[2] for k in known) / t_known
    assert r.gamma_per_s[0] == pytest.approx(gamma, rel=1e-12)
    plin, pent = est.compiled_prior(est.prior_scale(st_.totals[0], st_.n_intervals))

    def neg_log_post(th: np.ndarray) -> float:
        a, k = float(th[0]), float(th[1])
        delta = a + gamma * -math.expm1(-k)
        f = plin[0] * a + plin[1] * k
        for e in pent:
            f -= e[2] * math.log(-math.expm1(-(a * e[0] + k * e[1])))
        for tau, ch, n in known:
            x = a * tau + k * n
            f += -math.log(-math.expm1(-x)) if ch else x
        for tau, ch in hidden:
            f += -math.log(-math.expm1(-tau * delta)) if ch else tau * delta
        return f

    x0 = np.array([r.alpha_per_s, r.kappa[0]])
    best = minimize(lambda z: neg_log_post(np.exp(z)), np.log(x0) + 0.3, method="Nelder-Mead",
                    options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 4000})
    np.testing.assert_allclose([r.alpha_per_s, r.kappa[0]], np.exp(best.x), rtol=1e-4)
    assert neg_log_post(x0) <= best.fun + 1e-9


def test_history_with_signals_unknown_keeps_the_ping_quality() -> None:
    """A long history imported without its pings, then live crawls with pings: declared as
    signals unknown, the history sets the change rate and leaves recall and precision to the
    live crawls; fed as intervals in which no source signalled, it makes every change an
    unsignalled one, so recall collapses."""
    rng = np.random.default_rng(11)
    rate = 1.0 / (10 * HOUR)
    kw = dict(change_rate_per_s=rate, crawl_rate_per_s=rate, recall=(0.6,), precision=(0.4,))
    past = simulate_page_intervals(rng, n_intervals=6000, **kw)  # type: ignore[arg-type]
    live = simulate_page_intervals(rng, n_intervals=1500, **kw)  # type: ignore[arg-type]
    est = SignalEstimator(1)
    results = {}
    for known in (False, True):
        st_ = est.init()
        for tau, ch in zip(past.interval_s.tolist(), past.changed.tolist(), strict=True):
            st_ = est.update(st_, CrawlInterval(tau, ch, (0.0,), signals_known=known))
        results[known] = est.result(feed(est, live, st_))
    r = results[False]
    assert r.recall[0] == pytest.approx(0.6, abs=0.08)
    assert r.precision[0] == pytest.approx(0.4, abs=0.08)
    assert r.change_rate_per_s == pytest.approx(rate, rel=0.06)
    assert r.gamma_per_s[0] == pytest.approx(0.6 * rate / 0.4, rel=0.1)
    assert results[True].recall[0] < 0.3  # the history's time dilutes gamma, alpha takes all
