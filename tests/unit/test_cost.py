"""Paper 003's cost model: cost per hour, optimal interval ratio, large-period asymptote."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize

from models import cost

REF = json.loads(Path(__file__).with_name("reference_values.json").read_text())


def test_quoted_values_of_paper_003() -> None:
    # Sec. 3.1-3.2: minimum near 0.3 x Delta for C_c = C_s = 1, Delta = 24 h;
    # about 0.15 when C_s = 4 C_c
    assert cost.optimal_ratio(24.0, 1.0, 1.0) == pytest.approx(0.3, abs=0.025)
    assert cost.optimal_ratio(24.0, 1.0, 4.0) == pytest.approx(0.15, abs=0.01)


@pytest.mark.parametrize(
    "case", REF["optimal_ratio"], ids=lambda c: f"{c['period']}-{c['cc']}-{c['cs']}"
)
def test_optimal_ratio_matches_mpmath(case: dict[str, str]) -> None:
    # reference: mpmath findroot of e^r (1 - z) = 1 + r at 50 digits (make_reference_values.py)
    r = cost.optimal_ratio(float(case["period"]), float(case["cc"]), float(case["cs"]))
    if case["r"] == "none":
        assert r is None
    else:
        assert r == pytest.approx(float(case["r"]), rel=1e-13)


def test_optimum_minimises_the_cost() -> None:
    for period, cc, cs in [(24, 1, 1), (24, 1, 4), (24, 4, 1), (500, 3, 0.2), (3, 1, 1)]:
        r = cost.optimal_ratio(period, cc, cs)
        assert r is not None
        res = optimize.minimize_scalar(
            lambda x, p=period, a=cc, b=cs: float(cost.cost_per_hour(x, p, a, b)),
            bounds=(1e-6, 50),
            method="bounded",
            options={"xatol": 1e-12},
        )
        assert r == pytest.approx(res.x, rel=1e-5)
        assert (
            cost.cost_per_hour(r, period, cc, cs)
            <= cost.cost_per_hour([0.99 * r, 1.01 * r], period, cc, cs).min()
        )


def test_no_finite_optimum() -> None:
    assert cost.optimal_ratio(1.0, 1.0, 1.0) is None  # C_c = C_s Delta
    assert cost.optimal_ratio(24.0, 1.0, 0.0) is None  # staleness costs nothing
    r = cost.optimal_ratio(np.array([24.0, 0.5]), 1.0, 1.0)
    assert np.isfinite(r[0]) and np.isnan(r[1])
    np.testing.assert_array_equal(
        cost.optimal_interval(np.array([24.0, 0.5]), 1.0, 1.0)[1:], [np.inf]
    )
    # and the cost really decreases all the way there
    c = cost.cost_per_hour(np.geomspace(0.01, 1e4, 200), 0.5, 1.0, 1.0)
    assert np.all(np.diff(c) < 0)


def test_large_period_asymptote() -> None:
    periods = np.array([1e2, 1e4, 1e6, 1e8])
    exact = cost.optimal_interval(periods, 1.0, 2.0)
    approx = cost.asymptotic_interval(periods, 1.0, 2.0)
    rel = np.abs(exact / approx - 1)
    assert np.all(np.diff(rel) < 0)
    assert rel[-1] < 1e-3


def test_stale_fraction_is_smooth_across_the_series_switch() -> None:
    r = np.array([1e-12, 1e-6, 0.4999999, 0.5, 0.5000001, 3.0, np.inf])
    s = cost.stale_fraction(r)
    assert s[0] == pytest.approx(0.5e-12, rel=1e-12)
    assert s[2] == pytest.approx(s[3], rel=1e-6) and s[3] == pytest.approx(s[4], rel=1e-6)
    assert s[5] == pytest.approx(1 - (1 - math.exp(-3)) / 3, rel=1e-15)
    assert s[6] == 1.0
    assert float(cost.stale_fraction(0.0)) == 0.0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="change_period"):
        cost.optimal_ratio(0.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="crawl_cost"):
        cost.optimal_ratio(24.0, -1.0, 1.0)
    with pytest.raises(ValueError, match="ratio"):
        cost.cost_per_hour(0.0, 24.0, 1.0, 1.0)


@settings(max_examples=50, deadline=None)
@given(period=st.floats(1e-2, 1e7), cc=st.floats(1e-3, 1e3), cs=st.floats(1e-3, 1e3))
def test_optimum_solves_first_order_condition(period, cc, cs) -> None:
    r = cost.optimal_ratio(period, cc, cs)
    z = cc / (cs * period)
    if z >= 1:
        assert r is None
        return
    assert r is not None and r > 0
    # e^r (1 - z) = 1 + r, checked in log form: r + log1p(-z) = log1p(r)
    assert r + math.log1p(-z) == pytest.approx(math.log1p(r), rel=1e-12, abs=1e-300)
