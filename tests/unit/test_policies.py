"""Optimal continuous policies (eqs. 4 and 5 of paper 004) and the LDS discretisation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, special

from models import policies as mp
from models import values as mv


def objective(mu: np.ndarray, delta: np.ndarray, xi: np.ndarray) -> float:
    """sum G(xi) with G(xi) = (mu/Delta) xi (1 - e^{-Delta/xi}), G(0) = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        g = np.where(xi > 0, mu / delta * xi * -np.expm1(-delta / xi), 0.0)
    return float(g.sum())


def instance(m: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(0, 1, m), rng.uniform(0, 1, m)


@pytest.mark.parametrize(("m", "budget"), [(50, 5.0), (200, 100.0), (1000, 30.0), (7, 1e-3)])
def test_kkt_conditions_and_binding_budget(m: int, budget: float) -> None:
    mu, delta = instance(m, m)
    sol = mp.solve_optimal_rates(mu, delta, budget)
    xi, lam = sol.rates, sol.multiplier
    assert xi.sum() == pytest.approx(budget, rel=1e-12)
    on = xi > 0
    # G'(xi) = (mu/Delta) R^1(Delta/xi) = Lambda where crawled ...
    grad = mu[on] / delta[on] * special.gammainc(2, delta[on] / xi[on])
    np.testing.assert_allclose(grad, lam, rtol=1e-10)
    # ... and G'(0+) = mu/Delta <= Lambda where not
    assert np.all(mu[~on] / delta[~on] <= lam * (1 + 1e-12))
    assert sol.accuracy == pytest.approx(objective(mu, delta, xi) / mu.sum(), rel=1e-12)


def test_matches_slsqp_on_small_instances() -> None:
    for seed in range(4):
        mu, delta = instance(6, seed)
        budget = 1.5
        ours = mp.optimal_rates(mu, delta, budget)
        res = optimize.minimize(
            lambda x, mu=mu, delta=delta: -objective(mu, delta, np.maximum(x, 0)),
            np.full(6, budget / 6),
            method="SLSQP",
            bounds=[(0, budget)] * 6,
            constraints=[{"type": "eq", "fun": lambda x, budget=budget: x.sum() - budget}],
            options={"ftol": 1e-14, "maxiter": 500},
        )
        assert res.success
        assert objective(mu, delta, ours) >= -res.fun - 1e-10
        np.testing.assert_allclose(ours, np.maximum(res.x, 0), atol=2e-4)


def test_pages_not_worth_crawling_and_degenerate_inputs() -> None:
    mu = np.array([1.0, 0.0, 1.0, 0.01])
    delta = np.array([0.5, 0.5, 0.0, 50.0])
    sol = mp.solve_optimal_rates(mu, delta, 0.2)
    assert sol.rates[1] == 0 and sol.rates[2] == 0  # no importance / never changes
    assert sol.rates[3] == 0  # changes too fast for its importance
    assert sol.rates.sum() == pytest.approx(0.2, rel=1e-12)
    none = mp.solve_optimal_rates([0.0, 1.0], [1.0, 0.0], 1.0)
    np.testing.assert_array_equal(none.rates, [0.0, 0.0])
    assert none.accuracy == pytest.approx(1.0)  # the only important page never changes


def test_optimal_beats_uniform_and_proportional() -> None:
    mu, delta = instance(300, 9)
    budget = 40.0
    best = mp.solve_optimal_rates(mu, delta, budget).accuracy
    uniform = mp.expected_accuracy(mu, delta, np.full(300, budget / 300))
    proportional = mp.expected_accuracy(mu, delta, budget * delta / delta.sum())
    assert best > uniform and best > proportional


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="budget"):
        mp.optimal_rates([1.0], [1.0], 0.0)
    with pytest.raises(ValueError, match="importance"):
        mp.optimal_rates([-1.0], [1.0], 1.0)
    with pytest.raises(ValueError, match="change_rate"):
        mp.optimal_rates([1.0, 2.0], [1.0, np.nan], 1.0)
    with pytest.raises(ValueError, match="importance"):
        mp.optimal_rates([1.0, 2.0], [1.0, 2.0, 3.0], 1.0)


