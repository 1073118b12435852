"""The time of ``recrawl plan``'s computation (:func:`streams.worker.plan.plan`, no Redis):
a synthetic catalogue of ``--pages`` pages on ``--hosts`` hosts, each page seen
``--intervals`` times with three source groups (estimator observations drawn from its own
parameters), planned at five budgets of ``--per-page`` x (1, 3, 10, 30, 100) / 400 orders
per second per page (the demo's 400 pages at 1 .. 100 orders/s).

    .venv/bin/python benchmarks/bench_plan.py --pages 400 --hosts 20
    .venv/bin/python benchmarks/bench_plan.py --pages 50000 --hosts 500
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from models.plan import PageLikelihood
from streams.worker.plan import DRAWS, MAX_SIM_PAGES, PlanInputs, plan


def catalogue(m: int, hosts: int, n: int, rng: np.random.Generator) -> PlanInputs:
    alpha = rng.uniform(0.001, 0.05, m)
    kappa = rng.uniform(0.1, 3.0, (m, 3))
    gamma = np.zeros((m, 3))
    gamma[np.arange(m), rng.integers(0, 2, m)] = rng.uniform(0.01, 0.06, m)
    tau = 40.0
    changed = rng.uniform(size=(m, n)) < -np.expm1(-(alpha + gamma.sum(1) * 0.5)[:, None] * tau)
    c = changed.sum(axis=1)
    counts = rng.poisson(gamma[:, None, :] * tau, (m, n, 3)).astype(np.float64)
    ring = np.zeros((m, 2, 5))
    lin = np.zeros((m, 4))
    for j in range(n):
        un = ~changed[:, j]
        lin[un, 0] += tau
        lin[un, 1:] += counts[un, j]
    k = np.zeros(m, dtype=np.int64)
    for j in range(n):
        ch = changed[:, j] & (k < 2)
        ring[ch, k[ch], 0] = tau
        ring[ch, k[ch], 1:4] = counts[ch, j]
        ring[ch, k[ch], 4] = 1.0
        k[ch] += 1
    totals = np.concatenate([np.full((m, 1), n * tau), counts.sum(axis=1)], axis=1)
    theta = np.concatenate([alpha[:, None], kappa], axis=1)
    lik = PageLikelihood(lin, ring, np.zeros((m, 4, 4)), np.zeros((m, 2)), totals, theta,
                         gamma, c >= 0)
    beta = (kappa * (gamma > 0)).sum(1) / alpha
    budget = 10.0 * m / 400
    # every host limited to 4 x its share of the budget (the demo's default host limit)
    return PlanInputs(rng.uniform(0.0, 1.0, m), alpha, beta, gamma.sum(1),
                      rng.integers(0, hosts, m), np.full(hosts, 4 * budget / hosts), lik, 2.0,
                      m, 0, budget, "settings", False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=400)
    ap.add_argument("--hosts", type=int, default=20)
    ap.add_argument("--intervals", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    inputs = catalogue(args.pages, args.hosts, args.intervals, np.random.default_rng(0))
    budgets = [b * args.pages / 400 for b in (1, 3, 10, 30, 100)]
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = plan(inputs, budgets)
        times.append(time.perf_counter() - t0)
    print(f"{args.pages} pages, {args.hosts} hosts, {len(out['rows'])} budgets, {DRAWS} draws "
          f"of at most {MAX_SIM_PAGES} pages: plan() {min(times):.2f} s (best of "
          f"{args.repeat}); current row accuracy {out['current']['accuracy']:.3f}, optimum "
          f"{out['current']['optimum_accuracy']:.3f}")


if __name__ == "__main__":
    main()
