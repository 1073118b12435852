"""Longest-interval floor (:class:`FloorPolicy`): a capability beyond paper 004.

A wrapper that spends a slot on any page whose last crawl is older than a floor ``F`` (the
streaming scheduler's floor: its due times in the service's
:class:`models.decision.floor.FloorQueue`), otherwise asks the wrapped policy;
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

from models.decision.floor import FloorQueue
from models.sim.policies import Policy

__all__ = [
    "FloorPolicy",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Eligible = Callable[[int], bool] | None


class FloorPolicy:
    """Wrap a policy with a longest-interval floor ``F``: floor-due pages first.

    The due times are the service's floor queue's (:class:`models.decision.floor.FloorQueue`:
    a page is due ``F`` after its last crawl, earliest due first).  ``mode="reactive"``
    (the streaming scheduler's floor, :func:`models.decision.core.choose`): at a slot, if
    some page is due, crawl the earliest due (eligible) one; otherwise the wrapped policy
    chooses.  A burst of pages falling due together is served one per slot, so a page can
    exceed ``F`` by up to the burst's length.  ``mode="proactive"`` (earliest deadline
    first, started at the latest slot that still meets every deadline,
    :meth:`FloorQueue.must_start <models.decision.floor.FloorQueue.must_start>`): the slot
    at ``t`` goes to the earliest-due page whenever waiting would miss one; then no
    interval exceeds ``F`` whenever that is feasible (``F >= m/R`` from a common start).

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
        self.queue = FloorQueue()
        self.queue.set_many(range(m), np.full(m, self.floor_interval))  # last crawl 0
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
        # a due time at a slot's time is due at that slot despite rounding
        eps = 1e-9 * max(1.0, abs(t))
        if self.mode == "reactive":
            now = t + eps
        else:
            if not self.queue.must_start(t - eps, self.rate):
                return None
            now = math.inf
        got = self.queue.due(now, 1, eligible)  # type: ignore[arg-type]
        return int(got[0][1]) if got else None  # type: ignore[call-overload]

    def choose(self, t: float, eligible: Eligible) -> int | None:
        p = self._floor_page(t, eligible)
        if p is not None:
            self.forced += 1
            return p
        return self.inner.choose(t, eligible)

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None:
        self.last_crawl[page] = t
        self.queue.set(page, t + self.floor_interval)
        self.inner.on_crawl(page, t, changed, last_modified)
