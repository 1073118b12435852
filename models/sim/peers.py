"""Policies of the simulator that are no Algorithm 1, spending the same slots (one crawl per slot).

* :class:`ScheduledPolicy` - a precomputed sequence, e.g. LDS (Azar et al., Algorithm 3;
  :func:`models.policies.low_discrepancy_schedule`) on the optimal rates of eq. 5.
* Peers, from their documented rules, serving due pages in order at rate R:
  :class:`NutchAdaptive` (Apache Nutch ``AdaptiveFetchSchedule``),
  :class:`StormCrawlerAdaptive` (StormCrawler ``AdaptiveScheduler``) and
  :class:`RoundRobin`.

Pings reach the peers through :mod:`models.decision.pings`' rule, as they reach
Algorithm 1 (:mod:`models.sim.policies`).
"""

from __future__ import annotations

import heapq
import math

import numpy as np
import numpy.typing as npt

from models.decision.pings import APPLIED, PingRule, ping_verdict
from models.sim.policies import Eligible, FloatArray, IntArray

__all__ = [
    "NutchAdaptive",
    "RoundRobin",
    "ScheduledPolicy",
    "StormCrawlerAdaptive",
    "nutch_interval",
]


class ScheduledPolicy:
    """Crawl a precomputed page sequence (LDS of Azar et al., Sec. 6.4 of paper 004)."""

    def __init__(self, name: str, sequence: IntArray) -> None:
        self.name = name
        self._seq = np.asarray(sequence, dtype=np.int64)
        self._j = 0

    def on_ping(self, page: int, arrival: float, emitted: float) -> None:
        return None

    def choose(self, t: float, eligible: Eligible) -> int | None:
        if self._j >= self._seq.size:
            return None
        p = int(self._seq[self._j])
        self._j += 1
        if eligible is not None and not eligible(p):
            return None
        return p

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None:
        return None


class _DueOrder:
    """Serve pages in order of their due time, one per slot (peers' fetch queues).

    A page whose host has no token is skipped (it keeps its place); a ping, when
    ``use_pings``, makes the page due at the ping's arrival (a "refetch now" hint).
    """

    name = "due-order"

    def __init__(self, m: int, first_due: FloatArray, *, use_pings: bool,
                 ping_rule: PingRule = "accept", t_delay: float = 0.0) -> None:
        self.due = np.asarray(first_due, dtype=np.float64).copy()
        self.last_crawl = np.zeros(m)
        self.use_pings = use_pings
        self.ping_rule: PingRule = ping_rule
        self.t_delay = t_delay
        self._ver = np.zeros(m, dtype=np.int64)
        self._heap = [(float(self.due[i]), i, 0) for i in range(m)]
        heapq.heapify(self._heap)

    def _set_due(self, page: int, due: float) -> None:
        self.due[page] = due
        self._ver[page] += 1
        heapq.heappush(self._heap, (due, page, int(self._ver[page])))

    def on_ping(self, page: int, arrival: float, emitted: float) -> None:
        if not self.use_pings or ping_verdict(
            self.ping_rule, self.t_delay, float(self.last_crawl[page]), arrival, emitted
        ) != APPLIED:
            return
        if arrival < self.due[page]:
            self._set_due(page, arrival)

    def choose(self, t: float, eligible: Eligible) -> int | None:
        skipped: list[tuple[float, int, int]] = []
        out: int | None = None
        heap = self._heap
        while heap and len(skipped) < 4096:
            due, p, ver = heapq.heappop(heap)
            if ver != self._ver[p]:
                continue
            if eligible is None or eligible(p):
                out = p
                self._ver[p] += 1  # taken; on_crawl sets the next due time
                break
            skipped.append((due, p, ver))
        for e in skipped:
            heapq.heappush(heap, e)
        return out

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None:
        self.last_crawl[page] = t
        self._set_due(page, self.next_due(page, t, changed, last_modified))

    def next_due(self, page: int, t: float, changed: bool, last_modified: float) -> float:
        raise NotImplementedError


