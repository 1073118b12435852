"""A shard's rebuild from Redis and the pages' updates: what the scheduler does when a
partition is assigned and when the agents change a page (:class:`ShardLoader`, a part
:class:`streams.scheduler.Scheduler` owns)."""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
from redis.exceptions import RedisError

from models.decision.table import PageTable
from streams.estimates.estimation import Estimates, estimates_of
from streams.estimates.params import (
    PageParams,
    ParamsMany,
    page_origin,
    page_params,
    page_params_many,
)
from streams.scheduler.placing import place_page
from streams.scheduler.shard import KEEP, NOT_IN_FLIGHT, Shard
from streams.scheduler.state import SchedulerState
from streams.store.page_record import PAGE_VERSION, PageState, page_length, record_bytes
from streams.store.protocol import HostDump
from streams.telemetry.metrics import GC_PAUSES

__all__ = ["LOAD_HOSTS", "LOAD_PAGES", "LOAD_WAIT_S", "MAX_LOAD_HOSTS", "PageUpdate",
           "ShardLoader"]

log = logging.getLogger(__name__)

#: hosts of a rebuild's first read from Redis (one pipeline); the next reads take as many
#: hosts as make about LOAD_PAGES pages at the pages per host seen so far, between
#: LOAD_HOSTS and MAX_LOAD_HOSTS (10 pages a host: 50 hosts would be 500 pages a read,
#: and every read lets the event loop run the agents' batches in between)
LOAD_HOSTS = 50
LOAD_PAGES = 5_000
MAX_LOAD_HOSTS = 2_000
#: the longest the agents wait for a loading shard before applying its events
#: (:meth:`streams.scheduler.Scheduler.wait_loaded`)
LOAD_WAIT_S = 10.0

#: one page's change for :meth:`ShardLoader.on_pages`: partition, host, url, its stored
#: value (None: deleted), whether its order in flight ended, its estimator record when the
#: event changed it (None: unchanged)
PageUpdate = tuple[int, str, str, "str | None", bool, "str | Estimates | None"]
_PAGE_VERSION = bytes([PAGE_VERSION])


