"""Crawl values of Theorem 1 (paper 004): reference values, identities, limits, properties."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import special

from models import values as mv

REF = json.loads(Path(__file__).with_name("reference_values.json").read_text())


def greedy_value(tau: np.ndarray, delta: float) -> np.ndarray:
    """The blog's crawl value, mu = 1: (1 - e^{-D t})/D - t e^{-D t} = P(2, D t)/D.

    Written with scipy's gammainc: the blog's subtraction cancels for small D t.
    """
    out: np.ndarray = special.gammainc(2, delta * tau) / delta
    return out


# ---------------------------------------------------------------- reference values
# tests/unit/reference_values.json was written by tests/unit/make_reference_values.py
# (mpmath, 50 digits, untruncated sums); see that script for how each number was made.


@pytest.mark.parametrize("case", REF["values"], ids=lambda c: f"t{c['tau']}-a{c['alpha']}")
def test_value_psi_w_match_mpmath(case: dict[str, str]) -> None:
    args = [float(case[k]) for k in ("tau", "alpha", "beta", "gamma")]
    assert mv.crawl_value(*args) == pytest.approx(float(case["V"]), rel=1e-12, abs=0)
    assert mv.psi(*args) == pytest.approx(float(case["psi"]), rel=1e-12, abs=0)
    assert mv.w(*args) == pytest.approx(float(case["w"]), rel=1e-12, abs=0)


@pytest.mark.parametrize("case", REF["greedy"], ids=lambda c: f"t{c['tau']}-d{c['delta']}")
def test_greedy_matches_mpmath(case: dict[str, str]) -> None:
    v = mv.crawl_value(float(case["tau"]), float(case["delta"]), 0.0, 0.0)
    assert v == pytest.approx(float(case["V"]), rel=1e-14, abs=0)


@pytest.mark.parametrize("case", REF["residual"], ids=lambda c: f"i{c['i']}-x{c['x']}")
def test_residual_matches_mpmath(case: dict[str, str]) -> None:
    r = mv.residual(int(case["i"]), float(case["x"]))
    assert r == pytest.approx(float(case["R"]), rel=1e-13, abs=0)


@pytest.mark.parametrize("case", REF["time_to_value"], ids=lambda c: f"l{c['level'][:6]}")
def test_time_to_value_matches_mpmath(case: dict[str, str]) -> None:
    args = [float(case[k]) for k in ("level", "alpha", "beta", "gamma")]
    assert mv.time_to_value(*args) == pytest.approx(float(case["tau"]), rel=1e-10, abs=0)


# ---------------------------------------------------------------- identities


PAGES = [  # (alpha, beta, gamma): generic, Greedy-CIS, many terms, tiny alpha, tiny nu
    (0.5, 2.0, 0.7),
    (0.2, np.inf, 0.4),
    (0.9, 0.05, 0.2),
    (1e-7, 2e4, 0.5),
    (0.3, 60.0, 1.1),
]


@pytest.mark.parametrize(("alpha", "beta", "gamma"), PAGES)
def test_value_is_zero_at_zero_increasing_and_bounded(alpha, beta, gamma) -> None:
    tau = np.concatenate([[0.0], np.geomspace(1e-6, 400, 500), [np.inf]])
    v = mv.crawl_value(tau, alpha, beta, gamma)
    cap = mv.value_at_infinity(alpha, beta, gamma)
    assert v[0] == 0.0
    assert np.all(np.diff(v) >= 0)
    assert np.all(np.diff(v[:-1])[v[1:-1] < 0.999 * cap] > 0)
    assert v[-1] == pytest.approx(cap, rel=1e-15)
    assert np.all(v <= cap * (1 + 1e-13))


@pytest.mark.parametrize(("alpha", "beta", "gamma"), PAGES)
def test_value_at_infinity_is_mu_over_delta(alpha, beta, gamma) -> None:
    delta, _, _ = mv.change_params(alpha, beta, gamma)
    assert mv.value_at_infinity(alpha, beta, gamma, mu=3.0) == pytest.approx(3.0 / delta)
    assert mv.crawl_value(np.inf, alpha, beta, gamma, mu=3.0) == pytest.approx(3.0 / delta)
    # and V approaches it: far out the gap is below 1e-12
    assert mv.crawl_value(1e4 / alpha, alpha, beta, gamma) == pytest.approx(1 / delta, rel=1e-12)


def test_greedy_is_the_blog_formula_and_the_gamma_to_zero_limit() -> None:
    tau = np.geomspace(1e-3, 50, 40)
    exact = greedy_value(tau, 0.4)
    np.testing.assert_allclose(mv.crawl_value(tau, 0.4, 0.0, 0.0), exact, rtol=1e-12)
    np.testing.assert_allclose(mv.crawl_value(tau, 0.4, 3.0, 0.0), exact, rtol=1e-12)
    # gamma -> 0 with beta fixed: nu -> 0, Delta -> alpha
    for gamma in (1e-6, 1e-9, 1e-12):
        np.testing.assert_allclose(
            mv.crawl_value(tau, 0.4, 3.0, gamma), exact, rtol=30 * gamma + 1e-12
        )


def test_uninformative_signals_beta_zero_is_greedy() -> None:
    tau = np.geomspace(1e-3, 50, 40)
    np.testing.assert_allclose(
        mv.crawl_value(tau, 0.4, 0.0, 0.9), greedy_value(tau, 0.4), rtol=1e-12
    )


def test_greedy_cis_formula_and_nu_to_zero_limit() -> None:
    delta, lam = 0.6, 0.7
    alpha, beta0, gamma0 = mv.signal_params(delta, lam, 0.0)
    assert np.isinf(beta0)
    tau = np.geomspace(0.1, 40, 50)  # the explicit formula below cancels for small tau
    c = alpha + gamma0
    formula = -np.expm1(-c * tau) / c - np.exp(-alpha * tau) * -np.expm1(-gamma0 * tau) / gamma0
    np.testing.assert_allclose(mv.crawl_value(tau, alpha, beta0, gamma0), formula, rtol=1e-12)
    assert mv.crawl_value(np.inf, alpha, beta0, gamma0) == pytest.approx(1 / delta)
    for nu in (1e-6, 1e-9, 1e-12):
        a, b, g = mv.signal_params(delta, lam, nu)
        np.testing.assert_allclose(mv.crawl_value(tau, a, b, g), formula, rtol=10 * nu + 1e-12)


@pytest.mark.parametrize(("alpha", "beta", "gamma"), PAGES)
def test_lemma3_w_prime_equals_exp_times_psi_prime(alpha, beta, gamma) -> None:
    # central differences, away from the kinks at multiples of beta
    x = np.array([0.37, 1.3, 4.1, 9.7]) / max(alpha + gamma, 0.1)
    x = x[np.abs(x / beta - np.round(x / beta)) > 1e-3] if np.isfinite(beta) else x
    h = 1e-5 * x
    dw = (mv.w(x + h, alpha, beta, gamma) - mv.w(x - h, alpha, beta, gamma)) / (2 * h)
    dpsi = (mv.psi(x + h, alpha, beta, gamma) - mv.psi(x - h, alpha, beta, gamma)) / (2 * h)
    np.testing.assert_allclose(dw, np.exp(-alpha * x) * dpsi, rtol=1e-7)


@pytest.mark.parametrize(("alpha", "beta", "gamma"), PAGES[:3] + PAGES[4:])
def test_value_is_kkt_derivative_of_objective_in_frequency(alpha, beta, gamma) -> None:
    # V(iota) = d o(f^{-1}(x)) / dx at x = f(iota), o = w f (mu = 1)
    iota = np.array([0.5, 2.2, 6.3])
    iota = iota[np.abs(iota / beta - np.round(iota / beta)) > 1e-3] if np.isfinite(beta) else iota
    h = 1e-5 * iota

    def o(t: np.ndarray) -> np.ndarray:
        return mv.w(t, alpha, beta, gamma) / mv.psi(t, alpha, beta, gamma)

    f = mv.crawl_frequency
    deriv = (o(iota + h) - o(iota - h)) / (
        f(iota + h, alpha, beta, gamma) - f(iota - h, alpha, beta, gamma)
    )
    np.testing.assert_allclose(deriv, mv.crawl_value(iota, alpha, beta, gamma), rtol=1e-6)


def test_value_derivative_is_lemma2() -> None:
    # V'(iota) = mu alpha e^{-alpha iota} psi(iota) > 0 (proof of Lemma 2)
    alpha, beta, gamma = 0.5, 2.0, 0.7
    iota = np.array([0.3, 1.1, 3.3, 7.9])
    h = 1e-5 * iota
    dv = (
        mv.crawl_value(iota + h, alpha, beta, gamma) - mv.crawl_value(iota - h, alpha, beta, gamma)
    ) / (2 * h)
    np.testing.assert_allclose(
        dv, alpha * np.exp(-alpha * iota) * mv.psi(iota, alpha, beta, gamma), rtol=1e-7
    )


# ---------------------------------------------------------------- truncation


def untruncated(iota: float, alpha: float, beta: float, gamma: float) -> float:
    """All floor(iota/beta)+1 terms, each R^i by scipy, summed with fsum."""
    nu = gamma * math.exp(-alpha * beta)
    c = alpha + gamma
    n = math.floor(iota / beta)
    parts = []
    for i in range(n + 1):
        s = iota - i * beta
        parts.append((nu / c) ** i / c * special.gammainc(i + 1, c * s))
        parts.append(-math.exp(-alpha * iota) / gamma * special.gammainc(i + 1, gamma * s))
    return math.fsum(parts)


def test_truncation_tolerance_against_untruncated_sum() -> None:
    rng = np.random.default_rng(7)
    worst = 0.0
    for _ in range(150):
        alpha = float(rng.uniform(0.05, 2))
        gamma = float(rng.uniform(0.05, 3))
        beta = float(10 ** rng.uniform(-2, 0.5))
        iota = float(rng.uniform(0.1, 30))
        if iota / beta > 1500:
            continue
        full = untruncated(iota, alpha, beta, gamma)
        got = float(mv.crawl_value(iota, alpha, beta, gamma))
        worst = max(worst, abs(got - full) / full)
    # truncation tolerance 1e-13 plus the rounding of the naive full sum
    assert mv.TRUNCATION_RTOL <= 1e-12
    assert worst < 1e-11


def test_approx_j_keeps_first_terms() -> None:
    alpha, beta, gamma = 0.3, 0.4, 0.9
    iota = 3.0  # floor(iota / beta) = 7: eight terms
    nu = gamma * math.exp(-alpha * beta)
    c = alpha + gamma
    terms = [
        (nu / c) ** i / c * special.gammainc(i + 1, c * (iota - i * beta))
        - math.exp(-alpha * iota) / gamma * special.gammainc(i + 1, gamma * (iota - i * beta))
        for i in range(8)
    ]
    for j in (1, 2, 3):
        assert mv.crawl_value(iota, alpha, beta, gamma, terms=j) == pytest.approx(
            sum(terms[:j]), rel=1e-12
        )
    assert mv.crawl_value(iota, alpha, beta, gamma, terms=8) == pytest.approx(
        mv.crawl_value(iota, alpha, beta, gamma), rel=1e-15
    )
    assert mv.crawl_value(iota, alpha, beta, gamma, terms=50) == mv.crawl_value(
        iota, alpha, beta, gamma, terms=8
    )
    # Approx-J stays below the exact value (all terms are non-negative)
    assert mv.crawl_value(iota, alpha, beta, gamma, terms=2) < mv.crawl_value(
        iota, alpha, beta, gamma
    )


# ---------------------------------------------------------------- limits


def test_exact_limits_have_no_nan_or_inf() -> None:
    tau = np.array([0.0, 1e-300, 1e-12, 1.0, 1e3, 1e8, 1e300, np.inf])
    for alpha, beta, gamma in [
        (0.0, np.inf, 0.5),  # lam = 1, nu = 0: never stale before a signal
        (0.0, 2.0, 0.5),  # Delta = 0
        (1e-300, 1.0, 0.5),  # tau/beta huge: residue expansion
        (1e-12, 1e10, 0.5),
        (1e-12, 1.0, 0.5),  # tau/beta huge with tiny alpha
        (0.5, 1e-8, 0.5),  # huge tau/beta
        (0.5, 2.0, 1e-300),
        (3.0, np.inf, 0.0),
        (0.0, 0.0, 0.0),
    ]:
        v = mv.crawl_value(tau, alpha, beta, gamma)
        assert np.all(np.isfinite(v)), (alpha, beta, gamma, v)
        assert v[0] == 0.0
        cap = float(mv.value_at_infinity(alpha, beta, gamma))
        assert np.all((v >= 0) & (v <= cap * (1 + 1e-12)))
        if alpha * 1e8 > 1e-6 or np.isinf(beta) or beta > 1e6 or alpha == 0:
            assert np.all(np.diff(v) >= -1e-15 * v[1:])
        # else: alpha tau tiny with tau/beta in the millions, the documented corner where
        # V is only accurate to ~1e-16 * psi in absolute terms (it underflows to 0 here)


def test_alpha_zero_limits() -> None:
    # alpha = 0 with noiseless signals: V = 0 until a signal, then mu/Delta = mu/gamma
    assert mv.crawl_value(5.0, 0.0, np.inf, 0.5) == 0.0
    assert mv.crawl_value(np.inf, 0.0, np.inf, 0.5) == pytest.approx(2.0)
    # alpha -> 0 with beta fixed: Delta -> 0 and V -> 0 linearly in alpha
    v = mv.crawl_value(4.0, np.array([1e-6, 1e-9, 1e-12]), 2.0, 0.5)
    np.testing.assert_allclose(v / np.array([1e-6, 1e-9, 1e-12]), v[2] / 1e-12, rtol=1e-5)
    assert mv.crawl_value(4.0, 0.0, 2.0, 0.5) == 0.0


def test_huge_tau_over_beta_is_exact_and_fast() -> None:
    # tau/beta = 1e9 terms nominally; the bound stops after a few dozen
    v = mv.crawl_value(20.0, 0.3, 2e-8, 0.6)
    assert v == pytest.approx(float(greedy_value(np.array([20.0]), 0.3)[0]), rel=1e-6)
    assert mv.crawl_value(1e6, 0.3, 2e-8, 0.6) == pytest.approx(
        1 / 0.3 + 0.6 * -math.expm1(-0.3 * 2e-8) * 0, rel=1e-6
    )


# ---------------------------------------------------------------- time_to_value


def test_time_to_value_inverts_crawl_value() -> None:
    rng = np.random.default_rng(3)
    n = 400
    delta = rng.uniform(0.01, 1, n)
    lam = rng.beta(0.25, 0.25, n)
    nu = rng.uniform(0.1, 0.6, n)
    tau = rng.uniform(0.01, 20, n)
    a, b, g = mv.signal_params(delta, lam, nu)
    mu = rng.uniform(0.1, 2, n)
    level = mv.crawl_value(tau, a, b, g, mu)
    ok = (level > 0) & (level < 0.999 * mu / delta)
    back = mv.time_to_value(level[ok], a[ok], b[ok], g[ok], mu[ok])
    np.testing.assert_allclose(back, tau[ok], rtol=1e-9)


def test_time_to_value_edges() -> None:
    a, b, g = 0.5, 2.0, 0.7
    cap = float(mv.value_at_infinity(a, b, g))
    out = mv.time_to_value([-1.0, 0.0, cap, 2 * cap, np.inf], a, b, g)
    np.testing.assert_array_equal(out, [0.0, 0.0, np.inf, np.inf, np.inf])
    assert mv.time_to_value(0.1, 0.0, 2.0, 0.7) == np.inf  # Delta = 0: never worth it
    t = mv.time_to_value(1e-20, a, b, g)
    assert t == pytest.approx(math.sqrt(2e-20 / a), rel=1e-6)  # V ~ alpha t^2 / 2
    assert mv.time_to_value(0.5, 0.4, 0.0, 0.0) == pytest.approx(
        float(mv.time_to_value(0.5, 0.4, 3.0, 0.0)), rel=1e-14
    )


# ---------------------------------------------------------------- conversions


def test_parameter_conversions_round_trip() -> None:
    rng = np.random.default_rng(5)
    delta = rng.uniform(0.01, 2, 200)
    lam = rng.uniform(0.01, 0.99, 200)
    nu = rng.uniform(0.01, 1, 200)
    a, b, g = mv.signal_params(delta, lam, nu)
    np.testing.assert_allclose(a, (1 - lam) * delta, rtol=1e-15)
    np.testing.assert_allclose(g, lam * delta + nu, rtol=1e-15)
    np.testing.assert_allclose(np.exp(-a * b), nu / g, rtol=1e-13)
    d2, lam2, nu2 = mv.change_params(a, b, g)
    np.testing.assert_allclose(d2, delta, rtol=1e-12)
    np.testing.assert_allclose(lam2, lam, rtol=1e-12)
    np.testing.assert_allclose(nu2, nu, rtol=1e-12)
    d3, prec, rec = mv.precision_recall(a, b, g)
    np.testing.assert_allclose(prec, lam * delta / (lam * delta + nu), rtol=1e-12)
    a4, b4, g4 = mv.from_precision_recall(d3, prec, rec)
    np.testing.assert_allclose(a4, a, rtol=1e-12)
    np.testing.assert_allclose(b4, b, rtol=1e-10)
    np.testing.assert_allclose(g4, g, rtol=1e-12)


def test_conversion_limits() -> None:
    a, b, g = mv.signal_params(0.5, 0.4, 0.0)  # no false signals
    assert np.isinf(b) and g == pytest.approx(0.2)
    a, b, g = mv.signal_params(0.5, 0.0, 0.3)  # no signalled changes
    assert b == 0.0 and a == 0.5
    a, b, g = mv.from_precision_recall(0.5, 0.0, 0.7)  # precision 0: ignore signals
    assert g == 0.0 and a == 0.5
    a, b, g = mv.from_precision_recall(0.5, 1.0, 0.7)  # precision 1: noiseless
    assert np.isinf(b)


# ---------------------------------------------------------------- arguments


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"tau_eff": -1.0}, "tau_eff"),
        ({"alpha": -0.1}, "alpha"),
        ({"beta": float("nan")}, "beta"),
        ({"gamma": np.inf}, "gamma"),
        ({"mu": -2.0}, "mu"),
        ({"alpha": "fast"}, "alpha"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(kwargs: dict[str, object], name: str) -> None:
    args: dict[str, object] = {"tau_eff": 1.0, "alpha": 0.5, "beta": 2.0, "gamma": 0.7, "mu": 1.0}
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        mv.crawl_value(**args)  # type: ignore[arg-type]


def test_mismatched_shapes_and_terms_raise() -> None:
    with pytest.raises(ValueError, match="tau_eff"):
        mv.crawl_value(np.ones(3), np.ones(4), 1.0, 1.0)
    with pytest.raises(ValueError, match="terms"):
        mv.crawl_value(1.0, 0.5, 2.0, 0.7, terms=0)
    with pytest.raises(ValueError, match="level"):
        mv.time_to_value(float("nan"), 0.5, 2.0, 0.7)
    with pytest.raises(ValueError, match="recall"):
        mv.signal_params(1.0, 1.5, 0.1)


def test_broadcasting_and_scalars() -> None:
    v = mv.crawl_value(
        np.linspace(0, 5, 6)[:, None],
        np.array([0.1, 0.5]),
        2.0,
        0.7,
        mu=[[1.0], [2], [1], [1], [1], [1]],
    )
    assert v.shape == (6, 2)
    assert v[1, 1] == pytest.approx(2 * float(mv.crawl_value(1.0, 0.5, 2.0, 0.7)), rel=1e-15)
    assert np.ndim(mv.crawl_value(1.0, 0.5, 2.0, 0.7)) == 0
    assert mv.crawl_value(np.empty(0), 0.5, 2.0, 0.7).shape == (0,)


# ---------------------------------------------------------------- properties

rates = st.floats(1e-6, 50.0)
times = st.floats(0.0, 1e3)


@settings(max_examples=60, deadline=None)
@given(
    tau=times,
    dt=st.floats(1e-9, 10.0),
    delta=rates,
    lam=st.floats(0.0, 1.0),
    nu=st.floats(0.0, 20.0),
    mu=st.floats(0.0, 10.0),
)
def test_value_in_range_and_increasing(tau, dt, delta, lam, nu, mu) -> None:
    a, b, g = mv.signal_params(delta, lam, nu)
    v0, v1 = mv.crawl_value([tau, tau + dt], a, b, g, mu)
    cap = float(mv.value_at_infinity(a, b, g, mu))
    assert np.isfinite(v0) and np.isfinite(v1)
    assert 0.0 <= v0 <= v1 * (1 + 1e-12) + 1e-300
    assert v1 <= cap * (1 + 1e-12)


def integral_of_lemma2(tau: float, a: float, b: float, g: float) -> float:
    """mu alpha int_0^tau e^{-alpha s} psi(s) ds by Gauss-Legendre on smooth pieces.

    psi is smooth between multiples of beta; each piece is cut into sub-intervals no
    longer than 1/gamma (the scale of e^{-gamma s}) and integrated with 30 nodes.
    """
    edges = [0.0] + ([k * b for k in range(1, int(tau / b) + 1)] if b > 0 else []) + [tau]
    nodes, weights = np.polynomial.legendre.leggauss(30)
    total = 0.0
    for lo, hi in itertools.pairwise(edges):
        if hi <= lo:
            continue
        cuts = np.linspace(lo, hi, int(np.ceil((hi - lo) * max(g, a, 1e-9))) + 1)
        for s0, s1 in itertools.pairwise(cuts):
            s = 0.5 * (s1 - s0) * nodes + 0.5 * (s1 + s0)
            f = a * np.exp(-a * s) * mv.psi(s, a, b, g)
            total += 0.5 * (s1 - s0) * float(weights @ f)
    return total


@settings(max_examples=25, deadline=None)
@given(
    tau=st.floats(1e-3, 60.0),
    delta=st.floats(1e-3, 2.0),
    lam=st.floats(0.0, 1.0),
    nu=st.floats(1e-3, 2.0),
)
def test_value_matches_unconditionally_stable_integral(tau, delta, lam, nu) -> None:
    # Lemma 2: V(iota) = mu alpha int_0^iota e^{-alpha s} psi(s) ds, a sum of positive terms,
    # an evaluation path independent of the closed-form sums
    a, b, g = (float(z) for z in mv.signal_params(delta, lam, nu))
    assume(b == 0 or tau / b < 60)
    v = float(mv.crawl_value(tau, a, b, g))
    assert v == pytest.approx(integral_of_lemma2(tau, a, b, g), rel=1e-9, abs=1e-300)


@settings(max_examples=40, deadline=None)
@given(
    frac=st.floats(1e-9, 0.99),
    delta=st.floats(1e-3, 5.0),
    lam=st.floats(0.0, 1.0),
    nu=st.floats(1e-3, 5.0),
)
def test_time_to_value_property(frac, delta, lam, nu) -> None:
    a, b, g = mv.signal_params(delta, lam, nu)
    level = frac / delta
    t = float(mv.time_to_value(level, a, b, g))
    if float(a) == 0.0:
        assert t == np.inf or level <= 0
        return
    assert np.isfinite(t)
    assert float(mv.crawl_value(t, a, b, g)) == pytest.approx(level, rel=1e-10)


def test_subnormal_beta_is_finite_and_greedy() -> None:
    """Recall ~ 1e-309 gives beta ~ 1e-310: V is Greedy's to machine precision, not NaN."""
    a, b, g = mv.signal_params(0.125, 2.225073858507203e-309, 20.0)
    v = mv.crawl_value([0.0, 10.0], a, b, g, 1.0)
    assert np.all(np.isfinite(v))
    np.testing.assert_allclose(v, mv.crawl_value([0.0, 10.0], 0.125, 0.0, 0.0, 1.0), rtol=1e-15)
