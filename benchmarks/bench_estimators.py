"""Throughput of the estimators (docs/benchmarks.md, "bench_estimation.py, bench_estimators.py,
bench_running_estimate.py").

``python benchmarks/bench_estimators.py [--quick]``: scalar ``SignalEstimator.update`` per
second for 0-3 ping sources, and vectorised ``batch_update`` page-intervals per second for
one million pages, in steady state (rings full, every changed interval evicts).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from models.estimators import CrawlInterval, SignalEstimator, batch_init, batch_update
from models.simulate_estimation import simulate_page_intervals

HOUR_S = 3600.0


def bench_scalar(n_sources: int, n: int, rng: np.random.Generator) -> float:
    """Scalar updates per second on one simulated page (after a warm-up that fills the ring)."""
    sim = simulate_page_intervals(
        rng,
        change_rate_per_s=1 / (10 * HOUR_S),
        crawl_rate_per_s=1 / (10 * HOUR_S),
        n_intervals=n + 200,
        recall=(0.3,) * n_sources,
        precision=(0.6,) * n_sources,
    )
    obs = [
        CrawlInterval(t, c, tuple(s))
        for t, c, s in zip(
            sim.interval_s.tolist(), sim.changed.tolist(), sim.n_signals.tolist(), strict=True
        )
    ]
    est = SignalEstimator(n_sources)
    st = est.init()
    for o in obs[:200]:
        st = est.update(st, o)
    update = est.update
    t0 = time.perf_counter()
    for o in obs[200:]:
        st = update(st, o)
    return n / (time.perf_counter() - t0)


def bench_batch(n_sources: int, n_pages: int, reps: int, rng: np.random.Generator) -> float:
    """Page-intervals per second of ``batch_update`` over all pages, rings already full."""
    est = SignalEstimator(n_sources)
    state = batch_init(est, n_pages)
    rate = 1 / (10 * HOUR_S)

    def step() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tau = rng.exponential(1 / rate, n_pages)
        changed = rng.random(n_pages) < -np.expm1(-rate * tau)
        sig = rng.poisson(0.5, (n_pages, n_sources)).astype(np.float64)
        return tau, changed, sig

    for _ in range(3 * est.ring_capacity):  # fill the rings (first evictions included)
        batch_update(est, state, *step())
    total = 0.0
    for _ in range(reps):
        tau, changed, sig = step()
        t0 = time.perf_counter()
        batch_update(est, state, tau, changed, sig)
        total += time.perf_counter() - t0
    return n_pages * reps / total


def main(argv: list[str] | None = None) -> int:
    """Print a markdown table of the measurements."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    n_scalar = 20_000 if args.quick else 200_000
    n_pages = 100_000 if args.quick else 1_000_000
    reps = 3 if args.quick else 10
    print("| sources S | scalar update / s | batch page-intervals / s |")
    print("| ---: | ---: | ---: |")
    for s in (0, 1, 2, 3):
        sc = bench_scalar(s, n_scalar, rng)
        ba = bench_batch(s, n_pages, reps, rng)
        print(f"| {s} | {sc:,.0f} | {ba:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
