"""Index vs brute force on Algorithm 1 slots, and simulator throughput.

Run: ``.venv/bin/python benchmarks/bench_sim.py [--m 1000] [--slots 300]``.  Reports the
time per slot of CrawlIndex.best and of a brute-force argmax over models.crawl_value,
measured in the same run on the same world and the same crawl sequence (paper 004
Algorithm 1, App. F).

``--whole``: the two simulator targets as whole simulator runs (``models.sim.run``):
fig6's world (m = 10^4, R = 100, T = 1000, exact Greedy-NCIS) and fig8's scale (10^5
pages, 200 steps of 5000 crawls, exact Greedy-NCIS), each with the time to draw the
events separately and, as the same-run reference, the brute-force time per crawl.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from models.index import CrawlIndex
from models.sim import simulate_events, synthetic_world, value_params
from models.values import crawl_value


def bench(kind: str, m: int, slots: int, seed: int, warmup: int = 0,
          plan: bool = True) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    R = 100.0
    w = synthetic_world(m, rng)
    ev = simulate_events(w, (slots + warmup) / R + 1, rng)
    a, b, g, terms = value_params(kind, w.delta, w.lam, w.nu)
    idx = CrawlIndex(terms=terms)
    origin = np.zeros(m)
    for i in range(m):
        idx.upsert(i, origin=0.0, alpha=a[i], beta=b[i], gamma=g[i], mu=w.mu[i])
    if plan:  # the slot times, as models.sim.run announces them to Algorithm1
        idx.plan(np.arange(1, slots + warmup + 1) / R)
    k = 0
    t_idx = t_bf = 0.0
    agree = 0
    pa, pp = ev.ping_arrival, ev.ping_page
    for j in range(1, slots + warmup + 1):
        t = j / R
        timed = j > warmup
        while k < pa.size and pa[k] <= t:
            p = int(pp[k])
            k += 1
            if g[p] == 0:
                continue
            origin[p] = -np.inf if b[p] == np.inf else origin[p] - b[p]
            idx.set_origin(p, float(origin[p]))
        t0 = time.perf_counter()
        got = idx.best(t)[0][0]
        t1 = time.perf_counter()
        v = crawl_value(np.maximum(t - origin, 0.0), a, b, g, w.mu, terms=terms)
        want = int(np.argmax(v))
        t2 = time.perf_counter()
        if timed:
            t_idx += t1 - t0
            t_bf += t2 - t1
        agree += int(got == want)
        origin[got] = t
        idx.set_origin(got, t)
    return {"index_ms_per_slot": 1e3 * t_idx / slots, "brute_ms_per_slot": 1e3 * t_bf / slots,
            "speedup": t_bf / t_idx, "agree": agree / (slots + warmup),
            **{k: float(v) for k, v in idx.stats.as_dict().items()}}


def whole(T6: float, steps8: int, m8: int) -> None:
    """Whole runs: fig6 (slot by slot) and fig8 (5000-page steps), exact Greedy-NCIS."""
    from models.sim import Budget, algorithm1, run, semi_synthetic_world

    print("| run | crawls | events s | run s | ms per crawl | brute force ms per crawl"
          " (same run) |")
    print("|---|---|---|---|---|---|")
    cases = [(f"fig6 m=1e4 R=100 T={T6:g}", 10_000, T6, False),
             (f"fig8 m={m8}, {steps8} steps of m/20", m8, float(steps8), True)]
    for label, m, T, semi in cases:
        rng = np.random.default_rng(0)
        w = semi_synthetic_world(m, rng) if semi else synthetic_world(m, rng)
        t0 = time.perf_counter()
        ev = simulate_events(w, T, rng)
        t1 = time.perf_counter()
        pol = algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu)
        R = m / 20.0 if semi else 100.0
        res = run(w, ev, pol, Budget(R, batch=int(R) if semi else 1))
        t2 = time.perf_counter()
        # reference: one brute-force evaluation of every page at the run's end state
        # (what a full scan costs per crawl, or per step of m/20 crawls for fig8)
        a, b, g, _ = value_params("greedy-ncis", w.delta, w.lam, w.nu)
        tau = np.maximum(T - pol.origin, 0.0)
        t3 = time.perf_counter()
        crawl_value(tau, a, b, g, w.mu)
        t4 = time.perf_counter()
        per_crawl_bf = (t4 - t3) * (1.0 if not semi else 1.0 / R)
        n = res.crawl_page.size
        print(f"| {label} | {n} | {t1 - t0:.1f} | {t2 - t1:.1f} | "
              f"{1e3 * (t2 - t1) / n:.3f} | {1e3 * per_crawl_bf:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--slots", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=300, help="untimed slots first")
    ap.add_argument("--kinds", nargs="+", default=["greedy", "greedy-ncis"])
    ap.add_argument("--no-plan", action="store_true",
                    help="do not announce the slot times (CrawlIndex.plan)")
    ap.add_argument("--whole", action="store_true", help="the two whole-run targets")
    ap.add_argument("--T6", type=float, default=1000.0)
    ap.add_argument("--steps8", type=int, default=200)
    ap.add_argument("--m8", type=int, default=100_000)
    args = ap.parse_args()
    if args.whole:
        whole(args.T6, args.steps8, args.m8)
        return
    print("| policy | m | slots | index ms/slot | brute force ms/slot | speed-up | same page |")
    print("|---|---|---|---|---|---|---|")
    for kind in args.kinds:
        for m in args.m:
            r = bench(kind, m, args.slots, 0, args.warmup, plan=not args.no_plan)
            print(f"| {kind} | {m} | {args.slots} | {r['index_ms_per_slot']:.2f} | "
                  f"{r['brute_ms_per_slot']:.1f} | {r['speedup']:.1f}x | {r['agree']:.3f} |"
                  f" <!-- scans {r['full_scans']:.0f}, levels {r['level_changes']:.0f},"
                  f" values {r['values_computed'] / (args.slots + args.warmup):.0f}/slot -->")


if __name__ == "__main__":
    main()
