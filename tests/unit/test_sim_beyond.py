"""models.sim.variants and experiments.beyond: uncertainty-aware Algorithm 1,
several ping sources, the longest-interval floor, and the three experiments' --quick runs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from models.sim import (
    Budget,
    EstimatingAlgorithm1,
    accuracy,
    algorithm1,
    run,
    simulate_events,
    synthetic_world,
)
from models.sim.variants import (
    ExactSourceAlgorithm1,
    FloorPolicy,
    MultiSourceAlgorithm1,
    SourceWorld,
    UncertainAlgorithm1,
    gauss_hermite_lognormal,
    multi_source_value,
    pooled_params,
    simulate_source_events,
    source_policy,
    two_source_world,
)
from models.values import crawl_value

R = 100.0


# ----------------------------------------------------------------------------- values
@pytest.mark.parametrize(("alpha", "beta", "gamma"), [
    (0.3, 2.0, 0.5), (0.05, 10.0, 1.2), (1.0, 0.3, 0.4), (0.2, 40.0, 0.05),
])
def test_one_source_value_is_theorem_1(alpha: float, beta: float, gamma: float) -> None:
    x = np.concatenate([np.linspace(0.0, 25.0, 51), [np.inf]])
    want = crawl_value(x, alpha, beta, gamma, 0.7)
    got = multi_source_value(x, alpha, [beta], [gamma], 0.7)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-300)
    # one source split in two with the same beta is the same page
    split = multi_source_value(x, alpha, [beta, beta], [0.3 * gamma, 0.7 * gamma], 0.7)
    np.testing.assert_allclose(split, want, rtol=1e-9, atol=1e-300)


def test_several_source_value_properties() -> None:
    a, b, g = 0.2, np.array([1.5, 12.0]), np.array([0.8, 0.15])
    x = np.linspace(0.0, 60.0, 301)
    v = multi_source_value(x, a, b, g, 2.0)
    assert v[0] == 0.0
    assert np.all(np.diff(v) >= -1e-15)  # Lemma 2: increasing
    nu = g * np.exp(-a * b)
    cap = 2.0 / (a + float((g - nu).sum()))
    assert v[-1] == pytest.approx(cap, rel=1e-3)
    assert multi_source_value(250.0, a, b, g, 2.0) == pytest.approx(cap, rel=1e-12)
    assert multi_source_value(np.inf, a, b, g, 2.0) == pytest.approx(cap, rel=1e-12)
    # the order of the sources does not matter
    np.testing.assert_allclose(multi_source_value(x, a, b[::-1], g[::-1], 2.0), v, rtol=1e-12)
    # and the value is NOT Theorem 1's at the merged (alpha, beta_bar, gamma)
    _, bbar, gbar = pooled_params(np.array([a]), b[None, :], g[None, :])
    pooled = crawl_value(x, a, bbar[0], gbar[0], 2.0)
    assert np.max(np.abs(pooled - v)[1:] / v[1:]) > 0.01


def test_pooled_params_merge_the_false_rates() -> None:
    a = np.array([0.3, 0.3])
    b = np.array([[2.0, 5.0], [2.0, 0.0]])
    g = np.array([[0.4, 0.1], [0.4, 0.0]])
    _, bbar, gbar = pooled_params(a, b, g)
    nu = (g * np.exp(-a[:, None] * b)).sum(axis=1)
    assert gbar[0] == pytest.approx(0.5)
    assert bbar[0] == pytest.approx(math.log(0.5 / nu[0]) / 0.3, rel=1e-12)
    assert bbar[1] == 2.0  # one active source: its own beta, exactly


# ----------------------------------------------------------------------------- sources
def _one_source(w: object) -> SourceWorld:
    from models.sim import World

    assert isinstance(w, World)
    return SourceWorld(w.mu, w.delta, w.lam[:, None], w.nu[:, None], np.zeros(1), ("only",))


def test_one_source_policy_crawls_exactly_as_algorithm1() -> None:
    rng = np.random.default_rng(11)
    w = synthetic_world(150, rng)
    sw = _one_source(w)
    se = simulate_source_events(sw, 8.0, rng, delay_unit=1.0 / R)
    a, b, g = sw.signal_params()
    ms = MultiSourceAlgorithm1("ms", w.mu, a, b, g, source_of=se.source_lookup())
    ref = algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu)
    r1 = run(w, se.events, ms, Budget(R))
    r2 = run(w, se.events, ref, Budget(R))
    assert r1.crawl_page.size == r2.crawl_page.size == 800
    np.testing.assert_array_equal(r1.crawl_page, r2.crawl_page)


def test_a_ping_of_source_s_moves_the_origin_by_beta_s() -> None:
    beta = np.array([[1.5, 7.0, 3.0]])
    gamma = np.array([[0.5, 0.1, 0.0]])  # source 2 not used by this policy
    src = {0.1: 0, 0.2: 1, 0.3: 2, 0.4: 1}
    pol = MultiSourceAlgorithm1("t", np.array([1.0]), np.array([0.2]), beta, gamma,
                                source_of=lambda p, a, e: src[a], ping_rule="strict")
    assert not hasattr(pol, "on_pings")  # the engine must call on_ping, with its source
    pol.on_ping(0, 0.1, 0.1)
    assert pol.origin[0] == pytest.approx(-1.5)
    pol.on_ping(0, 0.2, 0.2)
    assert pol.origin[0] == pytest.approx(-8.5)
    pol.on_ping(0, 0.3, 0.3)  # gamma = 0: ignored
    assert pol.origin[0] == pytest.approx(-8.5)
    assert pol.index.origin(0) == pol.origin[0]
    pol.on_crawl(0, 0.35, True, 0.0)
    assert pol.origin[0] == 0.35
    pol.on_ping(0, 0.4, 0.3)  # emitted before the crawl: dropped by the strict rule
    assert pol.origin[0] == 0.35
    # the value is ranked at the merged shape of the used sources
    _, bbar, _ = pooled_params(np.array([0.2]), beta, gamma)
    assert pol.value_beta[0] == bbar[0] and pol.value_gamma[0] == pytest.approx(0.6)


def test_source_events_follow_the_model() -> None:
    rng = np.random.default_rng(5)
    sw = two_source_world(400, rng)
    T = 30.0
    se = simulate_source_events(sw, T, rng, delay_unit=0.01)
    ev = se.events
    n_changes = ev.change_time.size
    assert n_changes == pytest.approx(sw.delta.sum() * T, rel=0.05)
    for s in range(2):
        mine = se.ping_source == s
        want = (sw.lam[:, s] * sw.delta + sw.nu[:, s]).sum() * T
        assert mine.sum() == pytest.approx(want, rel=0.06)
        lag = ev.ping_arrival[mine] - ev.ping_emitted[mine]
        if sw.delay_mean[s] == 0:
            assert np.all(lag == 0)
        else:
            assert lag.mean() == pytest.approx(sw.delay_mean[s] * 0.01, rel=0.05)
    # each change is announced by at most one source, true pings at change times
    true_emit = ev.ping_emitted[ev.ping_true]
    assert np.unique(true_emit).size == true_emit.size
    assert np.isin(true_emit, ev.change_time).all()
    share = true_emit.size / n_changes
    assert share == pytest.approx((sw.lam * sw.delta[:, None]).sum() / sw.delta.sum(), abs=0.03)
    only = se.only([1])
    assert only.ping_page.size == int((se.ping_source == 1).sum())
    assert np.all(np.diff(only.ping_arrival) >= 0)


def test_exact_source_tables_match_the_series() -> None:
    rng = np.random.default_rng(2)
    sw = two_source_world(12, rng)
    se = simulate_source_events(sw, 5.0, rng, delay_unit=0.01)
    a, b, g = sw.signal_params()
    pol = ExactSourceAlgorithm1("x", sw.mu, a, b, g, source_of=se.source_lookup())
    for t in (0.3, 2.0, 9.0, 40.0):
        pol.origin = -rng.uniform(0.0, 30.0, sw.m)
        got = pol.exact_values(t)
        want = np.array([multi_source_value(t - pol.origin[i], a[i], b[i], g[i], sw.mu[i])
                         for i in range(sw.m)])
        np.testing.assert_allclose(got, want, rtol=2e-3)


def test_source_policies_use_their_pings() -> None:
    rng = np.random.default_rng(8)
    sw = two_source_world(100, rng)
    se = simulate_source_events(sw, 10.0, rng, delay_unit=1.0 / R)
    w = sw.world()
    acc = {}
    for kind in ("greedy", "per-source", "only-1"):
        res = run(w, se.events, source_policy(kind, sw, se), Budget(R))
        acc[kind] = accuracy(w, se.events, res, start=2.0)
    assert acc["per-source"] > acc["only-1"] > acc["greedy"]


# ----------------------------------------------------------------------------- floor
def _intervals(res: object, m: int, horizon: float) -> np.ndarray:
    t = np.concatenate([np.zeros(m), res.crawl_time, np.full(m, horizon)])  # type: ignore[attr-defined]
    p = np.concatenate([np.arange(m), res.crawl_page, np.arange(m)])  # type: ignore[attr-defined]
    o = np.lexsort((t, p))
    t, p = t[o], p[o]
    return np.diff(t)[p[1:] == p[:-1]]


@pytest.mark.parametrize("mult", [1.0, 1.5, 3.0])
def test_proactive_floor_never_exceeds_f_and_spends_every_slot(mult: float) -> None:
    rng = np.random.default_rng(3)
    m, T = 120, 12.0
    w = synthetic_world(m, rng)
    ev = simulate_events(w, T, rng)
    f = mult * m / R
    pol = FloorPolicy(algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu), m, f, rate=R,
                      mode="proactive")
    res = run(w, ev, pol, Budget(R))
    assert res.crawl_page.size == res.slots == int(R * T)
    assert _intervals(res, m, T).max() <= f + 1e-9
    assert 0 < pol.forced <= res.slots
    free = run(w, ev, algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu), Budget(R))
    assert _intervals(free, m, T).max() > f  # the floor did bind


def test_reactive_floor_serves_overdue_pages_first() -> None:
    rng = np.random.default_rng(4)
    m, T = 120, 12.0
    w = synthetic_world(m, rng)
    ev = simulate_events(w, T, rng)
    f = 2.0 * m / R
    pol = FloorPolicy(algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu), m, f,
                      mode="reactive")
    res = run(w, ev, pol, Budget(R))
    assert res.crawl_page.size == int(R * T)
    # a page is served at most (pages due at once)/R late: never beyond F + m/R
    assert _intervals(res, m, T).max() <= f + m / R + 1e-9
    # a floor no page reaches changes nothing
    wide = FloorPolicy(algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu), m, 10 * T)
    ref = run(w, ev, algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu), Budget(R))
    np.testing.assert_array_equal(run(w, ev, wide, Budget(R)).crawl_page, ref.crawl_page)
    assert wide.forced == 0


# ----------------------------------------------------------------------------- uncertainty
def test_gauss_hermite_lognormal_moments() -> None:
    z, w = gauss_hermite_lognormal(5)
    assert w.sum() == pytest.approx(1.0)
    assert z[2] == 0.0
    for sigma in (0.3, 1.0):
        assert float(w @ np.exp(sigma * z)) == pytest.approx(math.exp(sigma**2 / 2), rel=2e-3)


def test_rate_scale_rescales_time() -> None:
    """V(tau; s alpha, beta/s, s gamma) = V(s tau; alpha, beta, gamma)/s (docstring claim)."""
    tau = np.linspace(0.0, 20.0, 41)
    for s in (0.2, 1.0, 3.5):
        lhs = crawl_value(tau, 0.3 * s, 2.0 / s, 0.6 * s, 0.8)
        rhs = crawl_value(s * tau, 0.3, 2.0, 0.6, 0.8) / s
        np.testing.assert_allclose(lhs, rhs, rtol=1e-9, atol=1e-300)


def _est_world(seed: int = 9, m: int = 80, T: float = 6.0):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    w = synthetic_world(m, rng)
    return w, simulate_events(w, T, rng)


@pytest.mark.parametrize("use_pings", [True, False])
def test_uncertain_without_uncertainty_is_the_estimating_policy(use_pings: bool) -> None:
    w, ev = _est_world()
    ref = run(w, ev, EstimatingAlgorithm1("e", w.mu, use_pings=use_pings), Budget(R))
    for pol in (
        UncertainAlgorithm1("u", w.mu, uncertainty_scale=0.0, use_pings=use_pings),
        UncertainAlgorithm1("c", w.mu, mode="conservative", quantile=0.5,
                            use_pings=use_pings),
    ):
        got = run(w, ev, pol, Budget(R))
        np.testing.assert_array_equal(got.crawl_page, ref.crawl_page)


def test_uncertainty_raises_the_value_of_uncertain_pages() -> None:
    w, ev = _est_world(m=40, T=3.0)
    pol = UncertainAlgorithm1("u", w.mu)
    run(w, ev, pol, Budget(R))
    t = ev.horizon + 5000.0  # long uncrawled: every value (every node) near mu/Delta
    got = pol.expected_values(t)
    plain = crawl_value(np.maximum(t - pol.origin, 0.0), pol.alpha, pol.beta, pol.gamma, pol.mu)
    unc = pol._sigma > 0.05
    assert unc.any()
    # E[mu/(s Delta)] = e^{sigma^2/2} mu/Delta (up to the 5-point rule)
    ratio = got[unc] / plain[unc]
    np.testing.assert_allclose(ratio, np.exp(pol._sigma[unc] ** 2 / 2), rtol=0.05)
    conservative = UncertainAlgorithm1("c", w.mu, mode="conservative")
    assert conservative.alpha[0] > pol.alpha[0]  # the prior's rate, raised to its 90% quantile


# ----------------------------------------------------------------------------- experiments
@pytest.mark.parametrize("name", ["uncertainty", "sources", "floor"])
def test_experiment_quick_writes_rows(name: str, tmp_path: Path) -> None:
    from experiments.beyond import main
    from streams.commands.experiments import EXPERIMENTS

    assert EXPERIMENTS[name] == "experiments.beyond"
    out = tmp_path / "out.json"
    assert main([name, "--quick", "--jobs", "1", "--no-progress", "--out", str(tmp_path),
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["experiment"] == name
    assert data["rows"]
    for row in data["rows"]:
        assert {"m", "policy", "accuracy", "stderr", "very_stale"} <= set(row)
        assert 0.0 <= row["accuracy"] <= 1.0
    assert (tmp_path / f"{name}.md").exists() and (tmp_path / f"{name}.png").exists()
