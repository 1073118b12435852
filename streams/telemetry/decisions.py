"""The worker's recent decisions about pages, for ``explain`` (why a page was or wasn't
crawled): a bounded ring in memory, not Redis (no per-page decision text in the store).

At most ``max_pages`` pages keep decisions (the least recently touched page is dropped
first) and each keeps its last ``per_page`` entries, so the ring's memory is bounded
whatever the input.  A worker answers for the pages of the shards it runs (the decisions
are made there); after a restart or a rebalance the ring starts empty.

A page's entries are one string, joined by a separator: 100,000 pages of four ~100
character entries take ~48 MiB, against ~134 MiB with a ``deque`` per page (its block of
64 slots) and four ``str`` objects (``benchmarks/bench_book_memory.py``;
``tests/unit/test_decisions.py`` checks the ratio).
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["DecisionRing"]

#: between two entries of a page (the ASCII record separator; taken out of the texts)
SEP = "\x1e"


class DecisionRing:
    """``add(url, text)``, ``get(url) -> [text, ...]`` oldest first (module docstring)."""

    __slots__ = ("_pages", "max_pages", "per_page")

    def __init__(self, max_pages: int = 100_000, per_page: int = 4) -> None:
        if max_pages < 0 or per_page < 0:
            raise ValueError(f"max_pages and per_page must be >= 0, got {max_pages}, {per_page}")
        self.max_pages = max_pages
        self.per_page = per_page
        self._pages: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pages)

    def add(self, url: str, text: str) -> None:
        if self.per_page == 0 or self.max_pages == 0:
            return
        if SEP in text:
            text = text.replace(SEP, " ")
        pages = self._pages
        cur = pages.get(url)
        if cur is None:
            pages[url] = text
            if len(pages) > self.max_pages:
                pages.popitem(last=False)
            return
        if cur.count(SEP) + 1 >= self.per_page:  # full: the oldest entries go
            parts = cur.split(SEP)
            cur = SEP.join(parts[len(parts) - self.per_page + 1 :]) if self.per_page > 1 else ""
        pages[url] = f"{cur}{SEP}{text}" if cur else text
        pages.move_to_end(url)

    def get(self, url: str) -> list[str]:
        cur = self._pages.get(url)
        return cur.split(SEP) if cur is not None else []
