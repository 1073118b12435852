"""The longest-interval floor: pages ordered at least every ``max_interval_s`` whatever
their crawl value (paper 004 Sec. 4 after eq. 5: the optimum abandons pages with low
``mu`` and high ``Delta``; "completely abandoning web pages might be unacceptable").

One due time per page (``last crawl + max_interval_s``, or first seen + it for a page never
crawled), kept in a float64 array indexed by the page's slot in its book's
:class:`~models.decision.table.PageTable` (``+inf``: no due time), so the floor costs 8
bytes a page and no Python object.  :meth:`FloorQueue.due` scans the array (``O(pages)``
vectorised: ~1 ms at 10^6 pages) and sorts only the pages that are due.  The earlier
queue, a heap of ``(due, seq, page)`` tuples with a dictionary of live entries, took ~255
bytes a page (``tracemalloc``: 10^6 pages, 255 MB of a worker's RSS) and a third of a
shard rebuild's dictionary inserts.

A queue made without a table (tests, tools) keeps its own page -> slot mapping.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from models.decision.table import PageTable

__all__ = ["FloorQueue"]


class FloorQueue:
    __slots__ = ("_due", "_ids", "_n", "_own", "_slot")

    def __init__(self, table: PageTable | None = None) -> None:
        self._due: npt.NDArray[np.float64] = np.full(64, np.inf)
        self._n = 0
        self._own = table is None
        self._slot: dict[Hashable, int] = {} if table is None else table.slot
        self._ids: list[Hashable | None] = [] if table is None else table.ids

    def bind(self, table: PageTable) -> None:
        """Use ``table``'s slots (an empty queue only: :class:`ShardBook` does it)."""
        if self._n or self._slot:
            raise ValueError("bind an empty floor queue")
        self._own, self._slot, self._ids = False, table.slot, table.ids

    def uses(self, table: PageTable) -> bool:
        """Whether the queue is bound to ``table``'s slots."""
        return self._slot is table.slot

    def __len__(self) -> int:
        return self._n

    def __contains__(self, page: object) -> bool:
        return isinstance(page, Hashable) and self.due_of(page) is not None

    def _slot_for(self, page: Hashable) -> int:
        s = self._slot.get(page)
        if s is None:
            if not self._own:
                raise KeyError(f"{page!r} is not in the book's table")
            s = self._slot[page] = len(self._ids)
            self._ids.append(page)
        if s >= self._due.size:
            self._grow(s + 1)
        return s

    def _grow(self, size: int) -> None:
        n = max(size, 2 * self._due.size)
        due = np.full(n, np.inf)
        due[: self._due.size] = self._due
        self._due = due

    def due_of(self, page: Hashable) -> float | None:
        s = self._slot.get(page)
        if s is None or s >= self._due.size:
            return None
        d = float(self._due[s])
        return None if d == np.inf else d

    def set(self, page: Hashable, due_s: float) -> None:
        """The page's due time (replaces any earlier one)."""
        s = self._slot_for(page)
        if self._due[s] == np.inf:
            self._n += 1
        self._due[s] = due_s

    def set_many(self, pages: Iterable[Hashable], due_s: Iterable[float]) -> None:
        """Many due times at once (the last of a repeated page wins, as one :meth:`set`
        after another)."""
        pages = list(pages)
        due = np.asarray(list(due_s), dtype=np.float64)
        if due.size != len(pages):
            raise ValueError("pages and due_s differ in length")
        self.set_slots(np.fromiter(map(self._slot_for, pages), dtype=np.int64,
                                   count=len(pages)), due)

    def set_slots(self, slots: Sequence[int] | npt.NDArray[np.int64],
                  due_s: npt.ArrayLike) -> None:
        """:meth:`set_many` by slot (a rebuild: the book's table gave the slots)."""
        sl = np.asarray(slots, dtype=np.int64)
        due = np.broadcast_to(np.asarray(due_s, dtype=np.float64), sl.shape)
        if not sl.size:
            return
        if int(sl.max()) >= self._due.size:
            self._grow(int(sl.max()) + 1)
        # distinct slots as they are when increasing (a rebuild's new slots), else sorted
        uniq = sl if bool(np.all(sl[1:] > sl[:-1])) else np.unique(sl)
        self._n -= int(np.count_nonzero(self._due[uniq] != np.inf))
        self._due[sl] = due  # numpy: the last of a repeated slot wins
        self._n += int(np.count_nonzero(self._due[uniq] != np.inf))

    def discard(self, page: Hashable) -> None:
        s = self._slot.get(page)
        if s is not None and s < self._due.size and self._due[s] != np.inf:
            self._due[s] = np.inf
            self._n -= 1

    def due(self, now_s: float, n: int,
            ok: Callable[[Hashable], bool] | None = None) -> list[tuple[float, Hashable]]:
        """Up to ``n`` pages due at ``now_s`` (due time <= now), earliest first (then by
        slot within each chunk of the earliest), that pass ``ok``; nothing is removed (the
        caller discards what it orders)."""
        if not self._n or n < 1:
            return []
        d = self._due
        idx = np.flatnonzero(d <= now_s)
        out: list[tuple[float, Hashable]] = []
        ids = self._ids
        # the earliest few first (argpartition), more only if ``ok`` refused them: a tick
        # with 10^6 pages due sorts a few hundred, not all of them
        k = max(4 * n, 256)
        while idx.size:
            dv = d[idx]
            if k < idx.size:
                part = np.argpartition(dv, k - 1)[:k]
                rest = np.ones(idx.size, dtype=bool)
                rest[part] = False
                chunk, idx = idx[part], idx[rest]
            else:
                chunk, idx = idx, idx[:0]
            order = chunk[np.lexsort((chunk, d[chunk]))]
            for s, ds in zip(order.tolist(), d[order].tolist(), strict=True):
                page = ids[s]
                if page is None:
                    continue
                if ok is None or ok(page):
                    out.append((ds, page))
                    if len(out) >= n:
                        return out
            k *= 4
        return out

    def must_start(self, now_s: float, rate_per_s: float) -> bool:
        """Whether waiting past ``now_s`` would miss a due time, one order every
        ``1/rate_per_s`` from now in earliest-due order: ``now + j/R > d_(j)`` for some
        ``j`` (``d_(1) <= d_(2) <= ...`` the due times).  Earliest deadline first, started
        at the latest moment that still meets every due time (the floor's proactive mode:
        no interval exceeds the floor whenever that is feasible); sorts every due time."""
        if not self._n:
            return False
        d = np.sort(self._due[self._due != np.inf])
        j = np.arange(1, d.size + 1, dtype=np.float64)
        return bool((now_s + j / rate_per_s > d).any())

    def earliest(self) -> float | None:
        """The earliest due time of any page (None when empty)."""
        if not self._n:
            return None
        return float(self._due.min())

    def __iter__(self) -> Iterator[Hashable]:
        ids = self._ids
        return (ids[s] for s in np.flatnonzero(self._due != np.inf).tolist()
                if s < len(ids) and ids[s] is not None)
