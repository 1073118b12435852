"""Per-page state as arrays (one slot per page, slots reused), not one object per page.

Columns: the page's host (a small integer code), whether it was crawled, its crawl-value
parameters (``origin`` with ``tau_eff = t - origin``, ``alpha``, ``beta``, ``gamma``,
``mu``; paper 004 Sec. 3 and Thm. 1), ``V(inf) = mu/Delta`` (``max_value``), the last crawl
and first sighting times, ``Delta``, whether the parameters come from an estimate, and
each ping source's ``beta_s`` (a ping of source ``s`` moves the origin by ``beta_s``).
At 10^6 pages the arrays take ``(13 + n_sources) * 8`` bytes per page, plus the page id
and its dictionary entry.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["PageTable"]

_FLOAT_COLUMNS = ("origin", "alpha", "beta", "gamma", "mu", "max_value", "last_crawl",
                  "first_seen", "delta")


class PageTable:
    __slots__ = ("_free", "alpha", "beta", "crawled", "delta", "estimated", "first_seen",
                 "gamma", "host", "host_code", "host_names", "ids", "last_crawl",
                 "max_value", "mu", "n_sources", "origin", "slot", "src_beta")

    def __init__(self, n_sources: int = 1, capacity: int = 64) -> None:
        self.n_sources = int(n_sources)
        self.slot: dict[Hashable, int] = {}
        self.ids: list[Hashable | None] = []
        self._free: list[int] = []
        self.host_code: dict[Hashable, int] = {}
        self.host_names: list[Hashable] = []
        cap = max(1, capacity)
        self.host = np.full(cap, -1, dtype=np.int32)
        self.crawled = np.zeros(cap, dtype=bool)
        self.estimated = np.zeros(cap, dtype=bool)
        self.src_beta = np.zeros((cap, self.n_sources))
        self.origin = np.zeros(cap)
        self.alpha = np.zeros(cap)
        self.beta = np.zeros(cap)
        self.gamma = np.zeros(cap)
        self.mu = np.zeros(cap)
        self.max_value = np.zeros(cap)
        self.last_crawl = np.zeros(cap)
        self.first_seen = np.zeros(cap)
        self.delta = np.zeros(cap)

    def __len__(self) -> int:
        return len(self.slot)

    def __contains__(self, page: object) -> bool:
        return page in self.slot

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.slot)

    def _grow(self, need: int = 0) -> None:
        """Double the columns (at least to ``need`` slots: one copy for a bulk insert)."""
        n = max(self.host.size * 2, need)
        for name in ("host", "crawled", "estimated", *_FLOAT_COLUMNS):
            old: npt.NDArray[np.generic] = getattr(self, name)
            new = np.zeros(n, dtype=old.dtype)
            if name == "host":
                new[:] = -1
            new[: old.size] = old
            setattr(self, name, new)
        sb = np.zeros((n, self.n_sources))
        sb[: self.src_beta.shape[0]] = self.src_beta
        self.src_beta = sb

    def code_of(self, host: Hashable) -> int:
        c = self.host_code.get(host)
        if c is None:
            c = self.host_code[host] = len(self.host_names)
            self.host_names.append(host)
        return c

    def get(self, page: Hashable) -> int | None:
        return self.slot.get(page)

    def add(self, page: Hashable, host: Hashable, first_seen_s: float) -> int:
        """The page's slot (a new one, with ``first_seen_s``, if the page is new)."""
        s = self.slot.get(page)
        if s is not None:
            code = self.code_of(host)
            self.host[s] = code
            return s
        if self._free:
            s = self._free.pop()
            self.ids[s] = page
        else:
            s = len(self.ids)
            if s >= self.host.size:
                self._grow()
            self.ids.append(page)
        self.slot[page] = s
        self.host[s] = self.code_of(host)
        self.first_seen[s] = first_seen_s
        return s

    def add_many(self, pages: Sequence[Hashable], hosts: Sequence[Hashable],
                 first_seen_s: float) -> npt.NDArray[np.int64]:
        """Slots of many pages at once (new ones get ``first_seen_s``); for a rebuild."""
        code = {h: self.code_of(h) for h in dict.fromkeys(hosts)}  # once per host
        codes = np.fromiter(map(code.__getitem__, hosts), dtype=np.int32, count=len(hosts))
        n = len(pages)
        start = len(self.ids)
        if self.slot.keys().isdisjoint(pages):
            if start + n > self.host.size:
                self._grow(start + n)
            # a rebuild: every page new, no lookup per page; distinct unless the dict grew
            # by fewer (then undone, and the pages go the general way below)
            before = len(self.slot)
            self.slot.update(zip(pages, range(start, start + n), strict=True))
            if len(self.slot) == before + n:
                self.ids.extend(pages)
                self.first_seen[start : start + n] = first_seen_s
                self.host[start : start + n] = codes
                return np.arange(start, start + n, dtype=np.int64)
            for p in pages:
                self.slot.pop(p, None)
        out = np.empty(n, dtype=np.int64)
        new: list[int] = []
        fresh: dict[Hashable, int] = {}  # a page given twice gets one slot
        for i, p in enumerate(pages):
            s = self.slot.get(p)
            if s is None:
                s = fresh.get(p)
            if s is None:
                new.append(i)
                s = fresh[p] = start + len(new) - 1
            out[i] = s
        if new:
            if start + len(new) > self.host.size:
                self._grow(start + len(new))
            idx = np.arange(start, start + len(new), dtype=np.int64)
            self.ids.extend(pages[i] for i in new)
            self.slot.update(fresh)
            self.first_seen[idx] = first_seen_s
        self.host[out] = codes
        return out

    def remove(self, page: Hashable) -> None:
        s = self.slot.pop(page, None)
        if s is not None:
            self.ids[s] = None
            self.host[s] = -1
            self._free.append(s)

    def host_of(self, page: Hashable) -> Hashable | None:
        s = self.slot.get(page)
        return self.host_names[int(self.host[s])] if s is not None else None
