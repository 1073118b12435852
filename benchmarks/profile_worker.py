"""Profile a running ``recrawl worker`` during one phase of ``bench_e2e.py throughput``.

Waits for a worker started by the bench (``streams.cli worker --web-port N``), polls its
``/stats/`` and, once the counters of each ``--phase`` prefix pass ``--after``, runs
``py-spy record --format raw`` on it for ``--seconds``; then prints, per phase, the share
of the main thread's samples by function (each function counted once per sample, so the
shares of nested frames overlap).  ``py-spy`` is not a dependency: ``.venv/bin/pip install
py-spy`` first.  Run it beside the bench::

    .venv/bin/python benchmarks/profile_worker.py --phase pings outcomes --out /tmp/prof &
    .venv/bin/python -u benchmarks/bench_e2e.py throughput --pages 100000 --hosts 10000

It also prints the CPU used over each window by the worker, Redis, Kafka and kcat (from
``/proc``, in % of one core) and how busy the machine's cores were: whether the worker
waits or computes.  ``--summarise FILE`` prints the table of a raw profile written before.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
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


def cpu_ticks(stat: Path) -> int:
    """utime + stime from a ``/proc/.../stat`` file (a process: all its threads; a task:
    one thread), in clock ticks; 0 if it is gone."""
    try:
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def thread_ticks(pid: int) -> dict[str, int]:
    """:func:`cpu_ticks` per thread of a process, by ``<tid> <name>``."""
    out = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        out[f"{task.name} {name}"] = cpu_ticks(task / "stat")
    return out


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every core (``/proc/stat``'s first line)."""
    v = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    return sum(v) - idle, sum(v)


def pids_of(pattern: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True,
                         check=False).stdout
    return [int(x) for x in out.split()]


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
    ap.add_argument("--idle", action="store_true",
                    help="py-spy --idle: samples of waiting threads too (where the loop waits)")
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
            others = {"redis-server": pids_of("redis-server"), "kafka": pids_of("kafka.Kafka"),
                      "kcat": pids_of("^kcat")}
            w0, m0, t0 = cpu_ticks(Path(f"/proc/{pid}/stat")), machine_ticks(), time.monotonic()
            th0 = thread_ticks(pid)
            o0 = {p: cpu_ticks(Path(f"/proc/{p}/stat")) for v in others.values() for p in v}
            done = subprocess.run([spy, "record", "--format", "raw", "-r", str(args.rate),
                                   "-d", str(args.seconds), "--pid", str(pid), "-o", str(out),
                                   *(["--idle"] if args.idle else [])],
                                  capture_output=True, text=True, check=False)
            if done.returncode or not out.exists():
                print(f"py-spy failed ({done.returncode}): {done.stderr[-2000:]}", flush=True)
                return 1
            # CPU over the window, in % of one core (this machine's cores: 100% each)
            hz, dt = os.sysconf("SC_CLK_TCK"), time.monotonic() - t0
            (b1, a1), (b0, a0) = machine_ticks(), m0
            # only processes there at both ends (a kcat that ended reads 0: not a negative)
            used = {k: sum(max(0, cpu_ticks(Path(f"/proc/{p}/stat")) - o0[p]) for p in v)
                    / hz / dt for k, v in others.items()}
            print(f"CPU over {dt:.1f} s, % of one core: worker "
                  f"{100 * (cpu_ticks(Path(f'/proc/{pid}/stat')) - w0) / hz / dt:.0f}%, "
                  + ", ".join(f"{k} {100 * u:.0f}%" for k, u in used.items())
                  + f"; all cores busy {100 * (b1 - b0) / max(a1 - a0, 1):.0f}% "
                  f"of {os.cpu_count()}", flush=True)
            th1 = thread_ticks(pid)
            busy = sorted(((th1[k] - th0.get(k, 0)) / hz / dt, k) for k in th1)[::-1]
            print("worker threads, % of one core: " + ", ".join(
                f"{k} {100 * u:.0f}%" for u, k in busy if u >= 0.01), flush=True)
            for share, name in summarise(out, args.top):
                print(f"{share:5.1f}% {name}")
            todo.pop(0)
        time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
