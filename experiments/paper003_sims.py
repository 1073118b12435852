"""The numbers behind paper 003's Figs. 1, 2, 3, 6 and 7 (no plotting).

The Monte Carlo simulations and searches that :mod:`experiments.paper003_figs`
draws; split out of it, which re-exports every name.  What each figure shows,
the formulas and the paper's sections: see that module's docstring.

Choices where the paper is silent are listed in the docstrings ("Choice:").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from models.cost import asymptotic_interval, cost_per_hour, optimal_ratio
from models.estimators import ChangeRateEstimator, batch_init, batch_result, batch_update

__all__ = [
    "GOLDEN",
    "HOUR_S",
    "PERIOD_H",
    "CostOverTime",
    "cost_over_time",
    "crawl_to_stale_cost_for_ratio",
    "fig2_grid",
    "fig3_curves",
    "lagged_difference",
    "optimal_ratio_by_search",
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
