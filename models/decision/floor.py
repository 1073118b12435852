"""The longest-interval floor: pages ordered at least every ``max_interval_s`` whatever
their crawl value (paper 004 Sec. 4 after eq. 5: the optimum abandons pages with low
``mu`` and high ``Delta``; "completely abandoning web pages might be unacceptable").

One due time per page (``last crawl + max_interval_s``, or first seen + it for a page never
crawled).  A heap of ``(due, seq, page)`` with lazy deletion: an entry counts only while it
is the page's current one.  The heap is rebuilt from the live entries when it holds more
than twice as many entries as pages (plus a constant), so its size stays ``O(pages)``
and the rebuild's cost is amortised ``O(1)`` per update (the earlier queue kept every
entry and re-compacted on every event past 3x pages).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Iterator

__all__ = ["FloorQueue"]


class FloorQueue:
    __slots__ = ("_heap", "_live", "_seq", "rebuilds")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._live: dict[Hashable, tuple[float, int]] = {}
        self._seq = 0
        self.rebuilds = 0

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, page: object) -> bool:
        return page in self._live

    def heap_size(self) -> int:
        return len(self._heap)

    def due_of(self, page: Hashable) -> float | None:
        e = self._live.get(page)
        return e[0] if e is not None else None

    def set(self, page: Hashable, due_s: float) -> None:
        """The page's due time (replaces any earlier one)."""
        old = self._live.get(page)
        if old is not None and old[0] == due_s:
            return
        self._seq += 1
        self._live[page] = (due_s, self._seq)
        heapq.heappush(self._heap, (due_s, self._seq, page))
        if len(self._heap) > 2 * len(self._live) + 64:
            self._rebuild()

    def set_many(self, pages: Iterable[Hashable], due_s: Iterable[float]) -> None:
        """Many due times at once (a rebuild, host by host): entries appended and the heap
        made again in ``O(size)`` when the batch is at least as big as the heap, else
        pushed (``O(batch log size)``); a rebuild's hosts then cost ``O(pages log pages)``
        in all, not a whole heap per host."""
        pages = list(pages)
        due = list(due_s)
        if len(due) != len(pages):
            raise ValueError("pages and due_s differ in length")
        seqs = range(self._seq + 1, self._seq + 1 + len(pages))
        self._seq += len(pages)
        # the last of a repeated page wins, as one set() after another
        self._live.update(zip(pages, zip(due, seqs, strict=True), strict=True))
        entries = list(zip(due, seqs, pages, strict=True))
        if len(entries) >= len(self._heap):
            self._heap.extend(entries)
            heapq.heapify(self._heap)
        else:
            for e in entries:
                heapq.heappush(self._heap, e)
        if len(self._heap) > 2 * len(self._live) + 64:
            self._rebuild()

    def discard(self, page: Hashable) -> None:
        if self._live.pop(page, None) is not None and (
                len(self._heap) > 2 * len(self._live) + 64):
            self._rebuild()

    def _rebuild(self) -> None:
        self._heap = [(d, s, p) for p, (d, s) in self._live.items()]
        heapq.heapify(self._heap)
        self.rebuilds += 1

    def _valid(self, e: tuple[float, int, Hashable]) -> bool:
        cur = self._live.get(e[2])
        return cur is not None and cur[1] == e[1]

    def due(self, now_s: float, n: int,
            ok: Callable[[Hashable], bool] | None = None) -> list[tuple[float, Hashable]]:
        """Up to ``n`` pages due at ``now_s`` (due time <= now), earliest first, that pass
        ``ok``; nothing is removed (the caller discards what it orders).  Costs
        ``O((n + skipped) log size)``: the due entries it looks at are put back."""
        out: list[tuple[float, Hashable]] = []
        looked: list[tuple[float, int, Hashable]] = []
        heap = self._heap
        while heap and heap[0][0] <= now_s and len(out) < n:
            e = heapq.heappop(heap)
            if not self._valid(e):
                continue  # stale: dropped for good
            looked.append(e)
            if ok is None or ok(e[2]):
                out.append((e[0], e[2]))
        for e in looked:
            heapq.heappush(heap, e)
        return out

    def earliest(self) -> float | None:
        """The earliest due time of any page (None when empty)."""
        heap = self._heap
        while heap and not self._valid(heap[0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._live)
