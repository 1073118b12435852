"""A shard's book at a rebuild's scale, no Redis, no Kafka: the time of
``ShardBook.set_pages`` of ``--pages`` pages (``--crawled`` of them crawled, the rest never
crawled, floor due times set, as a rebuild sets them), and the time of a full garbage
collection with that book alive, before and after ``gc.freeze`` (what the worker's
``GcPauses`` does: ``streams/telemetry/metrics.py``).

    .venv/bin/python benchmarks/bench_book_gc.py --pages 1000000 --hosts 10000

Run it with ``PYTHONPATH=<other tree>`` for a same-run reference of another commit's book.
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np

from models.decision.core import ShardBook
from models.decision.hosts import HostBuckets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=1_000_000)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--crawled", type=float, default=0.1, help="share of crawled pages")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n, nh = args.pages, args.hosts
    pages = [f"https://host{i % nh}.example/p/{i:08d}" for i in range(n)]
    hosts = [f"host{i % nh}.example" for i in range(n)]
    rng = np.random.default_rng(1)
    crawled = rng.random(n) < args.crawled
    delta = rng.uniform(0.01, 1.0, n)
    alpha, gamma = delta * 0.6, delta * 0.4 + 0.05
    beta = np.log(gamma / 0.05) / alpha
    mu = rng.uniform(0.1, 2.0, n)
    origin = np.where(crawled, rng.uniform(-50, 0, n), 0.0)
    times, book = [], None
    for _ in range(args.repeat):
        book = None
        gc.collect()
        book = ShardBook(HostBuckets(1.0))
        t0 = time.perf_counter()
        book.set_pages(pages, hosts, crawled=crawled, origin=origin, alpha=alpha, beta=beta,
                       gamma=gamma, mu=mu, max_value=mu / delta, first_seen_s=0.0,
                       last_crawl_s=origin, delta=delta, estimated=np.zeros(n, dtype=bool),
                       src_beta=beta[:, None], floor_due_s=origin + 1e6)
        times.append(time.perf_counter() - t0)
    print(f"set_pages of {n:,} pages ({args.crawled:.0%} crawled) on {nh:,} hosts: "
          + ", ".join(f"{t:.2f}" for t in times) + " s")
    del pages, hosts
    for label in ("full collection", "after gc.freeze: full collection"):
        if label.startswith("after"):
            gc.freeze()
        walks = []
        for _ in range(3):
            t0 = time.perf_counter()
            gc.collect()
            walks.append(time.perf_counter() - t0)
        print(f"{label}: " + ", ".join(f"{t:.3f}" for t in walks) + " s")
    gc.unfreeze()
    assert book is not None and len(book) == n


if __name__ == "__main__":
    main()
