"""The scheduler: per shard (an input partition this worker owns) an in-memory
:class:`models.index.CrawlIndex` rebuilt from Redis, and one loop that emits orders.

Loop (twice per ``tick_s``, default 10 ms)
------------------------------------------
The shards of one worker are scheduled as ONE scheduler (paper 004 Sec. 5.2 with the
shares following demand exactly): ``credit = min(cap, credit + S * dt)`` with ``S`` the sum
of the local shards' shares and ``cap = max(1, S * tick)``; ``n = floor(credit)`` orders are
chosen: first pages past the floor (longest interval ``max_interval_s``, earliest due
first), then the highest crawl values among all local shards' pages whose host has a token
(each shard's ``CrawlIndex.best`` with an eligibility predicate and its never-crawled pages,
merged by value: Algorithm 1 of paper 004 over the worker's pages).  Each order is one Lua
script in Redis that checks the page exists and has no order in flight, takes a token from
the host's bucket (and respects max in flight), marks the page in flight and records the
decision; only then the order is sent.  In any window of ``L`` seconds a worker emits at
most ``S * L + cap`` orders: no spikes, and unspent credit is never banked beyond one tick
(scarce pages or hosts give fewer orders, not a burst later).  The flip side: when
``S * tick`` is about 1, any wake-up later than ``tick - 1/S`` costs budget, so give the
loop a tick with a few orders (``R * tick >= 4``) when the emitted rate must match R
closely.

Budget
------
``R`` and the switches come from ``P:control`` (written by the control agent), read every
0.25 s.  Every 0.5 s each worker publishes its shards' thresholds and weights to Redis and
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
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from models.index import CrawlIndex
from streams import budget
from streams.estimation import Estimates, estimates_of
from streams.metrics import Metrics
from streams.params import PageParams, page_params
from streams.settings import Settings
from streams.state import HostInfo, PageState, Store

log = logging.getLogger(__name__)

OrderSink = Callable[[bytes, bytes], Awaitable[Any]]
EWMA_S = 2.0


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


@dataclass(slots=True)
class HostBucket:
    """Local mirror of a host's token bucket (Redis is authoritative)."""

    rate_per_s: float | None = None
    max_in_flight: int | None = None
    tokens: float | None = None
    ts: float = 0.0
    in_flight: int = 0

    def available(self, now: float, default_rate: float, burst: float) -> float:
        rate = self.rate_per_s or default_rate
        if self.tokens is None:
            return burst
        return min(burst, self.tokens + max(0.0, now - self.ts) * rate)

    def take(self, now: float, default_rate: float, burst: float) -> None:
        self.tokens = self.available(now, default_rate, burst) - 1.0
        self.ts = now


@dataclass(slots=True)
class PageEntry:
    host: str
    last_crawl_s: float
    first_seen_s: float
    params: PageParams
    estimator: Estimates | None = None


KEEP = object()
NOT_IN_FLIGHT = object()