def nutch_interval(interval: FloatArray | float, changed: npt.NDArray[np.bool_] | bool, *,
                   inc_rate: float = 0.4, dec_rate: float = 0.2) -> FloatArray:
    """Apache Nutch ``AdaptiveFetchSchedule``'s interval step (its documented rule, before
    the clamp and ``sync_delta``): ``interval * (1 - dec_rate)`` after a fetch that found
    the page modified, ``interval * (1 + inc_rate)`` after one that did not."""
    out: FloatArray = np.asarray(interval, dtype=np.float64) * np.where(
        changed, 1.0 - dec_rate, 1.0 + inc_rate)
    return out


class NutchAdaptive(_DueOrder):
    """Apache Nutch ``AdaptiveFetchSchedule``, from its documented rules.

    Documented in ``nutch-default.xml`` / the class javadoc: the fetch interval is
    multiplied by ``1 + inc_rate`` (0.4) when the page is unmodified and by
    ``1 - dec_rate`` (0.2) when modified, then clamped to ``[min_interval,
    max_interval]``.  With ``sync_delta`` the next fetch is pulled towards the page's
    change time: ``delta = fetch_time - last_modified``; if ``delta`` is shorter than
    the interval the interval becomes ``delta``, and the next fetch time is
    ``fetch_time + interval - sync_delta_rate * delta`` (rate 0.3).  ``last_modified``
    is the page's ``Last-Modified``, its latest change before the fetch.
    """

    def __init__(self, m: int, *, initial_interval: float, min_interval: float,
                 max_interval: float, rng: np.random.Generator, use_pings: bool = False,
                 ping_rule: PingRule = "accept", inc_rate: float = 0.4, dec_rate: float = 0.2,
                 sync_delta: bool = True, sync_delta_rate: float = 0.3) -> None:
        super().__init__(m, rng.uniform(0, initial_interval, m), use_pings=use_pings,
                         ping_rule=ping_rule)
        self.name = "nutch"
        self.interval = np.full(m, float(initial_interval))
        self.min_interval, self.max_interval = float(min_interval), float(max_interval)
        self.inc, self.dec = inc_rate, dec_rate
        self.sync, self.sync_rate = sync_delta, sync_delta_rate

    def next_due(self, page: int, t: float, changed: bool, last_modified: float) -> float:
        iv = float(nutch_interval(float(self.interval[page]), changed, inc_rate=self.inc,
                                  dec_rate=self.dec))
        ref = t
        if self.sync and changed and last_modified > -math.inf:
            delta = t - last_modified
            if delta < iv:
                iv = delta
            ref = t - self.sync_rate * delta
        iv = min(max(iv, self.min_interval), self.max_interval)
        self.interval[page] = iv
        return ref + iv


class StormCrawlerAdaptive(_DueOrder):
    """StormCrawler ``AdaptiveScheduler``, from its documented rules.

    Changed (signature differs): ``I <- (1 - 0.5) I + 0.5 I_min``; unchanged:
    ``I <- min(I (1 + 0.5), I_max)``; next fetch at ``t + I``.
    """

    def __init__(self, m: int, *, initial_interval: float, min_interval: float,
                 max_interval: float, rng: np.random.Generator, use_pings: bool = False,
                 ping_rule: PingRule = "accept", fetch_interval_rate: float = 0.5) -> None:
        super().__init__(m, rng.uniform(0, initial_interval, m), use_pings=use_pings,
                         ping_rule=ping_rule)
        self.name = "stormcrawler"
        self.interval = np.full(m, float(initial_interval))
        self.min_interval, self.max_interval = float(min_interval), float(max_interval)
        self.rate = fetch_interval_rate

    def next_due(self, page: int, t: float, changed: bool, last_modified: float) -> float:
        iv = float(self.interval[page])
        if changed:
            iv = (1 - self.rate) * iv + self.rate * self.min_interval
        else:
            iv = min(iv * (1 + self.rate), self.max_interval)
        self.interval[page] = iv
        return t + iv


class RoundRobin(_DueOrder):
    """Uniform round robin: every page once per cycle, in a fixed random order."""

    def __init__(self, m: int, *, rng: np.random.Generator, use_pings: bool = False) -> None:
        super().__init__(m, rng.permutation(m).astype(np.float64), use_pings=use_pings)
        self.name = "round-robin"
        self._m = m

    def next_due(self, page: int, t: float, changed: bool, last_modified: float) -> float:
        return float(self.due[page]) + self._m
