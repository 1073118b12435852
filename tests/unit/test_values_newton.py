"""The inverse of the crawl value (``V(iota) = level``) raises no floating-point warning:
``recrawl demo`` learning the rates printed ``RuntimeWarning: overflow encountered in
divide`` from the Newton step of ``models.values._solve_numpy`` (a warm start far below
the root sent the first step deep into the saturated region, where ``V'`` is ~1e-310 and ``f/V'``
overflowed).  Every test here turns warnings into errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from models import values as mv

pytestmark = pytest.mark.filterwarnings("error")


def inverse(level: float, a: np.ndarray, b: np.ndarray, g: np.ndarray, mu: np.ndarray,
            start: np.ndarray) -> np.ndarray:
    # the crawl index's call (models/index.py: the root at a lower level as warm start)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return mv._time_to_value_unchecked(level, a, b, g, mu, start)


def test_warm_start_far_below_the_root_has_no_overflow() -> None:
    """The case found behind the demo's warning (Greedy page, level near mu/Delta)."""
    a, mu, level = 0.01878660001121966, 0.046017668138562604, 2.4492929571710156
    one = np.ones(1)
    iota = inverse(level, a * one, 0 * one, 0 * one, mu * one, 0.07274698429018207 * one)
    assert np.isfinite(iota).all()
    # Greedy's V = (mu/alpha) R^1(alpha iota) (Sec. 5.1 of paper 004), by hand
    x = a * iota[0]
    assert (mu / a) * (-np.expm1(-x) - x * np.exp(-x)) == pytest.approx(level, rel=1e-10)


def test_random_pages_and_starts_invert_the_value_without_warnings() -> None:
    rng = np.random.default_rng(7)
    n = 400
    a = 10 ** rng.uniform(-6, 2, n)
    g = np.where(np.arange(n) % 2 == 0, 0.0, 10 ** rng.uniform(-4, 0, n))
    b = np.where(g > 0, 10 ** rng.uniform(-2, 1, n) / a, 0.0)
    mu = 10 ** rng.uniform(-2, 2, n)
    cap = mu / mv._derived(a, b, g)[2]
    start = 10 ** rng.uniform(-3, 3, n) / a
    for rel_gap in (1e-1, 1e-6, 1e-12):
        for i in range(n):  # one level per call, as the index does
            level = float(cap[i] * (1 - rel_gap))
            sl = slice(i, i + 1)
            iota = inverse(level, a[sl], b[sl], g[sl], mu[sl], start[sl])
            assert np.isfinite(iota).all(), (i, rel_gap)
            v = mv.crawl_value(iota, a[sl], b[sl], g[sl], mu[sl])
            assert v[0] == pytest.approx(level, rel=1e-8, abs=1e-12 * cap[i]), (i, rel_gap)


def test_a_level_within_rounding_of_the_cap_is_never_reached_and_warns_nothing() -> None:
    """One ulp below ``mu/Delta``: the computed V never gets there; the bracket used to grow
    until ``4 x`` overflowed."""
    a, b, g, mu = 0.00041805497889489066, 0.008975848270455585, 0.01892844308847327, 0.83302
    cap = float(mu / mv._derived(np.array([a]), np.array([b]), np.array([g]))[2][0])
    level = float(np.nextafter(cap, 0.0))
    one = np.ones(1)
    iota = inverse(level, a * one, b * one, g * one, mu * one, 4.59 * one)
    if np.isfinite(iota[0]):
        assert mv.crawl_value(iota, a, b, g, mu)[0] >= level * (1 - 1e-15)
    else:
        assert iota[0] == np.inf