class FreshPages:
    """Never-crawled pages, outside the :class:`CrawlIndex`: their value is constant,
    ``V(inf) = mu/Delta`` (``tau_eff`` is decades), so they need no time-to-level keys.

    One heap per host (highest value first, ties by arrival) and a heap of hosts keyed by
    their best page, so a host without a token is skipped in one step with all its pages
    (an index full of equal values would otherwise make every query a full scan).  Removal
    is lazy: an entry counts only while ``self.key[url]`` is that entry.
    """

    __slots__ = ("by_host", "hosts", "key", "seq")

    def __init__(self) -> None:
        self.by_host: dict[str, list[tuple[float, int, str]]] = {}
        self.hosts: list[tuple[float, int, str]] = []
        self.key: dict[str, tuple[float, int, str]] = {}
        self.seq = 0

    def __len__(self) -> int:
        return len(self.key)

    def __contains__(self, url: object) -> bool:
        return url in self.key

    def add(self, url: str, host: str, value: float) -> None:
        old = self.key.get(url)
        if old is not None and old[0] == -value:
            return
        self.seq += 1
        entry = (-value, self.seq, url)
        self.key[url] = entry
        heap = self.by_host.setdefault(host, [])
        heapq.heappush(heap, entry)
        if heap[0] is entry:
            heapq.heappush(self.hosts, (entry[0], entry[1], host))

    def remove(self, url: str) -> None:
        self.key.pop(url, None)

    def best_value(self) -> float:
        """The highest value of any page (0 when empty)."""
        while self.hosts:
            hk = self.hosts[0]
            top = self._top(hk[2])
            if top is not None and (top[0], top[1]) == (hk[0], hk[1]):
                return -top[0]
            heapq.heappop(self.hosts)
            if top is not None:
                heapq.heappush(self.hosts, (top[0], top[1], hk[2]))
        return 0.0

    def _top(self, host: str) -> tuple[float, int, str] | None:
        heap = self.by_host.get(host)
        while heap and self.key.get(heap[0][2]) is not heap[0]:
            heapq.heappop(heap)
        if not heap:
            self.by_host.pop(host, None)
            return None
        return heap[0]

    def take(self, n: int, capacity: Callable[[str], int]) -> list[tuple[str, str, float]]:
        """Up to ``n`` best pages ``(url, host, value)`` (removed), at most
        ``capacity(host)`` per host; a host with no capacity is skipped whole."""
        out: list[tuple[str, str, float]] = []
        skipped: list[tuple[float, int, str]] = []
        room: dict[str, int] = {}
        while len(out) < n and self.hosts:
            hk = self.hosts[0]
            host = hk[2]
            top = self._top(host)
            if top is None or (top[0], top[1]) != (hk[0], hk[1]):
                heapq.heappop(self.hosts)  # stale host entry
                if top is not None:
                    heapq.heappush(self.hosts, (top[0], top[1], host))
                continue
            left = room.get(host)
            if left is None:
                left = capacity(host)
            if left <= 0:
                skipped.append(heapq.heappop(self.hosts))
                continue
            room[host] = left - 1
            heapq.heappop(self.by_host[host])
            del self.key[top[2]]
            out.append((top[2], host, -top[0]))
            heapq.heappop(self.hosts)
            nxt = self._top(host)
            if nxt is not None:
                heapq.heappush(self.hosts, (nxt[0], nxt[1], host))
        for e in skipped:
            heapq.heappush(self.hosts, e)
        return out


@dataclass
class Shard:
    partition: int
    index: CrawlIndex = field(default_factory=CrawlIndex)
    pages: dict[str, PageEntry] = field(default_factory=dict)
    hosts: dict[str, HostBucket] = field(default_factory=dict)
    #: url -> (order id, issued at); such pages are out of the index until the order ends
    in_flight: dict[str, tuple[str, float]] = field(default_factory=dict)
    timeouts: list[tuple[float, str, str]] = field(default_factory=list)
    floor: list[tuple[float, str, float]] = field(default_factory=list)
    share_per_s: float = 0.0
    weight: float = 1.0
    log_threshold: float | None = None
    level: float = 0.0
    emitted: int = 0
    ready: bool = False
    dirty: set[tuple[str, str]] = field(default_factory=set)
    rate_window: list[tuple[float, int]] = field(default_factory=list)
    fresh: FreshPages = field(default_factory=lambda: FreshPages())

    def bucket(self, host: str) -> HostBucket:
        b = self.hosts.get(host)
        if b is None:
            b = self.hosts[host] = HostBucket()
        return b

    def summary(self) -> dict[str, Any]:
        return {
            "pages": len(self.pages),
            "in_flight": len(self.in_flight),
            "share_per_s": self.share_per_s,
            "weight": self.weight,
            "threshold": math.exp(self.log_threshold) if self.log_threshold is not None else None,
            "index_level": self.level,
            "emitted": self.emitted,
            "ready": self.ready,
        }


