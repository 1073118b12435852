"""Slot-driven simulation loop and the paper's accuracy metric (paper 004 Sec. 6).

:func:`run` feeds pings (by arrival time) and crawl slots to a policy.  Slots follow a
:class:`Budget` (a crawl rate that may change over time, App. D): the next slot is
``1/R(t)`` after the previous one, so every policy spends exactly the same crawls.
Per-host limits (blog, paper 001) make a page eligible only when its host has a token in
the service's bucket (:class:`models.decision.hosts.HostBuckets`, burst 1: its last crawl
is at least ``1/k_host`` ago); a slot with no eligible page is lost.  A policy with a book
(Algorithm 1: :class:`models.decision.core.ShardBook`) is given those buckets and picks
under them with the worker's rule (:func:`models.decision.core.choose`); the others are
given a per-page filter.

Accuracy (Sec. 6.2) is the request-weighted fraction of time the cached copy is fresh,
``sum_i mu_i fresh_time_i / (sum_i mu_i * T)``: the expectation, given the realised
changes and crawls, of the fraction of Poisson requests served fresh (the paper counts
sampled requests; the integral has the same mean and less noise).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.decision.hosts import HostBuckets
from models.sim.events import ChangeCursor, Events
from models.sim.policies import Policy
from models.sim.world import World

__all__ = [
    "Budget",
    "RunResult",
    "accuracy",
    "accuracy_curve",
    "crawl_rates",
    "run",
    "stale_share",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Budget:
    """Crawl rate over time: ``rate`` from ``t = 0``, then ``(time, rate)`` changes (App. D)."""

    rate: float
    changes: tuple[tuple[float, float], ...] = ()
    #: crawls per step: ``batch > 1`` groups every ``batch`` consecutive slots into one
    #: step at the time of its last slot (Sec. 6.7: 5000 crawls per step)
    batch: int = 1

    def slot_times(self, horizon: float) -> FloatArray:
        """Slot times in ``(0, horizon]``: ``t_{j+1} = t_j + 1/R(t_j)``."""
        if self.rate <= 0 or any(r <= 0 for _, r in self.changes):
            raise ValueError("budget rates must be > 0")
        pieces = [(0.0, self.rate), *sorted(self.changes)]
        out: list[FloatArray] = []
        t = 0.0
        for k, (start, r) in enumerate(pieces):
            end = pieces[k + 1][0] if k + 1 < len(pieces) else horizon
            end = min(end, horizon)
            t = max(t, start)
            n = math.floor((end - t) * r + 1e-9)
            if n > 0:
                out.append(t + np.arange(1, n + 1) / r)
                t = t + n / r
        return np.concatenate(out) if out else np.zeros(0)


@dataclass(frozen=True)
class RunResult:
    """Crawl log of one run: ``crawl_time[j]``, ``crawl_page[j]`` for every crawl made."""

    policy: str
    crawl_time: FloatArray
    crawl_page: IntArray
    slots: int


def run(
    world: World,
    events: Events,
    policy: Policy,
    budget: Budget,
    *,
    host_limits: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Simulate ``policy`` on ``(world, events)`` until ``events.horizon``."""
    slots = budget.slot_times(events.horizon)
    if budget.batch < 1:
        raise ValueError(f"budget batch must be >= 1, got {budget.batch!r}")
    if budget.batch > 1:
        return _run_steps(world, events, policy, budget, slots, host_limits=host_limits,
                          progress=progress)
    n_slots = slots.size
    plan = getattr(policy, "plan", None)
    if plan is not None:  # Algorithm 1: batch value evaluation over upcoming slots
        plan(slots)
    cursor = ChangeCursor(events)
    pa, pe, pp = events.ping_arrival, events.ping_emitted, events.ping_page
    n_pings = pa.size
    k = 0
    host = world.host
    buckets = host_buckets(world) if host_limits else None
    filtered = _give_buckets(policy, world, buckets)
    times = np.empty(n_slots)
    pages = np.empty(n_slots, dtype=np.int64)
    made = 0
    pa_l, pe_l, pp_l = pa.tolist(), pe.tolist(), pp.tolist()
    on_pings = getattr(policy, "on_pings", None)
    # pings up to each slot, as one batch per slot when the policy takes batches
    upto = np.searchsorted(pa, slots, side="right").tolist() if on_pings is not None else []
    for j, t in enumerate(slots.tolist()):
        if on_pings is not None:
            k2 = upto[j]
            if k2 > k:
                on_pings(pp[k:k2], pa[k:k2], pe[k:k2])
                k = k2
        while k < n_pings and pa_l[k] <= t:
            policy.on_ping(pp_l[k], pa_l[k], pe_l[k])
            k += 1
        page = policy.choose(t, _has_room(buckets, host, t) if filtered else None)
        if page is None:
            continue
        changed, last_mod = cursor.copy(page, t)
        policy.on_crawl(page, t, changed, last_mod)
        if buckets is not None:
            buckets.take(int(host[page]), t)
        times[made] = t
        pages[made] = page
        made += 1
        if progress is not None and (j & 1023) == 0:
            progress(j, n_slots)
    return RunResult(getattr(policy, "name", "policy"), times[:made], pages[:made], n_slots)


