"""Memory of a shard's book per page: ``tracemalloc`` over ``ShardBook.set_pages`` of
``--pages`` crawled pages (floor due times included, as a rebuild sets them), grouped by
source line.  No Redis, no Kafka.

    .venv/bin/python benchmarks/bench_book_memory.py --pages 200000 --hosts 2000
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

import numpy as np

from models.decision.core import ShardBook
from models.decision.hosts import HostBuckets
from models.decision.table import PageTable


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pages", type=int, default=200_000)
    ap.add_argument("--hosts", type=int, default=2_000)
    ap.add_argument("--batch", type=int, default=5_000, help="pages per set_pages call")
    ap.add_argument("--top", type=int, default=10)
    args = ap.parse_args()
    n_all, h_all = args.pages, args.hosts
    urls = [f"https://host{i % h_all}.example/page/{i:08d}" for i in range(n_all)]
    hosts = [f"host{i % h_all}.example" for i in range(n_all)]
    tracemalloc.start()
    book = ShardBook(HostBuckets(1.0, 1.0, 0), key=0, table=PageTable(n_sources=5))
    now = time.time()
    for k in range(0, n_all, args.batch):
        n = min(args.batch, n_all - k)
        ones = np.ones(n)
        book.set_pages(urls[k:k + n], hosts[k:k + n], crawled=np.ones(n, bool),
                       origin=now - 100 * ones, alpha=1e-4 * ones, beta=50 * ones,
                       gamma=1e-4 * ones, mu=ones, max_value=ones, first_seen_s=now,
                       last_crawl_s=now - 100 * ones, delta=1e-4 * ones,
                       estimated=np.ones(n, bool), src_beta=np.full((n, 5), 50.0),
                       floor_due_s=now + 86400 * ones)
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
