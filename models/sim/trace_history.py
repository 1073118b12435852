"""A recorded history as the crawl intervals an estimator learns from: a complete change
history alone (:func:`complete_history_intervals`) or with its recorded pings
(:func:`ping_history_crawls`).  ``recrawl experiments trace --learn-days`` learns from them
(:meth:`models.sim.trace_learn.OnlineRates.learn_complete`) and ``recrawl import`` sends the
same crawls to a worker (:mod:`streams.histories.observations`).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["complete_history_intervals", "ping_history_crawls"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def complete_history_intervals(changes: FloatArray, start: float, stop: float,
                               eps: float) -> list[tuple[float, bool]]:
    """A complete change history on ``(start, stop]`` as crawl intervals ``(tau, changed)``.

    A complete history is the limit of crawls infinitely often: each change at ``c`` after
    the previous one at ``c'`` is an unchanged interval of ``c - c' - eps`` and a changed
    one of ``eps`` (likelihood ``exp(-r (c - c' - eps)) (1 - exp(-r eps))``, which tends
    to ``r eps exp(-r (c - c'))``: up to the constant ``eps``, the Poisson likelihood of
    the gap; paper 003 eq. (2) then solves to the complete-data MLE ``n / observed time``
    as ``eps -> 0``); the time after the last change is one unchanged interval.
    """
    out: list[tuple[float, bool]] = []
    prev = start
    for c in changes.tolist():
        if c <= start or c > stop:
            continue
        gap = c - prev
        e = min(eps, gap / 2.0) if gap > 0 else 0.0
        if gap - e > 0:
            out.append((gap - e, False))
        out.append((max(e, 1e-12), True))
        prev = c
    if stop > prev:
        out.append((stop - prev, False))
    return out


def ping_history_crawls(changes: FloatArray, pings: FloatArray, start: float, stop: float
                        ) -> tuple[FloatArray, npt.NDArray[np.bool_], IntArray]:
    """A complete change history on ``(start, stop]`` and its recorded pings (arrival times,
    sorted) as the crawls of a crawler that fetched the page at every ping's arrival and on
    a fixed grid of period ``(stop - start) / (n + 1)`` (``n`` the page's changes in the
    window: its mean gap between changes), and at ``stop``.

    Returns the crawl times (ascending, after ``start``, the last ``stop``), whether the page
    changed since the previous crawl (or ``start``), and the pings in each crawl's interval
    (pings outside the window are in none).

    Why crawls and not the change times: paper 004 App. E's likelihood (``P(no change) =
    exp(-alpha*tau - sum_s kappa_s*n_s)``) is that of a crawl interval given its signal
    counts, and it holds for crawl times chosen from what is already known (a ping that has
    arrived, a fixed grid), as the live worker's are.  The change times' own chop
    (:func:`complete_history_intervals`) ends an interval at each change, so every ping,
    which arrives after its change, would fall in the next interval, one in which the page
    did not change: the pings would look false.  The grid keeps the crawls about one per
    change, as a scheduler's crawl interval follows the change period (paper 003 Sec. 5),
    so the history still pins the change rate.
    """
    changes = np.asarray(changes, dtype=np.float64)
    pings = np.asarray(pings, dtype=np.float64)
    inside = changes[(changes > start) & (changes <= stop)]
    period = (stop - start) / (inside.size + 1)
    grid = start + period * np.arange(1, inside.size + 1, dtype=np.float64)
    arrived = pings[(pings > start) & (pings <= stop)]
    times = np.unique(np.concatenate([grid[grid < stop], arrived, [stop]]))
    prev = np.concatenate([[start], times[:-1]])
    changed = (np.searchsorted(inside, times, side="right")
               > np.searchsorted(inside, prev, side="right"))
    counts = np.diff(np.searchsorted(pings, np.concatenate([[start], times]), side="right"))
    return times, changed, counts.astype(np.int64)
