"""Beyond paper 004: uncertain estimates, several ping sources, a longest-interval floor.

``recrawl experiments NAME [--quick] [--reps N] [--jobs 2] [--out DIR] [--json PATH]``

===========  ================================================================================
uncertainty  Algorithm 1 with online App. E estimates: plug-in (``-est``) vs the expected
             value under the estimates' uncertainty (``-uncertain``, ``x2``: doubled
             sigma) vs the value at a conservative (90% quantile) rate; true parameters as
             reference.  Accuracy and very-stale share.
sources      two ping sources per page (sitemap-like: high recall, noisy, late; IndexNow-
             like: low recall, precise, immediate): each ping with its own ``beta_s``
             (pooled-shape value, and the exact several-source value) vs all pings merged
             into one source vs one source alone vs no pings.
floor        Greedy-NCIS (true and estimated parameters) with a longest-interval floor
             ``F`` in {none, 8, 4, 2, 1.5, 1} x ``m/R``: reactive (the streaming
             scheduler's rule) and proactive (earliest deadline, never above F).
===========  ================================================================================

The policies are in :mod:`models.sim.variants`; ``very_stale`` is
:func:`models.sim.engine.stale_share` (importance-weighted share of time a page is stale
and uncrawled for more than 5 mean change intervals).  Every table says its scale.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments._common import (
    Job,
    Row,
    add_paired,
    aggregate,
    figure,
    markdown_table,
    parser,
    rng,
    run_jobs,
    write_outputs,
)
from models.sim import Budget, EstimatingAlgorithm1, accuracy, algorithm1, run, simulate_events
from models.sim import synthetic_world as _synthetic_world
from models.sim.engine import stale_share
from models.sim.policies import Policy
from models.sim.variants import (
    FloorPolicy,
    UncertainAlgorithm1,
    simulate_source_events,
    source_policy,
    two_source_world,
)

__all__ = ["NAMES", "main"]

NAMES = ("uncertainty", "sources", "floor")
R = 100.0
BURN = 0.2  # share of the horizon left out of the metrics

UNCERTAINTY_POLICIES = (
    "greedy-ncis", "greedy-ncis-est", "greedy-ncis-uncertain", "greedy-ncis-uncertain-x2",
    "greedy-ncis-conservative", "greedy-est", "greedy-uncertain",
)
SOURCE_KINDS = {  # row name -> models.sim.variants.source_policy kind
    "per-source": "per-source", "per-source-exact": "per-source-exact", "merged": "merged",
    "only-sitemap": "only-0", "only-indexnow": "only-1", "greedy": "greedy",
}
FLOOR_MULTIPLES = (math.inf, 8.0, 4.0, 2.0, 1.5, 1.0)


def _scale(name: str, quick: bool) -> dict[str, Any]:
    """(ms, horizon T, reps) per experiment and mode."""
    if name == "uncertainty":
        return {"ms": [100 if quick else 300], "T": 8.0 if quick else 40.0,
                "reps": 1 if quick else 4}
    if name == "sources":
        return {"ms": [100] if quick else [100, 300, 1000], "T": 10.0 if quick else 40.0,
                "reps": 1 if quick else 6}
    if name == "floor":
        return {"ms": [100 if quick else 300], "T": 8.0 if quick else 40.0,
                "reps": 1 if quick else 4}
    raise ValueError(name)


def _synthetic(job: Job) -> Any:
    """The Sec. 6.6 world of the ``est`` experiment: ``lam ~ Beta(.25,.25)``, ``nu ~ U(.1,.6)``."""
    m, rep = job["m"], job["rep"]
    w = _synthetic_world(m, rng(job["seed"], m, rep), lam_beta=(0.25, 0.25),
                         nu_range=(0.1, 0.6))
    ev = simulate_events(w, job["T"], rng(job["seed"], m, rep, 1))
    return w, ev


# ----------------------------------------------------------------------------- jobs
def _uncertainty_policy(kind: str, w: Any) -> Policy:
    if kind == "greedy-ncis":
        return algorithm1(kind, w.mu, w.delta, w.lam, w.nu)
    if kind == "greedy-ncis-est":
        return EstimatingAlgorithm1(kind, w.mu, use_pings=True)
    if kind == "greedy-est":
        return EstimatingAlgorithm1(kind, w.mu, use_pings=False)
    if kind == "greedy-ncis-uncertain":
        return UncertainAlgorithm1(kind, w.mu)
    if kind == "greedy-ncis-uncertain-x2":
        return UncertainAlgorithm1(kind, w.mu, uncertainty_scale=2.0)
    if kind == "greedy-ncis-conservative":
        return UncertainAlgorithm1(kind, w.mu, mode="conservative", quantile=0.9)
    if kind == "greedy-uncertain":
        return UncertainAlgorithm1(kind, w.mu, use_pings=False)
    raise ValueError(kind)


def _uncertainty_job(job: Job) -> list[Row]:
    w, ev = _synthetic(job)
    t0 = time.perf_counter()
    res = run(w, ev, _uncertainty_policy(job["policy"], w), Budget(R))
    start = BURN * job["T"]
    return [{"experiment": "uncertainty", "m": job["m"], "policy": job["policy"],
             "rep": job["rep"], "accuracy": accuracy(w, ev, res, start=start),
             "very_stale": stale_share(w, ev, res, start=start),
             "seconds": time.perf_counter() - t0}]


def _sources_job(job: Job) -> list[Row]:
    m, rep, T = job["m"], job["rep"], job["T"]
    sw = two_source_world(m, rng(job["seed"], m, rep))
    se = simulate_source_events(sw, T, rng(job["seed"], m, rep, 1), delay_unit=1.0 / R)
    w = sw.world()
    t0 = time.perf_counter()
    pol = source_policy(SOURCE_KINDS[job["policy"]], sw, se, ping_rule="strict")
    res = run(w, se.events, pol, Budget(R))
    start = BURN * T
    return [{"experiment": "sources", "m": m, "policy": job["policy"], "rep": rep,
             "accuracy": accuracy(w, se.events, res, start=start),
             "very_stale": stale_share(w, se.events, res, start=start),
             "seconds": time.perf_counter() - t0}]


def _floor_job(job: Job) -> list[Row]:
    w, ev = _synthetic(job)
    m, base, mult, mode = job["m"], job["policy"], job["floor"], job["mode"]
    inner: Policy = (algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu)
                     if base == "greedy-ncis" else EstimatingAlgorithm1(base, w.mu))
    t0 = time.perf_counter()
    pol: Policy = inner
    if math.isfinite(mult):
        pol = FloorPolicy(inner, m, mult * m / R, rate=R, mode=mode)
    res = run(w, ev, pol, Budget(R))
    start = BURN * job["T"]
    forced = getattr(pol, "forced", 0) / max(1, res.crawl_time.size)
    return [{"experiment": "floor", "m": m, "policy": base, "mode": mode,
             "floor": "none" if not math.isfinite(mult) else f"{mult:g}",
             "rep": job["rep"],
             "accuracy": accuracy(w, ev, res, start=start),
             "very_stale": stale_share(w, ev, res, start=start),
             "forced_share": forced, "max_interval": _max_interval(res, m, job["T"]),
             "seconds": time.perf_counter() - t0}]


def _max_interval(res: Any, m: int, horizon: float) -> float:
    """Longest time any page went uncrawled (from 0 and to the horizon included)."""
    t = np.concatenate([np.zeros(m), res.crawl_time, np.full(m, horizon)])
    p = np.concatenate([np.arange(m), res.crawl_page, np.arange(m)])
    o = np.lexsort((t, p))
    t, p = t[o], p[o]
    gaps = np.diff(t)[p[1:] == p[:-1]]
    return float(gaps.max()) if gaps.size else 0.0


# ----------------------------------------------------------------------------- tables
def _aggregate(raw: list[Row], keys: Sequence[str], extra: Sequence[str]) -> list[Row]:
    """Mean and standard error of accuracy, plus the means of ``extra`` metrics."""
    rows = aggregate(raw, keys=keys)
    for metric in extra:
        by = {tuple(r[k] for k in keys): r for r in aggregate(raw, keys=keys, value=metric)}
        for r in rows:
            got = by[tuple(r[k] for k in keys)]
            r[metric] = got[metric]
            r[f"{metric}_stderr"] = got["stderr"]
    return rows


def _add_paired(rows: list[Row], raw: list[Row], keys: Sequence[str],
                ref: Callable[[Row], dict[str, Any]]) -> None:
    """Paired ``d_acc`` and ``d_stale`` (accuracy and very-stale share) to a reference run
    on the same world and events (:func:`add_paired`)."""
    add_paired(rows, raw, keys, ref, (("accuracy", "d_acc"), ("very_stale", "d_stale")))


def _header(name: str, sc: dict[str, Any], reps: int, t0: float) -> str:
    return (f"<!-- {name}: m in {sc['ms']}, R = {R:g}, T = {sc['T']:g} (metrics after "
            f"{BURN * sc['T']:g}), {reps} repetitions, {time.perf_counter() - t0:.0f} s wall -->\n")


def _plot_two_panels(rows: list[Row], path: Path, *, x: str, xs: Sequence[Any],
                     xlabels: Sequence[str], series: str, title: str) -> None:
    """Accuracy (left) and very-stale share (right), one line per ``series`` value."""
    with figure(path, (10.0, 4.0), ncols=2, suptitle=title) as axes:
        groups: dict[str, list[Row]] = {}
        for r in rows:
            groups.setdefault(str(r[series]), []).append(r)
        pos = {v: i for i, v in enumerate(xs)}
        for label, rs in groups.items():
            rs = sorted((r for r in rs if r[x] in pos), key=lambda r: pos[r[x]])
            px = [pos[r[x]] for r in rs]
            for ax, metric, err in ((axes[0], "accuracy", "stderr"),
                                    (axes[1], "very_stale", "very_stale_stderr")):
                ax.errorbar(px, [r[metric] for r in rs], yerr=[r.get(err, 0.0) for r in rs],
                            marker="o", ms=3, capsize=2, label=label)
        for ax, lab in ((axes[0], "accuracy"), (axes[1], "very-stale share")):
            ax.set_xticks(range(len(xs)))
            ax.set_xticklabels(xlabels, fontsize=7)
            ax.set_ylabel(lab)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7)


def _plot_sources(rows: list[Row], path: Path, title: str) -> None:
    """Accuracy vs m (left) and the paired difference to ``merged`` vs m (right)."""
    with figure(path, (10.0, 4.0), ncols=2, suptitle=title) as axes:
        groups: dict[str, list[Row]] = {}
        for r in rows:
            groups.setdefault(str(r["policy"]), []).append(r)
        for label, rs in groups.items():
            rs = sorted(rs, key=lambda r: r["m"])
            ms = [r["m"] for r in rs]
            axes[0].errorbar(ms, [r["accuracy"] for r in rs], yerr=[r["stderr"] for r in rs],
                             marker="o", ms=3, capsize=2, label=label)
            axes[1].errorbar(ms, [r.get("d_acc", 0.0) for r in rs],
                             yerr=[r.get("d_acc_se", 0.0) for r in rs], marker="o", ms=3,
                             capsize=2, label=label)
        for ax, lab in ((axes[0], "accuracy"), (axes[1], "accuracy - merged (paired)")):
            ax.set_xscale("log")
            ax.set_xlabel("m (pages), R = 100")
            ax.set_ylabel(lab)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=7)


def _plot_bars(rows: list[Row], path: Path, title: str) -> None:
    with figure(path, (10.0, 4.2), ncols=2, suptitle=title) as axes:
        names = [str(r["policy"]) for r in rows]
        y = np.arange(len(rows))
        axes[0].barh(y, [r["accuracy"] for r in rows], xerr=[r["stderr"] for r in rows],
                     capsize=2)
        axes[1].barh(y, [r["very_stale"] for r in rows],
                     xerr=[r["very_stale_stderr"] for r in rows], capsize=2, color="tab:red")
        lo = min(r["accuracy"] - r["stderr"] for r in rows)
        axes[0].set_xlim(max(0.0, lo - 0.02), None)
        axes[0].set_xlabel("accuracy")
        axes[1].set_xlabel("very-stale share")
        for ax in axes:
            ax.set_yticks(y)
            ax.set_yticklabels(names if ax is axes[0] else [], fontsize=7)
            ax.grid(alpha=0.3, axis="x")
            ax.invert_yaxis()


# ----------------------------------------------------------------------------- main
def main(argv: Sequence[str]) -> int:
    name, *rest = argv
    if name not in NAMES:
        raise SystemExit(f"unknown experiment {name!r}; expected one of {NAMES}")
    args = parser(name, __doc__ or "").parse_args(rest)
    sc = _scale(name, args.quick)
    reps = args.reps if args.reps is not None else sc["reps"]
    T = sc["T"]
    base: dict[str, Any] = {"experiment": name, "seed": args.seed, "T": T}
    t0 = time.perf_counter()
    progress = not args.no_progress
    if name == "uncertainty":
        jobs = [{**base, "m": m, "rep": r, "policy": p}
                for m in sc["ms"] for r in range(reps) for p in UNCERTAINTY_POLICIES]
        raw = run_jobs(_uncertainty_job, jobs, processes=args.jobs, progress=progress,
                       label=name)
        rows = _aggregate(raw, ("m", "policy"), ("very_stale",))
        _add_paired(rows, raw, ("m", "policy"), lambda r: {"policy": "greedy-ncis-est"})
        order = {p: i for i, p in enumerate(UNCERTAINTY_POLICIES)}
        rows.sort(key=lambda r: (r["m"], order[r["policy"]]))
        ref_note = "d_* = paired difference to greedy-ncis-est"
        cols = ["m", "policy", "accuracy", "stderr", "very_stale", "very_stale_stderr",
                "d_acc", "d_acc_se", "d_stale", "d_stale_se", "reps"]
        _plot_bars(rows, args.out / f"{name}.png",
                   f"uncertainty: m={sc['ms'][0]}, R={R:g}, T={T:g}, {reps} reps")
    elif name == "sources":
        jobs = [{**base, "m": m, "rep": r, "policy": p}
                for m in sc["ms"] for r in range(reps) for p in SOURCE_KINDS]
        raw = run_jobs(_sources_job, jobs, processes=args.jobs, progress=progress,
                       label=name)
        rows = _aggregate(raw, ("m", "policy"), ("very_stale",))
        _add_paired(rows, raw, ("m", "policy"), lambda r: {"policy": "merged"})
        order = {p: i for i, p in enumerate(SOURCE_KINDS)}
        rows.sort(key=lambda r: (r["m"], order[r["policy"]]))
        ref_note = "d_* = paired difference to merged"
        cols = ["m", "policy", "accuracy", "stderr", "very_stale", "d_acc", "d_acc_se",
                "d_stale", "d_stale_se", "reps"]
        _plot_sources(rows, args.out / f"{name}.png",
                      f"sources: sitemap + IndexNow, R={R:g}, T={T:g}, {reps} reps")
    else:
        combos = [("greedy-ncis", "reactive", f) for f in FLOOR_MULTIPLES]
        combos += [("greedy-ncis", "proactive", f) for f in FLOOR_MULTIPLES
                   if math.isfinite(f)]
        combos += [("greedy-ncis-est", "reactive", f) for f in FLOOR_MULTIPLES]
        jobs = [{**base, "m": m, "rep": r, "policy": p, "mode": mode, "floor": f}
                for m in sc["ms"] for r in range(reps) for p, mode, f in combos]
        raw = run_jobs(_floor_job, jobs, processes=args.jobs, progress=progress, label=name)
        keys = ("m", "policy", "mode", "floor")
        rows = _aggregate(raw, keys, ("very_stale", "forced_share", "max_interval"))
        _add_paired(rows, raw, keys, lambda r: {"floor": "none", "mode": "reactive"})
        ref_note = "d_* = paired difference to the same policy without a floor"
        # the unfloored run belongs to both modes' curves
        for r in [r for r in rows if r["floor"] == "none" and r["policy"] == "greedy-ncis"]:
            rows.append({**r, "mode": "proactive"})
        fx = {"none": 0, **{f"{f:g}": i + 1 for i, f in enumerate(FLOOR_MULTIPLES[1:])}}
        rows.sort(key=lambda r: (r["m"], r["policy"], r["mode"], fx[r["floor"]]))
        for r in rows:
            r["series"] = f"{r['policy']} ({r['mode']})"
        cols = ["m", "policy", "mode", "floor", "accuracy", "stderr", "very_stale", "d_acc",
                "d_acc_se", "d_stale", "forced_share", "max_interval", "reps"]
        labels = ["none"] + [f"{f:g} m/R" for f in FLOOR_MULTIPLES[1:]]
        _plot_two_panels(rows, args.out / f"{name}.png", x="floor", xs=list(fx),
                         xlabels=labels, series="series",
                         title=f"floor: m={sc['ms'][0]}, R={R:g}, T={T:g}, {reps} reps "
                               f"(m/R = {sc['ms'][0] / R:g})")
    table = markdown_table(rows, cols)
    write_outputs(name, args, rows, _header(name, sc, reps, t0) + f"<!-- {ref_note} -->\n"
                  + table)
    return 0
