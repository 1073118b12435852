"""Paper 004's simulator experiments and the peers comparison (``recrawl experiments NAME``).

=========  ==================================================================================
fig3       Greedy vs LDS vs Baseline, no pings (Sec. 6.4)
fig4       Greedy vs Greedy-CIS, ``lam ~ Beta(.25,.25)``, no false pings (Sec. 6.5)
fig6       all five Algorithm 1 variants with false pings ``nu ~ U(.1,.6)`` (Sec. 6.6)
fig11      delayed pings (lag Poisson(6) slots), T_DELAY = 5/R rule and the strict rule (App. C)
fig12      burn-in: R 100 -> 150 -> 100 at t = 133 and 266, m = 1000 (App. D)
fig8       semi-synthetic web, Greedy / Greedy-NCIS / Greedy-CIS+ with corrupted estimates (6.7)
peers      recrawl vs Nutch vs StormCrawler vs round robin, +- pings, +- host limits
est        every Algorithm 1 variant with known vs online-estimated parameters (App. E)
=========  ==================================================================================

Defaults are reduced from the paper's scale; ``--paper`` runs fig3/fig4/fig6/fig11 at
T = 1000 with m up to 10^4 and fig8 at 10^5 pages, 200 steps of 5000 crawls (one
repetition unless ``--reps``; the paper used 100).  Every table says the scale it ran at.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
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
    plot_lines,
    rng,
    run_jobs,
    write_outputs,
)
from models.policies import expected_accuracy, low_discrepancy_schedule, optimal_rates
from models.sim import (
    POLICY_NAMES,
    Budget,
    EstimatingAlgorithm1,
    NutchAdaptive,
    RoundRobin,
    ScheduledPolicy,
    StormCrawlerAdaptive,
    World,
    accuracy,
    accuracy_curve,
    algorithm1,
    assign_hosts,
    corrupt,
    run,
    semi_synthetic_world,
    simulate_events,
    synthetic_world,
)
from models.sim.engine import stale_share
from models.sim.policies import Policy
from models.values import change_params, from_precision_recall, precision_recall

__all__ = ["NAMES", "main"]

# reference policy of the paired differences (same world and events) per experiment
PAIRED_REF = {"fig3": "greedy", "fig4": "greedy", "fig6": "greedy",
              "fig11": "greedy-ncis-delayed"}
NAMES = ("fig3", "fig4", "fig6", "fig8", "fig11", "fig12", "peers", "est")

WORLDS: dict[str, dict[str, Any]] = {
    "fig3": {"lam_beta": None, "nu_range": None},
    "fig4": {"lam_beta": (0.25, 0.25), "nu_range": None},
    "fig6": {"lam_beta": (0.25, 0.25), "nu_range": (0.1, 0.6)},
    "fig11": {"lam_beta": (0.25, 0.25), "nu_range": (0.1, 0.6)},
    "peers": {"lam_beta": (0.25, 0.25), "nu_range": (0.1, 0.6)},
    "est": {"lam_beta": (0.25, 0.25), "nu_range": (0.1, 0.6)},
}
POLICIES = {
    "fig3": ["greedy", "lds", "baseline"],
    "fig4": ["greedy", "greedy-cis", "baseline"],
    "fig6": ["greedy", "greedy-cis", "greedy-ncis", "ncis-approx-1", "ncis-approx-2", "baseline"],
    "fig11": ["greedy-ncis", "greedy-ncis-delayed", "greedy-ncis-d", "greedy-ncis-strict",
              "baseline"],
    # every Algorithm 1 variant with true parameters and with online estimates
    "est": [v + suffix for v in POLICY_NAMES for suffix in ("", "-est")],
}


PAPER_MS = [100, 200, 500, 750, 1000, 10000]


def _scale(name: str, quick: bool, paper: bool = False) -> dict[str, Any]:
    """(ms, horizon, reps) per experiment and mode."""
    if paper and name in ("fig3", "fig4", "fig6", "fig11"):
        return {"ms": PAPER_MS, "T": 1000.0, "reps": 1}
    if paper and name == "fig8":
        return {"ms": [100_000], "T": 200.0, "reps": 1}
    if name in ("fig3", "fig4", "fig6", "fig11"):
        if quick:
            return {"ms": [100, 200], "T": 10.0, "reps": 2}
        ms = [100, 200, 500, 1000] if name == "fig6" or name == "fig11" else [
            100, 200, 500, 750, 1000, 10000]
        return {"ms": ms, "T": 20.0 if name in ("fig6", "fig11") else 100.0,
                "reps": 3 if name in ("fig6", "fig11") else 4}
    if name == "fig12":
        return {"ms": [200 if quick else 1000], "T": 40.0 if quick else 400.0,
                "reps": 2 if quick else 4}
    if name == "fig8":
        return {"ms": [500 if quick else 20000], "T": 10.0 if quick else 40.0,
                "reps": 1 if quick else 2}
    if name == "peers":
        return {"ms": [200 if quick else 500], "T": 10.0 if quick else 40.0,
                "reps": 2 if quick else 4}
    if name == "est":
        return {"ms": [100 if quick else 300], "T": 20.0 if quick else 60.0,
                "reps": 2 if quick else 4}
    raise ValueError(name)


# ----------------------------------------------------------------------------- jobs
def _policy(kind: str, w: World, R: float, T: float, rng: np.random.Generator,
            *, pings: bool = True) -> Policy:
    m = w.m
    if kind == "lds":
        xi = optimal_rates(w.mu, w.delta, R)
        return ScheduledPolicy("lds", low_discrepancy_schedule(xi, int(R * T) + 1,
                                                              seed=int(rng.integers(1 << 31))))
    peer_kw: dict[str, Any] = {"initial_interval": m / R, "min_interval": 1.0 / R,
                               "max_interval": T, "rng": rng, "use_pings": pings}
    if kind == "nutch":
        return NutchAdaptive(m, **peer_kw)
    if kind == "stormcrawler":
        return StormCrawlerAdaptive(m, **peer_kw)
    if kind == "round-robin":
        return RoundRobin(m, rng=rng, use_pings=False)
    if kind == "greedy-ncis-d":
        p = algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu, ping_rule="tdelay",
                       t_delay=5.0 / R)
        p.name = kind
        return p
    if kind == "greedy-ncis-strict":
        p = algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu, ping_rule="strict")
        p.name = kind
        return p
    if kind == "greedy-ncis-delayed":
        p = algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu)
        p.name = kind
        return p
    if kind.endswith("-est"):  # the variant with online App. E estimates
        return EstimatingAlgorithm1(kind, w.mu, variant=kind.removesuffix("-est"))
    return algorithm1(kind, w.mu, w.delta, w.lam, w.nu, host=w.host)


def _synthetic_job(job: Job) -> list[Row]:
    """One (experiment, m, rep, policy): same world and events for every policy."""
    name, m, rep, kind = job["experiment"], job["m"], job["rep"], job["policy"]
    R, T = 100.0, job["T"]
    w = synthetic_world(m, rng(job["seed"], m, rep), **WORLDS[name])
    t0 = time.perf_counter()
    burn = 0.2 * T
    if kind == "baseline":
        acc = expected_accuracy(w.mu, w.delta, optimal_rates(w.mu, w.delta, R))
        return [{"experiment": name, "m": m, "policy": kind, "rep": rep, "accuracy": acc,
                 "seconds": 0.0}]
    delayed = name == "fig11" and kind != "greedy-ncis"
    ev = simulate_events(w, T, rng(job["seed"], m, rep, 1),
                         delay_mean=6.0 if delayed else 0.0, delay_unit=1.0 / R)
    pol = _policy(kind, w, R, T, rng(job["seed"], m, rep, 2))
    res = run(w, ev, pol, Budget(R))
    acc = accuracy(w, ev, res, start=burn)
    row: Row = {"experiment": name, "m": m, "policy": kind, "rep": rep, "accuracy": acc,
                "seconds": time.perf_counter() - t0}
    if name == "est":
        row["very_stale"] = stale_share(w, ev, res, start=burn)
    return [row]


def _peers_job(job: Job) -> list[Row]:
    m, rep, kind = job["m"], job["rep"], job["policy"]
    pings, hosts = job["pings"], job["hosts"]
    R, T = 100.0, job["T"]
    w = synthetic_world(m, rng(job["seed"], m, rep), **WORLDS["peers"])
    if hosts:
        w = assign_hosts(w, rng(job["seed"], m, rep, 3), n_hosts=max(10, m // 20),
                         limited_share=0.1, limit_per_page=0.1)
    ev = simulate_events(w, T, rng(job["seed"], m, rep, 1))
    if not pings:
        ev = ev.without_pings()
    real: str = kind
    if kind == "recrawl":
        real = "greedy-ncis" if pings else "greedy"
    pol = _policy(real, w, R, T, rng(job["seed"], m, rep, 2), pings=pings)
    res = run(w, ev, pol, Budget(R), host_limits=hosts)
    return [{"experiment": "peers", "m": m, "policy": kind, "rep": rep,
             "pings": pings, "host_limits": hosts, "crawls": int(res.crawl_time.size),
             "accuracy": accuracy(w, ev, res, start=0.2 * T)}]


def _fig12_job(job: Job) -> list[Row]:
    m, rep, label = job["m"], job["rep"], job["policy"]
    T = job["T"]
    w = synthetic_world(m, rng(job["seed"], m, rep), lam_beta=None, nu_range=None)
    ev = simulate_events(w, T, rng(job["seed"], m, rep, 1))
    a, b = T / 3.0, 2.0 * T / 3.0
    budget = {"R=100->150->100": Budget(100.0, ((a, 150.0), (b, 100.0))),
              "R=100": Budget(100.0), "R=150": Budget(150.0)}[label]
    res = run(w, ev, algorithm1("greedy", w.mu, w.delta, w.lam, w.nu), budget)
    edges = np.linspace(0.0, T, 81)
    curve = accuracy_curve(w, ev, res, edges)
    return [{"experiment": "fig12", "m": m, "policy": label, "rep": rep,
             "t": float(0.5 * (edges[i] + edges[i + 1])), "accuracy": float(curve[i])}
            for i in range(curve.size)]


def _fig8_job(job: Job) -> list[Row]:
    m, rep, kind, p = job["m"], job["rep"], job["policy"], job["p"]
    T = job["T"]
    R = m / 20.0  # paper: 100k pages, 5000 crawls per step (all at the step's time)
    w = semi_synthetic_world(m, rng(job["seed"], m, rep))
    ev = simulate_events(w, T, rng(job["seed"], m, rep, 1))
    _, prec, rec = precision_recall(*w.signal_params())
    bp, br = corrupt(prec, rec, p, rng(job["seed"], m, rep, 4))
    bp, br = np.clip(bp, 1e-6, 1.0), np.clip(br, 0.0, 1.0)
    a, b, g = from_precision_recall(w.delta, bp, br)
    _, lam2, nu2 = change_params(a, b, g)
    pol = algorithm1(kind, w.mu, w.delta, lam2, nu2)
    res = run(w, ev, pol, Budget(R, batch=max(1, round(R))))
    return [{"experiment": "fig8", "m": m, "policy": kind, "rep": rep, "p": p,
             "accuracy": accuracy(w, ev, res, start=0.2 * T)}]


# ----------------------------------------------------------------------------- main
def main(argv: Sequence[str]) -> int:
    name, *rest = argv
    if name not in NAMES:
        raise SystemExit(f"unknown experiment {name!r}; expected one of {NAMES}")
    ap = parser(name, __doc__ or "")
    ap.add_argument("--paper", action="store_true",
                    help="the paper's scale (fig3/4/6/11: T = 1000, m up to 1e4; "
                         "fig8: 1e5 pages, 200 steps)")
    args = ap.parse_args(rest)
    sc = _scale(name, args.quick, args.paper)
    reps = args.reps if args.reps is not None else sc["reps"]
    T = sc["T"]
    base: dict[str, Any] = {"experiment": name, "seed": args.seed, "T": T}
    jobs: list[Job] = []
    t0 = time.perf_counter()
    if name in POLICIES:
        jobs = [{**base, "m": m, "rep": r, "policy": p}
                for m in sc["ms"] for r in range(reps) for p in POLICIES[name]]
        raw = run_jobs(_synthetic_job, jobs, processes=args.jobs,
                       progress=not args.no_progress, label=name)
        extra = ("very_stale",) if name == "est" else ()
        rows = aggregate(raw)
        if name == "est":
            stale = aggregate(raw, value="very_stale")
            for r, s in zip(rows, stale, strict=True):
                r["very_stale"] = s["very_stale"]
        cols = ["m", "policy", "accuracy", "stderr", "reps", *extra]
        ref = PAIRED_REF.get(name)
        if ref is not None:
            # each policy's gap to the reference on the same worlds and events
            col = "d_" + ref.replace("-", "_")
            add_paired(rows, raw, ("m", "policy"), lambda r: {"policy": ref},
                       (("accuracy", col),))
            cols += [col, f"{col}_se"]
        if name == "est":
            # what estimating costs: each variant against itself with true parameters
            add_paired(rows, raw, ("m", "policy"),
                       lambda r: {"policy": r["policy"].removesuffix("-est")},
                       (("accuracy", "d_true"), ("very_stale", "d_stale_true")))
            cols += ["d_true", "d_true_se", "d_stale_true", "d_stale_true_se"]
            _plot_est(rows, args.out / "est.png", f"est: m={sc['ms'][0]}, R=100, T={T:g}, "
                      f"{reps} reps")
        else:
            plot_lines([r for r in rows if r["policy"] != "baseline"] + [
                r for r in rows if r["policy"] == "baseline"], args.out / f"{name}.png",
                x="m", title=f"{name}: R=100, T={T:g}, {reps} reps")
    elif name == "peers":
        kinds = ["recrawl", "nutch", "stormcrawler", "round-robin"]
        jobs = [{**base, "m": m, "rep": r, "policy": k, "pings": pi, "hosts": h}
                for m in sc["ms"] for r in range(reps) for k in kinds
                for pi in (False, True) for h in (False, True)]
        raw = run_jobs(_peers_job, jobs, processes=args.jobs,
                       progress=not args.no_progress, label=name)
        rows = aggregate(raw, keys=("m", "pings", "host_limits", "policy"))
        cols = ["m", "pings", "host_limits", "policy", "accuracy", "stderr", "reps"]
        _plot_peers(rows, args.out / "peers.png")
    elif name == "fig12":
        jobs = [{**base, "m": m, "rep": r, "policy": p} for m in sc["ms"]
                for r in range(reps) for p in ("R=100->150->100", "R=100", "R=150")]
        raw = run_jobs(_fig12_job, jobs, processes=args.jobs,
                       progress=not args.no_progress, label=name)
        curves = aggregate(raw, keys=("policy", "t"))
        for r in curves:
            r["m"] = sc["ms"][0]
        plot_lines(curves, args.out / "fig12.png", x="t", logx=False,
                   title=f"fig12: Greedy, m={sc['ms'][0]}, {reps} reps")
        thirds = []
        for lab in ("R=100->150->100", "R=100", "R=150"):
            for lo, hi in ((0.0, 1 / 3), (1 / 3, 2 / 3), (2 / 3, 1.0)):
                sel = [r["accuracy"] for r in curves
                       if r["policy"] == lab and lo * T + 0.05 * T < r["t"] < hi * T]
                thirds.append({"m": sc["ms"][0], "policy": lab,
                               "window": f"[{lo * T + 0.05 * T:.0f}, {hi * T:.0f}]",
                               "accuracy": float(np.mean(sel)), "stderr": 0.0})
        rows = curves
        cols = ["m", "policy", "window", "accuracy"]
        table = markdown_table(thirds, cols)
        write_outputs(name, args, rows, _header(name, sc, reps, t0) + table)
        return 0
    else:  # fig8
        kinds = ["greedy", "greedy-ncis", "greedy-cis-plus"]
        jobs = [{**base, "m": m, "rep": r, "policy": k, "p": p} for m in sc["ms"]
                for r in range(reps) for k in kinds for p in (0.0, 0.1, 0.2)]
        raw = run_jobs(_fig8_job, jobs, processes=args.jobs,
                       progress=not args.no_progress, label=name)
        rows = aggregate(raw, keys=("m", "p", "policy"))
        # paired with Greedy on the same world and events (Greedy ignores the estimates)
        add_paired(rows, raw, ("m", "p", "policy"), lambda r: {"policy": "greedy"},
                   (("accuracy", "d_greedy"),))
        cols = ["m", "p", "policy", "accuracy", "stderr", "d_greedy", "d_greedy_se", "reps"]
        plot_lines(rows, args.out / "fig8.png", x="p", logx=False,
                   title=f"fig8 stand-in: m={sc['ms'][0]}, budget m/20 per step")
    table = markdown_table(rows, cols)
    write_outputs(name, args, rows, _header(name, sc, reps, t0) + table)
    return 0


def _header(name: str, sc: dict[str, Any], reps: int, t0: float) -> str:
    return (f"<!-- {name}: m in {sc['ms']}, T = {sc['T']:g}, {reps} repetitions, "
            f"{time.perf_counter() - t0:.0f} s wall -->\n")


def _plot_bars(path: Any, groups: Sequence[str], series: Sequence[str],
               value: Callable[[int, int], tuple[float, float]], title: str) -> None:
    """Grouped bars: one group per ``groups`` entry, one bar per ``series`` entry, the
    bar's height and error ``value(group index, series index)``."""
    with figure(path, (7.0, 4.0)) as ax:
        width = 0.8 / len(series)
        x = np.arange(len(groups))
        for j, name in enumerate(series):
            ys, es = zip(*(value(g, j) for g in range(len(groups))), strict=True)
            ax.bar(x + j * width, ys, width, yerr=es, label=name, capsize=2)
        ax.set_xticks(x + 0.5 * (len(series) - 1) * width)
        ax.set_xticklabels(groups, fontsize=8)
        ax.set_ylabel("accuracy")
        ax.set_title(title)
        ax.legend(fontsize=7)


def _plot_peers(rows: list[Row], path: Any) -> None:
    settings = [(False, False), (True, False), (False, True), (True, True)]
    kinds = ["recrawl", "nutch", "stormcrawler", "round-robin"]

    def value(g: int, j: int) -> tuple[float, float]:
        pi, h = settings[g]
        r = next(r for r in rows if r["policy"] == kinds[j] and r["pings"] == pi
                 and r["host_limits"] == h)
        return r["accuracy"], r["stderr"]

    _plot_bars(path, ["no pings", "pings", "no pings\nhost limits", "pings\nhost limits"],
               kinds, value, "peers at the same crawl rate R = 100")


def _plot_est(rows: list[Row], path: Any, title: str) -> None:
    by = {r["policy"]: r for r in rows}

    def value(g: int, j: int) -> tuple[float, float]:
        r = by[POLICY_NAMES[g] + ("", "-est")[j]]
        return r["accuracy"], r["stderr"]

    _plot_bars(path, [n.replace("-", "-\n", 1) for n in POLICY_NAMES],
               ["true parameters", "estimated online (App. E)"], value, title)