class ShardLoader:
    """A shard's rebuild from Redis and its pages' updates: the part of the scheduler that
    writes the books (the shards of ``state``)."""

    def __init__(self, state: SchedulerState, *, manage_gc: bool = False) -> None:
        self.state = state
        #: refreeze the garbage collector once no shard is loading (the worker; not tests)
        self.manage_gc = manage_gc

    def on_blocked(self, partition: int, host: str, url: str,
                   epoch: int | None = None) -> None:
        """The host's robots.txt disallows ``url``: out of the book until it changes.
        ``epoch``: :meth:`Scheduler.robots_epoch` when the outcome was written; if a change was
        applied since (the hosts agent ran in between), Redis's blocked set was emptied
        after this page entered it, so the page stays a candidate (were it blocked again
        under the new robots.txt, the issue script refuses it: ``blocked``)."""
        shard = self.state.shards.get(partition)
        if shard is None or (epoch is not None and shard.robots_epoch.get(host, 0) != epoch):
            return
        shard.blocked.setdefault(host, set()).add(url)
        self.forget(shard, url)

    def forget(self, shard: Shard, url: str) -> None:
        shard.book.remove_page(url)

    def on_pages(self, updates: Sequence[PageUpdate]) -> None:
        """:meth:`streams.scheduler.Scheduler.on_page` of a batch's pages, in their order
        (a page updated twice ends as its last update, an order ended by any of them ended):
        the pages' parameters computed on arrays from their stored values
        (:func:`streams.estimates.params.page_params_many`, as a rebuild) and put in the book
        at once (:meth:`models.decision.core.ShardBook.set_pages`).  A page whose parameters
        do not all come from its stored value goes through :meth:`apply` as one: an
        estimator given as :class:`Estimates`, or other than the one stored in the value,
        or none given for a page the book holds as estimated whose value has no record
        (the book's parameters are kept).  (A page whose value holds a record the book has
        not seen takes it, as a rebuild would; ``on_page`` would keep the prior, which the
        book only holds for such a page if it missed an update.)  A value that does not
        parse, or whose parameters are not usable, leaves the page out of the book, counted
        (``pages.unusable``), as in a rebuild (``on_page`` raises).
        ``tests/unit/test_scheduler_bulk.py`` checks it against ``on_page`` one update at a
        time."""
        todo: dict[int, dict[str, tuple[str, str, bool, str | Estimates | None]]] = {}
        for partition, host, url, value, cleared, est in updates:
            shard = self.state.shards.get(partition)
            if shard is None:
                continue
            if not shard.ready:
                shard.dirty.add((host, url))
                continue
            mine = todo.setdefault(partition, {})
            if value is None:
                mine.pop(url, None)
                self.forget(shard, url)
                continue
            prev = mine.get(url)  # a page updated again keeps its place (its tie rank)
            if url in shard.blocked.get(host, ()):
                continue
            if prev is not None:  # the earlier update's order end and estimates stand
                cleared = cleared or prev[2]
                est = prev[3] if est is None else est
            mine[url] = (host, value, cleared, est)
        for partition, mine in todo.items():
            if mine:
                self._apply_many(self.state.shards[partition], mine)

    def _apply_many(self, shard: Shard,
                    pages: dict[str, tuple[str, str, bool, str | Estimates | None]]) -> None:
        """:meth:`on_pages` of one shard's pages (each once)."""
        t = shard.table
        urls: list[str] = []
        hosts: list[str] = []
        raws: list[bytes] = []
        one: list[tuple[str, str, str, bool, str | Estimates | None]] = []
        for url, (host, value, cleared, est) in pages.items():
            raw = record_bytes(value)
            size = page_length(raw)
            inner = raw[:1] == _PAGE_VERSION and len(raw) > size
            slot = t.get(url)
            estimated = slot is not None and bool(t.estimated[slot])
            if (not isinstance(est, str | None)
                    or (inner and est is not None and record_bytes(est) != raw[size:])
                    or (not inner and (est is not None or estimated))):
                one.append((host, url, value, cleared, est))
                continue
            urls.append(url)
            hosts.append(host)
            raws.append(raw)
        if urls:
            many = page_params_many(raws, self.state.settings)
            if many is None:  # some value does not parse: all of them one by one
                one += [(h, u, *pages[u][1:]) for u, h in zip(urls, hosts, strict=True)]
            else:
                self._set_many(shard, urls, hosts, many, one, pages)
        for host, url, value, cleared, est in one:
            try:
                state = PageState.decode(value)
            except ValueError as exc:
                self.state.metrics.tally["pages.unusable"] += 1
                log.warning("page %s left out of shard %d: unreadable %r (%s)", url,
                            shard.partition, value[:200], exc)
                self.forget(shard, url)
                continue
            self.apply_or_skip(shard, host, url, state, est,
                                NOT_IN_FLIGHT if cleared else KEEP)

    def _set_many(self, shard: Shard, urls: list[str], hosts: list[str], many: ParamsMany,
                  one: list[tuple[str, str, str, bool, str | Estimates | None]],
                  pages: dict[str, tuple[str, str, bool, str | Estimates | None]]) -> None:
        """The pages whose parameters are usable (as :meth:`apply` checks) into the book
        at once; the others to ``one``."""
        with np.errstate(invalid="ignore"):
            ok = (np.isfinite(many.alpha) & np.isfinite(many.gamma)
                  & np.isfinite(many.importance) & np.isfinite(many.max_value)
                  & ~np.isnan(many.origin) & ~np.isnan(many.beta)
                  & (many.last_crawl_s <= self._latest_crawl_s()))
        for i in np.flatnonzero(~ok).tolist():
            host, value, cleared, est = pages[urls[i]]
            one.append((host, urls[i], value, cleared, est))
        rows = np.flatnonzero(ok)
        if not rows.size:
            return
        every = rows.size == len(urls)
        picked = rows.tolist()
        page_urls = urls if every else [urls[i] for i in picked]
        page_hosts = hosts if every else [hosts[i] for i in picked]
        book, t = shard.book, shard.table
        for u in page_urls:
            if pages[u][2]:
                book.end_flight(u)
        now = self.state.clock()
        floor_due = None
        if self.state.control.max_interval_s > 0:
            get = t.get
            first_seen = np.fromiter(
                (now if (s := get(u)) is None else t.first_seen[s] for u in page_urls),
                dtype=np.float64, count=len(page_urls))
            floor_due = np.where(many.crawled[rows], many.last_crawl_s[rows],
                                 first_seen) + self.state.control.max_interval_s
        else:
            for u in page_urls:
                book.floor.discard(u)
        book.set_pages(
            page_urls, page_hosts, crawled=many.crawled[rows], origin=many.origin[rows],
            alpha=many.alpha[rows], beta=many.beta[rows], gamma=many.gamma[rows],
            mu=many.importance[rows], max_value=many.max_value[rows], first_seen_s=now,
            last_crawl_s=many.last_crawl_s[rows], delta=many.delta[rows],
            estimated=many.estimated[rows], src_beta=many.src_beta[rows],
            floor_due_s=floor_due)

    def _latest_crawl_s(self, now: float | None = None) -> float:
        """The latest last crawl a stored page may have: the outcomes' bound (an outcome's
        ``fetched_at`` at most ``max_future_s`` ahead of the clock: ``OutcomeEvent``).  A
        page stored with a later one (written before that bound, or by a worker whose
        clock ran far ahead) would be loaded and never ordered: it is left out instead,
        counted (``pages.unusable``, ``pages.future-crawl``) and logged."""
        return (self.state.clock() if now is None else now) + self.state.settings.max_future_s

    def apply(
        self, shard: Shard, host: str, url: str, state: PageState,
        estimator: str | Estimates | None, flight: Any,
    ) -> None:
        """Apply a page's state; ``flight``: KEEP (unchanged), NOT_IN_FLIGHT, or the
        ``(order_id, issued_at)`` stored in Redis (rebuild)."""
        now = self.state.clock()
        if not state.last_crawl_s <= self._latest_crawl_s(now):  # (also NaN)
            self.state.metrics.tally["pages.future-crawl"] += 1
            raise ValueError(
                f"last crawl {state.last_crawl_s!r} is more than max_future_s="
                f"{self.state.settings.max_future_s:g}s after this worker's clock ({now:.3f}): "
                "it would never be due (an outcome cannot set it; delete the page and add "
                "it again)")
        if isinstance(estimator, str):
            estimator = estimates_of(estimator)
        t = shard.table
        slot = t.get(url)
        if estimator is None and slot is not None and t.estimated[slot]:
            # the page's estimate did not change (a ping, a catalogue update): its
            # parameters are the table's, with the origin from the new signal counts
            params = _cached_params(t, slot, state)
        else:
            params = page_params(state, estimator, self.state.settings)
        place_page(shard.book, url, host, state, params,
                   max_interval_s=self.state.control.max_interval_s, now_s=now,
                   end_flight=flight is NOT_IN_FLIGHT)
        if flight is not KEEP and flight is not NOT_IN_FLIGHT:
            self.set_flight(shard, url, host, flight)

    async def _load_all(self, shard: Shard, hosts: list[str]) -> None:
        """Every host's pages, about ``LOAD_PAGES`` pages a read (module constants).
        (Reading the next hosts while this one's pages go in the book was slower: 6.0 s
        against 5.3-5.7 s per 10^6 pages with ``benchmarks/bench_rebuild.py``; the reads'
        cost is parsing in this process.)"""
        i, step = 0, LOAD_HOSTS
        while i < len(hosts):
            chunk = hosts[i : i + step]
            i += len(chunk)
            dumps = await self.state.store.dump_hosts(chunk)
            for dump in dumps:
                if dump.blocked:
                    shard.blocked[dump.host] = set(dump.blocked)
            self._load_hosts(shard, dumps)
            per_host = max(1.0, sum(len(d.pages) for d in dumps) / len(chunk))
            step = int(min(MAX_LOAD_HOSTS, max(LOAD_HOSTS, LOAD_PAGES / per_host)))
            await asyncio.sleep(0)
        heapq.heapify(shard.timeouts)  # extended unsorted meanwhile (_restore_flights)

    async def load(self, shard: Shard) -> None:
        """Rebuild a shard from Redis (its hosts set, then each host's pages)."""
        t0 = time.monotonic()
        while True:
            try:
                hosts = await self.state.store.shard_hosts(shard.partition)
                await self._load_all(shard, hosts)
                while shard.dirty:
                    batch = list(shard.dirty)
                    shard.dirty.clear()
                    by_host: dict[str, list[str]] = {}
                    for h, u in batch:
                        by_host.setdefault(h, []).append(u)
                    for h, urls in by_host.items():
                        await self.reload(shard, h, urls)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.state.metrics.retry("redis")
                if isinstance(exc, ConnectionError | TimeoutError | RedisError):
                    self.state.outage.failed(exc, f"loading shard {shard.partition}")
                else:
                    log.warning("loading shard %d failed (%r); retrying", shard.partition, exc)
                await asyncio.sleep(0.5)
        shard.ready = True
        log.info("shard %d ready: %d pages, %d in flight (%.2fs)", shard.partition,
                 len(shard.book), len(shard.in_flight), time.monotonic() - t0)
        if self.manage_gc and all(s.ready for s in self.state.shards.values()):
            # the books as loaded out of the collector's walks (GcPauses), once all are in
            log.info("garbage collector refrozen after the loads (%.2fs)", GC_PAUSES.refreeze())

    def _load_hosts(self, shard: Shard, dumps: list[HostDump]) -> None:
        """Some hosts of a shard's rebuild: their pages' parameters computed on arrays
        (:func:`streams.estimates.params.page_params_many`, equal to :meth:`apply` page by page)
        and put in the book at once; a page whose stored text does not parse or whose
        parameters are not usable goes page by page (counted ``pages.unusable``)."""
        urls: list[str] = []
        hosts: list[str] = []
        values: list[str | bytes] = []
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
        if not urls:
            return
        many = page_params_many(values, self.state.settings)
        if many is None:
            bulk = np.zeros(len(urls), dtype=bool)
        else:
            with np.errstate(invalid="ignore"):
                bulk = (np.isfinite(many.alpha) & np.isfinite(many.gamma)
                        & np.isfinite(many.importance) & np.isfinite(many.max_value)
                        & ~np.isnan(many.origin) & ~np.isnan(many.beta)
                        & (many.last_crawl_s <= self._latest_crawl_s()))
        rows = np.flatnonzero(bulk)
        if many is not None and rows.size:
            now = self.state.clock()
            floor_due = None
            if self.state.control.max_interval_s > 0:
                base = np.where(many.crawled, many.last_crawl_s, now)
                floor_due = base[rows] + self.state.control.max_interval_s
            picked = rows.tolist()
            page_urls, page_hosts = [urls[i] for i in picked], [hosts[i] for i in picked]
            self._restore_flights(shard, dumps, page_urls, page_hosts, floor_due)
            shard.book.set_pages(
                page_urls, page_hosts,
                crawled=many.crawled[rows], origin=many.origin[rows], alpha=many.alpha[rows],
                beta=many.beta[rows], gamma=many.gamma[rows], mu=many.importance[rows],
                max_value=many.max_value[rows], first_seen_s=now,
                last_crawl_s=many.last_crawl_s[rows], delta=many.delta[rows],
                estimated=many.estimated[rows], src_beta=many.src_beta[rows],
                floor_due_s=floor_due)
        by_host = {d.host: d for d in dumps}
        for i in np.flatnonzero(~bulk).tolist():
            url, dump = urls[i], by_host[hosts[i]]
            try:
                state = PageState.decode(values[i])
            except ValueError as exc:
                self.state.metrics.tally["pages.unusable"] += 1
                log.warning("page %s left out of shard %d: unreadable %r (%s)", url,
                            shard.partition, values[i][:200], exc)
                continue
            self.apply_or_skip(shard, dump.host, url, state, dump.estimator(url),
                                dump.in_flight.get(url, NOT_IN_FLIGHT))

    def apply_or_skip(self, shard: Shard, host: str, url: str, state: PageState,
                       estimator: str | Estimates | None, flight: Any) -> bool:
        """:meth:`apply`, but a page whose stored state gives no finite parameters (only
        possible for data written before the schema's bounds) is left out of the book and
        counted (``pages.unusable``) instead of failing its whole shard's rebuild."""
        try:
            self.apply(shard, host, url, state, estimator, flight)
            return True
        except (ValueError, ArithmeticError) as exc:
            self.state.metrics.tally["pages.unusable"] += 1
            log.warning("page %s left out of shard %d: %s", url, shard.partition, exc)
            self.forget(shard, url)
            return False

    async def reload(self, shard: Shard, host: str, urls: list[str]) -> None:
        """Re-read pages from Redis (the truth) and apply them, in flight or not."""
        got = await self.state.store.get_pages(host, urls)
        # Redis's blocked set is the truth (a robots.txt change may have emptied it while
        # the shard was loading)
        blocked = await self.state.store.blocked_among(host, urls)
        mine = shard.blocked.setdefault(host, set())
        mine.difference_update(set(urls) - blocked)
        mine.update(blocked)
        if not mine:
            del shard.blocked[host]
        for url, (value, fl, est) in got.items():
            if value is None or url in blocked:
                self.forget(shard, url)
                continue
            flight: Any = NOT_IN_FLIGHT
            if fl:
                oid, _, at = fl.partition("|")
                flight = (oid, float(at or 0.0))
            self.apply_or_skip(shard, host, url, PageState.decode(value), est, flight)

    def _restore_flights(self, shard: Shard, dumps: list[HostDump], urls: list[str],
                         hosts: list[str], floor_due: np.ndarray | None) -> None:
        """The orders in flight among a rebuild's pages, recorded before the pages go in the
        book (:meth:`ShardBook.restore_flights`; no floor due time for them, as
        :meth:`set_flight` would discard it), with their order time-outs."""
        flying = {d.host: d.in_flight for d in dumps if d.in_flight}
        if not flying:
            return
        rows: list[int] = []
        flights: list[tuple[str, float]] = []
        for k, (url, host) in enumerate(zip(urls, hosts, strict=True)):
            f = flying.get(host)
            flight = f.get(url) if f is not None else None
            if flight is not None:
                rows.append(k)
                flights.append(flight)
        if not rows:
            return
        fl_urls = [urls[k] for k in rows]
        known = [shard.in_flight.get(u) for u in fl_urls]
        shard.book.restore_flights(fl_urls, [hosts[k] for k in rows], flights)
        timeout = self.state.control.order_timeout_s
        new = [(flight[1] + timeout, url, flight[0])
               for url, flight, was in zip(fl_urls, flights, known, strict=True)
               if was is None or was[0] != flight[0]]
        # made a heap once, at the end of the load (:meth:`_load_all`): heapifying the
        # growing list after every read was quadratic (a sixth of a rebuild's time with
        # 2x10^5 orders in flight, their time-outs tied by tick)
        shard.timeouts.extend(new)
        if floor_due is not None:
            floor_due[rows] = np.inf

    def set_flight(self, shard: Shard, url: str, host: str, flight: tuple[str, float]) -> None:
        if url not in shard.book:
            return
        known = shard.in_flight.get(url)
        shard.book.start_flight(url, flight)
        if known is None or known[0] != flight[0]:
            heapq.heappush(shard.timeouts,
                           (flight[1] + self.state.control.order_timeout_s, url, flight[0]))


def _cached_params(t: PageTable, slot: int, state: PageState) -> PageParams:
    """:func:`streams.estimates.params.page_params` of a page whose estimate is unchanged, from the
    table: ``mu`` is the importance, the origin from the new signal counts and the table's
    betas (:func:`streams.estimates.params.page_origin`)."""
    src_beta = t.src_beta[slot]
    origin = float(page_origin(state.last_crawl_s, src_beta, state.signals))
    return PageParams(float(t.alpha[slot]), float(t.beta[slot]), float(t.gamma[slot]),
                      state.importance, float(t.delta[slot]), tuple(src_beta.tolist()), origin,
                      True)
