"""Memory of a shard's book per page: ``tracemalloc`` over ``ShardBook.set_pages`` of
``--pages`` crawled pages (floor due times included, as a rebuild sets them), grouped by
source line; and the worker's decisions ring (``streams.telemetry.decisions``) at ``--ring-pages``
pages of four ~100-character entries, against the layout it replaced (a ``deque`` per
page).  No Redis, no Kafka.

    .venv/bin/python benchmarks/bench_book_memory.py --pages 200000 --hosts 2000 [--from-new]

``--from-new``: the pages are set never crawled first, then crawled (what a shard goes
through when its pages are crawled after they came in).
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from collections import OrderedDict, deque
from typing import Any

import numpy as np

from models.decision.core import ShardBook
from models.decision.hosts import HostBuckets
from models.decision.table import PageTable
from streams.telemetry.decisions import DecisionRing


def _traced(build: Any) -> float:
    """MiB that ``build()``'s result holds (tracemalloc)."""
    tracemalloc.start()
    try:
        keep = build()
        size = tracemalloc.get_traced_memory()[0]
        del keep
        return size / 2**20
    finally:
        tracemalloc.stop()


def ring_memory(pages: int) -> None:
    urls = [f"https://host{i % 10_000}.example/page/{i:08d}" for i in range(pages)]
    texts = [f"{1764000000.123 + k:.3f} ordered w1-0-{k:x} (greedy): value 0.01234 >= "
             "threshold 0.01, tau_eff 3600s" for k in range(4)]

    def ring() -> DecisionRing:
        r = DecisionRing(max_pages=pages)
        for u in urls:
            for t in texts:
                r.add(u, t + u[-4:])
        return r

    def deques() -> OrderedDict[str, deque[str]]:
        d: OrderedDict[str, deque[str]] = OrderedDict()
        for u in urls:
            q = d[u] = deque(maxlen=4)
            for t in texts:
                q.append(t + u[-4:])
        return d

    print(f"decisions ring, {pages} pages x 4 entries: {_traced(ring):.0f} MiB "
          f"(a deque per page: {_traced(deques):.0f} MiB)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=200_000)
    ap.add_argument("--hosts", type=int, default=2_000)
    ap.add_argument("--batch", type=int, default=5_000, help="pages per set_pages call")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--ring-pages", type=int, default=100_000)
    ap.add_argument("--from-new", action="store_true",
                    help="set every page never crawled first, then crawled (the path of a "
                         "shard whose pages are crawled after they came in: bench_e2e.py "
                         "throughput --state crawled)")
    args = ap.parse_args()
    ring_memory(args.ring_pages)
    n_all, h_all = args.pages, args.hosts
    urls = [f"https://host{i % h_all}.example/page/{i:08d}" for i in range(n_all)]
    hosts = [f"host{i % h_all}.example" for i in range(n_all)]
    tracemalloc.start()
    book = ShardBook(HostBuckets(1.0, 1.0, 0), key=0, table=PageTable(n_sources=5))
    now = time.time()
    for crawled in (False, True) if args.from_new else (True,):
        for k in range(0, n_all, args.batch):
            n = min(args.batch, n_all - k)
            ones = np.ones(n)
            book.set_pages(urls[k:k + n], hosts[k:k + n], crawled=np.full(n, crawled),
                           origin=now - 100 * ones, alpha=1e-4 * ones, beta=50 * ones,
                           gamma=1e-4 * ones, mu=ones, max_value=ones, first_seen_s=now,
                           last_crawl_s=(now - 100 if crawled else 0.0) * ones,
                           delta=1e-4 * ones, estimated=np.full(n, crawled),
                           src_beta=np.full((n, 5), 50.0), floor_due_s=now + 86400 * ones)
    gc.collect()
    snap = tracemalloc.take_snapshot()
    stats = snap.statistics("lineno")
    total = sum(s.size for s in stats)
    print(f"book of {n_all} pages on {h_all} hosts: {total / n_all:.0f} B per page "
          "(tracemalloc, the url strings themselves not counted)")
    for s in stats[: args.top]:
        frame = s.traceback[0]
        where = "/".join(frame.filename.rsplit("/", 3)[-3:])
        print(f"  {s.size / n_all:7.1f} B/page  {where}:{frame.lineno}")


if __name__ == "__main__":
    main()
