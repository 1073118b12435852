"""Memory and time of reading a ping log for ``recrawl import --ping-log``
(:class:`streams.histories.pings.PingIndex`): ``--pings`` pings over ``--urls`` URLs written
to a temporary file, read once with ``tracemalloc`` tracing (bytes per ping after the read
and at its peak) and once without (seconds).

    .venv/bin/python benchmarks/bench_ping_log.py --pings 1000000 --urls 10000
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import tracemalloc
from pathlib import Path

from streams.histories.pings import PingIndex
from streams.histories.records import ReadReport


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pings", type=int, default=1_000_000)
    p.add_argument("--urls", type=int, default=10_000)
    a = p.parse_args()
    urls = [f"https://h{i % 50}.example/p/{i}" for i in range(a.urls)]
    rnd = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "pings.jsonl"
        with open(path, "w") as f:
            for k in range(a.pings):
                f.write(json.dumps({"url": urls[rnd.randrange(a.urls)],
                                    "time": 1.7e9 + k * 0.37, "source": "indexnow"}) + "\n")
        wanted = set(urls)
        t = time.perf_counter()
        PingIndex.read(path, wanted, ReadReport(), strict=True)
        took = time.perf_counter() - t
        tracemalloc.start()
        idx = PingIndex.read(path, wanted, ReadReport(), strict=True)
        after, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    n = idx.pings
    print(f"{n} pings over {a.urls} URLs: read in {took:.1f} s ({n / took:,.0f} pings/s); "
          f"{after / n:.1f} B a ping after the read, {peak / n:.1f} B at its peak")


if __name__ == "__main__":
    main()
