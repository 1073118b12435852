"""Scale-out on paper and in a simulator.

Two pure parts, no clock, no I/O:

* :func:`size` -- how many workers, partitions and Redis masters a catalogue of ``pages`` at
  ``orders_per_s`` (and a ping rate) needs, from measured per-worker and per-page figures
  (:class:`Measured`; the defaults are docs/benchmarks.md's figures for one worker at 10^6
  pages), and which resource binds.  Each count is
  ``ceil(demand / capacity of one unit)``; the binding resource is the one that needs the
  most units.  Nothing here is fitted: it is arithmetic on the measured figures plus the
  assumptions named in :class:`Measured` (a master's memory, its command rate, a worker's
  memory limit).
* :func:`simulate_split` -- the budget split protocol itself: several simulated workers
  with shards, each with the real credit pacer (:class:`models.decision.pacer.CreditPacer`)
  and a resplit every ``resplit_s`` that applies the service's split rule
  (:mod:`models.decision.budget`: ``live``, ``ready_weights``, ``split``), entries
  re-stamped by a heartbeat (or, ``heartbeat=False``, only by the loop's resplit), and
  events: a worker killed (its partitions move to the survivors after the session timeout
  and rebuild there), a loop
  stalled (a rebuild on the event loop), a shard loading.  With ``books`` (:class:`Pages`
  per partition) the shards also have pages whose crawl values grow as in the service
  (:func:`models.values.crawl_value`, no signals): each worker orders its best pages, its
  threshold is the average of the values it ordered (``budget.observe_value``) and its
  weights follow the service's controller (``budget.update_weight``), so the split's
  convergence can be watched.  It returns the orders per step, so a caller can count any
  window, and the shares and thresholds at every resplit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from models.decision import budget
from models.decision.pacer import CreditPacer
from models.values import crawl_value

__all__ = [
    "Measured",
    "Pages",
    "SimResult",
    "Sizing",
    "Worker",
    "simulate_split",
    "size",
    "worst_window",
]

MiB = 1024.0 * 1024.0
GB = 1e9


@dataclass(frozen=True, slots=True)
class Measured:
    """Per-unit figures.  Defaults: docs/benchmarks.md, "One worker at 10^6 pages" (2-core
    machine, 10^6 crawled pages on 10^4 hosts) unless marked *assumed*; of several
    end-to-end runs the lowest figure."""

    #: orders/s per worker, end to end at 10^6 crawled pages on 10^4 hosts of 1 crawl/s
    #: (``bench_e2e.py throughput``: 10,000/s over 30 s in three runs, 9,667/s in an earlier
    #: one, against the hosts' cap of 10^4/s)
    orders_per_s: float = 9667.0
    #: pings applied per second per worker, end to end (``bench_e2e.py throughput``:
    #: 19,746-22,644/s)
    pings_per_s: float = 19746.0
    #: outcomes applied per second per worker, end to end, each an estimator update with
    #: its host-prior E-step (``bench_e2e.py throughput``: 8,462-9,320/s)
    outcomes_per_s: float = 8462.0
    #: Redis bytes per page crawled and pinged, with estimator state (``INFO memory``, at
    #: 10^6 pages): a page whose estimator record holds a quadratic summary, signals of
    #: all three source groups and over 255 of one group in one interval, on hosts of 1 to
    #: 199 pages (``bench_rebuild.py --history evicted --sources three --host-spread
    #: --signal-scale 300 --fingerprints 8``: 231.0 B, with the page record keeping all
    #: eight 48-bit ping fingerprints, no prior and one page in two a signal count, and the
    #: host prior's 8 B per estimator record), the most a crawled page took there (184.5 B
    #: with one fingerprint kept; 86 B on ``bench_e2e.py``'s pages crawled twice and pinged)
    redis_bytes_per_page: float = 231.0
    #: seconds to rebuild a shard, per 10^6 estimated pages (``bench_rebuild.py``: 4.02 s
    #: in process; the slowest shard's load end to end 4.22-5.25 s)
    rebuild_s_per_mpage: float = 4.1
    #: worker RSS per 10^6 pages (``bench_e2e.py throughput``: peaks of 845-879 MiB)
    rss_bytes_per_mpage: float = 879.0 * MiB
    #: *assumed*: a worker process's memory limit (container), so pages per worker
    worker_memory_bytes: float = 2.0 * 1024 * MiB
    #: *assumed*: memory a Redis master may fill (of 32 GB: half for fork/AOF rewrite)
    master_memory_bytes: float = 16.0 * GB
    #: Redis commands/s per master: the same-run reference, redis-py pipelined ``SET``
    #: (126,680-142,968/s); a store script call runs 7-9 commands, counted as
    #: ``cmds_per_call``
    master_cmds_per_s: float = 126_680.0
    #: *assumed*: commands inside one order/ping/outcome script call (7-9)
    cmds_per_call: float = 8.0
    #: partitions per worker: a rebalance moves about a quarter of a worker at a time
    partitions_per_worker: int = 4
    #: *assumed*: the longest a shard may take to rebuild (its share goes unspent by it,
    #: to the ready shards, meanwhile): bounds the pages per partition
    max_rebuild_s: float = 30.0
    #: the split's shard table (one hash, one master): bytes per entry (the JSON of an
    #: entry with every field at full length: 284 B, plus the field name and framing),
    #: reads per worker per second (``RESPLIT_S`` = 0.25 s), heartbeat writes per shard
    #: per second (``HEARTBEAT_S`` = 0.2 s)
    shard_entry_bytes: float = 300.0
    table_reads_per_worker_s: float = 4.0
    table_writes_per_shard_s: float = 5.0
    #: *assumed*: what one master may send per second (10 GbE, a quarter of it)
    master_egress_bytes_per_s: float = 0.3125 * GB


@dataclass(frozen=True, slots=True)
class Sizing:
    pages: float
    orders_per_s: float
    pings_per_s: float
    outcomes_per_s: float
    #: workers each resource needs, and the most of them (``workers``) and which binds
    workers_by: dict[str, int]
    workers: int
    bound_by: str
    partitions: int
    pages_per_partition: float
    rebuild_s: float
    masters_by: dict[str, int]
    masters: int
    masters_bound_by: str
    redis_bytes: float
    #: the shard table's egress from its one master, as a fraction of
    #: ``master_egress_bytes_per_s`` (above 1: it breaks)
    table_load: float
    #: resources in the order they break as the catalogue grows (ratio demand/capacity of
    #: the deployment sized by the other resources, largest first)
    breaks_first: list[str] = field(default_factory=list)


def size(pages: float, orders_per_s: float, pings_per_s: float, *,
         outcomes_per_s: float | None = None, m: Measured | None = None,
         cluster_min_masters: int = 3) -> Sizing:
    """Workers, partitions and Redis masters for ``pages`` at ``orders_per_s``.

    Outcomes come back at the order rate unless given.  Workers: the most of
    ``pages * rss / worker memory``, ``orders / per-worker orders``, ``pings / per-worker
    pings``, ``outcomes / per-worker outcomes`` (each ``ceil``).  Partitions:
    ``partitions_per_worker`` per worker, more if a partition would take longer than
    ``max_rebuild_s`` to rebuild.  Masters: the most of memory (``pages * bytes per
    page / master memory``) and commands (``(orders + pings + outcomes) * cmds_per_call /
    master commands/s``), at least ``cluster_min_masters`` (a Redis Cluster needs 3).
    """
    m = m or Measured()
    outcomes = orders_per_s if outcomes_per_s is None else outcomes_per_s
    pages_per_worker = m.worker_memory_bytes / (m.rss_bytes_per_mpage / 1e6)
    workers_by = {
        "memory (RSS)": math.ceil(pages / pages_per_worker),
        "orders": math.ceil(orders_per_s / m.orders_per_s),
        "pings": math.ceil(pings_per_s / m.pings_per_s),
        "outcomes": math.ceil(outcomes / m.outcomes_per_s),
    }
    bound_by = max(workers_by, key=lambda k: workers_by[k])
    workers = max(1, workers_by[bound_by])
    rebuild_per_page = m.rebuild_s_per_mpage / 1e6
    partitions = max(workers * m.partitions_per_worker,
                     math.ceil(pages * rebuild_per_page / m.max_rebuild_s))
    per_partition = pages / partitions
    redis_bytes = pages * m.redis_bytes_per_page
    calls = orders_per_s + pings_per_s + outcomes
    masters_by = {
        "memory": math.ceil(redis_bytes / m.master_memory_bytes),
        "commands": math.ceil(calls * m.cmds_per_call / m.master_cmds_per_s),
        "cluster minimum": cluster_min_masters,
    }
    masters_bound_by = max(masters_by, key=lambda k: masters_by[k])
    masters = masters_by[masters_bound_by]
    table_bytes_s = (workers * m.table_reads_per_worker_s * partitions * m.shard_entry_bytes
                     + partitions * m.table_writes_per_shard_s * m.shard_entry_bytes)
    table_load = table_bytes_s / m.master_egress_bytes_per_s
    # how close each resource of the sized deployment is to its limit: the fractional
    # demand of the binding resources is 1 by construction; the rest break later
    ratios = {
        "worker memory": pages / pages_per_worker / workers,
        "orders per worker": orders_per_s / m.orders_per_s / workers,
        "pings per worker": pings_per_s / m.pings_per_s / workers,
        "outcomes per worker": outcomes / m.outcomes_per_s / workers,
        "Redis memory": redis_bytes / m.master_memory_bytes / masters,
        "Redis commands": calls * m.cmds_per_call / m.master_cmds_per_s / masters,
        "shard table (one master)": table_load,
        "rebuild per partition": per_partition * rebuild_per_page / m.max_rebuild_s,
    }
    order = sorted(ratios, key=lambda k: -ratios[k])
    return Sizing(pages, orders_per_s, pings_per_s, outcomes, workers_by, workers, bound_by,
                  partitions, per_partition, per_partition * rebuild_per_page, masters_by,
                  masters, masters_bound_by, redis_bytes, table_load,
                  [f"{k} {ratios[k]:.2f}" for k in order])


# -- the split protocol ------------------------------------------------------------------

@dataclass(slots=True)
class Worker:
    name: int
    #: partition -> time it is ready (loaded)
    shards: dict[int, float]
    resplit_phase_s: float = 0.0
    beat_phase_s: float = 0.0
    dead_at: float = math.inf
    #: (start, end) intervals when the loop does not run (a rebuild on the loop)
    stalls: list[tuple[float, float]] = field(default_factory=list)
    shares: dict[int, float] = field(default_factory=dict)
    published: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: shards published ready at the last resplit (``Scheduler._announced``)
    announced: set[int] = field(default_factory=set)
    #: the heartbeat published its shards as stalled (``Heartbeat.stalled_flag``)
    stalled_flag: bool = False
    pacer: CreditPacer | None = None
    next_resplit: float = 0.0
    next_beat: float = 0.0
    #: with books: the worker's log-threshold (``Scheduler.log_threshold``) and the orders
    #: wanted and emitted since its last resplit
    log_threshold: float | None = None
    wanted: int = 0

    def stalled(self, t: float) -> bool:
        return any(a <= t < b for a, b in self.stalls)


@dataclass(slots=True)
class Pages:
    """One shard's pages for the simulated thresholds: importance ``mu`` and change rate
    ``delta`` (per second) of each page, changes without signals; ``last`` is each page's
    last crawl (-inf: never crawled, worth ``mu / delta``)."""

    mu: npt.NDArray[np.float64]
    delta: npt.NDArray[np.float64]
    last: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))

    def __post_init__(self) -> None:
        if self.last.shape != self.mu.shape:
            self.last = np.full(self.mu.shape, -np.inf)

    def __len__(self) -> int:
        return int(self.mu.shape[0])

    def values(self, t: float) -> npt.NDArray[np.float64]:
        return np.asarray(crawl_value(t - self.last, self.delta, 0.0, 0.0, mu=self.mu),
                          dtype=np.float64)


@dataclass(slots=True)
class SimResult:
    dt_s: float
    #: orders emitted in each step (all workers)
    orders: list[int]
    #: (t, sum over live workers of their shares) at every resplit
    shares: list[tuple[float, float]]
    #: with books, every ``resplit_s``: (t, share of each live worker, log-threshold of
    #: each live worker with a ready shard)
    split: list[tuple[float, dict[int, float], dict[int, float]]] = field(
        default_factory=list)

    def rate(self, a: float, b: float) -> float:
        i, j = round(a / self.dt_s), round(b / self.dt_s)
        return sum(self.orders[i:j]) / (b - a)


def worst_window(orders: list[int], dt_s: float, length_s: float) -> int:
    """The most orders in any window of ``length_s`` (steps of ``dt_s``)."""
    k = max(1, round(length_s / dt_s))
    s = sum(orders[:k])
    worst = s
    for i in range(k, len(orders)):
        s += orders[i] - orders[i - k]
        worst = max(worst, s)
    return worst


def simulate_split(
    workers: list[Worker], budget_per_s: float, duration_s: float, *,
    tick_s: float = 0.1, resplit_s: float = 0.5, heartbeat: bool = True,
    heartbeat_s: float = 0.2, alive_s: float = 1.0, hung_s: float = 10.0,
    session_timeout_s: float = 10.0, rebuild_s: float = 1.0, announce: bool = True,
    stall_s: float | None = 0.5, books: dict[int, Pages] | None = None,
    gain: float = 0.5, average_s: float = 2.0, fixed_turnover_s: float | None = None,
) -> SimResult:
    """Run the split protocol for ``duration_s`` in steps of ``tick_s / 2`` (the loop's
    wake-ups).  Every page is always available (the budget is the only limit), all shards'
    thresholds are equal (the weights stay where they are), and Redis answers at once.

    A worker's resplit (every ``resplit_s``, from ``resplit_phase_s``; skipped while its
    loop is stalled) reads every entry, keeps the live ones (:func:`budget.live
    <models.decision.budget.live>` at ``alive_s``), gives loading shards weight 0
    (``budget.ready_weights``) and splits R (``budget.split``); it publishes its own
    entries.  With ``heartbeat`` they are written and re-stamped every ``heartbeat_s`` by
    a thread that stalls do not hold (unless longer than ``hung_s``; a loop stalled for more
    than ``stall_s`` has its shards
    published as not ready, and announces them again when it runs; None: not done);
    without, only by the resplit.  A dead worker (``dead_at``)
    stops at once; ``session_timeout_s`` later its partitions go round-robin to the live
    workers and rebuild there for ``rebuild_s``.  With ``announce`` (as
    ``Scheduler.resplit``) a shard that became ready spends from the worker's next resplit,
    after publishing itself ready, so that the others shrink first.

    ``books`` (partition -> :class:`Pages`, mutated: the crawls): thresholds are no longer
    equal.  A worker orders the best pages of its ready shards; its log-threshold is the
    average of the values ordered over ``average_s`` (``budget.observe_value``), raised to
    its best value after a resplit interval without an order (as ``Scheduler.resplit``);
    its shards publish it, and their weights (kept by partition, so a moved shard keeps
    its own) follow ``budget.update_weight`` at ``gain`` over the turnover of all live
    books (``budget.turnover_s``, lag ``average_s + resplit_s``), or over
    ``fixed_turnover_s`` if given (a gain per second that ignores the catalogue: the
    alternative design, kept to compare)."""
    dt = tick_s / 2
    steps = round(duration_s / dt)
    entries: dict[int, dict[str, Any]] = {}
    orders = [0] * steps
    shares_log: list[tuple[float, float]] = []
    for w in workers:
        w.pacer = CreditPacer(tick_s)
        w.next_resplit = w.resplit_phase_s
        w.next_beat = w.beat_phase_s
    moved: set[int] = set()
    weight: dict[int, float] = {}
    split_log: list[tuple[float, dict[int, float], dict[int, float]]] = []
    for i in range(steps):
        t = i * dt
        # partitions of workers dead for longer than the session timeout move
        for w in workers:
            if w.name in moved or t < w.dead_at + session_timeout_s:
                continue
            moved.add(w.name)
            live_ws = [v for v in workers if v.dead_at > t]
            for k, p in enumerate(sorted(w.shards)):
                if live_ws:
                    live_ws[k % len(live_ws)].shards[p] = t + rebuild_s
            w.shards = {}
        for w in workers:
            if w.dead_at <= t:
                continue
            stalled = w.stalled(t)
            if heartbeat and t >= w.next_beat:
                w.next_beat += heartbeat_s
                idle = max((t - a for a, b in w.stalls if a <= t < b), default=0.0)
                if idle <= hung_s:
                    stall = stall_s is not None and idle > stall_s
                    w.stalled_flag = w.stalled_flag or stall
                    for p, e in w.published.items():
                        if p in w.shards:
                            entries[p] = {**e, "ts": t, **({"ready": False} if stall else {})}
            if not stalled and t >= w.next_resplit:
                w.next_resplit = t + resplit_s
                live = {p: e for p, e in budget.live(entries, t, alive_s).items()
                        if p not in w.shards}
                own = {p: {"weight": 1.0, "ready": t >= ready, "worker": w.name, "ts": t}
                       for p, ready in w.shards.items()}
                if books is not None:
                    _control(w, own, live, books, weight, t, budget_per_s, gain,
                             average_s + resplit_s, resplit_s, fixed_turnover_s)
                w.published = own
                for p, e in own.items():
                    entries[p] = e
                weights = {p: float(e.get("weight", 1.0)) for p, e in live.items()}
                weights.update({p: float(e["weight"]) for p, e in own.items()})
                loading = {p for p, e in live.items() if e.get("ready") is False}
                loading |= {p for p, e in own.items() if not e["ready"]}
                ready_now = {p for p, e in own.items() if e["ready"]}
                if w.stalled_flag:  # seen as not ready while stalled: announce again
                    w.stalled_flag = False
                    w.announced = set()
                if announce:  # newly ready: spends from the next resplit
                    loading |= ready_now - w.announced
                w.announced = ready_now
                shares = budget.split(budget_per_s, budget.ready_weights(weights, loading))
                w.shares = {p: shares.get(p, 0.0) for p in own}
            if not stalled:
                assert w.pacer is not None
                s = sum(v for p, v in w.shares.items() if p in w.shards and t >= w.shards[p])
                n = w.pacer.advance(t, s)
                if n >= 1:
                    w.pacer.spend(n)
                    orders[i] += n
                    if books is not None:
                        _crawl(w, books, t, n, s, average_s)
        if i % round(resplit_s / dt) == 0:
            shares_log.append((t, sum(sum(w.shares.values()) for w in workers
                                      if w.dead_at > t)))
            if books is not None:
                alive = [w for w in workers if w.dead_at > t]
                split_log.append((
                    t, {w.name: sum(w.shares.values()) for w in alive},
                    {w.name: w.log_threshold for w in alive if w.log_threshold is not None
                     and any(t >= r for r in w.shards.values())}))
    return SimResult(dt, orders, shares_log, split_log)


def _crawl(w: Worker, books: dict[int, Pages], t: float, n: int, share: float,
           average_s: float) -> None:
    """``n`` orders of worker ``w`` at ``t``: its best pages over its ready shards (the
    merged pick), each value ordered averaged into its threshold."""
    ready = [p for p, r in w.shards.items() if t >= r and p in books]
    if not ready:
        return
    vals = [books[p].values(t) for p in ready]
    flat = np.concatenate(vals)
    top = np.argsort(-flat, kind="stable")[:n]
    bounds = np.cumsum([0] + [len(v) for v in vals])
    w.wanted += n
    for j in top:
        k = int(np.searchsorted(bounds, j, side="right") - 1)
        books[ready[k]].last[j - bounds[k]] = t
        w.log_threshold = budget.observe_value(w.log_threshold, float(flat[j]), share,
                                               average_s)


def _control(w: Worker, own: dict[int, dict[str, Any]], live: Mapping[int, Mapping[str, Any]],
             books: dict[int, Pages], weight: dict[int, float], t: float,
             budget_per_s: float, gain: float, lag_s: float, dt_s: float,
             fixed_turnover_s: float | None) -> None:
    """The controller's part of worker ``w``'s resplit (``Scheduler.resplit``): its
    threshold raised to its best value after an interval without orders (looked up at
    every such resplit; the service caches it for ``BEST_VALUE_EVERY_S``), the weights of
    its shards moved, and the entries it publishes filled in."""
    ready = [p for p, e in own.items() if e["ready"] and p in books]
    if w.wanted == 0 and ready:
        best = max(float(np.max(books[p].values(t), initial=0.0)) for p in ready)
        if best > 0.0 and (w.log_threshold is None or math.log(best) > w.log_threshold):
            w.log_threshold = math.log(best)
    w.wanted = 0
    thresholds: dict[int, float | None] = {p: e.get("log_threshold") for p, e in live.items()}
    for p, e in own.items():
        thresholds[p] = w.log_threshold if e["ready"] else None
    mean = budget.mean_log(thresholds)
    pages = sum(len(books[p]) for p in own if p in books)
    pages += sum(int(e.get("pages", 0)) for e in live.values())
    turnover = (budget.turnover_s(pages, budget_per_s, lag_s) if fixed_turnover_s is None
                else fixed_turnover_s)
    for p, e in own.items():
        weight[p] = budget.update_weight(weight.get(p, 1.0), thresholds[p], mean, gain=gain,
                                         turnover_s=turnover, dt_s=dt_s)
        e.update(weight=weight[p], log_threshold=thresholds[p],
                 pages=len(books[p]) if p in books else 0)
