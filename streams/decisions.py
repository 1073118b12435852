"""The worker's recent decisions about pages, for ``explain`` (why a page was or wasn't
crawled): a bounded ring in memory, not Redis (no per-page decision text in the store).

At most ``max_pages`` pages keep decisions (the least recently touched page is dropped
first) and each keeps its last ``per_page`` entries, so the ring's memory is bounded
whatever the input.  A worker answers for the pages of the shards it runs (the decisions
are made there); after a restart or a rebalance the ring starts empty.
"""

from __future__ import annotations

from collections import OrderedDict, deque

__all__ = ["DecisionRing"]


class DecisionRing:
    """``add(url, text)``, ``get(url) -> [text, ...]`` oldest first (module docstring)."""

    __slots__ = ("_pages", "max_pages", "per_page")

    def __init__(self, max_pages: int = 100_000, per_page: int = 4) -> None:
        if max_pages < 0 or per_page < 0:
            raise ValueError(f"max_pages and per_page must be >= 0, got {max_pages}, {per_page}")
        self.max_pages = max_pages
        self.per_page = per_page
        self._pages: OrderedDict[str, deque[str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pages)

    def add(self, url: str, text: str) -> None:
        if self.per_page == 0 or self.max_pages == 0:
            return
        ring = self._pages.get(url)
        if ring is None:
            ring = self._pages[url] = deque(maxlen=self.per_page)
            if len(self._pages) > self.max_pages:
                self._pages.popitem(last=False)
        else:
            self._pages.move_to_end(url)
        ring.append(text)

    def get(self, url: str) -> list[str]:
        ring = self._pages.get(url)
        return list(ring) if ring is not None else []