def host_buckets(world: World) -> HostBuckets | None:
    """The world's host limits as the service's token buckets
    (:class:`models.decision.hosts.HostBuckets`, burst 1: a host is available again
    ``1/k_host`` after its last crawl); None when no host is limited."""
    limited = np.flatnonzero(np.isfinite(world.host_rate))
    if not limited.size:
        return None
    buckets = HostBuckets(math.inf, burst=1.0)
    for h, rate in zip(limited.tolist(), world.host_rate[limited].tolist(), strict=True):
        buckets.set_capacity(h, rate, None)
    return buckets


def _give_buckets(policy: Policy, world: World, buckets: HostBuckets | None) -> bool:
    """A book's policy gets the run's host buckets (its pages must be on the world's
    hosts); returns whether the policy needs a per-page filter instead (no book)."""
    if buckets is None:
        return False
    book = getattr(policy, "book", None)
    if book is None:
        return True
    host = getattr(policy, "host", None)
    if host is None or not np.array_equal(host, world.host):
        raise ValueError(f"policy {getattr(policy, 'name', policy)!r} has its pages on other "
                         "hosts than the world's: build it with host=world.host")
    book.hosts = buckets
    return False


def _has_room(buckets: HostBuckets | None, host: IntArray, now: float
              ) -> Callable[[int], bool]:
    """Whether page ``p``'s host has a token at ``now`` (the service's bucket rule)."""
    assert buckets is not None
    room = buckets.room

    def eligible(p: int) -> bool:
        return room(int(host[p]), now) >= 1

    return eligible


def _run_steps(
    world: World,
    events: Events,
    policy: Policy,
    budget: Budget,
    slots: FloatArray,
    *,
    host_limits: bool,
    progress: Callable[[int, int], None] | None,
) -> RunResult:
    """:func:`run` with ``budget.batch`` crawls per step, all at the step's time.

    A policy with ``choose_many(t, k)`` (Algorithm 1: the ``k`` largest values, the
    same pages as ``k`` sequential picks since a crawled page's value drops to 0)
    picks a step at once; others pick one page at a time.
    """
    k = budget.batch
    n_steps = slots.size // k
    steps = slots[k - 1 :: k][:n_steps]
    # no plan(): a step's candidates are mostly crawled in that step, so values are
    # computed for the step only (a window of future steps would be wasted)
    cursor = ChangeCursor(events)
    pa, pe, pp = events.ping_arrival, events.ping_emitted, events.ping_page
    upto = np.searchsorted(pa, steps, side="right").tolist()
    on_pings = getattr(policy, "on_pings", None)
    choose_many = getattr(policy, "choose_many", None)
    on_crawls = getattr(policy, "on_crawls", None)
    host = world.host
    buckets = host_buckets(world) if host_limits else None
    limited = buckets is not None
    filtered = _give_buckets(policy, world, buckets)
    times: list[FloatArray] = []
    pages_out: list[IntArray] = []
    q0 = 0
    for j, t in enumerate(steps.tolist()):
        q1 = upto[j]
        if q1 > q0:
            if on_pings is not None:
                on_pings(pp[q0:q1], pa[q0:q1], pe[q0:q1])
            else:
                for p_, a_, e_ in zip(pp[q0:q1].tolist(), pa[q0:q1].tolist(),
                                      pe[q0:q1].tolist(), strict=True):
                    policy.on_ping(p_, a_, e_)
            q0 = q1
        picked: list[int] = []
        if choose_many is not None and on_crawls is not None and not limited:
            # the whole step at once: the policy sees the step's crawls together
            got_pages = np.asarray(choose_many(t, k), dtype=np.int64)
            chg = np.zeros(got_pages.size, dtype=bool)
            lmod = np.full(got_pages.size, -math.inf)
            for n, page in enumerate(got_pages.tolist()):
                chg[n], lmod[n] = cursor.copy(page, t)
            on_crawls(got_pages, t, chg, lmod)
            times.append(np.full(got_pages.size, t))
            pages_out.append(got_pages)
            if progress is not None:
                progress(j, n_steps)
            continue
        if choose_many is not None and not limited:
            picked = [int(p_) for p_ in choose_many(t, k)]
            crawl_now = picked
        else:
            crawl_now = []
        for n in range(k):
            if crawl_now:
                if n >= len(crawl_now):
                    break
                page = crawl_now[n]
            else:
                got = policy.choose(t, _has_room(buckets, host, t) if filtered else None)
                if got is None:
                    break
                page = got
                picked.append(page)
            changed, last_mod = cursor.copy(page, t)
            policy.on_crawl(page, t, changed, last_mod)
            if buckets is not None:
                buckets.take(int(host[page]), t)
        times.append(np.full(len(picked), t))
        pages_out.append(np.asarray(picked, dtype=np.int64))
        if progress is not None:
            progress(j, n_steps)
    ctime = np.concatenate(times) if times else np.zeros(0)
    cpage = np.concatenate(pages_out) if pages_out else np.zeros(0, dtype=np.int64)
    return RunResult(getattr(policy, "name", "policy"), ctime, cpage, n_steps * k)


