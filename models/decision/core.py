"""The decision core: one shard's book of pages and the merged pick over shards.

A :class:`ShardBook` holds what the scheduler decides with for one shard (a set of
hosts): crawled pages in an index (:class:`BookIndex`; the service's is a host x page index,
:class:`~models.decision.hostindex.HostIndex`: exact greedy top of ``V(tau_eff)`` under the
hosts' room, hosts without room parked; the simulator's, with few hosts and dense re-keys, is
:class:`models.index.CrawlIndex`),
never-crawled pages (:class:`~models.decision.fresh.FreshPages`), the longest-interval
floor (:class:`~models.decision.floor.FloorQueue`), the hosts' token buckets
(:class:`~models.decision.hosts.HostBuckets`) and the pages with an order in flight
(out of the index until the order ends).

:func:`choose` picks one tick's ``n`` orders over several books as ONE scheduler
(Algorithm 1 of paper 004 over all their pages; Sec. 5.2's shares only split ``R``
between workers): first floor-due pages (earliest due first), then the highest crawl
values among pages whose host has room, never more orders for a host than its room.
The pick is exactly the greedy over all candidates in that order with per-host caps
(tested against brute force): each source (floor, fresh pages, host index) returns its
own greedy top ``n`` under the caps, and merging those lists with shared caps gives the
union's greedy (a candidate missing from its source's list has ``n`` taken candidates
above it).  The floor's picks are left out of the other two sources: there they would
hold their host's room (a page below them on the same host was then missed).

Pure: time comes in as ``now_s``; nothing here reads a clock or does I/O.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from models.decision.floor import FloorQueue
from models.decision.fresh import FreshPages
from models.decision.hostindex import HostIndex
from models.decision.hosts import HostBuckets
from models.decision.table import PageTable

__all__ = ["BookIndex", "Pick", "ShardBook", "choose"]


class BookIndex(Protocol):
    """What a :class:`ShardBook` and :func:`choose` need of the index of crawled pages:
    :class:`~models.decision.hostindex.HostIndex` (many hosts, the service's) or
    :class:`models.index.CrawlIndex` (few hosts and dense re-keys, the simulator's).  The
    pick rule is :func:`choose`'s whatever the index; the index is a data structure
    choice.  ``best_capped``: the greedy top ``k`` of positive values under ``room(host)``
    (ties by insertion rank); ``best``: the top ``k`` whatever the room."""

    def __len__(self) -> int: ...

    def __contains__(self, page_id: object) -> bool: ...

    def upsert(self, page_id: Hashable, *, origin: float, alpha: float, beta: float,
               gamma: float, mu: float, host: Hashable | None = None) -> None: ...

    def set_origin(self, page_id: Hashable, origin: float) -> None: ...

    def remove(self, page_id: Hashable) -> None: ...

    def forget(self, page_id: Hashable) -> None: ...

    def value(self, page_id: Hashable, now: float) -> float: ...

    def threshold(self) -> float: ...

    def unpark(self, host: Hashable) -> None: ...

    def best(self, now: float, *, eligible: Callable[[Hashable], bool] | None = None,
             eligible_host: Callable[[Hashable], bool] | None = None,
             k: int = 1) -> list[tuple[Hashable, float]]: ...

    def best_capped(self, now: float, k: int, room: Callable[[Hashable], int], *,
                    park: Callable[[Hashable], None] | None = None,
                    eligible: Callable[[Hashable], bool] | None = None
                    ) -> list[tuple[Hashable, float]]: ...


class Pick(NamedTuple):
    """One order of a tick (a tuple: a tick of the simulator's batched steps makes 5000)."""

    book: ShardBook
    page: Hashable
    host: Hashable
    policy: str  # "floor" or "greedy"
    value: float


@dataclass(eq=False)
class ShardBook:
    """One shard's pages, hosts and orders in flight (module docstring)."""

    hosts: HostBuckets
    key: Hashable = None
    #: crawled pages (:class:`BookIndex`); the service's host index by default
    index: BookIndex = field(default_factory=HostIndex)
    fresh: FreshPages = field(default_factory=FreshPages)
    floor: FloorQueue = field(default_factory=FloorQueue)
    #: per-page state as arrays (host, parameters, crawl times)
    table: PageTable = field(default_factory=PageTable)
    #: page -> (order id, issued at): out of the index and fresh pages until it ends
    in_flight: dict[Hashable, tuple[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # the floor's due times live by the table's slots (models/decision/floor.py)
        if not self.floor.uses(self.table):
            self.floor.bind(self.table)
        # the host index keeps its pages by the table's slots, with the table's parameter
        # columns (models/decision/hostindex.py ``bind``); other indexes keep their own
        if isinstance(self.index, HostIndex) and not self.index.uses(self.table):
            self.index.bind(self.table)

    def __len__(self) -> int:
        return len(self.table)

    def __contains__(self, page: object) -> bool:
        return page in self.table

    def host_of(self, page: Hashable) -> Hashable | None:
        return self.table.host_of(page)

    # -- pages ---------------------------------------------------------------------------
    def set_page(self, page: Hashable, host: Hashable, *, crawled: bool, origin: float,
                 alpha: float, beta: float, gamma: float, mu: float, max_value: float,
                 floor_due_s: float | None = None, first_seen_s: float = 0.0,
                 last_crawl_s: float = 0.0, delta: float = 0.0, estimated: bool = False,
                 src_beta: Sequence[float] | None = None) -> int:
        """A page's parameters (crawl value of paper 004 Thm. 1 at ``tau_eff = t -
        origin``); ``floor_due_s``: when the floor orders it (None: no floor).  The other
        keywords are kept in the table for the caller.  Returns the page's slot."""
        t = self.table
        s = t.add(page, host, first_seen_s)
        t.crawled[s] = crawled
        t.origin[s], t.alpha[s], t.beta[s], t.gamma[s], t.mu[s] = origin, alpha, beta, gamma, mu
        t.max_value[s], t.last_crawl[s], t.delta[s] = max_value, last_crawl_s, delta
        t.estimated[s] = estimated
        if src_beta is not None:
            t.src_beta[s] = src_beta
        if floor_due_s is None:
            self.floor.discard(page)
        else:
            self.floor.set(page, floor_due_s)
        if page not in self.in_flight:  # else: enters the index when its order ends
            self._place(page, host, crawled=crawled, origin=origin, alpha=alpha, beta=beta,
                        gamma=gamma, mu=mu, max_value=max_value)
        return s

    def set_pages(self, pages: Sequence[Hashable], hosts: Sequence[Hashable], *,
                  crawled: npt.ArrayLike, origin: npt.ArrayLike, alpha: npt.ArrayLike,
                  beta: npt.ArrayLike, gamma: npt.ArrayLike, mu: npt.ArrayLike,
                  max_value: npt.ArrayLike, first_seen_s: float,
                  last_crawl_s: npt.ArrayLike, delta: npt.ArrayLike,
                  estimated: npt.ArrayLike, src_beta: npt.ArrayLike,
                  floor_due_s: npt.ArrayLike | None = None) -> None:
        """:meth:`set_page` of many pages at once, arrays in (a shard's rebuild); pages in
        flight stay out of the index and fresh pages as in :meth:`set_page`."""
        t = self.table
        had_pages = len(t) > 0
        slots = t.add_many(pages, hosts, first_seen_s)
        cr = np.asarray(crawled, dtype=bool)
        t.crawled[slots] = cr
        t.origin[slots] = origin
        t.alpha[slots] = alpha
        t.beta[slots] = beta
        t.gamma[slots] = gamma
        t.mu[slots] = mu
        mv = np.asarray(max_value, dtype=np.float64)
        t.max_value[slots] = mv
        t.last_crawl[slots] = last_crawl_s
        t.delta[slots] = delta
        t.estimated[slots] = estimated
        t.src_beta[slots] = src_beta
        if floor_due_s is not None:
            self.floor.set_slots(slots, floor_due_s)
        if self.in_flight.keys().isdisjoint(pages):
            free = np.ones(len(pages), dtype=bool)
        else:
            free = np.fromiter((p not in self.in_flight for p in pages), dtype=bool,
                               count=len(pages))
        idx = np.flatnonzero(free & cr)
        upsert_many = getattr(self.index, "upsert_many", None)
        if upsert_many is not None and idx.size:
            sl = slots[idx]
            every = idx.size == len(pages)
            uses = getattr(self.index, "uses", None)  # a bound index takes the slots
            more = {"slots": sl} if uses is not None and uses(self.table) else {}
            upsert_many(pages if every else [pages[i] for i in idx.tolist()],
                        hosts if every else [hosts[i] for i in idx.tolist()],
                        t.origin[sl], t.alpha[sl], t.beta[sl], t.gamma[sl], t.mu[sl], **more)
        else:
            for i in idx.tolist():
                j = int(slots[i])
                self.index.upsert(pages[i], origin=float(t.origin[j]),
                                  alpha=float(t.alpha[j]), beta=float(t.beta[j]),
                                  gamma=float(t.gamma[j]), mu=float(t.mu[j]), host=hosts[i])
        if had_pages:  # pages known before may change side, as in _place
            for i in idx.tolist():
                self.fresh.remove(pages[i])
        rest = np.flatnonzero(free & ~cr)
        if had_pages:  # pages known before may change side, as in _place
            for i in rest.tolist():
                if pages[i] in self.index:
                    self.index.remove(pages[i])
                if not mv[i] > 0.0:  # worthless pages are left to the floor
                    self.fresh.remove(pages[i])
        add = rest[mv[rest] > 0.0].tolist()
        self.fresh.add_many([pages[i] for i in add], [hosts[i] for i in add], mv[add].tolist())

    def _place(self, page: Hashable, host: Hashable, *, crawled: bool, origin: float,
               alpha: float, beta: float, gamma: float, mu: float, max_value: float) -> None:
        if crawled:
            self.fresh.remove(page)
            self.index.upsert(page, origin=origin, alpha=alpha, beta=beta, gamma=gamma,
                              mu=mu, host=host)
        else:
            if page in self.index:
                self.index.remove(page)
            if max_value > 0.0:  # worthless pages are left to the floor
                self.fresh.add(page, host, max_value)
            else:
                self.fresh.remove(page)

    def remove_page(self, page: Hashable) -> None:
        host = self.table.host_of(page)
        self.floor.discard(page)  # by its slot: before the table frees it
        self.index.forget(page)  # the same (a bound host index)
        self.table.remove(page)
        self.fresh.remove(page)
        if self.in_flight.pop(page, None) is not None and host is not None:
            self.hosts.add_in_flight(host, -1)

    def start_flight(self, page: Hashable, flight: tuple[str, float]) -> bool:
        """An order of the page is out (``(order id, issued at)``); True if it was not
        in flight before.  The page leaves the index, fresh pages and floor."""
        host = self.table.host_of(page)
        if host is None:
            return False
        new = page not in self.in_flight
        if new:
            self.hosts.add_in_flight(host, +1)
        self.in_flight[page] = flight
        self.fresh.remove(page)
        self.floor.discard(page)
        if page in self.index:
            self.index.remove(page)
        return new

    def restore_flights(self, pages: Sequence[Hashable], hosts: Sequence[Hashable],
                        flights: Sequence[tuple[str, float]]) -> None:
        """Orders in flight of pages about to be set by :meth:`set_pages` (a rebuild):
        recorded first, so that :meth:`set_pages` keeps the pages out of the index and the
        fresh pages instead of putting them in and :meth:`start_flight` taking them out
        again page by page.  The same book as :meth:`start_flight` after :meth:`set_pages`
        when the caller gives these pages no floor due time (``inf``).  A page already in
        the book goes through :meth:`start_flight`."""
        counts: dict[Hashable, int] = {}
        for page, host, flight in zip(pages, hosts, flights, strict=True):
            if page in self.table:
                self.start_flight(page, flight)
                continue
            if page not in self.in_flight:
                counts[host] = counts.get(host, 0) + 1
            self.in_flight[page] = flight
        for host, n in counts.items():
            self.hosts.add_in_flight(host, n)

    def end_flight(self, page: Hashable) -> None:
        """The page's order ended; the caller then sets the page (``set_page``)."""
        if self.in_flight.pop(page, None) is not None:
            host = self.table.host_of(page)
            if host is not None:
                self.hosts.add_in_flight(host, -1)

    def value(self, page: Hashable, now_s: float) -> float:
        if page in self.index:
            return self.index.value(page, now_s)
        s = self.table.get(page)
        return float(self.table.max_value[s]) if s is not None else 0.0

    def best_value(self, now_s: float) -> float:
        """The highest value of any page, whatever its host's room (0 when empty)."""
        best = self.fresh.best_value()
        if len(self.index):
            top = self.index.best(now_s, k=1)
            if top:
                best = max(best, top[0][1])
        return best


class _Caps:
    """One book's host room during a tick: the room at the tick's start (computed once
    per host), minus what this tick has taken."""

    __slots__ = ("base", "book", "now_s", "taken")

    def __init__(self, book: ShardBook, now_s: float) -> None:
        self.book = book
        self.now_s = now_s
        self.base: dict[Hashable, int] = {}
        self.taken: dict[Hashable, int] = {}

    def base_room(self, host: Hashable) -> int:
        r = self.base.get(host)
        if r is None:
            r = self.base[host] = self.book.hosts.room(host, self.now_s)
        return r

    def room(self, host: Hashable) -> int:
        return self.base_room(host) - self.taken.get(host, 0)

    def take(self, host: Hashable) -> None:
        self.taken[host] = self.taken.get(host, 0) + 1


def _index_best(book: ShardBook, caps: _Caps, now_s: float, k: int,
                exclude: set[Hashable]) -> list[tuple[Hashable, Hashable, float]]:
    """The index's greedy top ``k`` under the hosts' room at the query's start (no side
    effect on ``caps``), pages in ``exclude`` (the floor's picks) left out so that they
    do not hold their host's room; hosts found without room are parked in the book's
    timer heap (:meth:`HostBuckets.park`) until their next token."""
    got = book.index.best_capped(now_s, k, caps.room,
                                 park=functools.partial(_park, book.hosts, now_s),
                                 eligible=None if not exclude else (lambda p: p not in exclude))
    t = book.table
    if len(got) < 8:
        host_of = t.host_of
        return [(pid, host_of(pid), v) for pid, v in got]
    # many picks (a batched step): the hosts by one array lookup, the rows built in C
    pids = list(map(itemgetter(0), got))
    names = t.host_names
    if len(names) == 1:
        hosts: Iterable[Hashable] = itertools.repeat(names[0])
    else:
        codes = t.host[np.fromiter(map(t.slot.__getitem__, pids), dtype=np.int64,
                                   count=len(pids))].tolist()
        hosts = map(names.__getitem__, codes)
    return list(zip(pids, hosts, map(itemgetter(1), got), strict=False))  # hosts: may repeat


def _park(hosts: HostBuckets, now_s: float, host: Hashable) -> None:
    hosts.park(host, now_s)


def choose(books: Sequence[ShardBook], n: int, now_s: float, *,
           floor: bool = True) -> list[Pick]:
    """The ``n`` orders of one tick over ``books`` (module docstring), in the order they
    were chosen (floor pages first).  Chosen never-crawled pages are removed from their
    book's fresh pages; nothing else changes (the caller records the orders that left:
    :meth:`ShardBook.start_flight` and ``hosts.take``)."""
    if n < 1:
        return []
    caps = [_Caps(b, now_s) for b in books]
    for b in books:  # hosts parked without room whose next token has come
        for h in b.hosts.unpark(now_s):
            b.fresh.unpark(h)
            b.index.unpark(h)
    if (len(books) == 1 and not len(books[0].fresh)
            and (not floor or not len(books[0].floor))):
        # one source (the crawled pages; the simulator's book): its greedy under the
        # caps is the tick's, the picks made as tuples in C (a batched step makes 5000)
        b = books[0]
        got = _index_best(b, caps[0], now_s, n, set()) if len(b.index) else []
        if len(got) < 8:
            return [Pick(b, p, h, "greedy", v) for p, h, v in got]
        return list(map(tuple.__new__, itertools.repeat(Pick), zip(
            itertools.repeat(b), map(itemgetter(0), got), map(itemgetter(1), got),
            itertools.repeat("greedy"), map(itemgetter(2), got), strict=False)))
    chosen: list[Pick] = []
    if floor:
        due: list[tuple[float, int, int, Hashable, Hashable]] = []
        for i, (b, c) in enumerate(zip(books, caps, strict=True)):
            if not len(b.floor):
                continue
            used: dict[Hashable, int] = {}

            def ok(page: Hashable, b: ShardBook = b, c: _Caps = c,
                   used: dict[Hashable, int] = used) -> bool:
                host = b.table.host_of(page)
                if host is None or page in b.in_flight:
                    return False
                u = used.get(host, 0)
                if c.room(host) - u < 1:
                    return False
                used[host] = u + 1
                return True

            for j, (d, page) in enumerate(b.floor.due(now_s, n, ok)):
                due.append((d, i, j, page, b.table.host_of(page)))
        due.sort(key=lambda x: (x[0], x[1], x[2]))
        for _d, i, _j, page, host in due[:n]:
            caps[i].take(host)
            chosen.append(Pick(books[i], page, host, "floor", books[i].value(page, now_s)))
            # chosen: out of the never-crawled pages (it would hold its host's room there)
            books[i].fresh.remove(page)
    want = n - len(chosen)
    if want <= 0:
        return chosen
    floor_picked = {(id(p.book), p.page) for p in chosen}
    lists: list[list[tuple[float, int, int, Hashable, Hashable, bool]]] = []
    fresh_taken: list[list[tuple[Hashable, Hashable, float]]] = []
    for b, c in zip(books, caps, strict=True):
        k = want  # the floor's picks are out of both sources (above and _index_best)
        fresh = (b.fresh.take(k, c.room, park=functools.partial(_park, b.hosts, now_s))
                 if len(b.fresh) else [])
        fresh_taken.append(fresh)
        crawled = (_index_best(b, c, now_s, k, {p.page for p in chosen if p.book is b})
                   if len(b.index) else [])
        cand = [(-v, 0, j, p, h, True) for j, (p, h, v) in enumerate(fresh)
                if (id(b), p) not in floor_picked]
        cand += [(-v, 1, j, p, h, False) for j, (p, h, v) in enumerate(crawled)
                 if (id(b), p) not in floor_picked]
        cand.sort(key=lambda x: (x[0], x[1], x[2]))
        # one book's merge with shared caps (the sources' greedy lists -> union's greedy)
        merged: list[tuple[float, int, int, Hashable, Hashable, bool]] = []
        for e in cand:
            if len(merged) == want:
                break
            if c.room(e[4]) >= 1:
                c.take(e[4])
                merged.append(e)
        lists.append(merged)
    used_fresh: set[tuple[int, Hashable]] = set()
    merged_all = heapq.merge(*[[(e[0], i, e) for e in lst] for i, lst in enumerate(lists)],
                             key=lambda x: (x[0], x[1]))
    for negv, i, e in merged_all:
        if len(chosen) >= n:
            break
        chosen.append(Pick(books[i], e[3], e[4], "greedy", -negv))
        if e[5]:
            used_fresh.add((i, e[3]))
    for i, fresh in enumerate(fresh_taken):
        for page, host, v in fresh:
            if (i, page) not in used_fresh:
                books[i].fresh.add(page, host, v)
    return chosen


def level_of(book: ShardBook) -> float:
    """The index's working level (0 when it has none), for stats and orders."""
    level = book.index.threshold()
    return level if math.isfinite(level) else 0.0


def hosts_room(book: ShardBook, now_s: float) -> Callable[[Hashable], int]:
    return lambda host: book.hosts.room(host, now_s)