@settings(max_examples=30, deadline=None)
@given(
    m=st.integers(1, 40),
    budget=st.floats(1e-4, 1e3),
    seed=st.integers(0, 10_000),
)
def test_rates_property(m: int, budget: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    mu = rng.uniform(0, 10, m) * (rng.random(m) > 0.1)
    delta = 10 ** rng.uniform(-3, 2, m)
    sol = mp.solve_optimal_rates(mu, delta, budget)
    if not (mu > 0).any():
        assert sol.rates.sum() == 0
        return
    assert np.all(sol.rates >= 0)
    assert sol.rates.sum() == pytest.approx(budget, rel=1e-9)
    assert 0.0 <= sol.accuracy <= 1.0


# ---------------------------------------------------------------- with signals


def signal_instance(m: int, seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    delta = rng.uniform(0.05, 1, m)
    lam = rng.beta(0.25, 0.25, m)
    nu = rng.uniform(0.1, 0.6, m)
    a, b, g = mv.signal_params(delta, lam, nu)
    return rng.uniform(0.1, 1, m), a, b, g, delta


@pytest.mark.slow
def test_thresholds_satisfy_theorem1() -> None:
    mu, a, b, g, delta = signal_instance(12, 1)
    sol = mp.optimal_thresholds(mu, a, b, g, 2.0)
    assert sol.rates.sum() == pytest.approx(2.0, rel=1e-9)
    on = np.isfinite(sol.thresholds)
    v = mv.crawl_value(sol.thresholds[on], a[on], b[on], g[on], mu[on])
    np.testing.assert_allclose(v, sol.multiplier, rtol=1e-9)
    assert np.all(mu[~on] / delta[~on] <= sol.multiplier * (1 + 1e-12))
    np.testing.assert_allclose(
        sol.rates[on], mv.crawl_frequency(sol.thresholds[on], a[on], b[on], g[on]), rtol=1e-12
    )
    # signals help: better than the signal-blind optimum on the same pages
    assert sol.accuracy > mp.solve_optimal_rates(mu, delta, 2.0).accuracy


def test_thresholds_without_signals_reduce_to_eq5() -> None:
    # gamma = 0: V is the blog's value, psi = iota, so f = 1/iota must equal xi of eq. 5
    mu, delta = instance(10, 4)
    delta = delta + 0.05
    sol = mp.optimal_thresholds(mu, delta, 0.0, 0.0, 1.5)
    ref = mp.solve_optimal_rates(mu, delta, 1.5)
    np.testing.assert_allclose(sol.rates, ref.rates, rtol=1e-8, atol=1e-12)
    assert sol.multiplier == pytest.approx(ref.multiplier, rel=1e-9)
    assert sol.accuracy == pytest.approx(ref.accuracy, rel=1e-9)


# ---------------------------------------------------------------- LDS


def test_lds_is_deterministic_and_tracks_rates() -> None:
    mu, delta = instance(60, 2)
    rates = mp.optimal_rates(mu, delta, 10.0)
    n = 20_000
    seq = mp.low_discrepancy_schedule(rates, n, seed=7)
    assert seq.shape == (n,) and seq.dtype == np.int64
    np.testing.assert_array_equal(seq, mp.low_discrepancy_schedule(rates, n, seed=7))
    assert not np.array_equal(seq, mp.low_discrepancy_schedule(rates, n, seed=8))
    counts = np.bincount(seq, minlength=60)
    assert np.all(counts[rates == 0] == 0)
    # every prefix: page i crawled rates_i / R * prefix length, within a few crawls
    for prefix in (100, 1000, n):
        c = np.bincount(seq[:prefix], minlength=60)
        assert np.max(np.abs(c - rates / rates.sum() * prefix)) <= 3


def test_lds_spacing_is_even() -> None:
    seq = mp.low_discrepancy_schedule(np.array([1.0, 3.0]), 400, seed=0)
    gaps = np.diff(np.flatnonzero(seq == 0))
    assert gaps.min() >= 3 and gaps.max() <= 5  # page 0 every 4th slot, +-1


def test_lds_bad_arguments() -> None:
    with pytest.raises(ValueError, match="rates"):
        mp.low_discrepancy_schedule(np.zeros(3), 10)
    with pytest.raises(ValueError, match="n_slots"):
        mp.low_discrepancy_schedule(np.ones(3), -1)
