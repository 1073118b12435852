"""Paper 003's Figs. 1, 2, 3, 6 and 7 (its Figs. 5 and 8 are in ``estimation.py``).

``python -m streams.experiments.estimation paper003 --figures [--quick] [--seed N] [--out DIR]``
runs the existing Sec. 5 reproduction and then :func:`run_figures`, which writes
``paper003_fig{1,2,3,6,7}.png`` into ``--out`` and returns the key numbers as table rows.

Paper 003 writes the change *period* ``Delta`` (hours), crawls every ``t = r Delta`` hours
and charges ``C_c`` per crawl and ``C_s`` per stale hour; its Sec. 3.1 expected cost per
hour is ``C(r) = (1 - (1 - e^{-r})/r) C_s + C_c/(r Delta)`` (:func:`models.cost.cost_per_hour`).

* Fig. 1 (Sec. 3.1): that formula against the mean cost per hour of a Monte Carlo
  simulation of Poisson changes crawled at fixed intervals, ``C_c = C_s = 1``, ``Delta = 24``.
* Fig. 2 (Sec. 3.2): the cost-minimising ``r`` over a grid of ``(C_c, C_s)``, ``Delta = 24``,
  found "by iteratively finding the minimum total cost" (a golden-section search on the
  Sec. 3.1 cost) and checked against the root of ``e^r = (1 + r)/(1 - C_c/(C_s Delta))``.
* Fig. 3 (Secs. 3.3-3.4): the optimal ``r`` against ``Delta`` for several ``(C_c, C_s)``,
  with the Sec. 3.4 asymptote ``r ~ sqrt(2 C_c/(C_s Delta))``.
* Figs. 6 and 7 (Sec. 5.2): cumulative cost, rate known minus rate estimated online, on the
  same simulated change processes.  Fig. 6: ``r = 1/3`` in both cases, ``N = 200`` runs of
  12,000 h, lag 500.  Fig. 7: ``r = 0.8`` when known, ``r = 1/3`` when estimated, ``N = 1000``
  runs of 1000 h, lag 100.  (The paper's captions and its Sec. 5.2 text agree on this
  assignment: Fig. 6 levels off, Fig. 7 grows linearly in favour of the estimated case.)

Choices where the paper is silent are listed in the docstrings ("Choice:").
"""

from __future__ import annotations

import math
import pathlib
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
from matplotlib.colors import LogNorm

from models.cost import asymptotic_interval, cost_per_hour, optimal_ratio
from models.estimators import ChangeRateEstimator, batch_init, batch_result, batch_update