@dataclass(slots=True)
class _TickCtx:
    """One shard's per-tick host bookkeeping while the worker chooses its orders."""

    shard: Shard
    taken: dict[str, int]
    accepted: set[Hashable]
    room: Callable[[str], int]
    ok: Callable[[Hashable], bool]
    fresh: list[tuple[str, str, float]] = field(default_factory=list)

    def host_has_room(self, host: Hashable) -> bool:
        """The index's host pre-filter: can the host take one more order this tick?"""
        return self.room(str(host)) >= 1

    def release(self, url: str) -> None:
        """Give back the host room of a page that was eligible but not chosen."""
        if url in self.accepted:
            self.accepted.discard(url)
            entry = self.shard.pages.get(url)
            if entry is not None:
                self.taken[entry.host] = self.taken.get(entry.host, 0) - 1


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
    ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.send_order = send_order
        self.assignment = assignment
        self.clock = clock
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
        #: one credit, threshold and starved count for all local shards (one scheduler)
        self.credit = 0.0
        self.last_tick = 0.0
        self.share_total = 0.0
        self.log_threshold: float | None = None
        self.emitted = 0
        self.wanted = 0

    # -- events from the agents -------------------------------------------------------
    async def on_page(
        self, partition: int, host: str, url: str, value: str | None, *,
        in_flight_cleared: bool = False, estimator: str | Estimates | None = None,
    ) -> None:
        """A page's stored value changed (None: deleted); keep the shard's index in step."""
        shard = self.shards.get(partition)
        if shard is None:
            return
        if not shard.ready:
            shard.dirty.add((host, url))
            return
        if value is None:
            self._forget(shard, url)
            return
        entry = shard.pages.get(url)
        if estimator is None and entry is not None:
            estimator = entry.estimator
        flight = NOT_IN_FLIGHT if in_flight_cleared else KEEP
        self._apply(shard, host, url, PageState.decode(value), estimator, flight)

    def on_host(self, partition: int, host: str, rate: float, mif: int | None) -> None:
        shard = self.shards.get(partition)
        if shard is not None:
            b = shard.bucket(host)
            b.rate_per_s, b.max_in_flight = rate, mif

    async def refresh_control(self) -> None:
        self.control = Control.from_redis(await self.store.get_control(), self.settings)
        self.metrics.budget.set(self.control.budget_per_s)

    # -- shard state ----------------------------------------------------------------
    def _forget(self, shard: Shard, url: str) -> None:
        entry = shard.pages.pop(url, None)
        shard.fresh.remove(url)
        if url in shard.index:
            shard.index.remove(url)
        fl = shard.in_flight.pop(url, None)
        if fl is not None and entry is not None:
            shard.bucket(entry.host).in_flight -= 1

    def _apply(
        self, shard: Shard, host: str, url: str, state: PageState,
        estimator: str | Estimates | None, flight: Any,
    ) -> None:
        """Apply a page's state; ``flight``: KEEP (unchanged), NOT_IN_FLIGHT, or the
        ``(order_id, issued_at)`` stored in Redis (rebuild)."""
        now = self.clock()
        if isinstance(estimator, str):
            estimator = estimates_of(estimator)
        params = page_params(state, estimator, self.settings)
        entry = shard.pages.get(url)
        if entry is None:
            entry = shard.pages[url] = PageEntry(host, state.last_crawl_s, now, params)
        entry.last_crawl_s, entry.params, entry.estimator = state.last_crawl_s, params, estimator
        if self.control.max_interval_s > 0:
            base = state.last_crawl_s if state.crawled else entry.first_seen_s
            heapq.heappush(shard.floor, (base + self.control.max_interval_s, url,
                                         state.last_crawl_s))
            if len(shard.floor) > 3 * len(shard.pages) + 1024:
                self._compact_floor(shard)
        known = shard.in_flight.get(url)
        if flight is KEEP:
            flight = (known[0], known[1]) if known is not None else NOT_IN_FLIGHT
        if flight is NOT_IN_FLIGHT:
            if known is not None:
                del shard.in_flight[url]
                shard.bucket(host).in_flight -= 1
            if state.crawled:
                shard.fresh.remove(url)
                shard.index.upsert(url, origin=params.origin_s, alpha=params.alpha_per_s,
                                   beta=params.beta_s, gamma=params.gamma_per_s, mu=params.mu,
                                   host=host)
            else:
                if url in shard.index:
                    shard.index.remove(url)
                value = params.max_value()
                if value > 0.0:  # worthless pages are left to the floor
                    shard.fresh.add(url, host, value)
                else:
                    shard.fresh.remove(url)
            return
        self._set_flight(shard, url, host, flight)

    def _compact_floor(self, shard: Shard) -> None:
        keep = [e for e in shard.floor
                if e[1] in shard.pages and shard.pages[e[1]].last_crawl_s == e[2]]
        heapq.heapify(keep)
        shard.floor = keep

    async def _load(self, shard: Shard) -> None:
        """Rebuild a shard from Redis (its hosts set, then each host's pages)."""
        t0 = time.monotonic()
        while True:
            try:
                hosts = await self.store.shard_hosts(shard.partition)
                for i in range(0, len(hosts), 50):
                    for dump in await self.store.dump_hosts(hosts[i : i + 50]):
                        self._load_host(shard, dump.host, dump.pages, dump.in_flight,
                                        dump.estimators, dump.info)
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
                 len(shard.pages), len(shard.in_flight), time.monotonic() - t0)

    def _load_host(
        self, shard: Shard, host: str, pages: dict[str, PageState],
        in_flight: dict[str, tuple[str, float]], est: dict[str, str], info: HostInfo,
    ) -> None:
        b = shard.bucket(host)
        b.rate_per_s, b.max_in_flight = info.rate_per_s, info.max_in_flight
        if info.tokens is not None:
            b.tokens, b.ts = info.tokens, info.updated_s or 0.0
        for url, state in pages.items():
            self._apply(shard, host, url, state, est.get(url), in_flight.get(url, NOT_IN_FLIGHT))

    async def _reload(self, shard: Shard, host: str, urls: list[str]) -> None:
        """Re-read pages from Redis (the truth) and apply them, in flight or not."""
        got = await self.store.get_pages(host, urls)
        for url, (value, fl, est) in got.items():
            if value is None:
                self._forget(shard, url)
                continue
            flight: Any = NOT_IN_FLIGHT
            if fl:
                oid, _, at = fl.partition("|")
                flight = (oid, float(at or 0.0))
            self._apply(shard, host, url, PageState.decode(value), est, flight)

    def sync_assignment(self, partitions: set[int]) -> None:
        for p in list(self.shards):
            if p not in partitions:
                task = self._loaders.pop(p, None)
                if task is not None:
                    task.cancel()
                del self.shards[p]
                self.metrics.forget_shard(p)
                log.info("shard %d revoked", p)
        for p in sorted(partitions - set(self.shards)):
            shard = self.shards[p] = Shard(p)
            self._loaders[p] = asyncio.ensure_future(self._load(shard))
            log.info("shard %d assigned; loading", p)

    # -- budget ---------------------------------------------------------------------
    async def resplit(self, dt_s: float) -> None:
        now = self.clock()
        entries = await self.store.get_shards()
        live = {p: e for p, e in entries.items() if now - float(e.get("ts", 0)) < 3.0
                and p not in self.shards}
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
                "share_per_s": s.share_per_s, "pages": len(s.pages),
                "in_flight": len(s.in_flight), "ts": now, "worker": self.worker_id,
            }
            s.emitted = 0
        await self.store.put_shards(own)
        weights = {p: float(e.get("weight", 1.0)) for p, e in live.items()}
        weights.update({p: s.weight for p, s in self.shards.items()})
        shares = budget.split(self.control.budget_per_s, weights)
        for p, s in self.shards.items():
            s.share_per_s = shares.get(p, 0.0)
            self.metrics.shard_rate.labels(str(p)).set(s.share_per_s)
            thr = math.exp(s.log_threshold) if s.log_threshold is not None else 0.0
            self.metrics.shard_threshold.labels(str(p)).set(thr)
            self.metrics.shard_pages.labels(str(p)).set(len(s.pages))
            self.metrics.shard_in_flight.labels(str(p)).set(len(s.in_flight))
        self.global_shards = {**live, **own}

    def _best_value(self, now: float) -> float:
        best = 0.0
        for s in self.shards.values():
            if not s.ready:
                continue
            best = max(best, s.fresh.best_value())
            if len(s.index):
                top = s.index.best(now, k=1)
                if top:
                    best = max(best, top[0][1])
        return best

    # -- the loop -------------------------------------------------------------------
    async def run(self) -> None:
        tick = self.settings.tick_s
        while not self.stopping:
            try:
                await self.store.load_scripts()
                break
            except Exception as exc:
                log.warning("redis unavailable (%r); retrying", exc)
                await asyncio.sleep(0.5)
        next_tick = time.monotonic()
        last_ctl = last_split = last_assign = 0.0
        while not self.stopping:
            mono = time.monotonic()
            try:
                if self.assignment is not None and mono - last_assign >= 0.5:
                    last_assign = mono
                    self.sync_assignment(self.assignment())
                if mono - last_ctl >= 0.25:
                    last_ctl = mono
                    await self.refresh_control()
                if mono - last_split >= 0.5:
                    dt = mono - last_split if last_split else 0.5
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

    def _host_room(self, shard: Shard, now: float, taken: dict[str, int]
                   ) -> Callable[[str], int]:
        """Orders a host can still take this tick (tokens and max in flight), minus
        ``taken``; computed once per host per tick."""
        st = self.settings
        cache: dict[str, int] = {}

        def room(host: str) -> int:
            r = cache.get(host)
            if r is None:
                b = shard.bucket(host)
                r = int(b.available(now, st.default_host_crawls_per_s, st.host_burst))
                mif = (b.max_in_flight if b.max_in_flight is not None
                       else st.default_host_max_in_flight)
                if mif > 0:
                    r = min(r, mif - b.in_flight)
                cache[host] = r
            return r - taken.get(host, 0)

        return room

    def _host_ok(self, shard: Shard, room: Callable[[str], int], taken: dict[str, int],
                 accepted: set[Hashable]) -> Callable[[Hashable], bool]:
        pages = shard.pages

        def ok(url: Hashable) -> bool:
            if url in accepted:
                return True
            entry = pages.get(url)  # type: ignore[call-overload]
            if entry is None:
                return False
            host = entry.host
            if room(host) < 1:
                return False
            taken[host] = taken.get(host, 0) + 1
            accepted.add(url)
            return True

        return ok

    async def tick(self, shard: Shard) -> int:
        """One tick of one shard (tests and benchmarks); returns the orders sent."""
        return await self.tick_all([shard])

    async def tick_all(self, shards: list[Shard]) -> int:
        """One tick: choose the orders of every shard, issue them in one Redis pipeline."""
        now = self.clock()
        for shard in shards:
            await self._expire(shard, now)
        plans = self._choose(shards, now)
        if not plans:
            return 0
        return await self._issue(plans, now)

    def _choose(self, shards: list[Shard], now: float
                ) -> list[tuple[Shard, list[tuple[str, str, float]]]]:
        """The orders of one tick over all local shards, as one scheduler: one credit at
        the sum of their shares, floor-due pages first (earliest due first), then the
        highest crawl values among all the shards' eligible pages (one merged Algorithm 1;
        shares only split R across workers)."""
        mono = time.monotonic()
        dt = mono - self.last_tick if self.last_tick else 0.0
        self.last_tick = mono
        total = sum(s.share_per_s for s in shards)
        self.share_total = total
        if self.control.paused or total <= 0.0:
            self.credit = 0.0
            return []
        cap = max(1.0, total * self.settings.tick_s)
        self.credit = min(cap, self.credit + total * dt)
        n = int(self.credit)
        if n < 1:
            return []
        self.wanted += n
        ctx: list[_TickCtx] = []
        for shard in shards:
            taken: dict[str, int] = {}
            accepted: set[Hashable] = set()
            room = self._host_room(shard, now, taken)
            ctx.append(_TickCtx(shard, taken, accepted, room,
                                self._host_ok(shard, room, taken, accepted)))
        chosen: list[tuple[_TickCtx, str, str, float]] = []
        # floor-due pages of every shard, earliest due first
        if self.control.max_interval_s > 0:
            due: list[tuple[float, int, _TickCtx, tuple[float, str, float]]] = []
            for i, c in enumerate(ctx):
                shard = c.shard
                deferred = []
                got = 0
                while shard.floor and shard.floor[0][0] <= now and got < n:
                    entry = heapq.heappop(shard.floor)
                    _, url, last = entry
                    page = shard.pages.get(url)
                    if page is None or page.last_crawl_s != last or url in shard.in_flight:
                        continue
                    if c.ok(url):
                        due.append((entry[0], i, c, entry))
                        got += 1
                    else:
                        deferred.append(entry)
                for e in deferred:
                    heapq.heappush(shard.floor, e)
            due.sort(key=lambda d: (d[0], d[1]))
            for _, _, c, entry in due[:n]:
                chosen.append((c, entry[1], "floor", self._value(c.shard, entry[1], now)))
            for _, _, c, entry in due[n:]:
                c.release(entry[1])
                heapq.heappush(c.shard.floor, entry)
        want = n - len(chosen)
        if want > 0:
            # each shard's best candidates (descending), then one merge over all shards
            lists: list[list[tuple[float, int, str, bool, _TickCtx]]] = []
            for i, c in enumerate(ctx):
                shard = c.shard
                fresh: list[tuple[str, str, float]] = []
                if len(shard.fresh):
                    fresh = shard.fresh.take(want, c.room)
                    for url, host, _v in fresh:
                        c.taken[host] = c.taken.get(host, 0) + 1
                        c.accepted.add(url)
                    c.fresh = fresh
                crawled: list[tuple[Hashable, float]] = []
                if len(shard.index):
                    # hosts without room are filtered by host first: when every candidate
                    # above the index's level is on a full host, only pages of hosts with
                    # room are evaluated (no full scan)
                    best = shard.index.best(now, eligible=c.ok, k=want,
                                            eligible_host=c.host_has_room)
                    crawled = [(pid, v) for pid, v in best if v > 0.0]
                cand = [(-v, i, u, True, c) for u, _h, v in fresh]
                cand += [(-v, i, str(pid), False, c) for pid, v in crawled]
                cand.sort(key=lambda x: (x[0], x[1]))
                lists.append(cand[:want])
            used: set[tuple[int, str]] = set()
            for negv, i, url, _is_fresh, c in heapq.merge(
                    *lists, key=lambda x: (x[0], x[1])):
                if len(chosen) >= n:
                    break
                chosen.append((c, url, "greedy", -negv))
                used.add((i, url))
            for i, c in enumerate(ctx):
                for url, host, v in c.fresh:
                    if (i, url) not in used:
                        c.shard.fresh.add(url, host, v)
        by_shard: dict[int, tuple[Shard, list[tuple[str, str, float]]]] = {}
        for c, url, policy, value in chosen:
            by_shard.setdefault(c.shard.partition, (c.shard, []))[1].append((url, policy, value))
        for shard, _picks in by_shard.values():
            level = shard.index.threshold()
            shard.level = level if math.isfinite(level) else 0.0
        return list(by_shard.values())

    def _value(self, shard: Shard, url: str, now: float) -> float:
        if url in shard.index:
            return shard.index.value(url, now)
        entry = shard.pages.get(url)
        return entry.params.max_value() if entry is not None else 0.0

    async def _issue(
        self, plans: list[tuple[Shard, list[tuple[str, str, float]]]], now: float
    ) -> int:
        st = self.settings
        orders: list[tuple[Shard, dict[str, Any]]] = []
        pipe = self.store.redis.pipeline(transaction=False)
        for shard, picks in plans:
            for url, policy, value in picks:
                self._seq += 1
                oid = f"{self.worker_id}-{shard.partition}-{self._seq:x}"
                page = shard.pages[url]
                tau = max(0.0, now - page.params.origin_s)
                # the Order record's fields (streams/records.py), built as a plain dict
                order: dict[str, Any] = {
                    "order_id": oid, "url": url, "host": page.host,
                    "issued_at": round(now, 6), "crawl_value": float(value),
                    "threshold": shard.level, "tau_eff": tau, "policy": policy,
                }
                why = (f"{now:.3f} ordered {oid} ({policy}): value {value:.4g}"
                       f" {'>=' if value >= shard.level else '<'} threshold {shard.level:.4g},"
                       f" tau_eff {tau:.0f}s")
                await self.store.queue_issue(
                    pipe, url, page.host, order_id=oid, now_s=now,
                    default_rate=st.default_host_crawls_per_s,
                    default_mif=st.default_host_max_in_flight, burst=st.host_burst,
                    keep=st.decisions_per_page, decision=why,
                )
                orders.append((shard, order))
        results = await pipe.execute(raise_on_error=False)
        sent = 0
        for (shard, order), res in zip(orders, results, strict=True):
            if isinstance(res, Exception):
                if "NOSCRIPT" in str(res):
                    await self.store.load_scripts()
                else:
                    log.warning("issue failed: %r", res)
                continue
            code = _s(res[0])
            url, host = order["url"], order["host"]
            b = shard.bucket(host)
            if code == "ok":
                b.take(now, st.default_host_crawls_per_s, st.host_burst)
                self._set_flight(shard, url, host, (order["order_id"], now))
                await self.send_order(host.encode(), json.dumps(order).encode())
                self.metrics.order(shard.partition, order["policy"])
                if order["policy"] == "greedy" and order["crawl_value"] > 0:
                    self._observe_value(shard, order["crawl_value"], now)
                shard.emitted += 1
                self.emitted += 1
                self.credit -= 1
                sent += 1
            elif code == "no-token":
                b.tokens, b.ts = 0.0, now
            elif code == "in-flight":
                oid, _, at = _s(res[1]).partition("|")
                self._set_flight(shard, url, host, (oid, float(at or now)))
            elif code == "max-in-flight":
                b.in_flight = max(b.in_flight, b.max_in_flight or 0)
            elif code == "gone":
                self._forget(shard, url)
        return sent

    def _set_flight(self, shard: Shard, url: str, host: str, flight: tuple[str, float]) -> None:
        entry = shard.pages.get(url)
        if entry is None:
            return
        known = shard.in_flight.get(url)
        if known is None:
            shard.bucket(host).in_flight += 1
        if known is None or known[0] != flight[0]:
            heapq.heappush(shard.timeouts,
                           (flight[1] + self.control.order_timeout_s, url, flight[0]))
        shard.in_flight[url] = flight
        shard.fresh.remove(url)
        if url in shard.index:
            shard.index.remove(url)

    def _observe_value(self, shard: Shard, value: float, now: float) -> None:
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
        pipe = self.store.redis.pipeline(transaction=False)
        for url, oid in due:
            await self.store.queue_expire(
                pipe, url, shard.pages[url].host, order_id=oid,
                keep=self.settings.decisions_per_page,
                decision=f"{now:.3f} order {oid} timed out: no outcome within "
                         f"{self.control.order_timeout_s:g}s; eligible again",
            )
        await pipe.execute(raise_on_error=False)
        by_host: dict[str, list[str]] = {}
        for url, _ in due:
            self.metrics.order_timeouts.inc()
            self.metrics.tally["orders.timed_out"] += 1
            by_host.setdefault(shard.pages[url].host, []).append(url)
        for host, urls in by_host.items():
            await self._reload(shard, host, urls)

    # -- views -----------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        return {
            "worker": self.worker_id,
            "budget_per_s": self.control.budget_per_s,
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
            "counters": dict(sorted(self.metrics.tally.items())),
        }


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)


async def cancel(task: asyncio.Task[Any] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