def _fresh_intervals(
    world: World, events: Events, crawl_time: FloatArray, crawl_page: IntArray
) -> tuple[FloatArray, FloatArray, IntArray]:
    """``(start, end, page)`` of every fresh interval (all pages fresh at ``t = 0``)."""
    m = world.m
    t = np.concatenate([np.zeros(m), crawl_time])
    p = np.concatenate([np.arange(m, dtype=np.int64), crawl_page])
    order = np.lexsort((t, p))
    t, p = t[order], p[order]
    nxt = np.full(t.size, events.horizon)
    same = p[1:] == p[:-1]
    nxt[:-1] = np.where(same, t[1:], events.horizon)
    # next change after each crawl: search in the (page, time)-sorted change list
    scale = 4.0 * events.horizon + 4.0
    ckey = events.change_time + scale * np.repeat(
        np.arange(m, dtype=np.float64), np.diff(events.change_start)
    )
    k = np.searchsorted(ckey, t + scale * p, side="right")
    kk = np.minimum(k, max(ckey.size - 1, 0))
    if ckey.size:
        has = (k < ckey.size) & (kk < events.change_start[p + 1]) & (kk >= events.change_start[p])
        nchg = np.where(has, events.change_time[kk], np.inf)
    else:
        nchg = np.full(t.size, np.inf)
    return t, np.minimum(nchg, nxt), p


def accuracy(
    world: World,
    events: Events,
    result: RunResult,
    *,
    start: float = 0.0,
    stop: float | None = None,
) -> float:
    """Request-weighted fraction of ``[start, stop]`` the cache is fresh (Sec. 6.2)."""
    stop = events.horizon if stop is None else stop
    s, e, p = _fresh_intervals(world, events, result.crawl_time, result.crawl_page)
    cover = np.clip(np.minimum(e, stop) - np.maximum(s, start), 0.0, None)
    return float((world.mu[p] * cover).sum() / (world.mu.sum() * (stop - start)))


def accuracy_curve(
    world: World, events: Events, result: RunResult, edges: npt.ArrayLike
) -> FloatArray:
    """Accuracy within each window ``[edges[k], edges[k+1]]`` (App. D, Fig. 12)."""
    s, e, p = _fresh_intervals(world, events, result.crawl_time, result.crawl_page)
    w = world.mu[p]
    x = np.asarray(edges, dtype=np.float64)

    def covered(xs: FloatArray, a: FloatArray, wt: FloatArray) -> FloatArray:
        # sum_i w_i max(0, x - a_i) for each x
        order = np.argsort(a)
        a_s, w_s = a[order], wt[order]
        cw = np.concatenate([[0.0], np.cumsum(w_s)])
        cwa = np.concatenate([[0.0], np.cumsum(w_s * a_s)])
        k = np.searchsorted(a_s, xs, side="right")
        out: FloatArray = xs * cw[k] - cwa[k]
        return out

    f = covered(x, s, w) - covered(x, e, w)
    out: FloatArray = np.diff(f) / (np.diff(x) * world.mu.sum())
    return out


def crawl_rates(world: World, result: RunResult, *, start: float, stop: float) -> FloatArray:
    """Empirical crawl rate of each page over ``[start, stop]`` (Fig. 5, 7, 10)."""
    sel = (result.crawl_time >= start) & (result.crawl_time <= stop)
    out: FloatArray = np.bincount(result.crawl_page[sel], minlength=world.m) / (stop - start)
    return out


def stale_share(
    world: World, events: Events, result: RunResult, *, factor: float = 5.0,
    start: float = 0.0,
) -> float:
    """Importance-weighted share of time pages spend *very* stale.

    A page is very stale when its copy is out of date and its last crawl is more than
    ``factor / Delta_i`` ago (``factor`` mean change intervals): the paper 003 risk of
    pages forgotten while their estimate converges.
    """
    m = world.m
    t = np.concatenate([np.zeros(m), result.crawl_time])
    p = np.concatenate([np.arange(m, dtype=np.int64), result.crawl_page])
    order = np.lexsort((t, p))
    t, p = t[order], p[order]
    nxt = np.full(t.size, events.horizon)
    same = p[1:] == p[:-1]
    nxt[:-1] = np.where(same, t[1:], events.horizon)
    with np.errstate(divide="ignore"):
        limit = t + factor / world.delta[p]
    a = np.maximum(limit, start)
    span = np.clip(nxt - a, 0.0, None)
    return float((world.mu[p] * span).sum() / (world.mu.sum() * (events.horizon - start)))