__all__ = [
    "CostOverTime",
    "FigureSizes",
    "cost_over_time",
    "fig2_grid",
    "fig3_curves",
    "figures_table",
    "lagged_difference",
    "optimal_ratio_by_search",
    "run_figures",
    "simulate_fixed_interval_cost",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
HOUR_S = 3600.0
PERIOD_H = 24.0
GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


# --- Fig. 1 -----------------------------------------------------------------------------------
def simulate_fixed_interval_cost(
    rng: np.random.Generator,
    ratios: npt.ArrayLike,
    *,
    period_h: float = PERIOD_H,
    crawl_cost: float = 1.0,
    stale_cost: float = 1.0,
    n_sims: int = 1000,
    horizon_h: float = 1000.0,
) -> dict[str, FloatArray]:
    """Monte Carlo mean cost per hour of crawling every ``r * Delta`` hours (paper 003 Fig. 1).

    Each run draws a Poisson process of changes with period ``Delta`` (``Poisson(T/Delta)``
    changes placed uniformly on ``[0, T]``), starts fresh at 0 and crawls at ``t, 2t, ...``.
    An interval is stale from its first change to the crawl that ends it; the run's cost per
    hour is ``(C_s * stale hours + C_c * crawls) / T`` - the quantity whose expectation is
    the Sec. 3.1 formula of paper 003 (``P(stale) C_s + P(re-crawl) C_c``).

    Choice: the paper gives neither ``N`` nor the run length for Fig. 1; we use ``N`` runs of
    ``T`` = the whole number of intervals nearest ``horizon_h`` (at least one), so no
    interval is cut and the crawl count is exactly ``T/t``.

    Returns
    -------
    dict
        ``ratio``, ``horizon_h`` (per ratio), ``mean`` and ``se`` (standard error over runs)
        of the cost per hour, and ``model`` (the Sec. 3.1 formula).
    """
    r = np.asarray(ratios, dtype=np.float64).ravel()
    mean = np.empty(r.size)
    se = np.empty(r.size)
    horizons = np.empty(r.size)
    for j, ratio in enumerate(r):
        t = float(ratio) * period_h
        n_int = max(1, round(horizon_h / t))
        horizon = n_int * t
        counts = rng.poisson(horizon / period_h, n_sims)
        rows = np.repeat(np.arange(n_sims), counts)
        times = rng.uniform(0.0, horizon, counts.sum())
        k = np.minimum((times // t).astype(np.int64), n_int - 1)
        first = np.full((n_sims, n_int), np.inf)
        np.minimum.at(first, (rows, k), times)
        ends = (np.arange(n_int) + 1.0) * t
        stale = np.where(np.isfinite(first), ends[None, :] - first, 0.0).sum(axis=1)
        per_run = (stale_cost * stale + crawl_cost * n_int) / horizon
        mean[j] = per_run.mean()
        se[j] = per_run.std(ddof=1) / math.sqrt(n_sims) if n_sims > 1 else math.nan
        horizons[j] = horizon
    model = cost_per_hour(r, period_h, crawl_cost, stale_cost)
    return {"ratio": r, "horizon_h": horizons, "mean": mean, "se": se, "model": model}


# --- Figs. 2 and 3 ----------------------------------------------------------------------------
def optimal_ratio_by_search(
    change_period: npt.ArrayLike,
    crawl_cost: npt.ArrayLike,
    stale_cost: npt.ArrayLike,
    *,
    lo: float = 1e-4,
    hi: float = 1e3,
    iterations: int = 120,
) -> FloatArray:
    """Cost-minimising ``r`` found by searching the Sec. 3.1 cost (paper 003 Fig. 2's method).

    Paper 003 Sec. 3.2 finds Fig. 2's optimum "by iteratively finding the minimum total
    cost" of Sec. 3.1, ``(1 - (1 - e^{-r})/r) C_s + C_c/(r Delta)``; here a vectorised
    golden-section search over ``log r`` in ``[lo, hi]`` (the cost falls then rises in
    ``r``, Sec. 3.2, so it is unimodal).  ``NaN`` (no finite optimum; Sec. 3.2: when
    ``C_c >= C_s Delta``) where the search ends at ``hi`` or its minimum does not beat never
    crawling, whose cost is ``C_s`` per hour (the ``r -> inf`` limit of the Sec. 3.1 cost).
    The closed-form root is :func:`models.cost.optimal_ratio`; they are compared in Fig. 2.
    """
    d, cc, cs = np.broadcast_arrays(
        np.asarray(change_period, dtype=np.float64),
        np.asarray(crawl_cost, dtype=np.float64),
        np.asarray(stale_cost, dtype=np.float64),
    )

    def f(u: FloatArray) -> FloatArray:
        return cost_per_hour(np.exp(u), d, cc, cs)

    a = np.full(d.shape, math.log(lo))
    b = np.full(d.shape, math.log(hi))
    x1 = b - GOLDEN * (b - a)
    x2 = a + GOLDEN * (b - a)
    f1, f2 = f(x1), f(x2)
    for _ in range(iterations):
        left = f1 <= f2  # the minimum is in [a, x2], else in [x1, b]
        b = np.where(left, x2, b)
        a = np.where(left, a, x1)
        new_x1 = np.where(left, b - GOLDEN * (b - a), x2)
        new_x2 = np.where(left, x1, a + GOLDEN * (b - a))
        f_new = f(np.where(left, new_x1, new_x2))  # one new point per cell
        f1, f2 = np.where(left, f_new, f2), np.where(left, f1, f_new)
        x1, x2 = new_x1, new_x2
    u = 0.5 * (a + b)
    # never crawling costs C_s per hour (the r -> inf limit); an optimum must beat it
    never = (u > math.log(hi) - 1e-3) | (f(u) >= cs)
    out: FloatArray = np.where(never, np.nan, np.exp(u))
    return out


def fig2_grid(
    crawl_costs: npt.ArrayLike, stale_costs: npt.ArrayLike, period_h: float = PERIOD_H
) -> dict[str, FloatArray]:
    """Fig. 2 of paper 003: optimal ``r`` for every ``(C_c, C_s)`` at ``Delta = 24`` h.

    ``search[i, j]`` is :func:`optimal_ratio_by_search` at ``C_s = stale_costs[i]``,
    ``C_c = crawl_costs[j]``; ``closed[i, j]`` the Sec. 3.2 root
    ``e^r = (1 + r)/(1 - C_c/(C_s Delta))`` (:func:`models.cost.optimal_ratio`).  Both are
    ``NaN`` where ``C_c >= C_s Delta`` (never crawl).
    """
    cc = np.asarray(crawl_costs, dtype=np.float64)
    cs = np.asarray(stale_costs, dtype=np.float64)
    cc_grid, cs_grid = np.meshgrid(cc, cs)
    search = optimal_ratio_by_search(period_h, cc_grid, cs_grid)
    closed = np.asarray(optimal_ratio(period_h, cc_grid, cs_grid), dtype=np.float64)
    return {"crawl_cost": cc, "stale_cost": cs, "search": search, "closed": closed}


def crawl_to_stale_cost_for_ratio(ratio: float, period_h: float = PERIOD_H) -> float:
    """``C_c / C_s`` at which ``ratio`` is optimal: ``Delta (1 - (1 + r) e^{-r})``.

    Sec. 3.2 of paper 003 rearranged: ``e^r = (1 + r)/(1 - C_c/(C_s Delta))``.
    """
    return period_h * (1.0 - (1.0 + ratio) * math.exp(-ratio))


def fig3_curves(
    periods_h: npt.ArrayLike, combos: list[tuple[float, float]]
) -> dict[str, Any]:
    """Fig. 3 of paper 003: optimal ``r`` against ``Delta`` for each ``(C_c, C_s)`` in combos.

    ``ratio[k]`` is the Sec. 3.2 root (``NaN`` where ``C_c >= C_s Delta``), ``asymptote[k]``
    the Sec. 3.4 large-``Delta`` ratio ``sqrt(2 Delta C_c / C_s) / Delta``.
    """
    d = np.asarray(periods_h, dtype=np.float64)
    ratio = np.stack([np.asarray(optimal_ratio(d, cc, cs), dtype=np.float64) for cc, cs in combos])
    asym = np.stack([asymptotic_interval(d, cc, cs) / d for cc, cs in combos])
    return {"period_h": d, "combos": combos, "ratio": ratio, "asymptote": asym}


# --- Figs. 6 and 7 ----------------------------------------------------------------------------
@dataclass(frozen=True)
class CostOverTime:
    """Cumulative cost at ``grid`` hours for each run: ``known`` and ``unknown`` are ``(N, G)``."""

    grid: FloatArray
    known: FloatArray
    unknown: FloatArray
    ratio_known: float
    ratio_unknown: float

    @property
    def difference(self) -> FloatArray:
        """Known minus unknown cumulative cost, per run (paper 003 Figs. 6 and 7)."""
        out: FloatArray = self.known - self.unknown
        return out


class _Changes:
    """Sorted Poisson change times of ``N`` runs, padded past the horizon."""

    def __init__(self, rng: np.random.Generator, n: int, horizon: float, period: float) -> None:
        counts = rng.poisson(horizon / period, n)
        k = int(counts.max()) + 1
        self.padded = np.full((n, k), 2.0 * horizon)
        for i in range(n):
            self.padded[i, : counts[i]] = np.sort(rng.uniform(0.0, horizon, counts[i]))
        self.big = 4.0 * horizon
        self.flat = (self.padded + (np.arange(n) * self.big)[:, None]).ravel()

    def first_after(self, rows: IntArray, t: FloatArray) -> FloatArray:
        """First change strictly after ``t[i]`` in run ``rows[i]`` (past the horizon if none)."""
        k = self.padded.shape[1]
        pos = np.searchsorted(self.flat, t + rows * self.big, side="right") - rows * k
        out: FloatArray = self.padded[rows, np.minimum(pos, k - 1)]
        return out


def _ramp_sums(points: FloatArray, grid: FloatArray) -> FloatArray:
    """``sum_k max(0, g - points[k])`` for every ``g`` in ``grid`` (``points`` sorted)."""
    m = np.searchsorted(points, grid, side="right")
    csum = np.concatenate([[0.0], np.cumsum(points)])
    out: FloatArray = m * grid - csum[m]
    return out


def _simulate_cumulative(
    changes: _Changes,
    grid: FloatArray,
    horizon: float,
    period: float,
    ratio: float,
    known: bool,
    crawl_cost: float,
    stale_cost: float,
) -> FloatArray:
    """Cumulative cost ``C_s * stale hours + C_c * crawls`` up to each grid time, per run.

    Known: crawl every ``r Delta``.  Unknown: crawl ``r / rate_hat`` after each crawl,
    ``rate_hat`` the streaming Cho and Garcia-Molina MLE (eq. (2) of paper 003) from the
    Grimes-Ford pseudo-datapoints of Sec. 4.4 (1 h changed, 57 h unchanged), updated at every
    crawl - the same schedule as Figs. 5 and 8 in ``estimation.py``.  A crawl costs ``C_c``
    at the moment it happens; staleness accrues from an interval's first change to its crawl.
    """
    n = changes.padded.shape[0]
    est = ChangeRateEstimator()
    state = batch_init(est.signal_estimator, n)
    first_h = ratio / (est.pseudo.prior_rate_per_s * HOUR_S)
    interval = np.full(n, ratio * period if known else first_h)
    now = np.zeros(n)
    active = np.ones(n, dtype=bool)
    seg_rows: list[IntArray] = []
    seg_lo: list[FloatArray] = []
    seg_hi: list[FloatArray] = []
    crawl_rows: list[IntArray] = []
    crawl_t: list[FloatArray] = []
    while active.any():
        idx = np.flatnonzero(active)
        a = now[idx]
        b = a + interval[idx]
        f = changes.first_after(idx, a)
        done = b <= horizon
        end = np.minimum(b, horizon)
        stale = f < end
        seg_rows.append(idx[stale])
        seg_lo.append(f[stale])
        seg_hi.append(end[stale])
        sel = idx[done]
        crawl_rows.append(sel)
        crawl_t.append(b[done])
        if not known and sel.size:
            batch_update(
                est.signal_estimator,
                state,
                interval[sel] * HOUR_S,
                (f <= b)[done],
                pages=sel,
                end_s=b[done] * HOUR_S,
            )
            rate_h = batch_result(est.signal_estimator, state, pages=sel).change_rate_per_s
            interval[sel] = ratio / (rate_h * HOUR_S)
        now[idx] = b
        active[idx[~done]] = False
    rows = np.concatenate(seg_rows)
    lo = np.concatenate(seg_lo)
    hi = np.concatenate(seg_hi)
    c_rows = np.concatenate(crawl_rows)
    c_t = np.concatenate(crawl_t)
    # stable sorts by run keep each run's events in time order (they were appended in order)
    o = np.argsort(rows, kind="stable")
    rows, lo, hi = rows[o], lo[o], hi[o]
    o = np.argsort(c_rows, kind="stable")
    c_rows, c_t = c_rows[o], c_t[o]
    seg_cut = np.searchsorted(rows, np.arange(n + 1))
    crawl_cut = np.searchsorted(c_rows, np.arange(n + 1))
    out = np.empty((n, grid.size))
    for i in range(n):
        s, e = seg_cut[i], seg_cut[i + 1]
        stale_h = _ramp_sums(lo[s:e], grid) - _ramp_sums(hi[s:e], grid)
        crawls = np.searchsorted(c_t[crawl_cut[i] : crawl_cut[i + 1]], grid, side="right")
        out[i] = stale_cost * stale_h + crawl_cost * crawls
    return out


def cost_over_time(
    rng: np.random.Generator,
    *,
    n_sims: int,
    horizon_h: float,
    ratio_known: float,
    ratio_unknown: float,
    period_h: float = PERIOD_H,
    crawl_cost: float = 1.0,
    stale_cost: float = 1.0,
    step_h: float = 1.0,
) -> CostOverTime:
    """Cumulative cost over time with the change rate known and estimated (paper 003 Sec. 5.2).

    Both cases see the same ``N`` simulated Poisson change processes (period ``Delta``).
    Choice: the paper does not define "difference in cost over time"; we take the
    cumulative cost ``C_s * (stale hours in [0, t]) + C_c * (crawls in [0, t])`` on a grid
    of ``step_h`` hours, so that a constant gap in expected cost per hour shows as a line
    of that slope (Sec. 5.2: "the approximate slope of this linear trend is directly
    attributable to the difference in expected costs") and a cost paid only early shows
    as a curve that levels off.
    """
    changes = _Changes(rng, n_sims, horizon_h, period_h)
    grid = np.arange(0.0, horizon_h + 0.5 * step_h, step_h)
    args = (changes, grid, horizon_h, period_h)
    known = _simulate_cumulative(*args, ratio_known, True, crawl_cost, stale_cost)
    unknown = _simulate_cumulative(*args, ratio_unknown, False, crawl_cost, stale_cost)
    return CostOverTime(grid, known, unknown, ratio_known, ratio_unknown)


def lagged_difference(grid: FloatArray, curve: FloatArray, lag_h: float) -> FloatArray:
    """``curve(t) - curve(t - lag)`` (``NaN`` for ``t < lag``): the yellow lines of Figs. 6-7.

    Choice: the paper only says "a difference with lag=500"; we read it as the change of the
    mean cumulative difference over the last ``lag`` hours (zero once estimating costs
    nothing more at the margin).
    """
    shifted = np.interp(grid - lag_h, grid, curve, left=np.nan)
    out: FloatArray = curve - shifted
    return out


def _at(sim: CostOverTime, t: float) -> int:
    return int(np.searchsorted(sim.grid, t - 1e-9))


# --- driver -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class FigureSizes:
    """Run sizes: the paper's where it gives them (Figs. 6, 7), ours otherwise (Fig. 1)."""

    fig1_sims: int = 1000
    fig1_horizon_h: float = 1000.0
    fig1_step: float = 0.05
    fig1_max_ratio: float = 2.0
    fig6_sims: int = 200
    fig6_horizon_h: float = 12_000.0
    fig6_lag_h: float = 500.0
    fig7_sims: int = 1000
    fig7_horizon_h: float = 1000.0
    fig7_lag_h: float = 100.0
    grid_step: float = 0.1

    @classmethod
    def quick(cls) -> FigureSizes:
        return cls(
            fig1_sims=200, fig1_step=0.1, fig6_sims=50, fig6_horizon_h=3000.0, fig7_sims=200,
            grid_step=0.25,
        )


FIG3_COMBOS: list[tuple[float, float]] = [(1.0, 1.0), (4.0, 1.0), (1.0, 4.0), (10.0, 1.0)]
FIG3_COLOURS = ["tab:blue", "tab:green", "tab:red", "tab:purple"]


def _row(fig: str, quantity: str, ours: float | str, paper: str, file: str) -> dict[str, Any]:
    return {"figure": fig, "quantity": quantity, "ours": ours, "paper": paper, "file": file}


def _fig1(rng: np.random.Generator, sz: FigureSizes, out: pathlib.Path) -> list[dict[str, Any]]:
    name = "paper003_fig1.png"
    ratios = np.round(np.arange(sz.fig1_step, sz.fig1_max_ratio + 1e-9, sz.fig1_step), 10)
    sim = simulate_fixed_interval_cost(
        rng, ratios, n_sims=sz.fig1_sims, horizon_h=sz.fig1_horizon_h
    )
    fine = np.linspace(0.02, sz.fig1_max_ratio, 400)
    r_opt = optimal_ratio(PERIOD_H, 1.0, 1.0)
    assert isinstance(r_opt, float)
    z = np.abs(sim["mean"] - sim["model"]) / sim["se"]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(fine, cost_per_hour(fine, PERIOD_H, 1.0, 1.0), color="tab:green", label="model")
    ax.errorbar(sim["ratio"], sim["mean"], yerr=2 * sim["se"], color="tab:red", ls=":",
                marker=".", ms=4, capsize=0, label=f"simulated mean (±2 se, N={sz.fig1_sims})")
    ax.axvline(r_opt, color="grey", lw=0.8, ls="--", label=f"model optimum r = {r_opt:.3f}")
    ax.set_ylim(0.2, 0.9)
    ax.set_xlabel("crawl interval / Delta  (r)")
    ax.set_ylabel("cost per hour")
    ax.set_title("Paper 003 Fig. 1: Delta = 24 h, C_c = C_s = 1")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    sim_best = float(sim["ratio"][np.argmin(sim["mean"])])
    return [
        _row("1", "model optimum r (Sec. 3.2 root)", r_opt, "0.3", name),
        _row("1", f"simulated argmin r on the {sz.fig1_step:g} grid", sim_best, "0.3", name),
        _row("1", "max abs(sim - model) / se over the grid", float(z.max()), "lines align", name),
        _row("1", f"ratios within 2 se of the model (of {ratios.size})",
             int((z <= 2).sum()), "", name),
        _row("1", "simulated cost per hour at r = 0.3 (model)",
             f"{sim['mean'][np.argmin(np.abs(ratios - 0.3))]:.4f} "
             f"± {sim['se'][np.argmin(np.abs(ratios - 0.3))]:.4f} "
             f"({cost_per_hour(0.3, PERIOD_H, 1.0, 1.0)[()]:.4f})", "", name),
    ]


def _fig2(sz: FigureSizes, out: pathlib.Path) -> list[dict[str, Any]]:
    name = "paper003_fig2.png"
    costs = np.round(np.arange(sz.grid_step, 5.0 + 1e-9, sz.grid_step), 10)
    g = fig2_grid(costs, costs)
    z = costs[None, :] / (costs[:, None] * PERIOD_H)  # C_c / (C_s Delta), Sec. 3.2
    # near z = 1 the cost is flat over a wide range of r and any search is ill-conditioned
    both = np.isfinite(g["closed"]) & np.isfinite(g["search"]) & (z <= 0.9)
    rel = np.abs(g["search"][both] / g["closed"][both] - 1.0)
    nan_agree = bool(np.array_equal(np.isnan(g["search"]), np.isnan(g["closed"])))
    fig, ax = plt.subplots(figsize=(6, 5))
    data = np.ma.masked_invalid(g["search"])
    mesh = ax.pcolormesh(costs, costs, data, shading="nearest", cmap="viridis",
                         norm=LogNorm(vmin=0.03, vmax=10.0))
    ax.set_facecolor("lightgrey")
    levels = [0.1, 0.15, 0.2, 0.3, 0.5, 0.8, 1.5, 3.0]
    cs_lines = ax.contour(costs, costs, data, levels=levels, colors="white", linewidths=0.8)
    ax.clabel(cs_lines, fmt="%g", fontsize=7)
    fig.colorbar(mesh, ax=ax, label="cost-minimising r = t / Delta")
    ax.set_xlabel("C_c (cost of a crawl)")
    ax.set_ylabel("C_s (cost of a stale hour)")
    ax.set_title("Paper 003 Fig. 2: optimal r, Delta = 24 h\n(grey: C_c >= 24 C_s, never crawl)")
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)

    def at(cc: float, cs: float) -> float:
        return float(optimal_ratio_by_search(PERIOD_H, cc, cs))

    return [
        _row("2", "r at C_c = C_s = 1", at(1.0, 1.0), "0.3 (Fig. 1)", name),
        _row("2", "r at C_c = 4 C_s (C_c = 4, C_s = 1)", at(4.0, 1.0), "about 0.8", name),
        _row("2", "C_c / C_s where r = 0.8", crawl_to_stale_cost_for_ratio(0.8),
             "about 4", name),
        _row("2", "r at C_s = 4 C_c (C_c = 1, C_s = 4)", at(1.0, 4.0), "about 0.15", name),
        _row("2", f"max rel. diff search vs closed form ({int(both.sum())} cells, "
             "C_c <= 0.9 C_s Delta)",
             float(rel.max()), "solutions match", name),
        _row("2", "no-optimum cells agree (search vs C_c >= C_s Delta)", str(nan_agree),
             "", name),
    ]


def _fig3(out: pathlib.Path) -> list[dict[str, Any]]:
    name = "paper003_fig3.png"
    periods = np.geomspace(1.0, 1e4, 600)
    c = fig3_curves(periods, FIG3_COMBOS)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    lin = periods <= 500.0
    for k, ((cc, cs), col) in enumerate(zip(FIG3_COMBOS, FIG3_COLOURS, strict=True)):
        label = f"C_c = {cc:g}, C_s = {cs:g}"
        axes[0].plot(periods[lin], c["ratio"][k][lin], color=col, label=label)
        axes[1].loglog(periods, c["ratio"][k], color=col, label=label)
        axes[1].loglog(periods, c["asymptote"][k], color=col, ls=":", lw=0.9)
    axes[0].set_ylim(0.0, 3.0)
    axes[0].set_xlabel("Delta (h)")
    axes[0].set_ylabel("optimal r = t / Delta")
    axes[0].set_title("Paper 003 Fig. 3 (linear axes)")
    axes[0].legend()
    axes[1].set_xlabel("Delta (h)")
    axes[1].set_ylabel("optimal r")
    axes[1].set_title("log axes; dotted: Sec. 3.4 sqrt(2 C_c / (C_s Delta))")
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    blue, green = c["ratio"][0], c["ratio"][1]
    ok = np.isfinite(green)
    rows = [
        _row("3", f"r (C_c = C_s = 1) at Delta = {d:g} h",
             float(np.asarray(optimal_ratio(d, 1.0, 1.0))), "", name)
        for d in (24.0, 200.0, 1000.0)
    ]
    rows += [
        _row("3", f"r / sqrt(2 C_c/(C_s Delta)) (C_c = C_s = 1) at Delta = {d:g} h",
             float(np.asarray(optimal_ratio(d, 1.0, 1.0)) / math.sqrt(2.0 / d)),
             "-> 1 (Sec. 3.4)", name)
        for d in (24.0, 1000.0, 1e4)
    ]
    rows.append(_row("3", "green (C_c = 4 C_s) above blue (C_c = C_s) wherever both exist",
                     str(bool(np.all(green[ok] > blue[ok]))), "yes", name))
    rows.append(_row("3", "smallest Delta with an optimum for C_c = 4 C_s (h)",
                     float(periods[ok][0]), "", name))
    return rows


def _plot_difference(sim: CostOverTime, lag: float, title: str, path: pathlib.Path) -> None:
    d = sim.difference
    mean = d.mean(axis=0)
    q25, q75 = np.percentile(d, [25.0, 75.0], axis=0)
    lagged = lagged_difference(sim.grid, mean, lag)
    expected = (
        cost_per_hour(sim.ratio_known, PERIOD_H, 1.0, 1.0)
        - cost_per_hour(sim.ratio_unknown, PERIOD_H, 1.0, 1.0)
    )[()] * sim.grid
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(sim.grid, q25, color="black", lw=0.8, label="interquartile range")
    ax.plot(sim.grid, q75, color="black", lw=0.8)
    ax.plot(sim.grid, mean, color="tab:orange", lw=2, label="mean")
    ax.plot(sim.grid, lagged, color="gold", lw=1.5, label=f"mean(t) - mean(t - {lag:g} h)")
    ax.plot(sim.grid, expected, color="tab:green", ls="--", lw=0.9,
            label="t x (C(r_known) - C(r_unknown)), Sec. 3.1")
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.set_xlabel("hours since the page appeared")
    ax.set_ylabel("cumulative cost, known - unknown Delta")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _fig6(rng: np.random.Generator, sz: FigureSizes, out: pathlib.Path) -> list[dict[str, Any]]:
    name = "paper003_fig6.png"
    n, horizon, lag = sz.fig6_sims, sz.fig6_horizon_h, sz.fig6_lag_h
    sim = cost_over_time(rng, n_sims=n, horizon_h=horizon, ratio_known=1 / 3,
                         ratio_unknown=1 / 3)
    _plot_difference(sim, lag, f"Paper 003 Fig. 6: r = 1/3 both, N = {n} x {horizon:.0f} h",
                     out / name)
    d = sim.difference
    end, early = _at(sim, horizon), _at(sim, 1500.0)
    last = d[:, end] - d[:, _at(sim, horizon - lag)]
    first = d[:, _at(sim, lag)]
    se = math.sqrt(n)

    def pm(x: FloatArray) -> str:
        return f"{x.mean():+.2f} ± {x.std(ddof=1) / se:.2f}"

    return [
        _row("6", "mean difference at 1500 h", pm(d[:, early]), "", name),
        _row("6", f"mean difference at {horizon:.0f} h", pm(d[:, end]), "flat (asymptote)",
             name),
        _row("6", "share of the final mean difference reached by 1500 h",
             float(d[:, early].mean() / d[:, end].mean()), "cost 'largely borne in the first "
             "1500 hours'", name),
        _row("6", f"mean change over the first {lag:.0f} h", pm(first), "", name),
        _row("6", f"mean change over the last {lag:.0f} h (lag {lag:.0f})", pm(last),
             "about 0", name),
        _row("6", f"interquartile range at {horizon:.0f} h",
             "{:+.1f} .. {:+.1f}".format(*np.percentile(d[:, end], [25.0, 75.0])), "", name),
    ]


def _fig7(rng: np.random.Generator, sz: FigureSizes, out: pathlib.Path) -> list[dict[str, Any]]:
    name = "paper003_fig7.png"
    n, horizon, lag = sz.fig7_sims, sz.fig7_horizon_h, sz.fig7_lag_h
    sim = cost_over_time(rng, n_sims=n, horizon_h=horizon, ratio_known=0.8,
                         ratio_unknown=1 / 3)
    _plot_difference(sim, lag, f"Paper 003 Fig. 7: r = 0.8 known, 1/3 estimated, "
                     f"N = {n} x {horizon:.0f} h", out / name)
    d = sim.difference
    mean = d.mean(axis=0)
    half = _at(sim, horizon / 2)
    end = _at(sim, horizon)
    slope = (d[:, end] - d[:, half]) / (sim.grid[end] - sim.grid[half])
    expected = float(
        cost_per_hour(0.8, PERIOD_H, 1.0, 1.0)[()] - cost_per_hour(1 / 3, PERIOD_H, 1.0, 1.0)[()]
    )
    neg = np.flatnonzero(mean < 0.0)
    se = math.sqrt(n)
    return [
        _row("7", "expected slope C(0.8) - C(1/3) (Sec. 3.1), per hour", expected,
             "slope 'directly attributable' to it", name),
        _row("7", f"slope of the mean, {horizon / 2:.0f}-{horizon:.0f} h, per hour",
             f"{slope.mean():.4f} ± {slope.std(ddof=1) / se:.4f}", "linear", name),
        _row("7", f"mean difference at {horizon:.0f} h",
             f"{d[:, end].mean():+.2f} ± {d[:, end].std(ddof=1) / se:.2f}",
             "> 0 (favours unknown)", name),
        _row("7", "most negative mean difference (h)",
             f"{mean.min():+.2f} at {sim.grid[int(np.argmin(mean))]:.0f} h",
             "known cheaper in the first few hours", name),
        _row("7", "last hour with mean difference < 0",
             f"{sim.grid[neg[-1]]:.0f}" if neg.size else "never", "", name),
        _row("7", f"mean change over the last {lag:.0f} h (lag {lag:.0f})",
             float(lagged_difference(sim.grid, mean, lag)[end]), "", name),
    ]


def run_figures(out_dir: pathlib.Path, seed: int, quick: bool) -> list[dict[str, Any]]:
    """Write ``paper003_fig{1,2,3,6,7}.png`` into ``out_dir``; return the key numbers as rows.

    Each row is ``{"figure", "quantity", "ours", "paper", "file"}`` (``paper``: what paper
    003 states, ``""`` where it states nothing).  The random streams are spawned from
    ``seed`` and do not touch the generator of the Figs. 5 and 8 runs.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    sz = FigureSizes.quick() if quick else FigureSizes()
    rng1, rng6, rng7 = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    rows = _fig1(rng1, sz, out_dir)
    rows += _fig2(sz, out_dir)
    rows += _fig3(out_dir)
    rows += _fig6(rng6, sz, out_dir)
    rows += _fig7(rng7, sz, out_dir)
    return rows


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e-3 and v != 0.0 else f"{v:.4f}"
    return str(v)


def figures_table(rows: list[dict[str, Any]]) -> str:
    """Markdown table of :func:`run_figures` rows."""
    lines = ["| fig. | quantity | ours | paper |", "| --- | --- | ---: | --- |"]
    lines += [
        f"| {r['figure']} | {r['quantity']} | {_fmt(r['ours'])} | {r['paper']} |" for r in rows
    ]
    return "\n".join(lines) + "\n"
