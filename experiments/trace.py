"""``recrawl experiments trace``: replay a recorded change history under every policy.

    recrawl experiments trace --changes FILE --budget R [R ...]
        [--pings RECALL,FALSE_PER_DAY,DELAY_DAYS | --ping-log FILE] [--learn-days D]
        [--jobs N] [--json PATH] [--out DIR] [--batch K] [--hedge SHARE] [--unhedged]

``FILE`` is any history :func:`streams.histories.read_history` reads (a change log
``.jsonl``, a CDX / WARC capture file, a Kolobov et al. folder).  Conventions: every page
of the file is known and fresh at the start; the window runs from the earliest to the
latest change; crawls are evenly spaced at ``R`` per day; accuracy is the time-averaged,
importance-weighted share of pages whose last crawl is current (:func:`models.sim.accuracy`,
the accounting of every simulator experiment).  Policies, each at each budget:

recrawl       Algorithm 1 with everything learned online from its own crawls and pings
              (:class:`models.sim.trace.VectorAlgorithm1` with
              :class:`models.sim.trace.OnlineRates`: Greedy without pings, Greedy-NCIS
              with them), starting from the estimator's default prior as a live worker
              starts; each rate is its posterior mean under its host's empirical-Bayes
              Gamma prior once 20 of the host's pages are crawled (default,
              ``--prior host``; :mod:`models.estimators.host_prior`; ``--prior global``:
              the default prior's estimate throughout), forgetting (an interval's
              weight halves every ``--half-life-days``, default 180, of crawl time),
              hedged (:class:`models.sim.trace.Hedge`:
              crawls go to a floor while the learned rates predict the crawls' findings
              no better than the floor's own predictor: round robin, or Greedy on
              Nutch-style adaptive intervals where those predict better than one rate
              for the whole site)
nutch         Apache Nutch AdaptiveFetchSchedule (:class:`models.sim.NutchAdaptive`)
stormcrawler  StormCrawler AdaptiveScheduler (:class:`models.sim.StormCrawlerAdaptive`)
uniform       round robin in a fixed order
hindsight     Greedy given each page's average rate over the scored window (its changes
              there / the window's length; with --learn-days, over the unscored days
              until they end): a bound for any policy that must learn (with
              synthesised pings: Greedy-NCIS given those rates and the pings' recall and
              false-ping rate)

``--pings RECALL,FALSE_PER_DAY,DELAY_DAYS`` synthesises pings from the recorded changes
(:func:`models.sim.trace.trace_events`); ``--ping-log FILE`` reads recorded ones (change
log lines ``{"url", "time"}``, one per ping).  ``--learn-days D``: the first ``D`` days are
not scored; ``recrawl`` gets, at ``D``, the estimates of their complete change history (as
an import of the history and its ping log would give it: with pings, the crawls of a
crawler that fetched each page at every ping of those days and on a grid of its mean gap
between changes, :func:`models.sim.trace.ping_history_crawls`; its hedge rescores the
learned rates on the crawls so far as the imported ones would have predicted them,
:meth:`models.sim.trace.Hedge.rescore`,
and its floor takes the intervals of Nutch's rule replayed over the history,
:func:`models.sim.trace.nutch_replay`, if they would have predicted those crawls better),
the peers run through them as they would have,
and ``recrawl-cold`` (table only) is ``recrawl`` without that history.  ``--json`` writes
``{"pages", "changes", "days", "budgets", "accuracy": {policy: [one per budget]}}``;
``--out`` gets ``trace.md`` (the table) and ``trace.png``.  ``--batch K`` groups ``K``
consecutive crawls into one step at the time of its last (default 1 up to 1000 pages, then
pages/1000); ``--hedge`` sets the hedge's largest share (0: none); ``--unhedged`` adds
``recrawl-unhedged`` to the table.  ``--shuffle-pages``: repetition ``r > 0`` runs every
policy on the pages in a random order (drawn from ``--seed`` and ``r``; repetition 0 keeps the
file's order), so that ``recrawl`` and ``hindsight`` repeat too: their first crawls, and every
tie after, follow the pages' order, which without the flag is the file's in every repetition
while each peer's repetition redraws its own random first order.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from experiments._common import Job, Row, figure, help_text, rng, run_jobs
from models.sim import (
    Budget,
        NutchAdaptive,
    RoundRobin,
    StormCrawlerAdaptive,
    accuracy,
    run,
)
from models.sim.policies import Policy, value_params
from models.sim.trace import (
    HALF_LIFE_DAYS,
    Hedge,
    OnlineRates,
    Trace,
    VectorAlgorithm1,
    average_rates,
    nutch_replay,
    trace_events,
    trace_world,
)

__all__ = ["NAMES", "POLICIES", "main", "parse_pings", "permute_pages", "trace_rows"]

NAMES = ("trace",)
#: the policies of ``--json``, in its order
POLICIES = ("recrawl", "nutch", "stormcrawler", "uniform", "hindsight")
PEERS = ("nutch", "stormcrawler", "uniform")
#: a complete history's changed intervals last this long (days; ``eps`` of
#: :func:`models.sim.trace.complete_history_intervals`): one second
EPS_DAYS = 1.0 / 86400.0

#: the largest share of crawls the hedge gives to its floor
#: (:class:`models.sim.trace.Hedge`) when the learned rates predict no better than the
#: floor's own predictor
HEDGE_SHARE = 1.0

_CACHE: dict[str, tuple[Trace, tuple[np.ndarray, np.ndarray] | None]] = {}


def parse_pings(text: str) -> tuple[float, float, float]:
    """``RECALL,FALSE_PER_DAY,DELAY_DAYS`` as three numbers."""
    parts = text.split(",")
    try:
        recall, false, delay = (float(x) for x in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--pings takes RECALL,FALSE_PER_DAY,DELAY_DAYS (three numbers), got {text!r}"
        ) from None
    if not (0 <= recall <= 1 and false >= 0 and delay >= 0):
        raise argparse.ArgumentTypeError(
            f"--pings: recall in [0, 1], false pings and delay >= 0, got {text!r}")
    return recall, false, delay


def _save(trace: Trace, folder: Path, pings: tuple[np.ndarray, np.ndarray] | None) -> Path:
    path = folder / "trace.npz"
    arrays: dict[str, Any] = {
        "mu": trace.mu, "change_time": trace.change_time, "change_start": trace.change_start,
        "horizon": trace.horizon, "start_s": trace.start_s}
    if trace.host is not None:
        arrays["host"] = trace.host
    if pings is not None:
        arrays.update(ping_page=pings[0], ping_day=pings[1])
    np.savez(path, **arrays)
    return path


def _load(path: str) -> tuple[Trace, tuple[np.ndarray, np.ndarray] | None]:
    with np.load(path) as z:
        tr = Trace(z["mu"], z["change_time"], z["change_start"], float(z["horizon"]),
                   float(z["start_s"]), z.get("host"))
        pings = (z["ping_page"], z["ping_day"]) if "ping_page" in z else None
    return tr, pings


def permute_pages(trace: Trace, order: np.ndarray,
                  pings: tuple[np.ndarray, np.ndarray] | None = None
                  ) -> tuple[Trace, tuple[np.ndarray, np.ndarray] | None]:
    """``trace`` with page ``k`` the old page ``order[k]`` (``order`` a permutation of the
    pages): the same changes, importances and hosts under other page numbers, and recorded
    ``pings`` ``(page, day)`` renumbered with them."""
    order = np.asarray(order, dtype=np.int64)
    if np.sort(order).tolist() != list(range(trace.m)):
        raise ValueError(f"order must be a permutation of the {trace.m} pages")
    sizes = np.diff(trace.change_start)[order]
    start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    change = (np.concatenate([trace.changes_of(int(i)) for i in order]) if trace.m
              else trace.change_time.copy())
    out = Trace(trace.mu[order], change, start, trace.horizon, trace.start_s,
                None if trace.host is None else trace.host[order])
    if pings is None:
        return out, None
    new_of = np.empty(trace.m, dtype=np.int64)
    new_of[order] = np.arange(trace.m)
    return out, (new_of[np.asarray(pings[0], dtype=np.int64)], np.asarray(pings[1]))


def _policy(kind: str, trace: Trace, R: float, learn_days: float, ev: Any,
            g: np.random.Generator, *, use_pings: bool,
            synthesised: tuple[float, float, float] | None = None,
            hedge_share: float = HEDGE_SHARE, prior: str = "host",
            half_life_days: float = HALF_LIFE_DAYS) -> Policy:
    m, T = trace.m, trace.horizon
    peer_kw: dict[str, Any] = {"initial_interval": m / R, "min_interval": 1.0 / R,
                               "max_interval": T, "rng": g, "use_pings": use_pings}
    if kind == "nutch":
        return NutchAdaptive(m, **peer_kw)
    if kind == "stormcrawler":
        return StormCrawlerAdaptive(m, **peer_kw)
    if kind == "uniform":
        p = RoundRobin(m, rng=g)
        p.name = "uniform"
        return p
    if kind == "hindsight":
        def params(start: float, stop: float) -> tuple[Any, Any, Any]:
            rates = average_rates(trace, start, stop)
            if synthesised is None:
                return rates, np.zeros(m), np.zeros(m)
            # with synthesised pings: Greedy-NCIS given the rates and the pings' true noise
            a, b, gm, _ = value_params("greedy-ncis", rates, np.full(m, synthesised[0]),
                                       np.full(m, synthesised[1]))
            return a, b, gm

        if learn_days <= 0:
            return VectorAlgorithm1("hindsight", trace.mu, *params(0.0, T))
        # the unscored days with their own average rates, the scored ones with theirs
        later = params(learn_days, T)

        def switch(pol: VectorAlgorithm1) -> None:
            pol.alpha, pol.beta, pol.gamma = (np.array(x, dtype=np.float64) for x in later)

        return VectorAlgorithm1("hindsight", trace.mu, *params(0.0, learn_days),
                                warm=(learn_days, switch))
    if kind in ("recrawl", "recrawl-cold", "recrawl-unhedged"):
        learner = OnlineRates(m, use_pings=use_pings, prior=prior, host=trace.host,
                              half_life_days=half_life_days)
        importing = kind == "recrawl" and learn_days > 0
        hedge = None if kind == "recrawl-unhedged" or not hedge_share else Hedge(
            m, max_share=hedge_share, record=importing)
        warm = None
        if importing:
            def learn(pol: VectorAlgorithm1) -> None:
                learner = pol.learner
                assert learner is not None
                # with pings, those of the imported days as recorded (a ping log)
                learner.learn_complete(trace, learn_days, EPS_DAYS, pings=(
                    (ev.ping_page, ev.ping_arrival) if learner.use_pings else None))
                if pol.hedge is not None:
                    # the hedge judges the imported rates, and the intervals Nutch's rule
                    # reaches over the imported history, by how they would have predicted
                    # the crawls of the imported days
                    def replay(p: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                        now, then = nutch_replay(trace, learn_days, m / R, 1.0 / R, T,
                                                 at=(p, s))
                        return now / (m / R), then / (m / R)

                    pol.hedge.rescore(lambda p, s: learner.complete_rates(trace, p, s), replay)
            warm = (learn_days, learn)
        return VectorAlgorithm1(kind, trace.mu, learner=learner, warm=warm, hedge=hedge)
    raise ValueError(f"unknown policy {kind!r}")


def step_crawls(m: int) -> int:
    """Crawls per step of the budget: 1 (every crawl at its own slot) up to 1000 pages,
    then ``m / 1000``, so that a step moves at most 0.1% of the pages (the batched budget
    of :func:`models.sim.run`, as Sec. 6.7 of paper 004 crawls 5000 pages per step)."""
    return max(1, round(m / 1000))


def _trace_job(job: Job) -> list[Row]:
    path = job["path"]
    if path not in _CACHE:
        _CACHE.clear()
        _CACHE[path] = _load(path)
    trace, recorded = _CACHE[path]
    if job.get("shuffle") and job["rep"] > 0:
        trace, recorded = permute_pages(
            trace, rng(job["seed"], job["rep"], 3).permutation(trace.m), recorded)
    recall, false, delay = job["pings"] or (0.0, 0.0, 0.0)
    use_pings = job["pings"] is not None or recorded is not None
    ev = trace_events(trace, rng(job["seed"], job["rep"], 1), recall=recall,
                      false_per_day=false, delay_days=delay, pings=recorded)
    t0 = time.perf_counter()
    R, D = job["budget"], job["learn_days"]
    pol = _policy(job["policy"], trace, R, D, ev, rng(job["seed"], job["rep"], 2),
                  use_pings=use_pings, synthesised=job["pings"],
                  hedge_share=job.get("hedge", HEDGE_SHARE), prior=job.get("prior", "host"),
                  half_life_days=job.get("half_life_days", HALF_LIFE_DAYS))
    w = trace_world(trace, recall=recall, false_per_day=false)
    res = run(w, ev, pol, Budget(R, batch=job.get("batch") or step_crawls(trace.m)))
    return [{"budget": R, "policy": job["policy"], "rep": job["rep"],
             "accuracy": accuracy(w, ev, res, start=D), "crawls": int(res.crawl_time.size),
             "seconds": time.perf_counter() - t0}]


def trace_rows(trace: Trace, budgets: Sequence[float], *, pings: tuple[float, float, float]
               | None = None, recorded: tuple[np.ndarray, np.ndarray] | None = None,
               learn_days: float = 0.0, reps: int = 1, seed: int = 0, jobs: int = 1,
               progress: bool = False, policies: Sequence[str] | None = None,
               hedge: float = HEDGE_SHARE, batch: int | None = None,
               unhedged: bool = False, prior: str = "host",
               half_life_days: float = HALF_LIFE_DAYS,
               shuffle_pages: bool = False) -> list[Row]:
    """Accuracy rows ``{budget, policy, rep, accuracy, crawls, seconds}`` of a trace
    (``shuffle_pages``: repetition ``r > 0`` on the pages in a random order, see the
    module's ``--shuffle-pages``)."""
    if not 0 <= learn_days < trace.horizon:
        raise ValueError(f"--learn-days must be in [0, {trace.horizon:.4g}) (the window's "
                         f"days), got {learn_days!r}")
    if not half_life_days > 0:
        raise ValueError(f"--half-life-days must be > 0, got {half_life_days!r}")
    if any(not (r > 0 and math.isfinite(r)) for r in budgets):
        raise ValueError(f"budgets must be finite crawls per day > 0, got {list(budgets)}")
    kinds = list(policies) if policies is not None else [
        *POLICIES, *(["recrawl-cold"] if learn_days > 0 else []),
        *(["recrawl-unhedged"] if unhedged else [])]
    with tempfile.TemporaryDirectory(prefix="recrawl-trace-") as tmp:
        path = str(_save(trace, Path(tmp), recorded))
        # without synthesised pings or shuffled pages a repetition redraws only the peers'
        # random first order and crawl times: recrawl and hindsight would repeat the same run
        job_list = [{"path": path, "budget": float(R), "policy": k, "rep": r, "seed": seed,
                     "pings": pings, "learn_days": float(learn_days), "hedge": hedge,
                     "batch": batch, "prior": prior, "half_life_days": half_life_days,
                     "shuffle": shuffle_pages}
                    for R in budgets for r in range(reps) for k in kinds
                    if r == 0 or pings is not None or shuffle_pages or k in PEERS]
        return run_jobs(_trace_job, job_list, processes=jobs, progress=progress,
                        label="trace")


def summarise(raw: Sequence[Row], budgets: Sequence[float]) -> dict[str, list[float]]:
    """Mean accuracy per policy, one number per budget (budgets' order)."""
    out: dict[str, list[float]] = {}
    for k in sorted({r["policy"] for r in raw}):
        out[k] = [float(np.mean([r["accuracy"] for r in raw
                                 if r["policy"] == k and r["budget"] == float(R)]))
                  for R in budgets]
    return out


def stderr(raw: Sequence[Row], budgets: Sequence[float]) -> dict[str, list[float]]:
    """Standard error of each policy's mean accuracy over the repetitions (0 with one)."""
    out: dict[str, list[float]] = {}
    for k in sorted({r["policy"] for r in raw}):
        out[k] = []
        for R in budgets:
            a = np.array([r["accuracy"] for r in raw
                          if r["policy"] == k and r["budget"] == float(R)])
            out[k].append(float(a.std(ddof=1) / np.sqrt(a.size)) if a.size > 1 else 0.0)
    return out


def _cell(mean: float, se: float) -> str:
    return f"{100 * mean:.2f}" + (f" ± {100 * se:.2f}" if 100 * se >= 0.005 else "")


def table(acc: dict[str, list[float]], budgets: Sequence[float],
          se: dict[str, list[float]] | None = None) -> str:
    """Accuracy per policy and budget (percent; ``± stderr`` where ``se`` has one above
    0.005 points), the best peer, hindsight's room over it (points) and the share of that
    room each policy captures."""
    kinds = [k for k in (*POLICIES, "recrawl-cold", "recrawl-unhedged") if k in acc]
    learners = [k for k in kinds if k not in PEERS and k != "hindsight"]
    head = ["R/day", *kinds, "best peer", "room", *[f"{k} share" for k in learners]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for j, R in enumerate(budgets):
        best_k = max(PEERS, key=lambda k: acc[k][j])
        best = acc[best_k][j]
        room = acc["hindsight"][j] - best
        cells = [f"{R:g}", *[_cell(acc[k][j], se[k][j] if se is not None else 0.0)
                              for k in kinds],
                 f"{best_k} {100 * best:.2f}", f"{100 * room:+.2f}"]
        for k in learners:
            cells.append(f"{(acc[k][j] - best) / room:+.0%}" if room > 1e-9 else "-")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _plot(acc: dict[str, list[float]], budgets: Sequence[float], path: Path, title: str) -> None:
    with figure(path, (6.4, 4.2)) as ax:
        for k in [k for k in (*POLICIES, "recrawl-cold", "recrawl-unhedged") if k in acc]:
            ax.plot(budgets, [100 * a for a in acc[k]], marker="o", ms=3, label=k,
                    ls="--" if k == "hindsight" else "-")
        ax.set_xscale("log")
        ax.set_xlabel("crawls per day R")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="recrawl experiments trace",
                                description=help_text(__doc__ or ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--changes", type=Path, required=True,
                   help="history file: change log .jsonl, .cdx/.cdxj, .warc(.gz), Kolobov folder")
    p.add_argument("--format", default=None, choices=["changes", "cdx", "warc", "kolobov"],
                   help="format of --changes (default: from the name)")
    p.add_argument("--budget", type=float, nargs="+", required=True, help="crawls per day")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--pings", type=parse_pings, default=None,
                   metavar="RECALL,FALSE_PER_DAY,DELAY_DAYS")
    g.add_argument("--ping-log", type=Path, default=None,
                   help="recorded pings: change-log lines, one per ping")
    p.add_argument("--learn-days", type=float, default=0.0)
    p.add_argument("--batch", type=int, default=None,
                   help="crawls per step, all at the step's time (default: 1 up to 1000 "
                        "pages, then pages/1000)")
    p.add_argument("--hedge", type=float, default=HEDGE_SHARE,
                   help="largest share of crawls recrawl gives to the hedge's floor (round "
                        "robin, or Greedy on adaptive intervals) when its rates do not "
                        f"predict (0: no hedge; default {HEDGE_SHARE:g})")
    p.add_argument("--unhedged", action="store_true",
                   help="also run recrawl without the hedge (table only: recrawl-unhedged)")
    p.add_argument("--prior", choices=["host", "global"], default="host",
                   help="recrawl's rate prior: 'host' (default), the site's empirical-Bayes "
                        "Gamma (models.estimators.host_prior); 'global', the estimator's "
                        "default prior for every page")
    p.add_argument("--half-life-days", type=float, default=HALF_LIFE_DAYS,
                   help="recrawl's estimator forgets: an interval's weight halves every that "
                        f"many days (default {HALF_LIFE_DAYS:g}; inf: never)")
    p.add_argument("--reps", type=int, default=1,
                   help="repetitions: the peers' random first order and crawl times, and "
                        "--pings' draws (without --pings or --shuffle-pages recrawl and "
                        "hindsight are deterministic and run once); the table gives "
                        "mean ± stderr")
    p.add_argument("--shuffle-pages", action="store_true",
                   help="repetitions after the first run every policy on the pages in a "
                        "random order, so recrawl and hindsight repeat too (their first "
                        "crawls and ties follow the pages' order)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jobs", type=int, default=2, help="worker processes (max 2)")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--out", type=Path, default=Path("var/experiments"))
    p.add_argument("--strict", action="store_true", help="fail on the first bad line")
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: Sequence[str]) -> int:
    name, *rest = argv
    if name not in NAMES:
        raise SystemExit(f"unknown experiment {name!r}; expected one of {NAMES}")
    args = _parser().parse_args(rest)
    from streams.histories import HistoryError
    from streams.histories.trace import load_pings, load_trace

    t0 = time.perf_counter()
    try:
        loaded = load_trace(args.changes, args.format, strict=args.strict)
        recorded = None
        if args.ping_log is not None:
            pp, pd, prep = load_pings(args.ping_log, loaded, strict=args.strict)
            recorded = (pp, pd)
            if prep.bad or prep.skipped:
                print(prep.summary())
    except (HistoryError, ValueError, OSError) as exc:
        raise SystemExit(f"recrawl experiments trace: {exc}") from None
    if loaded.report.bad:
        print(loaded.report.summary())
    tr = loaded.trace
    try:
        raw = trace_rows(tr, args.budget, pings=args.pings, recorded=recorded,
                         learn_days=args.learn_days, reps=args.reps, seed=args.seed,
                         jobs=args.jobs, progress=not args.no_progress, hedge=args.hedge,
                         batch=args.batch, unhedged=args.unhedged, prior=args.prior,
                         half_life_days=args.half_life_days,
                         shuffle_pages=args.shuffle_pages)
    except ValueError as exc:
        raise SystemExit(f"recrawl experiments trace: {exc}") from None
    acc = summarise(raw, args.budget)
    scored = tr.horizon - args.learn_days
    what = (f"{tr.m} pages, {loaded.changes_read} changes, {tr.horizon:.1f} days"
            f" (scored: last {scored:.1f})" + (f", pings {args.pings}" if args.pings else "")
            + (f", recorded pings {args.ping_log}" if args.ping_log else ""))
    text = (f"# trace: {args.changes.name}\n\n{what}; recrawl prior {args.prior}, half-life "
            f"{args.half_life_days:g} days; "
            f"{args.reps} rep(s){' over shuffled page orders' if args.shuffle_pages else ''}, "
            f"seed {args.seed}, "
            f"{time.perf_counter() - t0:.0f} s\n\n"
            + table(acc, args.budget, stderr(raw, args.budget))
            + "\nroom = hindsight - best peer (points); share = (policy - best peer) / room"
            + ("; ± the standard error over the repetitions" if args.reps > 1 else "")
            + ".\n")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "trace.md").write_text(text)
    _plot(acc, args.budget, args.out / "trace.png", f"{args.changes.name}: {what}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "pages": tr.m, "changes": loaded.changes_read, "days": tr.horizon,
            "budgets": [float(R) for R in args.budget],
            "accuracy": {k: acc[k] for k in POLICIES}}, indent=1))
    print(text)
    return 0
