"""Longest-interval floor (:class:`FloorPolicy`): a capability beyond paper 004.

A wrapper that spends a slot on any page whose last crawl is older than a floor ``F`` (the
streaming scheduler's floor, ``streams/scheduler/``), otherwise asks the wrapped policy;
paper 004 Sec. 4 (the remark on abandoned pages after eq. 5) is why a floor is wanted.
Split out of :mod:`models.sim.variants`, which re-exports every name.

References
----------
[004] R. Busa-Fekete, J. Zimmert, A. György et al., "A Scalable Crawling Algorithm
Utilizing Noisy Change-Indicating Signals": Sec. 4 (the remark after eq. 5).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
import numpy.typing as npt

from models.sim.policies import Policy

__all__ = [
    "FloorPolicy",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Eligible = Callable[[int], bool] | None


class FloorPolicy:
    """Wrap a policy with a longest-interval floor ``F``: floor-due pages first.

    ``mode="reactive"`` (the streaming scheduler's floor, ``streams/scheduler/``): at a
    slot, if some page's last crawl is at least ``F`` ago, crawl the most overdue
    (eligible) one; otherwise the wrapped policy chooses.  A burst of pages falling due
    together is served one per slot, so a page can exceed ``F`` by up to the burst's
    length.  ``mode="proactive"`` (earliest deadline first, started at the latest slot
    that still meets every deadline): with deadlines ``d_(1) <= d_(2) <= ...`` (last crawl
    + ``F``), the slot at ``t`` goes to the earliest-deadline page whenever waiting would
    miss one, i.e. ``t + j/R > d_(j)`` for some ``j``; then no interval exceeds ``F``
    whenever that is feasible (``F >= m/R`` from a common start).

    Every slot is spent (one crawl per slot, as the wrapped policy).  Paper 004 (Sec. 4,
    after eq. 5) notes that the optimum abandons pages with low ``mu`` and high
    ``Delta`` and that "completely abandoning web pages might be unacceptable", to be
    alleviated by a minimum crawl frequency; this wrapper is that floor, and its cost in
    accuracy is what the ``floor`` experiment measures.
    """

    def __init__(self, inner: Policy, m: int, floor_interval: float, *,
                 rate: float | None = None, mode: Literal["reactive", "proactive"] = "reactive",
                 name: str | None = None) -> None:
        if not floor_interval > 0.0:
            raise ValueError(f"floor_interval must be > 0, got {floor_interval!r}")
        if mode not in ("reactive", "proactive"):
            raise ValueError(f"mode must be 'reactive' or 'proactive', got {mode!r}")
        if mode == "proactive" and not (rate is not None and rate > 0.0):
            raise ValueError("mode='proactive' needs the slot rate (rate > 0)")
        self.inner = inner
        self.floor_interval = float(floor_interval)
        self.rate = float(rate) if rate is not None else math.nan
        self.mode = mode
        self.name = name if name is not None else f"{inner.name}+floor"
        self.last_crawl = np.zeros(m)
        self.forced = 0

    def on_ping(self, page: int, arrival: float, emitted: float) -> None:
        self.inner.on_ping(page, arrival, emitted)

    def on_pings(self, pages: IntArray, arrivals: FloatArray, emitted: FloatArray) -> None:
        batch = getattr(self.inner, "on_pings", None)
        if batch is not None:
            batch(pages, arrivals, emitted)
            return
        for p, a, e in zip(pages.tolist(), arrivals.tolist(), emitted.tolist(), strict=True):
            self.inner.on_ping(p, a, e)

    def plan(self, times: FloatArray) -> None:
        plan = getattr(self.inner, "plan", None)
        if plan is not None:
            plan(times)

    def _floor_page(self, t: float, eligible: Eligible) -> int | None:
        f = self.floor_interval
        last = self.last_crawl
        eps = 1e-9 * max(1.0, abs(t))
        if self.mode == "reactive":
            if float(last.min()) + f > t + eps:
                return None
            due = np.nonzero(last + f <= t + eps)[0]
            order = due[np.argsort(last[due], kind="stable")]
        else:
            dl = last + f
            order = np.argsort(dl, kind="stable")
            j = np.arange(1, order.size + 1, dtype=np.float64)
            if not (t + j / self.rate > dl[order] + eps).any():
                return None
        for p in order.tolist():
            if eligible is None or eligible(p):
                return int(p)
        return None

    def choose(self, t: float, eligible: Eligible) -> int | None:
        p = self._floor_page(t, eligible)
        if p is not None:
            self.forced += 1
            return p
        return self.inner.choose(t, eligible)

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None:
        self.last_crawl[page] = t
        self.inner.on_crawl(page, t, changed, last_modified)
