"""Paper 003's Figs. 1, 2, 3, 6 and 7 (its Figs. 5 and 8 are in ``estimation.py``).

``python -m experiments.estimation paper003 --figures [--quick] [--seed N] [--out DIR]``
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

The simulations and searches are in :mod:`experiments.paper003_sims`;
this module draws the figures and re-exports them.

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
from matplotlib.colors import LogNorm

from experiments.paper003_sims import (
    PERIOD_H,
    CostOverTime,
    FloatArray,
    _at,
    cost_over_time,
    crawl_to_stale_cost_for_ratio,
    fig2_grid,
    fig3_curves,
    lagged_difference,
    optimal_ratio_by_search,
    simulate_fixed_interval_cost,
)
from models.cost import cost_per_hour, optimal_ratio

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
