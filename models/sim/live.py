"""Simulator configurations that match a live run (``recrawl demo``): pure, no clock, no I/O.

The slot loop of :mod:`models.sim.engine` crawls instantly at evenly spaced slots with an
unlimited fetcher.  A live loop differs in ways that belong to "the same world and budget":

* :func:`testweb_events` - the test web's announcement channels: a sitemap host's change is
  seen only when the poller next polls (several announcements between two polls collapse
  into one ``lastmod``, and a ``lastmod`` that does not move is no ping); an IndexNow host's
  announcements are POSTed in batches every ``flush_interval``.
* :func:`run_timed` - crawl slots at given times (the orders actually emitted), the copy
  taken ``fetch_lag`` after the order and the outcome applied ``outcome_lag`` after it (the
  page is in flight meanwhile and cannot be ordered again), per-host token buckets and a
  per-host cap on orders in flight (the service's :class:`models.decision.hosts.HostBuckets`).
  A policy with a book (:class:`EnginePolicy`) is run on the worker's own engine: its
  orders are :func:`models.decision.core.choose`'s over its
  :class:`models.decision.core.ShardBook`, which holds the flights and the host buckets.
* :class:`EngineAlgorithm1` - Algorithm 1 with given parameters on that engine (the worker's
  host index, floor and buckets), with the worker's ping rule.
* :class:`LiveRuleAlgorithm1` - Algorithm 1 with the worker's ping rules (a ping is dropped
  if its change time or arrival precedes the last crawl, or if it arrives within
  ``t_delay`` of it; App. C).
* :func:`windowed_accuracy` - the paper's accuracy over a window, with every page's copy
  taken at a given initial time.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from models.decision.core import ShardBook, choose
from models.decision.hostindex import HostIndex
from models.decision.hosts import HostBuckets
from models.decision.pings import APPLIED, PingRule, ping_verdict
from models.sim.events import ChangeCursor, Events
from models.sim.policies import Algorithm1

__all__ = [
    "EngineAlgorithm1",
    "EnginePolicy",
    "LiveRuleAlgorithm1",
    "TimedPolicy",
    "live_ping_ok",
    "run_timed",
    "testweb_events",
    "testweb_pings",
    "windowed_accuracy",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def live_ping_ok(last_crawl: float, arrival: float, emitted: float, t_delay: float) -> bool:
    """The worker's rule (``"live"`` of :mod:`models.decision.pings`): keep a ping unless its
    change (or arrival) precedes the last crawl or it arrives within ``t_delay`` after it
    (``last_crawl = -inf``: never crawled)."""
    return ping_verdict("live", t_delay, last_crawl, arrival, emitted) == APPLIED


class LiveRuleAlgorithm1(Algorithm1):
    """:class:`Algorithm1` (true or believed parameters) with the ``"live"`` ping rule."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("ping_rule", "live")
        super().__init__(*args, **kwargs)


def testweb_events(
    delta: FloatArray,
    lam: FloatArray,
    nu: FloatArray,
    delay: FloatArray,
    sitemap: BoolArray,
    horizon: float,
    rng: np.random.Generator,
    *,
    poll_interval: float,
    flush_interval: float,
    poll_phase: float = -1.0,
    lag: float = 0.0,
) -> Events:
    """Changes and pings as the test web produces and the producers deliver them.

    Changes of page ``i`` are Poisson(``delta[i]``) over ``[0, horizon)``; their pings are
    :func:`testweb_pings`'s.
    """
    m = delta.size
    counts = rng.poisson(delta * horizon)
    cp = np.repeat(np.arange(m, dtype=np.int64), counts)
    ct = rng.uniform(0.0, horizon, cp.size)
    order = np.lexsort((ct, cp))
    ct, cp = ct[order], cp[order]
    start = np.searchsorted(cp, np.arange(m + 1)).astype(np.int64)
    arrival, emitted, page, true = testweb_pings(
        ct, cp, lam, nu, delay, sitemap, horizon, rng, poll_interval=poll_interval,
        flush_interval=flush_interval, poll_phase=poll_phase, lag=lag)
    return Events(
        change_time=ct,
        change_start=start,
        ping_arrival=arrival,
        ping_emitted=emitted,
        ping_page=page,
        ping_true=true,
        horizon=float(horizon),
    )


