"""Trace replay at scale: 10^5 pages and 10^6 changes under all five policies.

Run: ``.venv/bin/python benchmarks/bench_trace.py [--pages 100000] [--changes 1000000]
[--days 100] [--budget 10000] [--jobs 2]``.  Writes a change log (``--keep PATH`` keeps
it) of pages whose rates are log-normal (median 0.1 changes/day, sigma 1.6, as the
semi-synthetic world of paper 004 Sec. 6.7) with half of them changing in bursts (a
change brings more within the hour), then reports: the file's lines; the time and the
peak memory of loading it (``tracemalloc`` on the loader, and the process's peak RSS);
and the wall time of ``recrawl experiments trace``'s jobs (all five policies at one
budget, ``--jobs`` worker processes), with each policy's own time and accuracy.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np

from experiments.trace import POLICIES, trace_rows
from streams.histories.trace import load_trace


def write_log(path: Path, pages: int, changes: int, days: float, seed: int) -> int:
    rng = np.random.default_rng(seed)
    rate = np.exp(rng.normal(np.log(0.1), 1.6, pages))
    rate *= changes / (rate.sum() * days)  # expected total = changes
    bursty = rng.uniform(size=pages) < 0.5
    lines = 0
    t0 = 1_700_000_000.0
    with open(path, "w") as f:
        for i in range(pages):
            url = f"https://h{i % 1000}.example/p{i}"
            f.write(json.dumps({"url": url, "page": True}) + "\n")
            n = rng.poisson(rate[i] * days)
            if bursty[i] and n > 1:  # half the changes come as follow-ups within the hour
                heads = rng.uniform(0, days, (n + 1) // 2)
                tail = rng.choice(heads, n // 2) + rng.uniform(0, 1 / 24, n // 2)
                times = np.concatenate([heads, np.minimum(tail, days)])
            else:
                times = rng.uniform(0, days, n)
            for t in np.sort(times).tolist():
                f.write(f'{{"url": "{url}", "time": {t0 + t * 86400.0:.3f}}}\n')
            lines += 1 + n
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--changes", type=int, default=1_000_000)
    ap.add_argument("--days", type=float, default=100.0)
    ap.add_argument("--budget", type=float, default=10_000.0, help="crawls per day")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = a.keep or Path(tmp) / "changes.jsonl"
        t = time.perf_counter()
        lines = write_log(path, a.pages, a.changes, a.days, a.seed)
        print(f"change log: {lines} lines, {path.stat().st_size / 1e6:.0f} MB, "
              f"written in {time.perf_counter() - t:.0f} s")
        tracemalloc.start()
        t = time.perf_counter()
        loaded = load_trace(path)
        load_s = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        tr = loaded.trace
        print(f"loaded {tr.m} pages, {tr.n_changes} changes, {tr.horizon:.1f} days in "
              f"{load_s:.0f} s; loader peak {peak / 1e6:.0f} MB (tracemalloc), "
              f"{peak / max(lines, 1):.0f} B per line")
    t = time.perf_counter()
    rows = trace_rows(tr, [a.budget], jobs=a.jobs, progress=False, policies=POLICIES)
    wall = time.perf_counter() - t
    for r in sorted(rows, key=lambda r: POLICIES.index(r["policy"])):
        print(f"  {r['policy']:<13} accuracy {r['accuracy']:.4f}  {r['crawls']} crawls  "
              f"{r['seconds']:.0f} s")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1e3
    print(f"five policies at R = {a.budget:g}/day, --jobs {a.jobs}: {wall:.0f} s wall; "
          f"peak RSS {rss:.0f} MB (this process), {kids:.0f} MB (largest worker)")


if __name__ == "__main__":
    main()
