"""Paper 003's Figs. 1, 2, 3, 6 and 7 (experiments/paper003_figs.py).

Expectations come from paper 003's model (Sec. 3.1 cost, Sec. 3.2 optimum, Sec. 3.4
asymptote; computed by ``models.cost``) and from its stated claims, never from this code's
own outputs.
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

from experiments.estimation import main
from experiments.paper003_figs import (
    cost_over_time,
    fig2_grid,
    fig3_curves,
    lagged_difference,
    optimal_ratio_by_search,
    simulate_fixed_interval_cost,
)
from models import cost

DELTA = 24.0


# --- Fig. 1 -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("cc", "cs"), [(1.0, 1.0), (3.0, 0.5)])
def test_fig1_simulated_cost_agrees_with_the_sec31_formula(cc: float, cs: float) -> None:
    r_opt = cost.optimal_ratio(DELTA, cc, cs)
    assert r_opt is not None
    ratios = np.array([r_opt / 3.0, r_opt, 3.0 * r_opt, 1.0, 3.0])
    sim = simulate_fixed_interval_cost(
        np.random.default_rng(7), ratios, crawl_cost=cc, stale_cost=cs, n_sims=2000,
        horizon_h=1000.0,
    )
    model = cost.cost_per_hour(ratios, DELTA, cc, cs)
    # within 4 standard errors of the Sec. 3.1 formula at every ratio ...
    assert np.all(np.abs(sim["mean"] - model) < 4.0 * sim["se"])
    # ... and the standard errors are small enough to reject a wrong model: the first-order
    # stale fraction r/2 (instead of 1 - (1 - e^-r)/r) is off by many se at r = 1 and 3
    wrong = ratios / 2.0 * cs + cc / (ratios * DELTA)
    assert np.all(np.abs(sim["mean"] - wrong)[3:] > 8.0 * sim["se"][3:])
    # the simulated cost is lowest at the model's optimum (Fig. 1: minimum at ~0.3 Delta)
    assert int(np.argmin(sim["mean"][:3])) == 1


# --- Fig. 2 -----------------------------------------------------------------------------------
def test_fig2_search_finds_the_closed_form_optimum() -> None:
    costs = np.array([0.25, 0.5, 1.0, 2.0, 4.0])
    g = fig2_grid(costs, costs)
    # rows are C_s, columns C_c; the closed form is Sec. 3.2's root, via models.cost
    for i, cs in enumerate(costs):
        for j, cc in enumerate(costs):
            r = cost.optimal_ratio(DELTA, cc, cs)
            assert r is not None
            assert g["search"][i, j] == pytest.approx(r, rel=1e-6)
    # the values quoted in Sec. 3.1-3.2: ~0.3 at C_c = C_s; ~0.15 at C_s = 4 C_c;
    # ~0.8 when a crawl costs "approximately four times" a stale hour
    assert g["search"][2, 2] == pytest.approx(0.3, abs=0.03)
    assert g["search"][4, 2] == pytest.approx(0.15, abs=0.01)
    assert g["search"][2, 4] == pytest.approx(0.8, abs=0.1)


def test_fig2_optimum_depends_on_the_cost_ratio_only_and_falls_as_staleness_gets_dearer() -> None:
    costs = np.linspace(0.2, 5.0, 25)
    g = fig2_grid(costs, costs)["search"]
    # Sec. 3.2: "for a given change period the fractional crawl time is a function of C_c/C_s"
    diag = np.diag(g)
    assert np.allclose(diag, diag[0], rtol=1e-6)
    # along a column (fixed C_c) r falls as C_s rises; along a row it rises with C_c
    for j in range(costs.size):
        col = g[:, j][np.isfinite(g[:, j])]
        assert np.all(np.diff(col) < 0)
    for i in range(costs.size):
        row = g[i, :][np.isfinite(g[i, :])]
        assert np.all(np.diff(row) > 0)


def test_fig2_no_optimum_when_a_crawl_costs_more_than_a_stale_period() -> None:
    # Sec. 3.2: no finite positive r when C_c >= C_s Delta (here Delta = 24)
    cc = np.array([5.0, 5.0, 2.0, 24.0, 23.0])
    cs = np.array([0.1, 0.2, 0.1, 1.0, 1.0])
    r = optimal_ratio_by_search(DELTA, cc, cs)
    np.testing.assert_array_equal(np.isnan(r), cc >= cs * DELTA)


# --- Fig. 3 -----------------------------------------------------------------------------------
def test_fig3_ratio_falls_and_flattens_as_the_period_grows() -> None:
    periods = np.arange(24.0, 1001.0, 1.0)
    combos = [(1.0, 1.0), (4.0, 1.0), (1.0, 4.0)]
    c = fig3_curves(periods, combos)
    for k in range(len(combos)):
        r = c["ratio"][k]
        slope = np.diff(r)
        # Sec. 3.3: "the right choice of r quickly becomes very small as Delta gets larger"
        assert np.all(slope < 0)
        # Sec. 3.4: "the optimal ratio ... flattens out as Delta grows larger"
        assert np.all(np.diff(np.abs(slope)) < 0)
        assert abs(slope[-1]) < 0.01 * abs(slope[0])
        # ... but the interval r Delta keeps growing (no cap)
        assert np.all(np.diff(r * periods) > 0)
    # Sec. 3.3: with C_c larger than C_s (green) the optimal r is larger for all Delta
    assert np.all(c["ratio"][1] > c["ratio"][0])
    assert np.all(c["ratio"][2] < c["ratio"][0])


def test_fig3_sqrt_asymptote_and_no_optimum_for_short_periods() -> None:
    periods = np.array([3.0, 4.0, 5.0, 100.0, 1e4, 1e6])
    c = fig3_curves(periods, [(4.0, 1.0)])
    r, asym = c["ratio"][0], c["asymptote"][0]
    # Sec. 3.2: no optimum while C_c >= C_s Delta, i.e. Delta <= 4 here
    assert np.isnan(r[0]) and np.isnan(r[1]) and np.isfinite(r[2])
    # Sec. 3.4: t ~ sqrt(2 Delta C_c / C_s), so r / sqrt(2 C_c / (C_s Delta)) -> 1
    rel = np.abs(r[3:] / np.sqrt(2.0 * 4.0 / periods[3:]) - 1.0)
    assert np.all(np.diff(rel) < 0) and rel[-1] < 1e-2
    np.testing.assert_allclose(asym, np.sqrt(2.0 * 4.0 / periods))


# --- Figs. 6 and 7 ----------------------------------------------------------------------------
def test_fig6_estimation_cost_is_paid_early_and_levels_off() -> None:
    n, horizon, lag = 400, 3000.0, 500.0
    sim = cost_over_time(
        np.random.default_rng(3), n_sims=n, horizon_h=horizon, ratio_known=1 / 3,
        ratio_unknown=1 / 3,
    )
    g = sim.grid
    end = int(np.searchsorted(g, horizon))
    # the known case is the Sec. 3.1 model: its cumulative cost per hour matches the formula
    known_rate = sim.known[:, end] / horizon
    expected = float(cost.cost_per_hour(1 / 3, DELTA, 1.0, 1.0))
    assert abs(known_rate.mean() - expected) < 4.0 * known_rate.std(ddof=1) / math.sqrt(n)
    d = sim.difference
    se = d[:, end].std(ddof=1) / math.sqrt(n)
    # Sec. 5.1-5.2: "we pay a price for having to estimate Delta" (known - unknown < 0)
    assert d[:, end].mean() < -3.0 * se
    # ... "but the convergence of the estimator eventually reduces the marginal cost to zero":
    # the change over the last 500 h is a small part of the change over the first 500 h
    first = d[:, int(np.searchsorted(g, lag))].mean()
    last = lagged_difference(g, d.mean(axis=0), lag)[end]
    assert first < 0
    assert abs(last) < 0.35 * abs(first)


def test_fig7_suboptimal_known_rate_loses_linearly_at_the_expected_cost_gap() -> None:
    n, horizon = 400, 1000.0
    sim = cost_over_time(
        np.random.default_rng(5), n_sims=n, horizon_h=horizon, ratio_known=0.8,
        ratio_unknown=1 / 3,
    )
    g = sim.grid
    end, half = int(np.searchsorted(g, horizon)), int(np.searchsorted(g, horizon / 2))
    c_known = float(cost.cost_per_hour(0.8, DELTA, 1.0, 1.0))
    c_unknown = float(cost.cost_per_hour(1 / 3, DELTA, 1.0, 1.0))
    known_rate = sim.known[:, end] / horizon
    assert abs(known_rate.mean() - c_known) < 4.0 * known_rate.std(ddof=1) / math.sqrt(n)
    d = sim.difference
    # Sec. 5.2: the difference "increases linearly in time and favors the unknown Delta case"
    assert d[:, end].mean() > 10.0 * d[:, end].std(ddof=1) / math.sqrt(n)
    # with a slope "directly attributable to the difference in expected costs": the gap of
    # the Sec. 3.1 formula, less what estimating still costs at the margin (>= 0)
    slope = (d[:, end] - d[:, half]) / (g[end] - g[half])
    slope_se = slope.std(ddof=1) / math.sqrt(n)
    gap = c_known - c_unknown
    assert slope.mean() < gap + 3.0 * slope_se
    assert slope.mean() > 0.7 * gap
    # and it is linear: the two halves of the second half grow alike
    q3 = int(np.searchsorted(g, 0.75 * horizon))
    m = d.mean(axis=0)
    assert (m[end] - m[q3]) == pytest.approx(m[q3] - m[half], rel=0.25)


# --- the command ------------------------------------------------------------------------------
def test_paper003_figures_flag_writes_the_five_figures(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    argv = ["paper003", "--figures", "--quick", "--seed", "2", "--out", str(out)]
    assert main([*argv, "--json", str(tmp_path / "p.json")]) == 0
    res = json.loads((tmp_path / "p.json").read_text())
    names = [f"paper003_fig{k}.png" for k in (1, 2, 3, 6, 7)]
    for name in names:
        assert name in res["files"]
        assert (out / name).stat().st_size > 10_000
    assert len(res["files"]) == 4 + len(names)  # Figs. 5 and 8 unchanged
    assert {r["figure"] for r in res["figures"]} == {"1", "2", "3", "6", "7"}
    assert "| fig. | quantity |" in (out / "paper003.md").read_text()