def testweb_pings(
    ct: FloatArray,
    cp: IntArray,
    lam: FloatArray,
    nu: FloatArray,
    delay: FloatArray,
    sitemap: BoolArray,
    horizon: float,
    rng: np.random.Generator,
    *,
    poll_interval: float,
    flush_interval: float,
    poll_phase: float = -1.0,
    lag: float = 0.0,
) -> tuple[FloatArray, FloatArray, IntArray, BoolArray]:
    """The pings of changes at ``ct`` of pages ``cp`` (sorted by page, then time) over
    ``[0, horizon)``, as the test web announces them and the producers deliver them:
    ``(arrival, emitted, page, true)``, by arrival (those arriving after ``horizon``
    dropped).

    Each change is announced with probability ``lam[i]`` after an ``Exp(mean delay[i])``
    time; false announcements are Poisson(``nu[i]``).  A sitemap page's announcement sets
    ``lastmod = max(lastmod, t)``; a ping (emitted at ``lastmod``) arrives at the first poll
    ``phase + k * poll_interval`` at which ``lastmod`` has increased (``phase =
    poll_phase``, or uniform per page if negative).  An IndexNow page's announcement
    arrives at the next flush ``k * flush_interval`` (its emission time is its arrival: an
    IndexNow ping carries no change time).  Every arrival is ``lag`` later still.
    """
    m = lam.size
    signalled = rng.uniform(size=ct.size) < lam[cp]
    d = delay[cp[signalled]]
    ann_t = ct[signalled] + np.where(d > 0, rng.exponential(np.where(d > 0, d, 1.0)), 0.0)
    ann_p = cp[signalled]
    fcounts = rng.poisson(nu * horizon)
    fp = np.repeat(np.arange(m, dtype=np.int64), fcounts)
    ft = rng.uniform(0.0, horizon, fp.size)
    t_all = np.concatenate([ann_t, ft])
    # what an announcement says: a true one the change time, a false one its own time
    v_all = np.concatenate([ct[signalled], ft])
    p_all = np.concatenate([ann_p, fp])
    true_all = np.concatenate([np.ones(ann_t.size, bool), np.zeros(ft.size, bool)])
    o = np.lexsort((t_all, p_all))
    t_all, v_all, p_all, true_all = t_all[o], v_all[o], p_all[o], true_all[o]
    bounds = np.searchsorted(p_all, np.arange(m + 1))
    phase = rng.uniform(0.0, poll_interval, m) if poll_phase < 0 else np.full(m, poll_phase)
    arr: list[float] = []
    emi: list[float] = []
    pg: list[int] = []
    tru: list[bool] = []
    for i in range(m):
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        if lo == hi:
            continue
        ts, vs, tr = t_all[lo:hi], v_all[lo:hi], true_all[lo:hi]
        if sitemap[i]:
            ks = np.ceil((ts - phase[i]) / poll_interval)
            cummax = np.maximum.accumulate(vs)
            last = np.append(ks[1:] != ks[:-1], True)  # last announcement before each poll
            seen = -math.inf
            for kk, lm, j in zip(ks[last].tolist(), cummax[last].tolist(),
                                 np.flatnonzero(last).tolist(), strict=True):
                if lm > seen:
                    arr.append(float(phase[i]) + kk * poll_interval + lag)
                    emi.append(lm)
                    pg.append(i)
                    tru.append(bool(tr[: j + 1][vs[: j + 1] > seen].any()))
                    seen = lm
        else:
            ks = np.unique(np.ceil(ts / flush_interval))  # one URL per POST
            a = ks * flush_interval + lag
            arr.extend(a.tolist())
            emi.extend(a.tolist())
            pg.extend([i] * a.size)
            tru.extend([True] * a.size)  # diagnostics only
    a_arr = np.array(arr, dtype=np.float64)
    keep = a_arr <= horizon
    ordr = np.argsort(a_arr[keep], kind="stable")
    return (a_arr[keep][ordr], np.array(emi, dtype=np.float64)[keep][ordr],
            np.array(pg, dtype=np.int64)[keep][ordr], np.array(tru, dtype=bool)[keep][ordr])


