"""Never-crawled pages: their crawl value is constant, ``V(inf) = mu/Delta`` (paper 004
Sec. 4: we hold no copy, so the page is stale for sure and its ``tau_eff`` is unbounded),
so they need no time-to-level keys and live outside the crawl index.

One heap per host (highest value first, ties by arrival) and a heap of hosts keyed by
their best page, so a host without room is skipped in one step with all its pages (an
index full of equal values would otherwise make every query a full scan).  A host found
without room can be *parked* (:meth:`FreshPages.take` with ``park``): it leaves the heap of
hosts until :meth:`FreshPages.unpark`, so a tick does not look at it again and again (with
pages loaded host by host, the hosts just used sat at the top of the heap: 600k room
checks for 7k orders at 1000 orders/s over 3000 hosts).  Removal is lazy: an entry counts
only while ``self.key[page]`` is that entry; once the dead entries (pages removed, values
replaced) outnumber the live ones, every host's heap is compacted (amortised O(1) per
removal).  Before that bound, a shard whose never-crawled pages were all crawled kept
every dead entry: ~160 B per page for good, 10^6 pages' worth in the end-to-end bench
(``bench_e2e.py throughput``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Sequence

__all__ = ["FreshPages"]

Entry = tuple[float, int, Hashable]
#: dead entries always tolerated before a compaction of every host's heap
COMPACT_MIN = 1024


class FreshPages:
    __slots__ = ("by_host", "dead", "hosts", "key", "parked", "seq")

    def __init__(self) -> None:
        self.by_host: dict[Hashable, list[Entry]] = {}
        self.hosts: list[Entry] = []
        self.key: dict[Hashable, Entry] = {}
        self.parked: set[Hashable] = set()
        self.seq = 0
        #: entries in the hosts' heaps that no longer count (at least; module docstring)
        self.dead = 0

    def __len__(self) -> int:
        return len(self.key)

    def __contains__(self, page: object) -> bool:
        return page in self.key

    def add(self, page: Hashable, host: Hashable, value: float) -> None:
        old = self.key.get(page)
        if old is not None and old[0] == -value:
            return
        if old is not None:
            self._died()
        self.seq += 1
        entry = (-value, self.seq, page)
        self.key[page] = entry
        heap = self.by_host.setdefault(host, [])
        heapq.heappush(heap, entry)
        if heap[0] is entry and host not in self.parked:
            heapq.heappush(self.hosts, (entry[0], entry[1], host))
        if len(heap) > 2 * 64 and len(heap) > 4 * len(self.key):
            self._compact(host)

    def add_many(self, pages: Sequence[Hashable], hosts: Sequence[Hashable],
                 values: Sequence[float]) -> None:
        """:meth:`add` of each ``(page, host, value)`` in turn, with each host's heap
        rebuilt once (``heapify``) instead of one push per page: a shard's rebuild puts
        every never-crawled page in at once.  The same entries (values, arrival order)
        as one :meth:`add` at a time, so :meth:`take` gives the same pages."""
        key = self.key
        n = len(pages)
        if len(hosts) != n or len(values) != n:
            raise ValueError(f"{n} pages, {len(hosts)} hosts, {len(values)} values")
        if n == 0:
            return
        first = self.seq  # entries after this one are new
        new: dict[Hashable, list[Entry]] = {}
        if key.keys().isdisjoint(pages) and len(set(pages)) == n:
            # pages new and distinct (a rebuild): entries built and grouped by runs of one
            # host (pages come host by host) without a dict lookup per page
            entries = list(zip([-v for v in values], range(first + 1, first + n + 1), pages,
                               strict=True))
            key.update(zip(pages, entries, strict=True))
            start = 0
            for i in [i for i in range(1, n) if hosts[i] != hosts[i - 1]] + [n]:
                got = new.get(hosts[start])
                if got is None:
                    new[hosts[start]] = entries[start:i]
                else:
                    got.extend(entries[start:i])
                start = i
            self.seq = first + n
        else:
            seq = first
            for page, host, value in zip(pages, hosts, values, strict=True):
                old = key.get(page)
                if old is not None and old[0] == -value:
                    continue
                if old is not None:
                    self.dead += 1
                seq += 1
                entry = (-value, seq, page)
                key[page] = entry
                got = new.get(host)
                if got is None:
                    new[host] = [entry]
                else:
                    got.append(entry)
            self.seq = seq
        for host, entries in new.items():
            heap = self.by_host.get(host)
            if heap is None:
                heap = self.by_host[host] = entries
            else:
                heap.extend(entries)
            heapq.heapify(heap)
            top = heap[0]
            if top[1] > first and host not in self.parked:  # a new best page of its host
                heapq.heappush(self.hosts, (top[0], top[1], host))
            if len(heap) > 2 * 64 and len(heap) > 4 * len(key):
                self._compact(host)
        if self.dead > max(COMPACT_MIN, len(key)):
            self.compact_all()

    def _compact(self, host: Hashable) -> None:
        heap = [e for e in self.by_host[host] if self.key.get(e[2]) is e]
        heapq.heapify(heap)
        self.by_host[host] = heap

    def remove(self, page: Hashable) -> None:
        if self.key.pop(page, None) is not None:
            self._died()

    def _died(self) -> None:
        """One more dead entry; every heap compacted once they outnumber the live ones."""
        self.dead += 1
        if self.dead > max(COMPACT_MIN, len(self.key)):
            self.compact_all()

    def compact_all(self) -> None:
        """Drop every dead entry from the hosts' heaps (hosts left empty go)."""
        key = self.key
        for host in list(self.by_host):
            heap = [e for e in self.by_host[host] if key.get(e[2]) is e]
            if heap:
                heapq.heapify(heap)
                self.by_host[host] = heap
            else:
                del self.by_host[host]
        # a dict never shrinks as keys leave: copied, it is sized for the live pages
        # (10^6 pages crawled kept ~31 B/page of table, bench_book_memory.py --from-new)
        self.key = dict(key)
        self.dead = 0

    def value(self, page: Hashable) -> float | None:
        e = self.key.get(page)
        return -e[0] if e is not None else None

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

    def _top(self, host: Hashable) -> Entry | None:
        heap = self.by_host.get(host)
        while heap and self.key.get(heap[0][2]) is not heap[0]:
            heapq.heappop(heap)
        if not heap:
            self.by_host.pop(host, None)
            return None
        return heap[0]

    def unpark(self, host: Hashable) -> None:
        """A parked host has room again: its pages are candidates again."""
        if host in self.parked:
            self.parked.discard(host)
            top = self._top(host)
            if top is not None:
                heapq.heappush(self.hosts, (top[0], top[1], host))

    def take(self, n: int, room: Callable[[Hashable], int],
             park: Callable[[Hashable], None] | None = None
             ) -> list[tuple[Hashable, Hashable, float]]:
        """Up to ``n`` best pages ``(page, host, value)``, removed, at most ``room(host)``
        per host (called once per host, no side effects expected); a host without room is
        skipped whole, and parked (``park(host)`` told) when ``park`` is given.  Exactly
        the greedy top ``n`` under the per-host caps over the hosts not parked."""
        out: list[tuple[Hashable, Hashable, float]] = []
        skipped: list[Entry] = []
        left: dict[Hashable, int] = {}
        while len(out) < n and self.hosts:
            hk = self.hosts[0]
            host = hk[2]
            top = self._top(host)
            if top is None or (top[0], top[1]) != (hk[0], hk[1]):
                heapq.heappop(self.hosts)  # stale host entry
                if top is not None:
                    heapq.heappush(self.hosts, (top[0], top[1], host))
                continue
            r = left.get(host)
            if r is None:
                r = room(host)
            if r <= 0:
                left[host] = 0
                e = heapq.heappop(self.hosts)
                if park is not None:
                    self.parked.add(host)
                    park(host)
                else:
                    skipped.append(e)
                continue
            left[host] = r - 1
            heapq.heappop(self.by_host[host])
            del self.key[top[2]]
            out.append((top[2], host, -top[0]))
            heapq.heappop(self.hosts)
            nxt = self._top(host)
            if nxt is not None:
                if r - 1 <= 0 and park is not None:
                    self.parked.add(host)  # its room is used up: park it right away
                    park(host)
                else:
                    heapq.heappush(self.hosts, (nxt[0], nxt[1], host))
        for e in skipped:
            heapq.heappush(self.hosts, e)
        return out
