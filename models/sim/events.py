"""Change and ping processes of a simulated web (paper 004 Sec. 3, 6.1 and App. C).

Changes of page ``i`` are Poisson(``Delta_i``).  Each change is signalled with
probability ``lam_i`` (a *true* ping, emitted at the change time) and false pings are
Poisson(``nu_i``) (Sec. 3).  A ping may arrive after a random lag (App. C); it carries
its emission time, as a sitemap ``lastmod`` or an IndexNow timestamp would, so that a
policy can apply the stricter rule of dropping pings that predate its last crawl.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.sim.world import World

__all__ = ["ChangeCursor", "Events", "simulate_events"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Events:
    """All changes and pings over ``[0, horizon]``.

    Attributes
    ----------
    change_time : ndarray
        Change times grouped by page, sorted within a page;
        page ``i``'s are ``change_time[change_start[i]:change_start[i + 1]]``.
    change_start : ndarray of int, shape (m + 1,)
    ping_arrival, ping_emitted : ndarray
        Arrival and emission time of each ping, sorted by arrival.
    ping_page : ndarray of int
    ping_true : ndarray of bool
        Whether the ping signals a real change (for diagnostics only).
    horizon : float
    """

    change_time: FloatArray
    change_start: IntArray
    ping_arrival: FloatArray
    ping_emitted: FloatArray
    ping_page: IntArray
    ping_true: npt.NDArray[np.bool_]
    horizon: float

    def changes_of(self, page: int) -> FloatArray:
        return self.change_time[self.change_start[page] : self.change_start[page + 1]]

    def without_pings(self) -> Events:
        empty = np.zeros(0)
        return Events(
            self.change_time, self.change_start, empty, empty,
            np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool), self.horizon,
        )


class ChangeCursor:
    """What a copy of a page finds: each page's place in its sorted change times.

    The one copy step of the simulator's loops (:func:`models.sim.engine.run`, its
    batched form and :func:`models.sim.live.run_timed`): a copy at ``t`` moves the page
    past its changes at or before ``t``; it is *changed* when it passed one (paper 004
    Sec. 6.1: a crawl observes whether the page changed since the last crawl), and its
    last modification is the latest change passed so far (``-inf`` for none).
    ``last_crawl`` (per page) skips the changes at or before each page's copy time before
    the run; default: none skipped.
    """

    def __init__(self, events: Events, last_crawl: FloatArray | None = None) -> None:
        cs = events.change_start
        self._ct: list[float] = events.change_time.tolist()
        self._start: list[int] = cs[:-1].tolist()
        self._end: list[int] = cs[1:].tolist()
        if last_crawl is None:
            self._ptr = list(self._start)
        else:
            self._ptr = [
                int(cs[i] + np.searchsorted(events.changes_of(i), last_crawl[i], side="right"))
                for i in range(cs.size - 1)
            ]

    def copy(self, page: int, t: float) -> tuple[bool, float]:
        """Copy ``page`` at ``t``: ``(changed since the last copy, last modification)``."""
        ct = self._ct
        q = self._ptr[page]
        e = self._end[page]
        changed = q < e and ct[q] <= t
        while q < e and ct[q] <= t:
            q += 1
        self._ptr[page] = q
        return changed, (ct[q - 1] if q > self._start[page] else -math.inf)


def _poisson_times(
    rng: np.random.Generator, rate: FloatArray, horizon: float, *, grouped: bool = True
) -> tuple[FloatArray, IntArray]:
    """Times of independent Poisson processes on ``[0, horizon]``.

    ``grouped``: sorted by page, then time; otherwise in no particular order (false
    pings are only ever sorted by arrival, so they skip the grouping sort).
    """
    counts = rng.poisson(rate * horizon)
    page = np.repeat(np.arange(rate.size, dtype=np.int64), counts)
    t = rng.uniform(0.0, horizon, page.size)
    if not grouped:
        return t, page
    # one argsort of page * span + t (pages are far apart; page is already grouped by
    # np.repeat, so the key is nearly sorted); if rounding of the key swapped two
    # times of a page (closer than the key's ulp), fall back to the exact lexsort
    order = np.argsort(page * (2.0 * horizon + 1.0) + t)
    t, page = t[order], page[order]
    same = page[1:] == page[:-1]
    if (np.diff(t)[same] < 0).any():  # pragma: no cover - needs times ~1e-8 apart
        order = np.lexsort((t, page))
        t, page = t[order], page[order]
    return t, page


def simulate_events(
    world: World,
    horizon: float,
    rng: np.random.Generator,
    *,
    delay_mean: float = 0.0,
    delay_unit: float = 1.0,
) -> Events:
    """Draw changes and pings for ``world`` on ``[0, horizon]``.

    Parameters
    ----------
    delay_mean : float
        Ping lag in units of ``delay_unit``: each ping arrives ``Poisson(delay_mean) *
        delay_unit`` after its emission (App. C of paper 004 uses a Poisson lag with
        mean 6; we read its unit as one crawl slot, ``delay_unit = 1/R``).  Pings
        arriving after ``horizon`` are dropped.
    """
    if horizon <= 0:
        raise ValueError(f"horizon must be > 0, got {horizon!r}")
    ct, cp = _poisson_times(rng, world.delta, horizon)
    start = np.searchsorted(cp, np.arange(world.m + 1)).astype(np.int64)
    signalled = rng.uniform(size=ct.size) < world.lam[cp]
    ft, fp = _poisson_times(rng, world.nu, horizon, grouped=False)
    emitted = np.concatenate([ct[signalled], ft])
    page = np.concatenate([cp[signalled], fp])
    true = np.concatenate([np.ones(int(signalled.sum()), bool), np.zeros(ft.size, bool)])
    lag = rng.poisson(delay_mean, emitted.size) * delay_unit if delay_mean > 0 else 0.0
    arrival = emitted + lag
    keep = arrival <= horizon
    if not keep.all():
        arrival, emitted, page, true = arrival[keep], emitted[keep], page[keep], true[keep]
    order = np.argsort(arrival)
    return Events(
        change_time=ct,
        change_start=start,
        ping_arrival=arrival[order],
        ping_emitted=emitted[order],
        ping_page=page[order],
        ping_true=true[order],
        horizon=float(horizon),
    )