class TimedPolicy:
    """What :func:`run_timed` needs (the :class:`models.sim.policies.Policy` methods, with
    ``on_crawl`` told the fetch time and called when the outcome is applied)."""

    name: str

    def on_ping(self, page: int, arrival: float, emitted: float) -> None: ...

    def choose(self, t: float, eligible: Callable[[int], bool] | None) -> int | None: ...

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None: ...


class EnginePolicy(Protocol):
    """A policy on the worker's engine: :func:`run_timed` picks its orders with
    :func:`models.decision.core.choose` over ``book`` at ``t + offset`` (the book's clock:
    ``offset`` is the epoch of the simulator's time 0), records them in flight there and
    gives the book the run's host buckets; ``on_crawl`` (called when the outcome is
    applied, after the book ended the page's flight) sets the page in the book again."""

    name: str
    book: ShardBook
    offset: float

    def on_ping(self, page: int, arrival: float, emitted: float) -> None: ...

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None: ...


class EngineAlgorithm1(Algorithm1):
    """Algorithm 1 (paper 004) with given ``(alpha, beta, gamma)`` per page on the worker's
    engine as the worker holds it: :class:`models.sim.policies.Algorithm1` with the
    worker's host index (:class:`models.decision.hostindex.HostIndex`) in its book and the
    worker's ping rule (``"live"`` by default).  ``last_crawl``: each page's copy time
    before the run (its origin); ``host``: each page's host."""

    def __init__(self, name: str, mu: FloatArray, alpha: FloatArray, beta: FloatArray,
                 gamma: FloatArray, *, host: IntArray, last_crawl: FloatArray,
                 terms: int | None = None, ping_rule: PingRule = "live",
                 t_delay: float = 0.0) -> None:
        super().__init__(name, mu, alpha, beta, gamma, terms=terms, ping_rule=ping_rule,
                         t_delay=t_delay, index=HostIndex(terms=terms), host=host,
                         last_crawl=last_crawl)


@dataclass(frozen=True)
class TimedResult:
    """Every crawl: order time, fetch time, page (fetch time is when the copy was taken)."""

    order_time: FloatArray
    fetch_time: FloatArray
    page: IntArray
    lost_slots: int


