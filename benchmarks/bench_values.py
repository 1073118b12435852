"""Throughput of the crawl values, time_to_value and optimal_rates.

Run (one core, no BLAS threads):

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \\
        taskset -c 0 .venv/bin/python benchmarks/bench_values.py [--n 1000000]

Prints a table.  The "paper mix" is Sec. 6.6 of paper 004: Delta ~ U(0, 1),
lam ~ Beta(0.25, 0.25), nu ~ U(0.1, 0.6), tau_eff ~ U(0, 20).  The gammainc ceiling is
measured in the same run (scipy.special.gammainc on a = 2 and on a in 1..9, x ~
U(0, 20)); exact Greedy-NCIS needs at least two gammainc-equivalents per value, so the
ceiling for values is half the gammainc rate.  Each number is the best of --repeat runs.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from scipy import special

from models.policies import solve_optimal_rates
from models.values import crawl_value, signal_params, time_to_value


def best_time(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    n, rep = args.n, args.repeat
    rng = np.random.default_rng(args.seed)
    delta = rng.uniform(0, 1, n)
    lam = rng.beta(0.25, 0.25, n)
    nu = rng.uniform(0.1, 0.6, n)
    tau = rng.uniform(0, 20, n)
    mu = rng.uniform(0, 1, n)
    a, b, g = signal_params(delta, lam, nu)
    a_cis, b_cis, g_cis = signal_params(delta, lam, np.zeros(n))
    x = rng.uniform(0, 20, n)
    orders = rng.integers(1, 10, n).astype(float)

    rows: list[tuple[str, int, float]] = []

    def record(name: str, count: int, fn: Callable[[], object]) -> float:
        dt = best_time(fn, rep)
        rows.append((name, count, dt))
        return count / dt

    ceil2 = record("scipy gammainc(2, x)  [ceiling]", n, lambda: special.gammainc(2.0, x))
    ceil_mix = record("scipy gammainc(1..9, x)  [ceiling]", n, lambda: special.gammainc(orders, x))
    greedy = record(
        "crawl_value Greedy (gamma = 0)", n, lambda: crawl_value(tau, delta, 0.0, 0.0, mu)
    )
    cis = record(
        "crawl_value Greedy-CIS (nu = 0)", n, lambda: crawl_value(tau, a_cis, b_cis, g_cis, mu)
    )
    ncis = record("crawl_value Greedy-NCIS exact", n, lambda: crawl_value(tau, a, b, g, mu))
    for j in (1, 2):
        record(
            f"crawl_value G-NCIS-Approx-{j}", n, lambda j=j: crawl_value(tau, a, b, g, mu, terms=j)
        )
    m = min(n, 100_000)
    level = crawl_value(tau[:m], a[:m], b[:m], g[:m], mu[:m])
    record(
        "time_to_value Greedy-NCIS", m, lambda: time_to_value(level, a[:m], b[:m], g[:m], mu[:m])
    )
    lvl_g = crawl_value(tau[:m], delta[:m], 0.0, 0.0, mu[:m])
    record("time_to_value Greedy", m, lambda: time_to_value(lvl_g, delta[:m], 0.0, 0.0, mu[:m]))
    t_rates = best_time(lambda: solve_optimal_rates(mu, delta, 0.1 * n), rep)
    rows.append(("optimal_rates, R = 0.1 n (one solve)", n, t_rates))

    print(f"{'what':44s} {'count':>9s} {'seconds':>9s} {'per second':>12s}")
    for name, count, dt in rows:
        print(f"{name:44s} {count:9d} {dt:9.4f} {count / dt:12.3e}")
    print()
    print(f"Greedy-NCIS exact vs value ceiling (gammainc(2)/2): {ncis / (ceil2 / 2):.3f}")
    print(f"Greedy-NCIS exact vs value ceiling (gammainc(1..9)/2): {ncis / (ceil_mix / 2):.3f}")
    print(f"Greedy values per second: {greedy:.3e}; Greedy-CIS: {cis:.3e}")


if __name__ == "__main__":
    main()
