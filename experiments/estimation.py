"""Reproductions of the estimation experiments of paper 004 (App. E) and paper 003 (Sec. 5).

``python -m experiments.estimation app-e [--quick] [--seed N] [--out DIR] [--json PATH]``
``python -m experiments.estimation paper003 [--figures] [...]`` (``--figures``: also
paper 003's Figs. 1-3, 6 and 7, from :mod:`experiments.paper003_figs`)

Each run writes PNG plots and a markdown table (``app_e.md`` / ``paper003.md``) into ``--out``
and, with ``--json``, the numbers as JSON.  All the estimation code is in ``models``; this
module only simulates, loops and reports.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
from rich.progress import Progress

from experiments.paper003_figs import figures_table, run_figures
from models.estimators import (
    ChangeRateEstimator,
    SignalEstimator,
    batch_init,
    batch_result,
    batch_update,
    fit_signal_mle,
    naive_precision_recall,
)
from models.simulate_estimation import simulate_page_intervals

__all__ = [
    "AppEConfig",
    "Paper003Config",
    "main",
    "run_app_e",
    "run_paper003",
    "theoretical_cost_per_hour",
]

FloatArray = npt.NDArray[np.float64]
HOUR_S = 3600.0


def _progress(total: int, label: str) -> Iterator[int]:
    with Progress(transient=True, disable=not sys.stderr.isatty()) as bar:
        task = bar.add_task(label, total=total)
        for i in range(total):
            yield i
            bar.advance(task)


# --- paper 004 App. E -----------------------------------------------------------------------
@dataclass(frozen=True)
class AppEConfig:
    """Experiment of paper 004 App. E (time unit: hours, passed to the models in seconds)."""

    n_pages: int = 200
    horizon_h: float = 100_000.0
    streaming: bool = True


def run_app_e(cfg: AppEConfig, rng: np.random.Generator) -> dict[str, Any]:
    """Naive vs MLE (full data) vs streaming MLE of precision and recall on simulated pages.

    Per page: precision and recall ~ U(0.2, 0.95), mean change interval ~ U(2, 20) h, crawl
    rate = change rate times a factor log-uniform in [1/4, 4], Poisson crawl times over the
    horizon; one ping source.
    """
    n = cfg.n_pages
    prec = rng.uniform(0.2, 0.95, n)
    rec = rng.uniform(0.2, 0.95, n)
    rate = 1.0 / (rng.uniform(2.0, 20.0, n) * HOUR_S)
    crawl = rate * np.exp(rng.uniform(math.log(0.25), math.log(4.0), n))
    sims = []
    out = {k: np.zeros(n) for k in ("naive_p", "naive_r", "mle_p", "mle_r", "str_p", "str_r")}
    for i in _progress(n, "App. E pages"):
        m = max(2, round(cfg.horizon_h * HOUR_S * crawl[i]))
        sim = simulate_page_intervals(
            rng,
            change_rate_per_s=float(rate[i]),
            crawl_rate_per_s=float(crawl[i]),
            n_intervals=m,
            recall=(float(rec[i]),),
            precision=(float(prec[i]),),
        )
        sims.append(sim)
        p, r = naive_precision_recall(sim.n_signals, sim.changed)
        out["naive_p"][i], out["naive_r"][i] = p[0], r[0]
        f = fit_signal_mle(sim.interval_s, sim.n_signals, sim.changed)
        out["mle_p"][i], out["mle_r"][i] = f.precision[0], f.recall[0]
    t_stream = 0.0
    n_updates = 0
    if cfg.streaming:
        est = SignalEstimator(1)
        state = batch_init(est, n)
        lengths = np.array([s.changed.size for s in sims])
        t0 = time.perf_counter()
        for j in _progress(int(lengths.max()), "App. E streaming"):
            pages = np.flatnonzero(lengths > j)
            batch_update(
                est,
                state,
                np.array([sims[i].interval_s[j] for i in pages]),
                np.array([sims[i].changed[j] for i in pages]),
                np.array([sims[i].n_signals[j] for i in pages]),
                pages=pages,
            )
            n_updates += pages.size
        res = batch_result(est, state)
        t_stream = time.perf_counter() - t0
        out["str_p"], out["str_r"] = res.precision[:, 0], res.recall[:, 0]
    summary: dict[str, Any] = {
        "n_pages": n,
        "horizon_h": cfg.horizon_h,
        "intervals_per_page_median": float(np.median([s.changed.size for s in sims])),
        "streaming_updates": n_updates,
        "streaming_seconds": t_stream,
    }
    for key, label in (("naive", "naive"), ("mle", "MLE (all data)"), ("str", "MLE (streaming)")):
        if key == "str" and not cfg.streaming:
            continue
        for what, truth in (("precision", prec), ("recall", rec)):
            err = out[f"{key}_{what[0]}"] - truth
            summary[f"{key}_{what}"] = {
                "label": label,
                "mean_error": float(np.mean(err)),
                "mean_abs_error": float(np.mean(np.abs(err))),
                "max_abs_error": float(np.max(np.abs(err))),
            }
    summary["_arrays"] = {"precision": prec, "recall": rec, **out}
    return summary


def _plot_app_e(summary: dict[str, Any], out: pathlib.Path) -> list[str]:
    arr = summary["_arrays"]
    files = []
    for key, fig_name, title in (
        ("naive", "app_e_fig13_naive.png", "Naive estimator (cf. paper 004 Fig. 13)"),
        ("mle", "app_e_fig14_mle.png", "MLE (cf. paper 004 Fig. 14)"),
    ):
        fig, axes = plt.subplots(1, 2, figsize=(9, 4))
        for ax, what in zip(axes, ("precision", "recall"), strict=True):
            err = arr[f"{key}_{what[0]}"] - arr[what]
            ax.scatter(arr[what], err, s=8)
            ax.axhline(0.0, color="k", lw=0.8)
            ax.set_xlabel(f"true {what}")
            ax.set_ylabel(f"estimate - true {what}")
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(out / fig_name, dpi=110)
        plt.close(fig)
        files.append(fig_name)
    return files


def _table_app_e(summary: dict[str, Any]) -> str:
    rows = [
        "| estimator | quantity | mean error (bias) | mean abs error | max abs error |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for key in ("naive", "mle", "str"):
        for what in ("precision", "recall"):
            s = summary.get(f"{key}_{what}")
            if s is None:
                continue
            rows.append(
                f"| {s['label']} | {what} | {s['mean_error']:+.2e} | "
                f"{s['mean_abs_error']:.2e} | {s['max_abs_error']:.2e} |"
            )
    return "\n".join(rows) + "\n"


# --- paper 003 Sec. 5 -----------------------------------------------------------------------
@dataclass(frozen=True)
class Paper003Config:
    """Sec. 5 of paper 003: ``C_s = C_c = 1``, period 24 h, ``r = 1/3``."""

    n_sims: int = 1000
    horizon_h: float = 1000.0
    period_h: float = 24.0
    ratio: float = 1.0 / 3.0
    cost_stale: float = 1.0
    cost_crawl: float = 1.0


def theoretical_cost_per_hour(ratio: float, period_h: float, c_s: float, c_c: float) -> float:
    """Paper 003 Sec. 3.1: ``(1 - (1 - e^-r)/r)*C_s + C_c/(r*Delta)``."""
    return (1.0 - (-math.expm1(-ratio)) / ratio) * c_s + c_c / (ratio * period_h)


def _first_change_after(
    padded: FloatArray, rows: npt.NDArray[np.int64], big: float, flat: FloatArray, t: FloatArray
) -> FloatArray:
    """First change time after ``t[i]`` in row ``rows[i]`` of the padded change times.

    Rows are sorted and padded with a time past the horizon; ``flat`` is
    ``(padded + row*big).ravel()``, globally sorted, so one ``searchsorted`` serves all rows.
    """
    k = padded.shape[1]
    pos = np.searchsorted(flat, t + rows * big, side="right") - rows * k
    pos = np.minimum(pos, k - 1)
    out: FloatArray = padded[rows, pos]
    return out


def run_paper003(cfg: Paper003Config, rng: np.random.Generator) -> dict[str, Any]:
    """Known vs estimated change rate on the same simulated change processes.

    Known: crawl every ``r*period``.  Unknown: crawl ``r/rate_hat`` after each crawl, with
    ``rate_hat`` the streaming Cho and Garcia-Molina MLE from the Grimes-Ford start
    (:class:`~models.estimators.ChangeRateEstimator`), updated at every crawl.
    Staleness of an interval = time from its first change to the crawl; "very stale" =
    stale for ``C = r*period`` hours or more.  Runs stop at the horizon (the last, cut
    interval counts its staleness up to the horizon but neither a crawl nor an interval).
    """
    n, horizon = cfg.n_sims, cfg.horizon_h
    lam = 1.0 / cfg.period_h
    counts = rng.poisson(lam * horizon, n)
    k = int(counts.max()) + 1
    padded = np.full((n, k), 2.0 * horizon)
    for i in range(n):
        padded[i, : counts[i]] = np.sort(rng.uniform(0.0, horizon, counts[i]))
    big = 4.0 * horizon
    row_offset = np.arange(n) * big
    flat = (padded + row_offset[:, None]).ravel()
    c_len = cfg.ratio * cfg.period_h
    # time bins for the plot: a whole number of known-rate crawl intervals each, so the
    # synchronised known-rate runs do not alias
    width = c_len * max(1, round(horizon / 50.0 / c_len))
    n_bins = math.ceil(horizon / width - 1e-9)
    edges = np.minimum(np.arange(n_bins + 1) * width, horizon)

    def simulate(known: bool) -> dict[str, Any]:
        est = ChangeRateEstimator()
        state = batch_init(est.signal_estimator, n)
        now = np.zeros(n)
        stale_total = np.zeros(n)
        stale_by_bin = np.zeros((n, n_bins))
        crawls_by_bin = np.zeros((n, n_bins))
        n_crawls = np.zeros(n)
        n_changed = np.zeros(n)
        very_stale = np.zeros(n)
        hist: list[FloatArray] = []
        first_h = cfg.ratio / (est.pseudo.prior_rate_per_s * HOUR_S)
        interval = np.full(n, c_len if known else first_h)
        active = np.ones(n, dtype=bool)
        steps = 0
        while active.any():
            idx = np.flatnonzero(active)
            a = now[idx]
            b = a + interval[idx]
            f = _first_change_after(padded, idx, big, flat, a)
            done = b <= horizon
            end = np.minimum(b, horizon)
            stale = np.maximum(0.0, end - f)
            stale_total[idx] += stale
            # cost over time: staleness lies in [f, end]; attribute it to bins exactly
            lo = np.minimum(f, end)
            # and the crawl that closes an interval is spread over it
            share = np.where(done, 1.0 / np.maximum(b - a, 1e-12), 0.0)
            for j in range(n_bins):
                seg = np.clip(np.minimum(end, edges[j + 1]) - np.maximum(lo, edges[j]), 0.0, None)
                stale_by_bin[idx, j] += seg
                span = np.clip(np.minimum(end, edges[j + 1]) - np.maximum(a, edges[j]), 0.0, None)
                crawls_by_bin[idx, j] += span * share
            changed = f <= b
            sel = idx[done]
            n_crawls[sel] += 1
            n_changed[sel] += changed[done]
            very_stale[sel] += stale[done] >= c_len
            hist.append(stale[done & changed])
            if not known:
                batch_update(
                    est.signal_estimator,
                    state,
                    interval[sel] * HOUR_S,
                    changed[done],
                    pages=sel,
                    end_s=b[done] * HOUR_S,
                )
                rate_h = batch_result(est.signal_estimator, state, pages=sel).change_rate_per_s
                interval[sel] = cfg.ratio / (rate_h * HOUR_S)
            now[idx] = b
            active[idx[~done]] = False
            steps += 1
        cost_bin = (cfg.cost_stale * stale_by_bin + cfg.cost_crawl * crawls_by_bin) / np.diff(edges)
        return {
            "cost_per_hour": float(
                np.mean((cfg.cost_stale * stale_total + cfg.cost_crawl * n_crawls) / horizon)
            ),
            "cost_per_hour_se": float(
                np.std((cfg.cost_stale * stale_total + cfg.cost_crawl * n_crawls) / horizon)
                / math.sqrt(n)
            ),
            "very_stale_share": float(very_stale.sum() / n_crawls.sum()),
            "changed_share": float(n_changed.sum() / n_crawls.sum()),
            "crawls_per_sim": float(n_crawls.mean()),
            "_cost_by_bin": cost_bin,
            "_stale": np.concatenate(hist) if hist else np.zeros(0),
        }

    known = simulate(True)
    unknown = simulate(False)
    theory = theoretical_cost_per_hour(cfg.ratio, cfg.period_h, cfg.cost_stale, cfg.cost_crawl)
    return {
        "n_sims": n,
        "horizon_h": horizon,
        "ratio": cfg.ratio,
        "period_h": cfg.period_h,
        "theory_cost_per_hour": theory,
        "theory_changed_share": -math.expm1(-cfg.ratio),
        "known": known,
        "unknown": unknown,
        "_edges": edges,
    }


def _plot_paper003(res: dict[str, Any], out: pathlib.Path, tag: str) -> list[str]:
    edges = res["_edges"]
    mid = 0.5 * (edges[1:] + edges[:-1])
    kn, un = res["known"], res["unknown"]
    files = []
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(mid, kn["_cost_by_bin"].mean(axis=0), label="rate known", color="tab:blue")
    ax.plot(mid, un["_cost_by_bin"].mean(axis=0), label="rate estimated online", color="tab:red")
    ax.axhline(res["theory_cost_per_hour"], color="tab:green", label="theory")
    ax.set_xlabel("hours since the page appeared")
    ax.set_ylabel("mean cost per hour")
    ax.set_title(f"Cost per hour over time ({res['n_sims']} runs of {res['horizon_h']:.0f} h)")
    ax.legend()
    fig.tight_layout()
    name = f"paper003_cost_{tag}.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    files.append(name)
    fig, ax = plt.subplots(figsize=(6, 4))
    bins = list(range(13))
    for data, label, alpha in ((kn["_stale"], "known", 0.5), (un["_stale"], "estimated", 0.8)):
        w = np.ones(data.size) / max(data.size, 1)
        ax.hist(np.minimum(data, 12.0), bins=bins, weights=w, alpha=alpha, label=label)
    ax.set_xlabel("staleness of a stale interval (h, truncated at 12)")
    ax.set_ylabel("share")
    ax.set_title("Staleness (cf. paper 003 Fig. 8)")
    ax.legend()
    fig.tight_layout()
    name = f"paper003_staleness_{tag}.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    files.append(name)
    return files


def _table_paper003(runs: list[dict[str, Any]]) -> str:
    rows = [
        "| runs x hours | case | cost per hour (± se) | very stale share | changed share |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for r in runs:
        head = f"{r['n_sims']} x {r['horizon_h']:.0f}"
        rows.append(
            f"| {head} | theory | {r['theory_cost_per_hour']:.4f} | 0 | "
            f"{r['theory_changed_share']:.1%} |"
        )
        for case in ("known", "unknown"):
            c = r[case]
            rows.append(
                f"| {head} | {'rate known' if case == 'known' else 'estimated online'} | "
                f"{c['cost_per_hour']:.4f} ± {c['cost_per_hour_se']:.4f} | "
                f"{c['very_stale_share']:.1%} | {c['changed_share']:.1%} |"
            )
    return "\n".join(rows) + "\n"


def _public(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _public(v) for k, v in d.items() if not k.startswith("_")}
    return d


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; returns the exit status."""
    ap = argparse.ArgumentParser(prog="recrawl experiments", description=__doc__.splitlines()[0])
    ap.add_argument("experiment", choices=["app-e", "paper003"])
    ap.add_argument("--quick", action="store_true", help="small sizes (seconds), for tests")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results/estimation"))
    ap.add_argument("--json", type=pathlib.Path, default=None, help="write the numbers here")
    ap.add_argument(
        "--figures", action="store_true", help="paper003: also Figs. 1-3, 6, 7 (paper003_figs)"
    )
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    t0 = time.perf_counter()
    if args.experiment == "app-e":
        cfg = AppEConfig(n_pages=20, horizon_h=5_000.0) if args.quick else AppEConfig()
        summary = run_app_e(cfg, rng)
        files = _plot_app_e(summary, args.out)
        table = _table_app_e(summary)
        result: dict[str, Any] = _public(summary)
        (args.out / "app_e.md").write_text(table)
    else:
        sizes = [(100, 1000.0), (30, 4000.0)] if args.quick else [(1000, 1000.0), (1000, 12000.0)]
        runs = []
        files = []
        for n_sims, hours in sizes:
            res = run_paper003(Paper003Config(n_sims=n_sims, horizon_h=hours), rng)
            files += _plot_paper003(res, args.out, f"{hours:.0f}h")
            runs.append(res)
        table = _table_paper003(runs)
        (args.out / "paper003.md").write_text(table)
        result = {"runs": [_public(r) for r in runs]}
        if args.figures:
            fig_rows = run_figures(args.out, args.seed, args.quick)
            table += "\n" + figures_table(fig_rows)
            (args.out / "paper003.md").write_text(table)
            files += list(dict.fromkeys(r["file"] for r in fig_rows))
            result["figures"] = fig_rows
    result["seconds"] = time.perf_counter() - t0
    result["files"] = files
    print(table)
    print(f"wrote {', '.join(files)} and the table to {args.out} in {result['seconds']:.1f} s")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
