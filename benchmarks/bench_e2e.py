"""End-to-end benchmark of one ``recrawl worker`` process through a real Kafka and Redis, with
``kcat`` as the outside producer and consumer (as users' own clients are).

    .venv/bin/python benchmarks/bench_e2e.py budget --rates 0.5 40 1000 --seconds 30
    .venv/bin/python benchmarks/bench_e2e.py throughput --pages 100000 --hosts 10000

A private Kafka (KRaft) and Redis start on loopback in a temporary folder and are stopped at
the end (also on Ctrl-C) unless ``--bootstrap HOST:PORT --redis URL`` name running ones; each
worker gets its own topic prefix, key prefix and consumer group.

``budget``: per R a fresh worker (budget R, host capacity 1e6/s) and ``--pages`` pages; kcat
reads the orders and answers each with an outcome at once (``--supply timeout``: no outcomes,
order time-out ``0.5 * pages / R``); ``--seconds`` s of orders by ``issued_at``, from
``--warmup`` after the first order (and all pages in): rate, ratio to R, worst count in any
``[t, t+L)`` against the pacer's bound ``R * (L + tick) + 1``.  A count over ``L`` is
+-1 order (at R = 0.5 over 30 s: +-6.7%, by the window's phase), so the rate is also given
from the intervals: ``(n - 1) / (last - first)`` of the window's ``n`` orders.
``throughput`` (budget 1e6, hosts at 1 crawl/s via ``recrawl.hosts``, ``t_delay_s`` 0):
seconds from the first produce until ``/stats`` counts every page (paused), ping, outcome;
with ``--state crawled`` (the default: 10^6 *crawled* pages) every page then gets
two outcomes without an order, the second an observed crawl interval (an estimator update,
timed), so the pings land on crawled pages, the orders are Greedy-NCIS picks among crawled
pages and the timed outcomes update estimators (``--state new``: pages never crawled);
Redis bytes per page after the pages and after the pings;
orders/s while every host has pages left (capped at ``hosts``/s); RSS; the rebuild
after SIGKILL (a new worker, same consumer group). Same-run reference: kcat producing then
consuming ``--ref-messages`` messages on a plain topic; pipelined Redis SET.

Over 600 lines on purpose: one script a user runs on its own (its stack, worker driver,
kcat taps, both benchmarks and their report), as the commands in docs/benchmarks.md show.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import urlopen

import redis
from rich.console import Console
from rich.table import Table

import streams
from infra import stack
from infra.kafka import create_topics
from infra.proc import free_port, spawn, stop_group, tail
from streams.store.redis_conn import connect_sync as connect_redis_sync

#: the tree whose ``streams`` this harness imported: the worker runs from there too (``python
#: -m`` puts its working directory first on ``sys.path``, ahead of ``PYTHONPATH``, so an
#: A/B run with ``PYTHONPATH=<other tree>`` would otherwise start this tree's worker)
REPO = Path(streams.__file__).resolve().parent.parent
TOPICS = ("pages", "pings", "outcomes", "hosts", "control", "orders", "rejects")
PROCS: list[subprocess.Popen[bytes]] = []
KEY_PREFIXES: list[str] = []  # their keys are deleted at the end from an outside Redis
Check = Callable[[dict[str, Any]], bool]
console = Console(width=shutil.get_terminal_size((120, 24)).columns)


@dataclass
class Services:
    bootstrap: str
    redis_url: str
    tmp: Path
    partitions: int

    def kcat(self, *args: str) -> list[str]:
        return ["kcat", "-b", self.bootstrap, "-X", "topic.partitioner=murmur2_random", *args]

    def produce(self, topic: str, lines: list[str]) -> float:
        """``key<TAB>value`` lines to ``topic`` through kcat (file, ``-l``); returns seconds."""
        path = self.tmp / f"in-{uuid.uuid4().hex[:6]}.txt"
        path.write_text("\n".join(lines) + "\n")
        t0 = time.perf_counter()
        proc = subprocess.run(self.kcat("-P", "-t", topic, "-K", "\t", "-l", str(path)),
                              capture_output=True, text=True, check=False)
        dt = time.perf_counter() - t0
        path.unlink()
        if proc.returncode:
            raise RuntimeError(f"kcat -P {topic} failed: {proc.stderr[-2000:]}")
        return dt

    def create(self, names: list[str]) -> None:
        asyncio.run(create_topics(self.bootstrap, names, self.partitions))


class Worker:
    """One ``recrawl worker`` subprocess with its own topics, keys and consumer group."""

    def __init__(self, svc: Services, env: dict[str, str]) -> None:
        tag = uuid.uuid4().hex[:8]
        self.svc, self.prefix, self.port = svc, f"e2e{tag}", free_port()
        self.log = svc.tmp / f"worker-{tag}.log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RECRAWL_")}
        self.env.update({
            "RECRAWL_HOME": str(svc.tmp), "RECRAWL_KAFKA_BOOTSTRAP": svc.bootstrap,
            "RECRAWL_REDIS_URL": svc.redis_url, "RECRAWL_PARTITIONS": str(svc.partitions),
            "RECRAWL_TOPIC_PREFIX": self.prefix, "RECRAWL_KEY_PREFIX": f"k{tag}",
            "RECRAWL_APP_ID": f"app{tag}", "RECRAWL_DATA_DIR": str(svc.tmp / f"data-{tag}"),
            **env})
        svc.create([self.topic(n) for n in TOPICS])
        KEY_PREFIXES.append(f"k{tag}")
        self.proc: subprocess.Popen[bytes] | None = None

    def topic(self, name: str) -> str:
        return f"{self.prefix}.{name}"

    def start(self) -> float:
        t0 = time.perf_counter()  # returned: the start for wait()
        self.proc = spawn([sys.executable, "-m", "streams.cli", "worker", "--web-port",
                           str(self.port), "--loglevel", "info"], self.log, env=self.env,
                          cwd=REPO, tie_to_parent=True)
        PROCS.append(self.proc)
        return t0

    def stop(self, kill: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            if kill:
                os.killpg(self.proc.pid, signal.SIGKILL)
            stop_group(self.proc)

    def stats(self) -> dict[str, Any] | None:
        try:
            with urlopen(f"http://127.0.0.1:{self.port}/stats/", timeout=5) as r:
                return dict(json.load(r))
        except (OSError, ValueError):
            return None

    def wait(self, checks: dict[str, Check], t0: float, timeout_s: float = 300.0,
             every_s: float = 0.05) -> dict[str, float]:
        """Poll ``/stats`` until every check held once; seconds from ``t0`` to each."""
        got: dict[str, float] = {}
        while len(got) < len(checks):
            st = self.stats()
            for name, check in checks.items():
                if st is not None and name not in got and check(st):
                    got[name] = time.perf_counter() - t0
            dead = self.proc is not None and self.proc.poll() is not None
            if dead or time.perf_counter() - t0 > timeout_s:
                why = "worker exited" if dead else "timed out"
                raise RuntimeError(f"{why} waiting for {list(checks)} (got {got}); counters "
                                   f"{(st or {}).get('counters')}\n{tail(self.log, 30)}")
            time.sleep(every_s)
        return got

    def until(self, check: Check, timeout_s: float = 120.0) -> float:
        """Poll until ``check`` holds; returns that perf_counter time."""
        t0 = time.perf_counter()
        return self.wait({"x": check}, t0, timeout_s)["x"] + t0

    def feed(self, name: str, lines: list[str]) -> tuple[float, float]:
        """Produce ``lines`` to topic ``name``: (seconds until the worker counted them all,
        seconds kcat took), both from the start of kcat."""
        before = counted(self.stats() or {}, f"{name}.")
        t0 = time.perf_counter()
        kcat_s = self.svc.produce(self.topic(name), lines)
        return self.until(at_least(f"{name}.", before + len(lines)), 1800) - t0, kcat_s

    def control(self, paused: bool) -> None:
        self.svc.produce(self.topic("control"), [f'control\t{{"paused": {str(paused).lower()}}}'])
        self.until(lambda st: st.get("paused") is paused)

    def memory(self) -> dict[str, int]:
        lines = Path(f"/proc/{self.proc.pid if self.proc else 0}/status").read_text()
        return {k: int(v) * 1024 for k, v in re.findall(r"(VmRSS|VmHWM):\s+(\d+)", lines)}


def counted(st: dict[str, Any], prefix: str = "", suffix: str = "") -> int:
    return sum(int(v) for k, v in st.get("counters", {}).items()
               if k.startswith(prefix) and k.endswith(suffix))


def ready(partitions: int) -> Check:
    return lambda st: len(st.get("shards", {})) == partitions and all(
        s["ready"] for s in st["shards"].values())


def by_result(st: dict[str, Any], topic: str) -> dict[str, int]:
    """The worker's counters of ``topic``'s events by result (``pings.applied``, ...)."""
    return {k.split(".", 1)[1]: int(v) for k, v in st.get("counters", {}).items()
            if k.startswith(f"{topic}.")}


def results_between(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    """Events counted between two :func:`by_result` readings, by result (none omitted)."""
    return {k: b[k] - a.get(k, 0) for k in sorted(b) if b[k] - a.get(k, 0)}


def at_least(prefix: str, n: int) -> Check:
    return lambda st: counted(st, prefix) >= n


def host_name(i: int) -> str:
    return f"h{i:06d}.bench.test"


def outcome_lines(n: int, hosts: int, fetched_at: float, changed: bool | None) -> list[str]:
    """An outcome of every page of :func:`page_lines` without an order (a fetcher may crawl
    unasked): ``changed`` None (unknown), or True for one page in two and False else."""
    def c(i: int) -> str:
        return "null" if changed is None else ("true" if i % 2 else "false")
    return [f'{host_name(i % hosts)}\t{{"url":"https://{host_name(i % hosts)}/p/{i:08d}",'
            f'"fetched_at":{fetched_at!r},"status":200,"changed":{c(i)}}}' for i in range(n)]


def page_lines(n: int, hosts: int) -> list[str]:
    rates = [1 / 3600, 1 / 86400, 1 / 600, 1 / 7200, 1 / 43200]
    return [f'{host_name(i % hosts)}\t{{"url":"https://{host_name(i % hosts)}/p/{i:08d}",'
            f'"importance":{1 + i % 5}.0,"change_rate_per_s":{rates[i % 5]!r}}}'
            for i in range(n)]


class Tap:
    """kcat reading a worker's orders from the beginning; with ``answer`` a second kcat sends
    each order's outcome at once (an instant fetcher; ``changed`` for one order in three)."""

    def __init__(self, svc: Services, w: Worker, answer: bool) -> None:
        self.orders: list[dict[str, Any]] = []
        self.cons = subprocess.Popen(
            svc.kcat("-C", "-q", "-u", "-t", w.topic("orders"), "-o", "beginning", "-f", "%s\n"),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        self.prod = subprocess.Popen(
            svc.kcat("-P", "-t", w.topic("outcomes"), "-K", "\t"), stdin=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True) if answer else None
        PROCS.extend(p for p in (self.cons, self.prod) if p is not None)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        out = self.prod.stdin if self.prod is not None else None
        for line in self.cons.stdout or []:
            if not line.startswith(b"{"):
                continue
            o = json.loads(line)
            self.orders.append(o)
            with contextlib.suppress(OSError):
                if out is not None:
                    out.write(f'{o["host"]}\t{{"url":"{o["url"]}","order_id":"{o["order_id"]}",'
                              f'"fetched_at":{time.time()!r},"status":200,"changed":'
                              f'{"false" if len(self.orders) % 3 else "true"}}}\n'.encode())
                    out.flush()

    def stop(self) -> list[dict[str, Any]]:
        for p in (self.cons, self.prod):
            if p is not None:
                stop_proc(p)
        self.thread.join(10)
        return self.orders


def stop_proc(p: subprocess.Popen[bytes]) -> None:
    if p.poll() is None:
        stop_group(p, timeout_s=10)


def worst(ts: list[float], length: float) -> int:
    """Most of the sorted times ``ts`` in any window ``[t, t + length)``."""
    best, j = 0, 0
    for i, t in enumerate(ts):
        while j < len(ts) and ts[j] < t + length:
            j += 1
        best = max(best, j - i)
    return best


def window(orders: list[dict[str, Any]], warmup: float, seconds: float,
           not_before: float = 0.0) -> tuple[list[float], list[int]]:
    """Sorted ``issued_at`` in ``seconds`` from ``warmup`` after the first order (and not
    before ``not_before``, wall clock); orders per second of the run from the first."""
    ts = sorted(float(o["issued_at"]) for o in orders)
    t0 = max(ts[0] + warmup, not_before) if ts else 0.0
    per_s = Counter(int(t - ts[0]) for t in ts)
    seconds_of_run = [per_s[i] for i in range(max(per_s, default=-1) + 1)]
    return [t for t in ts if t0 <= t < t0 + seconds], seconds_of_run


def budget_one(svc: Services, rate: float, args: argparse.Namespace) -> dict[str, Any]:
    answer = args.supply == "outcomes"
    timeout = 600.0 if answer else min(600.0, max(0.5, 0.5 * args.pages / rate))
    w = Worker(svc, {"RECRAWL_BUDGET_PER_S": repr(rate), "RECRAWL_TICK_S": repr(args.tick),
                     "RECRAWL_DEFAULT_HOST_CRAWLS_PER_S": "1e6",
                     "RECRAWL_ORDER_TIMEOUT_S": repr(timeout)})
    try:
        w.wait({"ready": ready(svc.partitions)}, w.start(), 120)
        tap = Tap(svc, w, answer)
        t0, wall0 = time.perf_counter(), time.time()
        svc.produce(w.topic("pages"), page_lines(args.pages, args.hosts))
        got = w.wait({"order": at_least("orders.", 1), "in": at_least("pages.", args.pages)},
                     t0, 600)
        ingested = wall0 + got["in"]  # the window starts once every page is in
        time.sleep(max(0.0, wall0 + max(got["order"] + args.warmup, got["in"]) - time.time())
                   + args.seconds + 1.5)
        rejects = counted(w.stats() or {}, suffix="rejected")
    finally:
        w.stop()
    time.sleep(0.5)
    orders = tap.stop()
    ts, per_s = window(orders, args.warmup, args.seconds, ingested)
    rate_got = len(ts) / args.seconds
    # the same orders' rate from their intervals (no +-1 order of a window's phase)
    rate_iv = (len(ts) - 1) / (ts[-1] - ts[0]) if len(ts) > 1 and ts[-1] > ts[0] else 0.0
    res: dict[str, Any] = {"rate": rate, "orders": len(ts), "orders_per_s": rate_got,
                           "ratio": rate_got / rate, "interval_rate_per_s": rate_iv,
                           "interval_ratio": rate_iv / rate, "order_timeout_s": timeout,
                           "rejected": rejects, "ingest_s": got["in"], "per_second": per_s}
    for length in (1.0, 5.0):
        res[f"worst_{length:g}s"] = worst(ts, length)
        res[f"bound_{length:g}s"] = rate * (length + args.tick) + 1
    return res


def used_memory(r: redis.Redis) -> int:
    with contextlib.suppress(redis.ResponseError):
        r.memory_purge()
    return int(r.info("memory")["used_memory"])


def full_gc(w: Worker) -> tuple[int, float]:
    """The worker's full garbage collections so far: (count, seconds) (``/stats`` gc)."""
    g = ((w.stats() or {}).get("gc") or {}).get("gen2", {})
    return int(g.get("collections", 0)), float(g.get("seconds", 0.0))


def throughput(svc: Services, args: argparse.Namespace) -> dict[str, Any]:
    n, nh = args.pages, args.hosts
    w = Worker(svc, {"RECRAWL_BUDGET_PER_S": "1e6", "RECRAWL_T_DELAY_S": "0",
                     "RECRAWL_TICK_S": repr(args.tick), **dict(args.worker_env)})
    r = connect_redis_sync(svc.redis_url)
    res: dict[str, Any] = {"pages": n, "hosts": nh}
    try:
        svc.produce(w.topic("control"), ['control\t{"paused": true}'])
        w.wait({"ready": ready(svc.partitions), "paused": lambda st: st["paused"]}, w.start())
        w.feed("hosts", [f'{host_name(i)}\t{{"host":"{host_name(i)}","max_crawls_per_s":1.0}}'
                         for i in range(nh)])
        mem0 = used_memory(r)
        gcs = [full_gc(w)]  # full collections before and after each phase
        res["ingest_s"], res["pages_produce_s"] = w.feed("pages", page_lines(n, nh))
        gcs.append(full_gc(w))
        res["pages_per_s"] = n / res["ingest_s"]
        res["redis_bytes_per_page"] = (used_memory(r) - mem0) / n
        res["rss_after_pages"] = w.memory()
        if args.state == "crawled":
            # the target's set-up: every page crawled twice before the timed phases, so each
            # has an estimator record (an observed crawl interval, changed for one in two)
            # and the orders are Greedy-NCIS picks among crawled pages, not never-crawled
            # ones; the second crawl is timed: outcomes that each update an estimator
            t0 = time.time()
            w.feed("outcomes", outcome_lines(n, nh, t0 - 3000, None))
            before = by_result(w.stats() or {}, "outcomes")
            res["crawl_s"], _ = w.feed("outcomes", outcome_lines(n, nh, t0 - 1500, True))
            res["crawl_by_result"] = results_between(before,
                                                     by_result(w.stats() or {}, "outcomes"))
            res["crawl_per_s"] = n / res["crawl_s"]
            gcs.append(full_gc(w))

        m, now = min(args.pings, n), time.time()
        pings = [f'{host_name(i % nh)}\t{{"url":"https://{host_name(i % nh)}/p/{i:08d}",'
                 f'"source":"sitemap","received_at":{now!r},"changed_at":{now - 5!r},'
                 f'"id":"b{i}"}}' for i in range(m)]
        before = by_result(w.stats() or {}, "pings")
        res["pings"], (res["pings_s"], _) = m, w.feed("pings", pings)
        res["pings_by_result"] = results_between(before, by_result(w.stats() or {}, "pings"))
        gcs.append(full_gc(w))
        res["pings_per_s"] = m / res["pings_s"]
        # every page's value now: page and estimator records (crawled), signal counts and
        # ping fingerprints (pinged), over the never-crawled pages' bytes above
        res["redis_bytes_per_page_now"] = (used_memory(r) - mem0) / n

        tap = Tap(svc, w, answer=False)
        span = min(args.seconds, max(1.0, n / nh - args.warmup - 1.0))
        w.control(paused=False)
        w.until(at_least("orders.", 1), 60)
        time.sleep(args.warmup + span + 0.5)
        w.control(paused=True)
        time.sleep(1.0)
        orders = tap.stop()
        gcs.append(full_gc(w))
        ts, res["orders_per_second"] = window(orders, args.warmup, span)
        res.update(orders_window_s=span, orders_in_window=len(ts),
                   orders_per_s=len(ts) / span, orders_host_bound_per_s=float(nh),
                   orders_total=len(orders))

        k = min(len(orders), args.outcomes)
        now = time.time()
        oc = [f'{o["host"]}\t{{"url":"{o["url"]}","order_id":"{o["order_id"]}",'
              f'"fetched_at":{now!r},"status":200,"changed":{"true" if i % 2 else "false"}}}'
              for i, o in enumerate(orders[:k])]
        before = by_result(w.stats() or {}, "outcomes")
        res["outcomes"], (res["outcomes_s"], _) = k, w.feed("outcomes", oc) if k else (0.0, 0.0)
        # which of them added an observed crawl interval ("applied") and which did not
        res["outcomes_by_result"] = results_between(before,
                                                    by_result(w.stats() or {}, "outcomes"))
        gcs.append(full_gc(w))
        # the worker's full garbage collections (pauses of its loop) in each phase
        res["gc_full"] = {phase: [b[0] - a[0], round(b[1] - a[1], 3)] for phase, a, b in zip(
            ("pages", *(("crawls",) if args.state == "crawled" else ()), "pings", "orders",
             "outcomes"), gcs[:-1], gcs[1:], strict=True)}
        res["outcomes_per_s"] = k / res["outcomes_s"] if k else 0.0
        res["rss_end"] = w.memory()
        res["counters"] = (w.stats() or {}).get("counters", {})
        res["rejected"] = counted(res, suffix="rejected")

        # rebuild: SIGKILL, then a new worker in the same consumer group, unpaused
        w.stop(kill=True)
        svc.produce(w.topic("control"), ['control\t{"paused": false}'])
        w.log = svc.tmp / f"worker-{w.prefix}-2.log"
        res["rebuild"] = w.wait({
            "http": lambda st: True, "assigned": lambda st: len(st["shards"]) == svc.partitions,
            "first_order": at_least("orders.", 1), "ready": ready(svc.partitions)}, w.start(),
            300 + n / 1000, 0.1)
        loads = re.findall(r"shard \d+ ready: .*?\(([\d.]+)s\)", w.log.read_text())
        res["rebuild"]["shard_load_max"] = max(map(float, loads), default=-1.0)
    finally:
        w.stop()
        r.close()
    return res


def reference(svc: Services, n: int) -> dict[str, float]:
    """Kafka + kcat alone (produce, then consume, ``n`` page-sized messages) and Redis
    pipelined SET (redis-py, batches of 1000)."""
    topic = f"e2eref{uuid.uuid4().hex[:8]}"
    svc.create([topic])
    produce_s = svc.produce(topic, page_lines(n, 1000))
    t0 = time.perf_counter()
    p = subprocess.run(svc.kcat("-C", "-q", "-e", "-o", "beginning", "-t", topic, "-f", "%s\n"),
                       capture_output=True, check=False)
    consume_s = time.perf_counter() - t0
    got = p.stdout.count(b"\n")
    if got != n:
        raise RuntimeError(f"reference consumer read {got} of {n}: {p.stderr[-500:]!r}")
    r = connect_redis_sync(svc.redis_url)
    KEY_PREFIXES.append(topic)
    t0 = time.perf_counter()
    for i in range(0, n, 1000):
        pipe = r.pipeline(transaction=False)
        for j in range(i, min(n, i + 1000)):
            pipe.set(f"{topic}:{j}", b"x" * 100)
        pipe.execute()
    set_s = time.perf_counter() - t0
    r.close()
    return {"messages": n, "kafka_produce_per_s": n / produce_s,
            "kafka_consume_per_s": n / consume_s, "redis_set_per_s": n / set_s}


@contextlib.contextmanager
def services(args: argparse.Namespace) -> Iterator[Services]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    home: Path | None = None
    try:
        if args.bootstrap or args.redis:
            if not (args.bootstrap and args.redis):
                raise SystemExit("--bootstrap and --redis go together")
            hosts = (args.bootstrap.rpartition(":")[0].strip("[]"), urlsplit(args.redis).hostname)
            if not all(h in ("localhost", "::1") or (h or "").startswith("127.") for h in hosts):
                raise SystemExit("only loopback addresses may be used")
            try:
                yield Services(args.bootstrap, args.redis, tmp, args.partitions)
            finally:
                r = connect_redis_sync(args.redis)
                for prefix in KEY_PREFIXES:
                    keys = list(r.scan_iter(f"{prefix}:*", 5000))
                    for i in range(0, len(keys), 5000):
                        r.unlink(*keys[i : i + 5000])
        else:
            home = tmp / "stack"
            console.print(f"starting Kafka and Redis in {home} ...")
            info = stack.up([], args.partitions, home=home, tie_to_parent=True)
            yield Services(info.kafka_bootstrap, info.redis_url, tmp, args.partitions)
    finally:
        for p in PROCS:
            stop_proc(p)
        if home is not None:
            stack.down(home)
        if args.keep:
            console.print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _results(counts: dict[str, int] | None) -> str:
    """``applied 99,990, stale 10``: a phase's events by the worker's result code."""
    return ", ".join(f"{k} {v:,}" for k, v in (counts or {}).items()) or "results not read"


def show(res: dict[str, Any], args: argparse.Namespace) -> None:
    ref = res["reference"]
    kc, rs = ref["kafka_consume_per_s"], ref["redis_set_per_s"]
    if args.mode == "budget":
        t = Table(title=f"recrawl e2e: budget ({args.pages} pages, {args.hosts} hosts, "
                        f"{args.seconds:g} s after {args.warmup:g} s warm-up, pages back by "
                        f"{args.supply})")
        for c in ("R /s", "orders", "orders/s", "ratio to R", "ratio by intervals",
                  "worst 1 s (bound)",
                  "worst 5 s (bound)", "order time-out", "rejected"):
            t.add_column(c, justify="right")
        for b in res["budget"]:
            t.add_row(f"{b['rate']:g}", str(b["orders"]), f"{b['orders_per_s']:.3f}",
                      f"{b['ratio']:.4f}", f"{b['interval_ratio']:.4f}",
                      f"{b['worst_1s']} ({b['bound_1s']:.2f})",
                      f"{b['worst_5s']} ({b['bound_5s']:.2f})", f"{b['order_timeout_s']:g} s",
                      str(b["rejected"]))
    else:
        th, rb, mib = res["throughput"], res["throughput"]["rebuild"], 1 << 20
        t = Table(title=f"recrawl e2e: throughput ({th['pages']:,} pages, {th['hosts']:,} "
                        f"hosts at 1 crawl/s, one worker; {th['rejected']} rejected)")
        for c in ("what", "value", "vs same-run reference"):
            t.add_column(c, justify="left" if c == "what" else "right")
        rows = [
            ("ingest (first produce -> all counted)", f"{th['ingest_s']:.2f} s = "
             f"{th['pages_per_s']:,.0f} pages/s (kcat produce {th['pages_produce_s']:.2f} s)",
             f"{th['pages_per_s'] / kc:.4f} x kcat consume"),
            ("redis bytes per page (pages in / after the pings)",
             f"{th['redis_bytes_per_page']:.0f} / {th.get('redis_bytes_per_page_now', 0):.0f}",
             ""),
            *([("crawls: the second, timed (an estimator update each)",
                f"{th['pages']:,} in {th['crawl_s']:.2f} s = {th['crawl_per_s']:,.0f}/s "
                f"({_results(th.get('crawl_by_result'))})",
                f"{th['crawl_per_s'] / kc:.4f} x kcat consume")] if "crawl_s" in th else []),
            ("pings applied", f"{th['pings']:,} in {th['pings_s']:.2f} s = "
             f"{th['pings_per_s']:,.0f}/s ({_results(th.get('pings_by_result'))})",
             f"{th['pings_per_s'] / kc:.4f} x kcat consume"),
            ("orders (steady, by issued_at)", f"{th['orders_per_s']:,.0f}/s over "
             f"{th['orders_window_s']:g} s (hosts cap: {th['hosts']:,}/s)",
             f"{th['orders_per_s'] / rs:.4f} x redis SET"),
            (f"full GC: count, seconds ({' / '.join(th['gc_full'])})",
             " / ".join(f"{c}, {t:.2f} s" for c, t in th["gc_full"].values()), ""),
            ("outcomes applied", f"{th['outcomes']:,} in {th['outcomes_s']:.2f} s = "
             f"{th['outcomes_per_s']:,.0f}/s ({_results(th.get('outcomes_by_result'))})",
             f"{th['outcomes_per_s'] / kc:.4f} x kcat consume"),
            ("worker RSS after pages / at end / peak",
             f"{th['rss_after_pages'].get('VmRSS', 0) / mib:.0f} / "
             f"{th['rss_end'].get('VmRSS', 0) / mib:.0f} / "
             f"{th['rss_end'].get('VmHWM', 0) / mib:.0f} MiB", ""),
            ("rebuild after SIGKILL: web / assigned / 1st order / ready",
             " / ".join(f"{rb[k]:.1f}" for k in ("http", "assigned", "first_order", "ready"))
             + " s", f"slowest shard load {rb['shard_load_max']:.2f} s"),
        ]
        for row in rows:
            t.add_row(*row)
    console.print(t)
    if args.mode == "throughput":
        console.print(f"orders per second from the first: {th['orders_per_second']}")
    console.print(f"reference ({ref['messages']:,} messages): kcat produce "
                  f"{ref['kafka_produce_per_s']:,.0f}/s, kcat consume {kc:,.0f}/s, "
                  f"redis pipelined SET {rs:,.0f}/s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["budget", "throughput"])
    ap.add_argument("--bootstrap", help="running Kafka HOST:PORT (loopback; with --redis)")
    ap.add_argument("--redis", help="running Redis URL (loopback; with --bootstrap)")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rates", type=float, nargs="+", default=[0.5, 40.0, 1000.0])
    ap.add_argument("--pages", type=int, help="default 4000 (budget), 100000 (throughput)")
    ap.add_argument("--hosts", type=int, help="default 200 (budget), 10000 (throughput)")
    ap.add_argument("--seconds", type=float, default=30.0, help="measurement window")
    ap.add_argument("--warmup", type=float, default=2.0, help="after the first order")
    ap.add_argument("--supply", choices=["outcomes", "timeout"], default="outcomes",
                    help="budget: pages come back by an outcome per order, or by time-out")
    ap.add_argument("--tick", type=float, default=0.05, help="RECRAWL_TICK_S (the default)")
    ap.add_argument("--state", choices=["crawled", "new"], default="crawled",
                    help="throughput: every page crawled twice first (estimator records), or "
                         "pages never crawled")
    ap.add_argument("--pings", type=int, default=100_000)
    ap.add_argument("--outcomes", type=int, default=100_000)
    ap.add_argument("--ref-messages", type=int, default=200_000)
    ap.add_argument("--json", type=Path, help="write every figure here")
    ap.add_argument("--keep", action="store_true", help="keep the temp folder (logs)")
    ap.add_argument("--worker-env", type=lambda kv: tuple(kv.split("=", 1)), action="append",
                    default=[], metavar="KEY=VALUE",
                    help="throughput: extra environment of the worker (e.g. RECRAWL_GC_FREEZE=0)")
    args = ap.parse_args()
    big = args.mode == "throughput"
    args.pages = args.pages or (100_000 if big else 4000)
    args.hosts = args.hosts or (10_000 if big else 200)
    if shutil.which("kcat") is None:
        raise SystemExit("kcat is not on PATH (Debian: apt-get install kcat)")
    # Ctrl-C and SIGTERM raise KeyboardInterrupt (also when started with SIGINT ignored)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    res: dict[str, Any] = {"mode": args.mode, "args": {k: str(v) for k, v in vars(args).items()}}
    try:
        with services(args) as svc:
            res["reference"] = reference(svc, args.ref_messages)
            if big:
                res["throughput"] = throughput(svc, args)
            else:
                res["budget"] = []
                for rate in args.rates:
                    res["budget"].append(budget_one(svc, rate, args))
                    b = res["budget"][-1]
                    console.print(f"R={rate:g}: {b['orders_per_s']:.3f}/s; orders per second "
                                  f"from the first: {b['per_second']}")
    except KeyboardInterrupt:
        console.print("interrupted; stopped everything started")
        return 130
    show(res, args)
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
