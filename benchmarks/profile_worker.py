"""Profile a running ``recrawl worker`` during one phase of ``bench_e2e.py throughput``.

Waits for a worker started by the bench (``streams.cli worker --web-port N``), polls its
``/stats/`` and, once the counters of each ``--phase`` prefix pass ``--after``, runs
``py-spy record --format raw`` on it for ``--seconds``; then prints, per phase, the share
of the main thread's samples by function (each function counted once per sample, so the
shares of nested frames overlap).  ``py-spy`` is not a dependency: ``.venv/bin/pip install
py-spy`` first.  Run it beside the bench::

    .venv/bin/python benchmarks/profile_worker.py --phase pings outcomes --out /tmp/prof &
    .venv/bin/python -u benchmarks/bench_e2e.py throughput --pages 100000 --hosts 10000

``--summarise FILE`` prints the table of a raw profile written before.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.request import urlopen


def find_worker() -> tuple[int, int] | None:
    out = subprocess.run(["pgrep", "-af", "streams.cli worker"], capture_output=True,
                         text=True, check=False).stdout
    for line in out.splitlines():
        m = re.search(r"--web-port (\d+)", line)
        if m and "pgrep" not in line:
            return int(line.split()[0]), int(m.group(1))
    return None


def counted(port: int, prefix: str) -> int:
    with urlopen(f"http://127.0.0.1:{port}/stats/", timeout=5) as r:
        counters = json.load(r).get("counters", {})
    return sum(int(v) for k, v in counters.items() if k.startswith(prefix + "."))


def summarise(path: Path, top: int) -> list[tuple[float, str]]:
    """Share of the main thread's samples per function (``py-spy`` raw format; the main
    thread is the one whose stack starts in ``streams/cli.py``)."""
    total, incl = 0, collections.Counter[str]()
    for line in path.read_text().splitlines():
        if not line.strip() or "streams/cli.py" not in line:  # the main thread
            continue
        stack, n = line.rsplit(" ", 1)
        total += int(n)
        names = {f.split(" (")[0] + " (" + f.rsplit("/", 1)[-1].split(":")[0] + ")"
                 for f in stack.split(";")}
        for name in names:
            incl[name] += int(n)
    return [(100.0 * v / max(total, 1), k) for k, v in incl.most_common(top)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phase", nargs="+", default=["pings", "outcomes"],
                    help="counter prefixes of /stats, profiled in turn")
    ap.add_argument("--after", type=int, default=200, help="events counted before starting")
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    ap.add_argument("--out", type=Path, default=Path("/tmp/recrawl-profile"))
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--summarise", type=Path)
    args = ap.parse_args()
    if args.summarise:
        for share, name in summarise(args.summarise, args.top):
            print(f"{share:5.1f}% {name}")
        return 0
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    args.out.mkdir(parents=True, exist_ok=True)
    todo = list(args.phase)
    while todo:
        w = find_worker()
        if w is None:
            time.sleep(0.5)
            continue
        pid, port = w
        try:
            n = counted(port, todo[0])
        except (OSError, ValueError):
            time.sleep(0.2)
            continue
        if n > args.after:
            out = args.out / f"{todo[0]}.txt"
            print(f"profiling {todo[0]} (worker {pid}) -> {out}", flush=True)
            done = subprocess.run([spy, "record", "--format", "raw", "-r", str(args.rate),
                                   "-d", str(args.seconds), "--pid", str(pid), "-o", str(out)],
                                  capture_output=True, text=True, check=False)
            if done.returncode or not out.exists():
                print(f"py-spy failed ({done.returncode}): {done.stderr[-2000:]}", flush=True)
                return 1
            for share, name in summarise(out, args.top):
                print(f"{share:5.1f}% {name}")
            todo.pop(0)
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
