"""The scheduler: shares of ``R``, the loop and its ticks, assignment, stats (the package
docstring says how it works)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from redis.exceptions import RedisError

from models.decision import budget
from models.decision.core import choose, level_of
from models.decision.pacer import CreditPacer
from streams.estimates.estimation import Estimates
from streams.reach import OutageReport, redis_address
from streams.scheduler.confirm import OrderLog, end_unconfirmed
from streams.scheduler.heartbeat import (
    RESPLIT_S,
    SHARD_ALIVE_S,
    Heartbeat,
)
from streams.scheduler.issuing import BatchSink, OrderIssuer, OrderSink, one_by_one
from streams.scheduler.loading import LOAD_WAIT_S, PageUpdate, ShardLoader
from streams.scheduler.placing import new_book
from streams.scheduler.shard import KEEP, NOT_IN_FLIGHT, Control, Shard, top_hosts
from streams.scheduler.state import SchedulerState, Shared
from streams.settings import Settings
from streams.store import StateStore
from streams.store.page_record import PageState
from streams.telemetry.decisions import DecisionRing
from streams.telemetry.metrics import GC_PAUSES, Metrics

__all__ = [
    "EWMA_S", "RATE_WINDOW_S", "REFREEZE_S", "BatchSink", "OrderSink", "Scheduler", "cancel",
    "dumps",
]

log = logging.getLogger(__name__)

#: the threshold is an EWMA of the log-values ordered over about this many seconds of
#: orders: each order weighs ``1 / max(1, share_per_s * EWMA_S)``
EWMA_S = 2.0
#: how often the worker's scheduler refreezes the garbage collector (a full collection,
#: 0.1-0.3 s at 10^6 pages: the objects frozen since the last one that died in a cycle
#: are freed then)
REFREEZE_S = 600.0
#: ``emitted_per_s`` in ``/stats``: orders sent over (about) the last this many seconds
RATE_WINDOW_S = 10.0
#: how often a worker whose share buys no order looks up its best value again (``resplit``):
#: the lookup refreshes the bounds of every host whose bound expired (a host index's
#: ``best``), about all of a book's pages per window at every resplit otherwise, while the
#: value it finds rises only as the pages age
BEST_VALUE_EVERY_S = 2.0


class Scheduler:
    """One scheduler for all of this worker's shards (the package docstring): the budget
    split, the credit and the loop here; its parts, which share :attr:`state`, rebuild and
    update the books (:attr:`loader`, :class:`streams.scheduler.loading.ShardLoader`) and
    issue, send and take back the orders (:attr:`issuer`,
    :class:`streams.scheduler.issuing.OrderIssuer`)."""

    # kept in :attr:`state`, shared with the parts
    settings = Shared[Settings]()
    store = Shared[StateStore]()
    metrics = Shared[Metrics]()
    decisions = Shared[DecisionRing]()
    clock = Shared[Callable[[], float]]()
    control = Shared[Control]()
    outage = Shared[OutageReport]()
    shards = Shared[dict[int, Shard]]()
    stopping = Shared[bool]()

    def __init__(
        self,
        settings: Settings,
        store: StateStore,
        metrics: Metrics,
        send_order: OrderSink | None,
        *,
        send_orders: BatchSink | None = None,
        assignment: Callable[[], set[int]] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        decisions: DecisionRing | None = None,
        manage_gc: bool = False,
        order_log: OrderLog | None = None,
    ) -> None:
        if send_orders is None:
            if send_order is None:
                raise ValueError("a scheduler needs send_order or send_orders")
            send_orders = one_by_one(send_order)
        self.state = SchedulerState(
            settings, store, metrics,
            decisions if decisions is not None else DecisionRing(
                per_page=settings.decisions_per_page),
            clock,
            Control(settings.budget_per_s, t_delay_s=settings.t_delay_s,
                    order_timeout_s=settings.order_timeout_s,
                    max_interval_s=settings.max_interval_s),
            # Redis outages of the loop, reported with the address every outage_report_s
            OutageReport("redis", redis_address(settings.redis_url),
                         settings.outage_report_s, log),
        )
        #: the worker's own process: refreeze the garbage collector after the loads and
        #: every REFREEZE_S (streams.telemetry.metrics.GcPauses); off for tests and benchmarks
        #: that run beside other code
        self.manage_gc = manage_gc
        self.worker_id = secrets.token_hex(4)
        self.loader = ShardLoader(self.state, manage_gc=manage_gc)
        self.issuer = OrderIssuer(self.state, self.loader, send_orders,
                                  worker_id=self.worker_id, on_sent=self._sent)
        self.assignment = assignment
        self.monotonic = monotonic
        # where this worker answers GET /pages (its decisions ring): `recrawl explain` asks it
        self.web_url = (f"http://{settings.web_host}:{settings.web_port or 6066}"
                        if settings.web_enabled else None)
        self._loaders: dict[int, asyncio.Task[None]] = {}
        self.global_shards: dict[int, dict[str, Any]] = {}
        self.loop_stats: dict[str, float] = {"iterations": 0, "busy_s": 0.0,
                                             "max_busy_s": 0.0, "late": 0}
        self._last_report = 0.0
        #: loop time spent working since the start (benchmarks: busy time per order)
        self.busy_total_s = 0.0
        #: one credit, threshold and starved count for all local shards (one scheduler)
        self.pacer = CreditPacer(settings.tick_s)
        self.share_total = 0.0
        self.log_threshold: float | None = None
        #: (monotonic time, value) of the last best-value lookup (resplit)
        self._best: tuple[float, float] | None = None
        self.emitted = 0
        self.wanted = 0
        #: orders sent since the start, and (monotonic s, orders_total) samples taken at
        #: each resplit over the last RATE_WINDOW_S (the emitted rate of /stats)
        self.orders_total = 0
        self._rate_samples: deque[tuple[float, int]] = deque()
        #: writes the shard entries while :meth:`run` runs (None: resplit writes them)
        self.heartbeat: Heartbeat | None = None
        #: local shards published as ready at the last resplit (they may spend)
        self._announced: set[int] = set()
        #: partitions whose state is being rebuilt (:meth:`hold`): no shard, no order
        self.held: set[int] = set()
        #: reads the orders topic: a rebuilt shard's in-flight marks are confirmed against
        #: it (streams/scheduler/confirm.py); None: not checked
        self.order_log = order_log
        self._confirms: dict[int, asyncio.Task[None]] = {}

    # -- events from the agents -------------------------------------------------------
    async def on_page(
        self, partition: int, host: str, url: str, value: str | PageState | None, *,
        in_flight_cleared: bool = False, estimator: str | Estimates | None = None,
    ) -> None:
        """A page's stored value changed (None: deleted); keep the shard's book in step.
        ``value``: the stored record as text or decoded (:class:`PageState`)."""
        shard = self.shards.get(partition)
        if shard is None:
            return
        if not shard.ready:
            shard.dirty.add((host, url))
            return
        if value is None:
            self.loader.forget(shard, url)
            return
        if url in shard.blocked.get(host, ()):
            return
        flight = NOT_IN_FLIGHT if in_flight_cleared else KEEP
        state = value if isinstance(value, PageState) else PageState.decode(value)
        self.loader.apply_or_skip(shard, host, url, state, estimator, flight)

    def on_pages(self, updates: Sequence[PageUpdate]) -> None:
        """:meth:`on_page` of a batch's pages, in their order, on arrays
        (:meth:`streams.scheduler.loading.ShardLoader.on_pages`)."""
        self.loader.on_pages(updates)

    def on_blocked(self, partition: int, host: str, url: str,
                   epoch: int | None = None) -> None:
        """The host's robots.txt disallows ``url``: out of the book until it changes
        (:meth:`streams.scheduler.loading.ShardLoader.on_blocked`; ``epoch``: the
        :meth:`robots_epoch` when the outcome was written)."""
        self.loader.on_blocked(partition, host, url, epoch)

    async def wait_loaded(self, partitions: set[int], timeout_s: float = LOAD_WAIT_S) -> None:
        """Wait (at most ``timeout_s``) until these partitions' shards are rebuilt.  The
        agents call it before applying a batch: a loading shard's events would only be
        marked dirty and read again after the load, and applying them meanwhile takes the
        event loop from the load (after a SIGKILL at 10^5 pages, the slowest of 4 shards
        loaded in 5.88 s with the backlog applied alongside, 1.35 s without:
        docs/benchmarks.md "Design decisions").  Bounded, so that a
        load stuck on an unreachable Redis or a rebalance waiting for the agents never
        stalls them."""
        tasks = [t for p in partitions if (t := self._loaders.get(p)) is not None
                 and not t.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)

    def new_shard(self, partition: int) -> Shard:
        return Shard(partition, new_book(self.settings, partition))

    def on_host(self, partition: int, host: str, rate: float | None, mif: int | None) -> None:
        """The host's capacity (None: the default rate)."""
        shard = self.shards.get(partition)
        if shard is not None:
            shard.hosts.set_capacity(host, rate, mif)

    def max_in_flight_of(self, partition: int, host: str) -> int | None:
        shard = self.shards.get(partition)
        if shard is None or host not in shard.hosts:
            return None
        return shard.hosts.bucket(host).max_in_flight

    def robots_epoch(self, partition: int, host: str) -> int:
        """How many robots.txt changes of ``host`` this worker has applied."""
        shard = self.shards.get(partition)
        return shard.robots_epoch.get(host, 0) if shard is not None else 0

    async def on_robots_changed(self, partition: int, host: str) -> None:
        """The host's robots.txt changed (its blocked set is empty in Redis): its blocked
        pages are read again and become candidates."""
        shard = self.shards.get(partition)
        if shard is None:
            return
        shard.robots_epoch[host] = shard.robots_epoch.get(host, 0) + 1
        urls = shard.blocked.pop(host, set())
        if not shard.ready:
            shard.dirty.update((host, u) for u in urls)
            return
        if urls:
            await self.loader.reload(shard, host, sorted(urls))
        for url in urls:
            self.decisions.add(url, f"{self.clock():.3f} robots.txt of {host} changed: "
                                    "a candidate again")

    async def refresh_control(self) -> None:
        self.control = Control.from_redis(await self.store.get_control(), self.settings)
        self.metrics.budget.set(self.control.budget_per_s)

    # -- shard state ----------------------------------------------------------------
    def hold(self, partitions: set[int]) -> None:
        """No shard for these partitions until :meth:`release` (their state in Redis is
        being rebuilt, streams.worker.recovery: a book read now would be partial)."""
        self.held |= partitions
        self.sync_assignment(set(self.shards))

    def release(self, partitions: set[int]) -> None:
        """Rebuild the shards of ``partitions`` from Redis again (if still assigned)."""
        self.held -= partitions
        owned = self.assignment() if self.assignment is not None else set(self.shards)
        self.sync_assignment(owned | (partitions if self.assignment is None else set()))

    def sync_assignment(self, partitions: set[int]) -> None:
        partitions = partitions - self.held
        if self.heartbeat is not None:
            self.heartbeat.drop(set(self.shards) - partitions)
        for p in list(self.shards):
            if p not in partitions:
                for tasks in (self._loaders, self._confirms):
                    task = tasks.pop(p, None)
                    if task is not None:
                        task.cancel()
                del self.shards[p]
                self.metrics.forget_shard(p)
                log.info("shard %d revoked", p)
        for p in sorted(partitions - set(self.shards)):
            shard = self.shards[p] = self.new_shard(p)
            # a shard moving between workers keeps its place in the split (its weight)
            # instead of starting again at 1
            with contextlib.suppress(TypeError, ValueError):
                shard.weight = float(self.global_shards.get(p, {}).get("weight", 1.0))
            self._loaders[p] = asyncio.ensure_future(self._load_then_confirm(shard))
            log.info("shard %d assigned; loading", p)

    async def _load_then_confirm(self, shard: Shard) -> None:
        await self.loader.load(shard)
        if self.order_log is not None and shard.in_flight:
            self._confirms[shard.partition] = asyncio.ensure_future(
                end_unconfirmed(shard, self.order_log, self.state))

    # -- budget ---------------------------------------------------------------------
    async def resplit(self, dt_s: float) -> None:
        now = self.clock()
        # liveness on Redis's clock, not the workers': a worker whose clock is skewed by
        # more than the 3 s window would otherwise see every other shard as dead and
        # take all of R
        redis_now = await self.store.server_time()
        entries = await self.store.get_shards()
        live = {p: dict(e) for p, e in budget.live(entries, redis_now, SHARD_ALIVE_S).items()
                if p not in self.shards}
        thresholds: dict[int, float | None] = {
            p: e.get("log_threshold") for p, e in live.items()
        }
        # the local shards are scheduled as one (merged picks): they share the worker's
        # threshold, so the controller moves only the split between workers
        if self.wanted == 0 and not self.control.paused:
            # no credit in the interval (a share too small for one order): the EWMA of
            # emitted values is stale, and would keep the share at nothing; the value the
            # worker would crawl at now rises as its pages age, and brings the share back
            mono = self.monotonic()
            if self._best is None or mono - self._best[0] >= BEST_VALUE_EVERY_S:
                self._best = (mono, self._best_value(now))
            best = self._best[1]
            if best > 0.0 and (self.log_threshold is None
                               or math.log(best) > self.log_threshold):
                self.log_threshold = math.log(best)
        for p, s in self.shards.items():
            s.log_threshold = self.log_threshold if s.ready else None
            thresholds[p] = s.log_threshold
        mean = budget.mean_log(thresholds)
        self._sample_rate()
        emitted_per_s = self.emitted_per_s()
        own: dict[int, dict[str, Any]] = {}
        starved_all = self.wanted > 0 and self.emitted == 0 and not self.control.paused
        self.wanted = self.emitted = 0
        # how fast thresholds answer a change of share: one turnover of all the books; while
        # paused nothing is ordered, the thresholds stand still and so do the weights (a
        # stale gap would otherwise push them to the clamps over a long pause)
        pages = sum(len(s.book) for s in self.shards.values())
        for e in live.values():
            with contextlib.suppress(TypeError, ValueError):
                pages += max(0, int(e.get("pages", 0)))
        turnover = (math.inf if self.control.paused else
                    budget.turnover_s(pages, self.control.budget_per_s, EWMA_S + RESPLIT_S))
        for p, s in self.shards.items():
            starved = s.ready and starved_all
            s.weight = budget.update_weight(
                s.weight, s.log_threshold, mean, gain=self.settings.resplit_gain,
                turnover_s=turnover, dt_s=dt_s,
                starved=starved and s.share_per_s * dt_s >= 2,
            )
            own[p] = {
                "weight": s.weight, "log_threshold": s.log_threshold,
                "share_per_s": s.share_per_s, "pages": len(s.book),
                "in_flight": len(s.in_flight), "ts": redis_now, "worker": self.worker_id,
                "ready": s.ready, "web": self.web_url,
                "budget_per_s": self.control.budget_per_s,  # the R it splits (recrawl plan)
                "t_delay_s": self.control.t_delay_s,  # its ping rule's (recrawl plan)
                "worker_emitted_per_s": emitted_per_s,
            }
            s.emitted = 0
        if self.heartbeat is not None and self.heartbeat.running:
            self.heartbeat.publish(own)  # its thread writes them (and re-stamps them)
        else:
            await self.store.put_shards(own)
        weights = {p: float(e.get("weight", 1.0)) for p, e in live.items()}
        weights.update({p: s.weight for p, s in self.shards.items()})
        # a shard still loading cannot spend: its share goes to the ready ones (of any
        # worker) until it is ready, unless no shard is ready
        loading = {p for p, e in live.items() if e.get("ready") is False}
        loading |= {p for p, s in self.shards.items() if not s.ready}
        # a shard that became ready since the last resplit spends from the next one: the
        # others learn it is ready from the entries just published and shrink their shares
        # first (else both would spend its share for up to one resplit: a burst)
        ready_now = {p for p, s in self.shards.items() if s.ready}
        if self.heartbeat is not None and self.heartbeat.take_stalled():
            # the others saw this worker's shards as not ready while its loop stalled
            # (and spent their share): announce them again before spending
            self._announced = set()
        loading |= ready_now - self._announced
        self._announced = ready_now
        weights = budget.ready_weights(weights, loading)
        shares = budget.split(self.control.budget_per_s, weights)
        for p, s in self.shards.items():
            s.share_per_s = shares.get(p, 0.0)
            self.metrics.shard_rate.labels(str(p)).set(s.share_per_s)
            thr = math.exp(s.log_threshold) if s.log_threshold is not None else 0.0
            self.metrics.shard_threshold.labels(str(p)).set(thr)
            self.metrics.shard_pages.labels(str(p)).set(len(s.book))
            self.metrics.shard_in_flight.labels(str(p)).set(len(s.in_flight))
        self.global_shards = {**live, **own}

    def _best_value(self, now: float) -> float:
        return max((s.book.best_value(now) for s in self.shards.values() if s.ready),
                   default=0.0)

    # -- the loop -------------------------------------------------------------------
    async def run(self) -> None:
        while not self.stopping:
            try:
                await self.store.load_scripts()
                break
            except Exception as exc:
                self.outage.failed(exc, "loading its scripts")
                await asyncio.sleep(0.5)
        if self.heartbeat is None and hasattr(self.store, "shards_key"):
            self.heartbeat = Heartbeat(self.settings.redis_url, self.store.shards_key)
        if self.heartbeat is not None:
            self.heartbeat.start()
        try:
            await self._loop()
        finally:
            if self.heartbeat is not None:
                self.heartbeat.stop()  # waits at most for the thread's last write

    async def _loop(self) -> None:
        tick = self.settings.tick_s
        next_tick = time.monotonic()
        last_ctl = last_split = last_assign = 0.0
        last_freeze = time.monotonic()
        while not self.stopping:
            mono = time.monotonic()
            if self.heartbeat is not None:
                self.heartbeat.loop_alive()
            try:
                if self.assignment is not None and mono - last_assign >= 0.5:
                    last_assign = mono
                    self.sync_assignment(self.assignment())
                if mono - last_ctl >= 0.25:
                    last_ctl = mono
                    await self.refresh_control()
                if mono - last_split >= RESPLIT_S:
                    dt = mono - last_split if last_split else RESPLIT_S
                    last_split = mono
                    await self.resplit(min(dt, 2.0))
                await self.tick_all([s for s in self.shards.values() if s.ready])
                if self.manage_gc:
                    if mono - last_freeze >= REFREEZE_S:
                        last_freeze = mono  # frees what died among the frozen objects
                        log.info("garbage collector refrozen (%.2fs)", GC_PAUSES.refreeze())
                    elif GC_PAUSES.wants_freeze:  # a full collection was long: freeze
                        GC_PAUSES.freeze()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.metrics.retry("scheduler")
                if isinstance(exc, ConnectionError | TimeoutError | RedisError):
                    self.outage.failed(exc, "scheduling")  # reported every outage_report_s
                else:
                    log.warning("scheduler tick failed: %r", exc)
                await asyncio.sleep(0.2)
            else:
                self.outage.ok()
            busy = time.monotonic() - mono
            self.busy_total_s += busy
            self.loop_stats["iterations"] += 1
            self.loop_stats["busy_s"] += busy
            self.loop_stats["max_busy_s"] = max(self.loop_stats["max_busy_s"], busy)
            if mono - self._last_report >= 10.0:
                self._last_report = mono
                log.info("scheduler loop: %s", self.loop_stats)
                self.loop_stats = {"iterations": 0, "busy_s": 0.0, "max_busy_s": 0.0,
                                   "late": 0}
            # wake twice per tick: a late wake-up (up to tick - 1/share) then costs nothing,
            # the credit cap share * tick absorbs it
            next_tick += tick / 2
            delay = next_tick - time.monotonic()
            if delay < -tick:  # fell behind: do not try to catch up (no spikes)
                self.loop_stats["late"] += 1
                next_tick = time.monotonic()
                delay = 0.0
            await asyncio.sleep(max(0.0, delay))

    async def tick(self, shard: Shard) -> int:
        """One tick of one shard (tests and benchmarks); returns the orders sent."""
        return await self.tick_all([shard])

    async def tick_all(self, shards: list[Shard]) -> int:
        """One tick: choose the orders of every shard, issue them in one Redis pipeline."""
        now, mono = self.clock(), self.monotonic()  # issued_at and the pacer's time
        for shard in shards:
            await self.issuer.expire(shard, now)
        plans = self._choose(shards, now, mono)
        if not plans:
            return 0
        return await self.issuer.issue(plans, now)

    def _sent(self, shard: Shard, policy: str, value: float) -> None:
        """An order the producer took (:class:`streams.scheduler.issuing.OrderIssuer`): it
        spends one credit, counts, and moves the threshold the split compares
        (:func:`models.decision.budget.observe_value`) when it was a value pick."""
        if policy == "greedy" and value > 0:
            self.log_threshold = budget.observe_value(self.log_threshold, value,
                                                      self.share_total, EWMA_S)
        shard.emitted += 1
        self.emitted += 1
        self.orders_total += 1
        self.pacer.spend(1)

    def _choose(self, shards: list[Shard], now: float, mono: float | None = None
                ) -> list[tuple[Shard, list[tuple[str, str, float]]]]:
        """The orders of one tick over all local shards, as one scheduler: one credit at
        the sum of their shares (:class:`models.decision.pacer.CreditPacer`, paced on
        ``mono``, the monotonic clock), then :func:`models.decision.core.choose` (floor
        pages first, then the merged Algorithm 1 pick within the hosts' room)."""
        mono = self.monotonic() if mono is None else mono
        total = sum(s.share_per_s for s in shards)
        self.share_total = total
        n = self.pacer.advance(mono, 0.0 if self.control.paused else total)
        if n < 1:
            return []
        self.wanted += n
        picks = choose([s.book for s in shards], n, now,
                       floor=self.control.max_interval_s > 0)
        by_shard: dict[int, tuple[Shard, list[tuple[str, str, float]]]] = {}
        for shard in shards:
            shard.level = level_of(shard.book)
        owner = {id(s.book): s for s in shards}
        for pk in picks:
            shard = owner[id(pk.book)]
            by_shard.setdefault(shard.partition, (shard, []))[1].append(
                (str(pk.page), pk.policy, pk.value))
        return list(by_shard.values())

    def _sample_rate(self) -> None:
        mono = self.monotonic()
        self._rate_samples.append((mono, self.orders_total))
        while len(self._rate_samples) > 2 and self._rate_samples[1][0] <= mono - RATE_WINDOW_S:
            self._rate_samples.popleft()

    def emitted_per_s(self) -> float | None:
        """Orders this worker sent per second over the last ``RATE_WINDOW_S`` (from the
        oldest sample in the window to now); None before the first resplit."""
        if not self._rate_samples:
            return None
        mono = self.monotonic()
        t0, n0 = next(((t, n) for t, n in self._rate_samples if t >= mono - RATE_WINDOW_S),
                      self._rate_samples[-1])
        return (self.orders_total - n0) / (mono - t0) if mono > t0 else 0.0

    def top_hosts(self, n: int) -> dict[str, Any]:
        """The ``n`` hosts of this worker's shards with the most orders in flight
        (:func:`streams.scheduler.shard.top_hosts`)."""
        return top_hosts(self.shards, n, self.clock())

    def cluster(self) -> dict[str, Any]:
        """Every live worker's numbers as the shard entries in Redis have them (this
        worker's own from memory): workers, their emitted rates summed, shards."""
        rates: dict[str, float] = {}
        for e in self.global_shards.values():
            w, r = e.get("worker"), e.get("worker_emitted_per_s")
            if isinstance(w, str) and isinstance(r, int | float):
                rates[w] = float(r)
        own = self.emitted_per_s()
        if own is not None:
            rates[self.worker_id] = own
        return {
            "workers": len({e["worker"] for e in self.global_shards.values()
                            if isinstance(e.get("worker"), str)} | {self.worker_id}),
            "shards": len(self.global_shards),
            "emitted_per_s": sum(rates.values()) if rates else None,
        }

    def stats(self) -> dict[str, Any]:
        return {
            "worker": self.worker_id,
            "now_s": self.clock(),
            "budget_per_s": self.control.budget_per_s,
            "emitted_per_s": self.emitted_per_s(),
            "rate_window_s": RATE_WINDOW_S,
            "orders_total": self.orders_total,
            # budget dropped by the pacer's cap (late wake-ups, nothing eligible), orders
            "credit_clipped": self.pacer.clipped,
            "threshold": (math.exp(self.log_threshold)
                          if self.log_threshold is not None else None),
            "paused": self.control.paused,
            "control": {
                "t_delay_s": self.control.t_delay_s,
                "order_timeout_s": self.control.order_timeout_s,
                "max_interval_s": self.control.max_interval_s,
            },
            "tick_s": self.settings.tick_s,
            "shards": {str(p): s.summary() for p, s in sorted(self.shards.items())},
            "all_shards": {
                str(p): {**e, "threshold": math.exp(e["log_threshold"])
                         if e.get("log_threshold") is not None else None}
                for p, e in sorted(self.global_shards.items())
            },
            "cluster": self.cluster(),
            "counters": dict(sorted(self.metrics.tally.items())),
            "pings_by_source": self.metrics.pings_by_source(),
            # seconds the batch consumer waited for Kafka ("wait") and each input handler
            # took ("handle.<topic>"), since the start
            "consumer": {k: round(v, 3) for k, v in sorted(self.metrics.seconds.items())},
            # the garbage collector's pauses of this process (streams.telemetry.metrics)
            "gc": GC_PAUSES.summary(),
        }


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


async def cancel(task: asyncio.Task[Any] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
