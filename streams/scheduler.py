"""The scheduler's I/O: per shard (an input partition this worker owns) a decision book
(:class:`models.decision.core.ShardBook`) rebuilt from Redis, and one loop that emits
orders.  What to order is decided in :mod:`models.decision` (pure, time passed in); this
module keeps Redis (Lua), Kafka and the clock.

Loop (twice per ``tick_s``, default 10 ms)
------------------------------------------
The shards of one worker are scheduled as ONE scheduler (paper 004 Sec. 5.2 with the
shares following demand exactly): the credit pacer (:mod:`models.decision.pacer`) accrues
``S`` per second, ``S`` the sum of the local shards' shares, capped at ``S * tick + 1``;
``n = floor(credit)`` orders are chosen by :func:`models.decision.core.choose`: first pages
past the floor (longest interval ``max_interval_s``, earliest due first), then the highest
crawl values among all local shards' pages whose host has room (each shard's crawl index
and never-crawled pages, merged by value: Algorithm 1 of paper 004 over the worker's
pages).  Each order is one Lua script in Redis that checks the page exists and has no
order in flight, takes a token from the host's bucket (and respects max in flight) and
marks the page in flight; only then the order is sent.  In any window of ``L`` seconds a
worker emits at most ``S * (L + tick) + 1`` orders (no spikes), unspent credit is never
banked beyond one tick, and while the loop wakes up at least once per tick the emitted
rate is ``S`` within one order (the pacer's docstring).  Decisions go to an in-memory ring
(:mod:`streams.decisions`) for explain.

Budget
------
``R`` and the switches come from ``P:control`` (written by the control agent), read every
0.25 s.  Every 0.25 s each worker publishes its shards' thresholds and weights to Redis and
re-reads everyone's; shares are ``R * w_p / sum w`` (:mod:`streams.budget`).  All shards of
a worker publish the worker's threshold (an EWMA of the log-values it ordered), so their
weights move together and the controller only splits R between workers.  A worker whose
share gave it no credit in an interval publishes the value it would order at now (its best
page) when that is higher: otherwise its stale threshold would hold its share at nothing
while its pages' values grow (measured with per-shard picks: a 1-host shard's weight fell
to the 1e-3 clamp within 8 s and stayed there, its 20 of 100 pages never crawled again).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import json
import logging
import math
import secrets
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from redis.exceptions import NoScriptError

from models.decision.core import ShardBook, choose, level_of
from models.decision.fresh import FreshPages
from models.decision.hostindex import HostIndex
from models.decision.hosts import HostBuckets
from models.decision.pacer import CreditPacer
from models.decision.table import PageTable
from streams import budget
from streams.decisions import DecisionRing
from streams.estimation import Estimates, estimates_of
from streams.metrics import Metrics
from streams.params import PageParams, page_params, page_params_many
from streams.records import SOURCES
from streams.redis_conn import connect_sync
from streams.settings import Settings
from streams.state import HostDump, PageState, Store

__all__ = [
    "EWMA_S",
    "HEARTBEAT_S",
    "KEEP",
    "LOOP_HUNG_S",
    "LOOP_STALL_S",
    "NOT_IN_FLIGHT",
    "RATE_WINDOW_S",
    "RESPLIT_S",
    "SHARD_ALIVE_S",
    "Control",
    "Heartbeat",
    "OrderSink",
    "Scheduler",
    "Shard",
    "cancel",
    "dumps",
]

log = logging.getLogger(__name__)

OrderSink = Callable[[bytes, bytes], Awaitable[Any]]
EWMA_S = 2.0
#: a shard entry older than this (on Redis's clock) is a dead worker's: its share is spent
#: by the live shards.  Entries are re-stamped every ``HEARTBEAT_S`` by a thread of their
#: worker (:class:`Heartbeat`) that the event loop's stalls (a shard rebuild, a large agent
#: batch) do not hold, so a live worker is never this late, and a killed one's share goes
#: to the others about 1 s after its death (it was 3 s when the entries were written by
#: the loop every 0.5 s: 3.6% of R lost over the 25 s after a kill).  Four heartbeats.
SHARD_ALIVE_S = 0.8
#: how often a worker re-reads every shard's entry and re-splits R (and publishes its own)
RESPLIT_S = 0.25
#: how often the heartbeat thread re-stamps this worker's shard entries (Redis's ``TIME``)
HEARTBEAT_S = 0.2
#: a scheduler loop that made no progress for this long is stalled (a rebuild or a large
#: agent batch holding the event loop): the heartbeat publishes its shards as not ready, so
#: the others spend its share meanwhile; once the loop runs again its shards spend from its
#: second resplit (the others shrink first)
LOOP_STALL_S = 0.5
#: a loop that made no progress for this long is hung: its heartbeat stops (entries age)
LOOP_HUNG_S = 10.0
#: ``emitted_per_s`` in ``/stats``: orders sent over (about) the last this many seconds
RATE_WINDOW_S = 10.0


@dataclass(slots=True)
class Control:
    budget_per_s: float
    paused: bool = False
    t_delay_s: float = 60.0
    order_timeout_s: float = 600.0
    max_interval_s: float = 0.0

    @classmethod
    def from_redis(cls, raw: dict[str, str], settings: Settings) -> Control:
        def f(name: str, default: float) -> float:
            try:
                return float(raw[name]) if name in raw else default
            except ValueError:
                return default

        return cls(
            budget_per_s=f("budget_per_s", settings.budget_per_s),
            paused=raw.get("paused") == "1",
            t_delay_s=f("t_delay_s", settings.t_delay_s),
            order_timeout_s=f("order_timeout_s", settings.order_timeout_s),
            max_interval_s=f("max_interval_s", settings.max_interval_s),
        )


KEEP = object()
NOT_IN_FLIGHT = object()


class Heartbeat:
    """This worker's shard entries in ``P:sched:shards``, written from a thread of their
    own: every ``period_s`` (and at once after :meth:`publish`) the thread reads Redis's
    ``TIME`` and writes the entries the loop last published with that ``ts``.  The loop's
    stalls do not delay it (the thread needs only the GIL, which CPython hands over every
    5 ms), so the liveness window can be short.  A loop that made no progress for
    ``stall_s`` (:meth:`loop_alive` not called) is stalled: its entries are written with
    ``ready`` false (weight 0: the others spend its share) and :attr:`stalled_flag` is set
    for the loop to see; after ``hung_s`` it is hung, and its entries are left to age.
    The only writer of the entries while it runs (no older copy overwrites a newer)."""

    def __init__(self, redis_url: str, key: str, *, period_s: float = HEARTBEAT_S,
                 stall_s: float = LOOP_STALL_S, hung_s: float = LOOP_HUNG_S) -> None:
        self.redis_url = redis_url
        self.key = key
        self.period_s = period_s
        self.stall_s = stall_s
        self.hung_s = hung_s
        #: set when entries went out as stalled; the loop clears it (:meth:`take_stalled`)
        self.stalled_flag = False
        self._entries: dict[int, dict[str, Any]] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._loop_mono = time.monotonic()
        self._thread: threading.Thread | None = None
        #: beats written, failed writes, and the longest time between two writes (s)
        self.beats = 0
        self.failures = 0
        self.max_gap_s = 0.0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def publish(self, entries: dict[int, dict[str, Any]]) -> None:
        """The entries to stamp from now on (a new dict: the thread reads it unlocked)."""
        self._entries = dict(entries)
        self._wake.set()

    def drop(self, partitions: set[int]) -> None:
        """Stop stamping these (revoked) shards' entries: they age and drop out."""
        if partitions & set(self._entries):
            self._entries = {p: e for p, e in self._entries.items() if p not in partitions}

    def loop_alive(self) -> None:
        self._loop_mono = time.monotonic()

    def take_stalled(self) -> bool:
        """Whether entries went out as stalled since the last call (then cleared)."""
        was, self.stalled_flag = self.stalled_flag, False
        return was

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="recrawl-heartbeat",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop beating (a worker that stops: its entries age and its share moves)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        r = None
        last = time.monotonic()
        while not self._stop.is_set():
            self._wake.wait(self.period_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            entries = self._entries
            idle = time.monotonic() - self._loop_mono
            if not entries or idle > self.hung_s:
                continue
            stalled = idle > self.stall_s
            if stalled:
                self.stalled_flag = True
                entries = {p: {**e, "ready": False, "stalled": True}
                           for p, e in entries.items()}
            try:
                if r is None:
                    # a connection that hangs must not hold the beats: time out, retry
                    r = connect_sync(self.redis_url, decode_responses=True,
                                     socket_timeout=2.0, socket_connect_timeout=2.0)
                sec, usec = r.time()
                ts = float(sec) + float(usec) / 1e6
                r.hset(self.key, mapping={str(p): json.dumps({**e, "ts": ts})
                                          for p, e in entries.items()})
            except Exception as exc:  # Redis away: try again (the entries age meanwhile)
                self.failures += 1
                log.warning("heartbeat failed (%r)", exc)
                r = None
                self._stop.wait(self.period_s)
                continue
            self.beats += 1
            mono = time.monotonic()
            self.max_gap_s = max(self.max_gap_s, mono - last)
            last = mono
        if r is not None:
            with contextlib.suppress(Exception):
                r.close()


@dataclass(eq=False)
class Shard:
    """One input partition this worker owns: its decision book (:mod:`models.decision`)
    and the I/O side's bookkeeping (loading, order time-outs, share of ``R``)."""

    partition: int
    book: ShardBook = field(default_factory=lambda: ShardBook(HostBuckets(1.0)))
    timeouts: list[tuple[float, str, str]] = field(default_factory=list)
    share_per_s: float = 0.0
    weight: float = 1.0
    log_threshold: float | None = None
    level: float = 0.0
    emitted: int = 0
    ready: bool = False
    dirty: set[tuple[str, str]] = field(default_factory=set)
    #: host -> urls its robots.txt disallows (Redis ``P:{host}:blocked``): kept out of the
    #: book until the host's robots.txt changes
    blocked: dict[str, set[str]] = field(default_factory=dict)
    #: host -> robots.txt changes applied (on_blocked ignores a block from before one)
    robots_epoch: dict[str, int] = field(default_factory=dict)

    @property
    def in_flight(self) -> dict[Any, tuple[str, float]]:
        return self.book.in_flight

    @property
    def hosts(self) -> HostBuckets:
        return self.book.hosts

    @property
    def index(self) -> HostIndex:
        return self.book.index

    @property
    def fresh(self) -> FreshPages:
        return self.book.fresh

    @property
    def table(self) -> PageTable:
        return self.book.table

    def host(self, url: str) -> str:
        return str(self.book.table.host_of(url))

    def summary(self) -> dict[str, Any]:
        return {
            "pages": len(self.book),
            "in_flight": len(self.in_flight),
            "share_per_s": self.share_per_s,
            "weight": self.weight,
            "threshold": math.exp(self.log_threshold) if self.log_threshold is not None else None,
            "index_level": self.level,
            "emitted": self.emitted,
            "ready": self.ready,
        }


class Scheduler:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        metrics: Metrics,
        send_order: OrderSink,
        *,
        assignment: Callable[[], set[int]] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        decisions: DecisionRing | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.send_order = send_order
        self.assignment = assignment
        self.clock = clock
        self.monotonic = monotonic
        # where this worker answers GET /pages (its decisions ring): `recrawl explain` asks it
        self.web_url = (f"http://{settings.web_host}:{settings.web_port or 6066}"
                        if settings.web_enabled else None)
        self.decisions = decisions if decisions is not None else DecisionRing(
            per_page=settings.decisions_per_page)
        self.shards: dict[int, Shard] = {}
        self.control = Control(
            settings.budget_per_s, t_delay_s=settings.t_delay_s,
            order_timeout_s=settings.order_timeout_s, max_interval_s=settings.max_interval_s,
        )
        self.worker_id = secrets.token_hex(4)
        self._seq = 0
        self._loaders: dict[int, asyncio.Task[None]] = {}
        self.global_shards: dict[int, dict[str, Any]] = {}
        self.stopping = False
        self.loop_stats: dict[str, float] = {"iterations": 0, "busy_s": 0.0,
                                             "max_busy_s": 0.0, "late": 0}
        self._last_report = 0.0
        #: loop time spent working since the start (benchmarks: busy time per order)
        self.busy_total_s = 0.0
        #: one credit, threshold and starved count for all local shards (one scheduler)
        self.pacer = CreditPacer(settings.tick_s)
        self.share_total = 0.0
        self.log_threshold: float | None = None
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
            self._forget(shard, url)
            return
        if url in shard.blocked.get(host, ()):
            return
        flight = NOT_IN_FLIGHT if in_flight_cleared else KEEP
        state = value if isinstance(value, PageState) else PageState.decode(value)
        self._apply_or_skip(shard, host, url, state, estimator, flight)

    def new_shard(self, partition: int) -> Shard:
        st = self.settings
        return Shard(partition, ShardBook(
            HostBuckets(st.default_host_crawls_per_s, st.host_burst,
                        st.default_host_max_in_flight), key=partition,
            table=PageTable(n_sources=len(SOURCES))))

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

    def on_blocked(self, partition: int, host: str, url: str,
                   epoch: int | None = None) -> None:
        """The host's robots.txt disallows ``url``: out of the book until it changes.
        ``epoch``: :meth:`robots_epoch` when the outcome was written; if a change was
        applied since (the hosts agent ran in between), Redis's blocked set was emptied
        after this page entered it, so the page stays a candidate (were it blocked again
        under the new robots.txt, the issue script refuses it: ``blocked``)."""
        shard = self.shards.get(partition)
        if shard is None or (epoch is not None and shard.robots_epoch.get(host, 0) != epoch):
            return
        shard.blocked.setdefault(host, set()).add(url)
        self._forget(shard, url)

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
            await self._reload(shard, host, sorted(urls))
        for url in urls:
            self.decisions.add(url, f"{self.clock():.3f} robots.txt of {host} changed: "
                                    "a candidate again")

    async def refresh_control(self) -> None:
        self.control = Control.from_redis(await self.store.get_control(), self.settings)
        self.metrics.budget.set(self.control.budget_per_s)

    # -- shard state ----------------------------------------------------------------
    def _forget(self, shard: Shard, url: str) -> None:
        shard.book.remove_page(url)

    def _apply(
        self, shard: Shard, host: str, url: str, state: PageState,
        estimator: str | Estimates | None, flight: Any,
    ) -> None:
        """Apply a page's state; ``flight``: KEEP (unchanged), NOT_IN_FLIGHT, or the
        ``(order_id, issued_at)`` stored in Redis (rebuild)."""
        now = self.clock()
        if isinstance(estimator, str):
            estimator = estimates_of(estimator)
        t = shard.table
        slot = t.get(url)
        if estimator is None and slot is not None and t.estimated[slot]:
            # the page's estimate did not change (a ping, a catalogue update): its
            # parameters are the table's, with the origin from the new signal counts
            params = _cached_params(t, slot, state)
        else:
            params = page_params(state, estimator, self.settings)
        cap = params.max_value()
        # beta = inf (a ping that is never false) and origin = -inf are the model's; NaN or
        # an infinite rate, importance or value are not
        if (not all(math.isfinite(x) for x in (params.alpha_per_s, params.gamma_per_s,
                                               params.mu, cap))
                or math.isnan(params.origin_s) or math.isnan(params.beta_s)):
            raise ValueError(f"parameters not usable: {params.as_dict()}")
        first_seen = float(t.first_seen[slot]) if slot is not None else now
        floor_due: float | None = None
        if self.control.max_interval_s > 0:
            base = state.last_crawl_s if state.crawled else first_seen
            floor_due = base + self.control.max_interval_s
        if flight is NOT_IN_FLIGHT:
            shard.book.end_flight(url)
        shard.book.set_page(
            url, host, crawled=state.crawled, origin=params.origin_s,
            alpha=params.alpha_per_s, beta=params.beta_s, gamma=params.gamma_per_s,
            mu=params.mu, max_value=cap, floor_due_s=floor_due,
            first_seen_s=first_seen, last_crawl_s=state.last_crawl_s,
            delta=params.change_rate_per_s, estimated=params.estimated,
            src_beta=params.source_beta_s)
        if flight is not KEEP and flight is not NOT_IN_FLIGHT:
            self._set_flight(shard, url, host, flight)

    async def _load(self, shard: Shard) -> None:
        """Rebuild a shard from Redis (its hosts set, then each host's pages)."""
        t0 = time.monotonic()
        while True:
            try:
                hosts = await self.store.shard_hosts(shard.partition)
                for i in range(0, len(hosts), 50):
                    dumps = await self.store.dump_hosts(hosts[i : i + 50])
                    for dump in dumps:
                        if dump.blocked:
                            shard.blocked[dump.host] = set(dump.blocked)
                    self._load_hosts(shard, dumps)
                    await asyncio.sleep(0)
                while shard.dirty:
                    batch = list(shard.dirty)
                    shard.dirty.clear()
                    by_host: dict[str, list[str]] = {}
                    for h, u in batch:
                        by_host.setdefault(h, []).append(u)
                    for h, urls in by_host.items():
                        await self._reload(shard, h, urls)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.metrics.retry("redis")
                log.warning("loading shard %d failed (%r); retrying", shard.partition, exc)
                await asyncio.sleep(0.5)
        shard.ready = True
        log.info("shard %d ready: %d pages, %d in flight (%.2fs)", shard.partition,
                 len(shard.book), len(shard.in_flight), time.monotonic() - t0)

    def _load_hosts(self, shard: Shard, dumps: list[HostDump]) -> None:
        """Some hosts of a shard's rebuild: their pages' parameters computed on arrays
        (:func:`streams.params.page_params_many`, equal to :meth:`_apply` page by page)
        and put in the book at once; a page whose stored text does not parse or whose
        parameters are not usable goes page by page (counted ``pages.unusable``)."""
        urls: list[str] = []
        hosts: list[str] = []
        values: list[str | bytes] = []
        #: estimator records still in the old est hash (the others are in the values)
        ests: list[str | None] = []
        for dump in dumps:
            info = dump.info
            blocked = shard.blocked.get(dump.host, ())
            pages = ({u: v for u, v in dump.pages.items() if u not in blocked} if blocked
                     else dump.pages)  # blocked by robots.txt: out of the book
            shard.hosts.set_capacity(dump.host, info.rate_per_s, info.max_in_flight)
            if info.tokens is not None:
                shard.hosts.set_tokens(dump.host, info.tokens, info.updated_s or 0.0)
            urls.extend(pages)
            hosts.extend([dump.host] * len(pages))
            values.extend(pages.values())
            if dump.estimators:
                ests.extend(dump.estimators.get(u) for u in pages)
            else:
                ests.extend([None] * len(pages))
        if not urls:
            return
        many = page_params_many(values, ests, self.settings)
        if many is None:
            bulk = np.zeros(len(urls), dtype=bool)
        else:
            with np.errstate(invalid="ignore"):
                bulk = (np.isfinite(many.alpha) & np.isfinite(many.gamma)
                        & np.isfinite(many.importance) & np.isfinite(many.max_value)
                        & ~np.isnan(many.origin) & ~np.isnan(many.beta))
        rows = np.flatnonzero(bulk)
        if many is not None and rows.size:
            now = self.clock()
            floor_due = None
            if self.control.max_interval_s > 0:
                base = np.where(many.crawled, many.last_crawl_s, now)
                floor_due = base[rows] + self.control.max_interval_s
            picked = rows.tolist()
            shard.book.set_pages(
                [urls[i] for i in picked], [hosts[i] for i in picked],
                crawled=many.crawled[rows], origin=many.origin[rows], alpha=many.alpha[rows],
                beta=many.beta[rows], gamma=many.gamma[rows], mu=many.importance[rows],
                max_value=many.max_value[rows], first_seen_s=now,
                last_crawl_s=many.last_crawl_s[rows], delta=many.delta[rows],
                estimated=many.estimated[rows], src_beta=many.src_beta[rows],
                floor_due_s=floor_due)
            for dump in dumps:
                for url, flight in dump.in_flight.items():
                    if url in dump.pages:
                        self._set_flight(shard, url, dump.host, flight)
        by_host = {d.host: d for d in dumps}
        for i in np.flatnonzero(~bulk).tolist():
            url, dump = urls[i], by_host[hosts[i]]
            try:
                state = PageState.decode(values[i])
            except ValueError as exc:
                self.metrics.tally["pages.unusable"] += 1
                log.warning("page %s left out of shard %d: unreadable %r (%s)", url,
                            shard.partition, values[i][:200], exc)
                continue
            self._apply_or_skip(shard, dump.host, url, state, dump.estimator(url),
                                dump.in_flight.get(url, NOT_IN_FLIGHT))

    def _apply_or_skip(self, shard: Shard, host: str, url: str, state: PageState,
                       estimator: str | Estimates | None, flight: Any) -> bool:
        """:meth:`_apply`, but a page whose stored state gives no finite parameters (only
        possible for data written before the schema's bounds) is left out of the book and
        counted (``pages.unusable``) instead of failing its whole shard's rebuild."""
        try:
            self._apply(shard, host, url, state, estimator, flight)
            return True
        except (ValueError, ArithmeticError) as exc:
            self.metrics.tally["pages.unusable"] += 1
            log.warning("page %s left out of shard %d: %s", url, shard.partition, exc)
            self._forget(shard, url)
            return False

    async def _reload(self, shard: Shard, host: str, urls: list[str]) -> None:
        """Re-read pages from Redis (the truth) and apply them, in flight or not."""
        got = await self.store.get_pages(host, urls)
        # Redis's blocked set is the truth (a robots.txt change may have emptied it while
        # the shard was loading)
        blocked = await self.store.blocked_among(host, urls)
        mine = shard.blocked.setdefault(host, set())
        mine.difference_update(set(urls) - blocked)
        mine.update(blocked)
        if not mine:
            del shard.blocked[host]
        for url, (value, fl, est) in got.items():
            if value is None or url in blocked:
                self._forget(shard, url)
                continue
            flight: Any = NOT_IN_FLIGHT
            if fl:
                oid, _, at = fl.partition("|")
                flight = (oid, float(at or 0.0))
            self._apply_or_skip(shard, host, url, PageState.decode(value), est, flight)

    def sync_assignment(self, partitions: set[int]) -> None:
        if self.heartbeat is not None:
            self.heartbeat.drop(set(self.shards) - partitions)
        for p in list(self.shards):
            if p not in partitions:
                task = self._loaders.pop(p, None)
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
            self._loaders[p] = asyncio.ensure_future(self._load(shard))
            log.info("shard %d assigned; loading", p)

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
            best = self._best_value(now)
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
        for p, s in self.shards.items():
            starved = s.ready and starved_all
            s.weight = budget.update_weight(
                s.weight, s.log_threshold, mean, gain_per_s=self.settings.resplit_gain,
                dt_s=dt_s, starved=starved and s.share_per_s * dt_s >= 2,
            )
            own[p] = {
                "weight": s.weight, "log_threshold": s.log_threshold,
                "share_per_s": s.share_per_s, "pages": len(s.book),
                "in_flight": len(s.in_flight), "ts": redis_now, "worker": self.worker_id,
                "ready": s.ready, "web": self.web_url,
                "budget_per_s": self.control.budget_per_s,  # the R it splits (recrawl plan)
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
                log.warning("redis unavailable (%r); retrying", exc)
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
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.metrics.retry("scheduler")
                log.warning("scheduler tick failed: %r", exc)
                await asyncio.sleep(0.2)
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
            await self._expire(shard, now)
        plans = self._choose(shards, now, mono)
        if not plans:
            return 0
        return await self._issue(plans, now)

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

    async def _issue(
        self, plans: list[tuple[Shard, list[tuple[str, str, float]]]], now: float
    ) -> int:
        """Issue a tick's picks: one script call per host (its keys share one slot), all in
        one pipeline (one round trip); the orders that Redis accepted go to the producer."""
        st = self.settings
        groups: dict[tuple[int, str], list[tuple[str, str, float, str]]] = {}
        owner: dict[int, Shard] = {}
        for shard, picks in plans:
            owner[shard.partition] = shard
            for url, policy, value in picks:
                self._seq += 1
                oid = f"{self.worker_id}-{shard.partition}-{self._seq:x}"
                groups.setdefault((shard.partition, shard.host(url)), []).append(
                    (url, policy, value, oid))
        pipe = self.store.redis.pipeline(transaction=False)
        for (_p, host), items in groups.items():
            self.store.queue_issue(
                pipe, host, [(url, oid) for url, _pol, _v, oid in items], now_s=now,
                default_rate=st.default_host_crawls_per_s,
                default_mif=st.default_host_max_in_flight, burst=st.host_burst,
            )
        try:
            results = await pipe.execute(raise_on_error=False)
        except Exception as exc:
            # no reply (a timeout, a dropped connection, Redis paused): the scripts may have
            # run and marked the pages in flight, and no order was sent; clear those marks
            await self._unsend([(owner[p], url, host, oid) for (p, host), items in groups.items()
                                for url, _pol, _v, oid in items], exc)
            return 0
        sent = 0
        issued_at = round(now, 6)
        send_error: Exception | None = None
        unsent: list[tuple[Shard, str, str, str]] = []
        for ((partition, host), items), res in zip(groups.items(), results, strict=True):
            shard = owner[partition]
            if isinstance(res, Exception):
                if isinstance(res, NoScriptError):
                    await self.store.load_scripts()
                else:
                    log.warning("issue failed: %r", res)
                for url, *_ in items:
                    self._restore(shard, url)
                continue
            hosts, table, level = shard.hosts, shard.table, shard.level
            for k, (url, policy, value, oid) in enumerate(items):
                code, payload = _s(res[2 * k]), res[2 * k + 1]
                if code == "ok":
                    slot = table.slot[url]
                    crawled = bool(table.crawled[slot])
                    tau = max(0.0, now - float(table.origin[slot]))
                    tau_eff = tau if crawled and math.isfinite(tau) else None
                    # the Order record's fields (streams/records.py), built as a plain dict
                    order = {
                        "order_id": oid, "url": url, "host": host, "issued_at": issued_at,
                        "crawl_value": float(value), "threshold": level, "tau_eff": tau_eff,
                        "policy": policy,
                    }
                    if send_error is not None:
                        unsent.append((shard, url, host, oid))
                        continue
                    try:
                        await self.send_order(host.encode(),
                                              json.dumps(order, allow_nan=False).encode())
                    except Exception as exc:  # e.g. the producer stopping: undo below
                        send_error = exc
                        unsent.append((shard, url, host, oid))
                        continue
                    hosts.take(host, now)
                    self._set_flight(shard, url, host, (oid, now))
                    self.metrics.order(partition, policy)
                    if policy == "greedy" and value > 0:
                        self._observe_value(shard, value, now)
                    shard.emitted += 1
                    self.emitted += 1
                    self.orders_total += 1
                    self.pacer.spend(1)
                    sent += 1
                    self.decisions.add(url, (
                        f"{now:.3f} ordered {oid} ({policy}): value {value:.4g}"
                        f" {'>=' if value >= level else '<'} threshold {level:.4g}"
                        + (f", tau_eff {tau:.0f}s" if crawled else ", never crawled")))
                    continue
                if code == "no-token":
                    hosts.empty(host, now)
                elif code == "in-flight":
                    foid, _, at = _s(payload).partition("|")
                    self._set_flight(shard, url, host, (foid, float(at or now)))
                elif code == "max-in-flight":
                    b = hosts.bucket(host)
                    b.in_flight = max(b.in_flight, hosts.max_in_flight(host))
                elif code == "gone":
                    self._forget(shard, url)
                    continue
                elif code == "blocked":  # its robots.txt disallows it (another worker knew)
                    self.on_blocked(partition, host, url)
                    continue
                if code != "in-flight":
                    self._restore(shard, url)  # not ordered: back among the candidates
        if unsent:
            await self._unsend(unsent, send_error)
        return sent

    async def _unsend(self, unsent: list[tuple[Shard, str, str, str]],
                      error: Exception | None) -> None:
        """Orders marked in flight in Redis that never reached the producer: clear the mark
        (only if it is still theirs) and put the pages back, so that none waits for a
        time-out with no order out."""
        log.warning("%d orders not sent (%r): taken out of flight again", len(unsent), error)
        await self._take_out_of_flight([(url, host, oid) for _s, url, host, oid in unsent])
        for shard, url, _host, _oid in unsent:
            self._restore(shard, url)
        self.metrics.tally["orders.unsent"] += len(unsent)

    async def _take_out_of_flight(self, orders: list[tuple[str, str, str]]) -> None:
        """Clear the in-flight marks of ``(url, host, order_id)`` that are still theirs, in
        one pipeline, until Redis answers (a mark left behind holds its page until the
        order time-out).  A master without the scripts (a restart; a Redis Cluster
        pipeline cannot check first) answers NOSCRIPT: load them and run again (the script
        is id-guarded)."""
        delay = 0.1
        while True:
            try:
                pipe = self.store.redis.pipeline(transaction=False)
                for url, host, oid in orders:
                    await self.store.queue_expire(pipe, url, host, order_id=oid)
                results = await pipe.execute(raise_on_error=False)
                if not any(isinstance(r, Exception) for r in results):
                    return
                if not any(isinstance(r, NoScriptError) for r in results):
                    log.warning("clearing in-flight marks: %r", results)
                    return
                await self.store.load_scripts()  # Redis restarted: load, then again
            except Exception as exc:
                if self.stopping:
                    log.warning("stopping: %d orders stay in flight (%r)", len(orders), exc)
                    return
                log.warning("clearing in-flight marks failed (%r); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(2 * delay, 2.0)

    def _restore(self, shard: Shard, url: str) -> None:
        """Put a chosen page that was not ordered back in its book (a never-crawled page
        left the fresh pages when it was chosen)."""
        t = shard.table
        slot = t.get(url)
        if slot is None or url in shard.in_flight:
            return
        shard.book.set_page(
            url, shard.host(url), crawled=bool(t.crawled[slot]), origin=float(t.origin[slot]),
            alpha=float(t.alpha[slot]), beta=float(t.beta[slot]), gamma=float(t.gamma[slot]),
            mu=float(t.mu[slot]), max_value=float(t.max_value[slot]),
            floor_due_s=shard.book.floor.due_of(url), first_seen_s=float(t.first_seen[slot]),
            last_crawl_s=float(t.last_crawl[slot]), delta=float(t.delta[slot]),
            estimated=bool(t.estimated[slot]))

    def _set_flight(self, shard: Shard, url: str, host: str, flight: tuple[str, float]) -> None:
        if url not in shard.book:
            return
        known = shard.in_flight.get(url)
        shard.book.start_flight(url, flight)
        if known is None or known[0] != flight[0]:
            heapq.heappush(shard.timeouts,
                           (flight[1] + self.control.order_timeout_s, url, flight[0]))

    def _observe_value(self, shard: Shard, value: float, now: float) -> None:
        if not 0.0 < value < math.inf:  # the threshold must stay finite (budget split)
            return
        lv = math.log(value)
        if self.log_threshold is None:
            self.log_threshold = lv
        else:
            w = 1.0 / max(1.0, self.share_total * EWMA_S)
            self.log_threshold += w * (lv - self.log_threshold)

    async def _expire(self, shard: Shard, now: float) -> None:
        due: list[tuple[str, str]] = []
        while shard.timeouts and shard.timeouts[0][0] <= now and len(due) < 200:
            _, url, oid = heapq.heappop(shard.timeouts)
            fl = shard.in_flight.get(url)
            if fl is not None and fl[0] == oid:
                due.append((url, oid))
        if not due:
            return
        await self._take_out_of_flight([(url, shard.host(url), oid) for url, oid in due])
        for url, oid in due:
            self.decisions.add(url, f"{now:.3f} order {oid} timed out: no outcome within "
                                    f"{self.control.order_timeout_s:g}s; eligible again")
        by_host: dict[str, list[str]] = {}
        for url, _ in due:
            self.metrics.order_timeouts.inc()
            self.metrics.tally["orders.timed_out"] += 1
            by_host.setdefault(shard.host(url), []).append(url)
        for host, urls in by_host.items():
            await self._reload(shard, host, urls)

    # -- views -----------------------------------------------------------------------
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
        """The ``n`` hosts of this worker's shards with the most orders in flight (then the
        highest capacity): capacity (``max_crawls_per_s``, ``max_in_flight``; 0: no cap),
        tokens now and orders in flight, as the scheduler's buckets hold them."""
        now = self.clock()
        rows = [(b.hosts.in_flight(h), b.hosts.rate(h), str(h), p, b.hosts)
                for p, b in self.shards.items() for h in b.hosts.buckets]
        top = heapq.nsmallest(max(0, n), rows, key=lambda r: (-r[0], -r[1], r[2]))
        return {
            "count": len(rows),
            "in_flight": sum(r[0] for r in rows),
            "top": [{"host": h, "shard": p, "in_flight": f, "max_crawls_per_s": rate,
                     "max_in_flight": hb.max_in_flight(h), "tokens": hb.tokens(h, now)}
                    for f, rate, h, p, hb in top],
        }

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
        }


def _cached_params(t: PageTable, slot: int, state: PageState) -> PageParams:
    """:func:`streams.params.page_params` of a page whose estimate is unchanged, from the
    table: ``mu`` is the importance, ``origin = last_crawl - sum_s beta_s n_s`` (paper 004
    Sec. 3, one factor per source)."""
    betas = tuple(float(b) for b in t.src_beta[slot])
    origin = (state.last_crawl_s - sum(b * n for b, n in zip(betas, state.signals, strict=True))
              if state.crawled else 0.0)
    return PageParams(float(t.alpha[slot]), float(t.beta[slot]), float(t.gamma[slot]),
                      state.importance, float(t.delta[slot]), betas, origin, True)


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


async def cancel(task: asyncio.Task[Any] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