def run_timed(
    events: Events,
    policy: TimedPolicy | EnginePolicy,
    order_times: FloatArray,
    *,
    fetch_lag: FloatArray | float = 0.0,
    outcome_lag: FloatArray | float = 0.0,
    last_crawl: FloatArray | None = None,
    host: IntArray | None = None,
    host_rate: float = math.inf,
    host_burst: float = 1.0,
    host_max_in_flight: int = 0,
) -> TimedResult:
    """Crawl one page at each of ``order_times`` (sorted), the copy taken ``fetch_lag`` later
    and ``policy.on_crawl`` called ``outcome_lag`` after the order (per order or scalar).

    A page is not ordered again while in flight.  With ``host``, a host's token bucket
    (``host_rate`` per unit time, ``host_burst`` tokens) and its in-flight cap (0 = none)
    must allow the order: the service's :class:`models.decision.hosts.HostBuckets`.  An
    :class:`EnginePolicy` (its pages on the hosts ``host``) is run on its book: the buckets
    become its book's, and each order is :func:`models.decision.core.choose`'s.
    ``last_crawl`` (per page) is each page's copy time before the run (the changes before
    it are skipped); default ``-inf`` for none.
    """
    m = events.change_start.size - 1
    n = order_times.size
    flag = np.broadcast_to(np.asarray(fetch_lag, dtype=np.float64), (n,))
    olag = np.broadcast_to(np.asarray(outcome_lag, dtype=np.float64), (n,))
    cursor = ChangeCursor(events, last_crawl)
    pa, pe, pp = (events.ping_arrival.tolist(), events.ping_emitted.tolist(),
                  events.ping_page.tolist())  # fmt: skip
    k = 0
    in_flight = np.zeros(m, dtype=bool)
    hosts = host.tolist() if host is not None else None
    buckets = HostBuckets(host_rate, burst=host_burst,
                          default_max_in_flight=host_max_in_flight)
    book: ShardBook | None = getattr(policy, "book", None)
    offset = float(getattr(policy, "offset", 0.0))
    if book is not None:
        book.hosts = buckets
    pending: list[tuple[float, int, int, float, bool, float]] = []  # outcome_at, seq, ...
    o_t: list[float] = []
    f_t: list[float] = []
    pages: list[int] = []
    lost = 0

    def apply_until(t: float) -> None:
        nonlocal k
        while True:
            next_ping = pa[k] if k < len(pa) else math.inf
            next_out = pending[0][0] if pending else math.inf
            if not pending and k >= len(pa):
                return
            if min(next_ping, next_out) > t:
                return
            if next_out <= next_ping:
                _, _, page, fetched, changed, last_mod = heapq.heappop(pending)
                in_flight[page] = False
                if book is not None:
                    book.end_flight(page)
                elif hosts is not None:
                    buckets.add_in_flight(hosts[page], -1)
                policy.on_crawl(page, fetched, changed, last_mod)
            else:
                policy.on_ping(pp[k], pa[k], pe[k])
                k += 1

    def host_ok_at(t: float) -> Callable[[int], bool]:
        def ok(p: int) -> bool:
            if in_flight[p]:
                return False
            return hosts is None or buckets.room(hosts[p], t) >= 1

        return ok

    for j, t in enumerate(order_times.tolist()):
        apply_until(t)
        page: int | None
        if book is not None:
            now = t + offset
            picks = choose([book], 1, now, floor=len(book.floor) > 0)
            page = int(picks[0].page) if picks else None  # type: ignore[call-overload]
            if page is not None:
                buckets.take(picks[0].host, now)
                book.start_flight(page, (str(j), now))
        else:
            page = policy.choose(t, host_ok_at(t))  # type: ignore[union-attr]
            if page is not None and hosts is not None:
                buckets.take(hosts[page], t)
                buckets.add_in_flight(hosts[page], +1)
        if page is None:
            lost += 1
            continue
        in_flight[page] = True
        tf = t + float(flag[j])
        changed, last_mod = cursor.copy(page, tf)
        heapq.heappush(pending, (t + max(float(olag[j]), float(flag[j])), j, page, tf, changed,
                                 last_mod))
        o_t.append(t)
        f_t.append(tf)
        pages.append(page)
    apply_until(math.inf)
    return TimedResult(np.array(o_t), np.array(f_t), np.array(pages, dtype=np.int64), lost)


def windowed_accuracy(
    mu: FloatArray,
    events: Events,
    fetch_time: FloatArray,
    fetch_page: IntArray,
    *,
    initial_copy: FloatArray,
    start: float,
    stop: float,
) -> float:
    """Request-weighted fraction of ``[start, stop]`` the copies are fresh (Sec. 6.2).

    Page ``i``'s copy is taken at ``initial_copy[i]`` and at each of its fetches; it is
    fresh from a fetch until the page's next change.
    """
    m = mu.size
    t = np.concatenate([initial_copy, fetch_time])
    p = np.concatenate([np.arange(m, dtype=np.int64), fetch_page])
    o = np.lexsort((t, p))
    t, p = t[o], p[o]
    fresh = np.zeros(m)
    for i in range(m):
        lo, hi = np.searchsorted(p, [i, i + 1])
        ts = t[lo:hi]
        ch = events.changes_of(i)
        nxt_fetch = np.append(ts[1:], math.inf)
        k = np.searchsorted(ch, ts, side="right")
        nxt_change = (np.where(k < ch.size, ch[np.minimum(k, ch.size - 1)], math.inf)
                      if ch.size else np.full(ts.size, math.inf))
        e = np.minimum(nxt_fetch, nxt_change)
        cover = np.clip(np.minimum(e, stop) - np.maximum(ts, start), 0.0, None)
        fresh[i] = cover.sum()
    return float((mu * fresh).sum() / (mu.sum() * (stop - start)))
