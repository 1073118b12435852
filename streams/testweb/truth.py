"""Ground truth: each page's current version and the fetcher's copy; live accuracy.

A page is *fresh* while the version last served to a fetch equals its current version.
Accuracy over a window is the importance-weighted fraction of time pages were fresh
(the metric of Busa-Fekete et al., Sec. 6.2, with requests arriving at rate ``mu``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PageTruth", "Truth"]


@dataclass
class PageTruth:
    importance: float
    version: int = 0
    last_change_at: float = 0.0
    changes: int = 0
    copy_version: int | None = None
    copy_at: float | None = None
    fetches: int = 0
    fresh: bool = False
    fresh_since: float = 0.0
    fresh_acc_s: float = 0.0


@dataclass
class Truth:
    window_start: float
    pages: dict[str, PageTruth] = field(default_factory=dict)

    def add_page(self, url: str, importance: float, now_s: float, *, fresh: bool = False) -> None:
        self.pages[url] = PageTruth(
            importance=importance, last_change_at=now_s, fresh=fresh, fresh_since=now_s,
            copy_version=0 if fresh else None,
        )  # fmt: skip

    def changed(self, url: str, now_s: float) -> int:
        p = self.pages[url]
        p.version += 1
        p.changes += 1
        p.last_change_at = now_s
        if p.fresh:
            p.fresh_acc_s += now_s - max(p.fresh_since, self.window_start)
            p.fresh = False
        return p.version

    def served(self, url: str, version: int, now_s: float) -> None:
        p = self.pages[url]
        p.copy_version = version
        p.copy_at = now_s
        p.fetches += 1
        if version == p.version and not p.fresh:
            p.fresh = True
            p.fresh_since = now_s

    def start_window(self, now_s: float) -> None:
        self.window_start = now_s
        for p in self.pages.values():
            p.fresh_acc_s = 0.0

    def fresh_time(self, url: str, now_s: float) -> float:
        p = self.pages[url]
        extra = now_s - max(p.fresh_since, self.window_start) if p.fresh else 0.0
        return p.fresh_acc_s + max(extra, 0.0)

    def accuracy(self, now_s: float) -> float | None:
        span = now_s - self.window_start
        total_mu = sum(p.importance for p in self.pages.values())
        if span <= 0 or total_mu <= 0:
            return None
        fresh = sum(p.importance * self.fresh_time(u, now_s) for u, p in self.pages.items())
        return fresh / (total_mu * span)

    def fresh_now(self) -> float:
        """Importance-weighted fraction of pages fresh at this instant."""
        total = sum(p.importance for p in self.pages.values())
        return sum(p.importance for p in self.pages.values() if p.fresh) / total if total else 0.0
