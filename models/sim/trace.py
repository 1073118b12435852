"""A world whose changes are given, not drawn: replay of a recorded change history.

A :class:`Trace` holds ``m`` pages' importance and change times (in days since the
window's start) over ``[0, horizon]``.  :func:`trace_events` turns it into the
:class:`~models.sim.events.Events` every simulator loop takes, so the replay runs on the
same engine (:func:`models.sim.run`), the same accounting (:func:`models.sim.accuracy`)
and the same policies as the synthetic experiments.  Pings are either synthesised from
the recorded changes with the synthetic worlds' noise model (each change signalled with
probability ``recall``, false pings Poisson at ``false_per_day`` per page, a lag of
``Poisson(6)`` units of ``delay_days / 6``: App. C of paper 004's lag, mean ``delay_days``)
or given as recorded ``(page, time)`` pings.

Conventions of the trace experiment (``recrawl experiments trace``): every page is known
and fresh at ``t = 0``; the window runs from the earliest to the latest change; a change
at ``t = 0`` is already in the initial copy.

:class:`VectorAlgorithm1` is the simulator's Algorithm 1 of paper 004 (ranked by the
:class:`~models.index.CrawlIndex`), with fixed parameters (``hindsight``) or parameters
learned online by :class:`~models.sim.trace_learn.OnlineRates` (``recrawl``: the App. E
estimator of :mod:`models.estimators`, batched), fast enough for 10^5 pages and 10^6
crawls; the learning parts (the learner, the hedge and
:func:`~models.sim.trace_history.complete_history_intervals`, a page's complete change
history as the crawl intervals an estimator consumes, which a policy can swap in at a
given time: ``--learn-days``) are in :mod:`models.sim.trace_learn`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.decision.pings import PingRule, ping_ok
from models.sim.events import Events
from models.sim.policies import Algorithm1, set_origins
from models.sim.trace_history import complete_history_intervals, ping_history_crawls
from models.sim.trace_learn import (
    HALF_LIFE_DAYS,
    Hedge,
    OnlineRates,
    nutch_replay,
)
from models.sim.world import World

__all__ = [
    "HALF_LIFE_DAYS",
    "Hedge",
    "OnlineRates",
    "Trace",
    "VectorAlgorithm1",
    "average_rates",
    "complete_history_intervals",
    "nutch_replay",
    "ping_history_crawls",
    "trace_events",
    "trace_from_arrays",
    "trace_world",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
DAY_S = 86400.0
#: App. C of paper 004: ping lag Poisson with mean 6 (units scaled to the mean delay)
LAG_POISSON_MEAN = 6.0


@dataclass(frozen=True)
class Trace:
    """Recorded changes of ``m`` pages over ``[0, horizon]`` days.

    Attributes
    ----------
    mu : ndarray
        Importance per page (> 0).
    change_time : ndarray
        Change times in days since the start, grouped by page, sorted within a page
        (page ``i``'s are ``change_time[change_start[i]:change_start[i + 1]]``), all in
        ``(0, horizon]``.
    change_start : ndarray of int, shape (m + 1,)
    horizon : float
        Window length in days.
    start_s : float
        Unix time of ``t = 0``.
    host : ndarray of int or None
        Each page's host (an index; ``None``: one host), for the learner's per-host prior.
    """

    mu: FloatArray
    change_time: FloatArray
    change_start: IntArray
    horizon: float
    start_s: float = 0.0
    host: IntArray | None = None

    @property
    def m(self) -> int:
        return int(self.mu.size)

    @property
    def n_changes(self) -> int:
        return int(self.change_time.size)

    def page_of_change(self) -> IntArray:
        out: IntArray = np.repeat(np.arange(self.m, dtype=np.int64), np.diff(self.change_start))
        return out

    def changes_of(self, page: int) -> FloatArray:
        return self.change_time[self.change_start[page]:self.change_start[page + 1]]


def trace_from_arrays(mu: npt.ArrayLike, page: npt.ArrayLike, time_s: npt.ArrayLike, *,
                      start_s: float | None = None, stop_s: float | None = None,
                      host: npt.ArrayLike | None = None) -> Trace:
    """A :class:`Trace` from per-change ``(page, unix time)`` arrays (any order).

    The window is ``[start_s, stop_s]``, by default the earliest and latest change.
    Changes outside it, and at its start (already in the initial copy), are dropped.
    ``host``: each page's host index (default: one host).
    """
    mu_a = np.asarray(mu, dtype=np.float64)
    p = np.asarray(page, dtype=np.int64)
    t = np.asarray(time_s, dtype=np.float64)
    if p.shape != t.shape:
        raise ValueError(f"page and time_s must have one shape, got {p.shape} and {t.shape}")
    if mu_a.ndim != 1 or mu_a.size < 1 or not (np.isfinite(mu_a) & (mu_a > 0)).all():
        raise ValueError("mu must be a non-empty 1-d array of finite importances > 0")
    if p.size and (p.min() < 0 or p.max() >= mu_a.size):
        raise ValueError(f"page indices must be in [0, {mu_a.size})")
    if not np.isfinite(t).all():
        raise ValueError("change times must be finite")
    lo = float(t.min()) if start_s is None and t.size else float(start_s or 0.0)
    hi = float(t.max()) if stop_s is None and t.size else float(stop_s or lo)
    if not hi > lo:
        raise ValueError(f"the window [{lo}, {hi}] is empty: a trace needs changes at two "
                         "different times (or start_s < stop_s)")
    keep = (t > lo) & (t <= hi)
    p, days = p[keep], (t[keep] - lo) / DAY_S
    order = np.lexsort((days, p))
    p, days = p[order], days[order]
    start = np.searchsorted(p, np.arange(mu_a.size + 1)).astype(np.int64)
    hosts = None
    if host is not None:
        hosts = np.asarray(host, dtype=np.int64)
        if hosts.shape != mu_a.shape or (hosts.size and hosts.min() < 0):
            raise ValueError(f"host must be {mu_a.size} host indices >= 0")
    return Trace(mu_a, days, start, (hi - lo) / DAY_S, lo, hosts)


def average_rates(trace: Trace, start: float = 0.0, stop: float | None = None) -> FloatArray:
    """Each page's changes in ``(start, stop]`` per day (hindsight's rates)."""
    stop = trace.horizon if stop is None else stop
    if not stop > start:
        raise ValueError(f"stop must exceed start, got [{start}, {stop}]")
    inside = (trace.change_time > start) & (trace.change_time <= stop)
    counts = np.bincount(trace.page_of_change()[inside], minlength=trace.m)
    out: FloatArray = counts / (stop - start)
    return out


def trace_world(trace: Trace, *, recall: float = 0.0, false_per_day: float = 0.0) -> World:
    """The :class:`World` of a trace: its importance, its average rates over the window
    (for reports only: no policy that learns sees them) and the ping noise."""
    m = trace.m
    return World(
        mu=trace.mu, delta=average_rates(trace), lam=np.full(m, float(recall)),
        nu=np.full(m, float(false_per_day)), host=np.zeros(m, dtype=np.int64),
        host_rate=np.array([np.inf]), top=np.zeros(m, dtype=bool),
    )


def trace_events(
    trace: Trace,
    rng: np.random.Generator | None = None,
    *,
    recall: float = 0.0,
    false_per_day: float = 0.0,
    delay_days: float = 0.0,
    pings: tuple[npt.ArrayLike, npt.ArrayLike] | None = None,
) -> Events:
    """The trace's changes and its pings (synthesised, or recorded ``(page, day)``)."""
    if not 0.0 <= recall <= 1.0:
        raise ValueError(f"recall must be in [0, 1], got {recall!r}")
    if false_per_day < 0 or delay_days < 0:
        raise ValueError("false_per_day and delay_days must be >= 0")
    T = trace.horizon
    ct = trace.change_time
    if pings is not None:
        pp = np.asarray(pings[0], dtype=np.int64)
        pt = np.asarray(pings[1], dtype=np.float64)
        keep = (pt >= 0) & (pt <= T)
        pp, pt = pp[keep], pt[keep]
        order = np.argsort(pt, kind="stable")
        return Events(ct, trace.change_start, pt[order], pt[order], pp[order],
                      np.zeros(order.size, dtype=bool), T)
    if rng is None:
        if recall > 0 or false_per_day > 0:
            raise ValueError("synthesised pings need an rng")
        rng = np.random.default_rng(0)
    cp = trace.page_of_change()
    signalled = rng.uniform(size=ct.size) < recall if recall > 0 else np.zeros(ct.size, bool)
    n_false = rng.poisson(false_per_day * T, trace.m) if false_per_day > 0 else np.zeros(
        trace.m, dtype=np.int64)
    fp = np.repeat(np.arange(trace.m, dtype=np.int64), n_false)
    ft = rng.uniform(0.0, T, fp.size)
    emitted = np.concatenate([ct[signalled], ft])
    page = np.concatenate([cp[signalled], fp])
    true = np.concatenate([np.ones(int(signalled.sum()), bool), np.zeros(ft.size, bool)])
    if delay_days > 0 and emitted.size:
        lag = rng.poisson(LAG_POISSON_MEAN, emitted.size) * (delay_days / LAG_POISSON_MEAN)
        arrival = emitted + lag
    else:
        arrival = emitted.copy()
    keep = arrival <= T
    arrival, emitted, page, true = arrival[keep], emitted[keep], page[keep], true[keep]
    order = np.argsort(arrival, kind="stable")
    return Events(ct, trace.change_start, arrival[order], emitted[order], page[order],
                  true[order], T)


class VectorAlgorithm1(Algorithm1):
    """The simulator's :class:`~models.sim.Algorithm1` (paper 004 Algorithm 1 over the
    :class:`~models.index.CrawlIndex`) with the trace experiment's options.

    The value is :func:`models.values.crawl_value` at ``tau_eff = t - origin`` with the
    page's ``(alpha, beta, gamma)``; ``origin`` is the last crawl moved back ``beta`` per
    accepted ping (Sec. 3; ``-inf`` for ``beta = inf``).  A slot crawls the page of largest
    value, a step of ``k`` crawls the ``k`` largest (:func:`models.sim.run`'s batched
    budget), found by the index without evaluating every page.  With ``learner`` the
    parameters are re-estimated after each crawl and the crawled pages re-keyed
    (``recrawl``); ``warm`` = ``(at, fn)`` calls ``fn(policy)`` before the first slot at or
    after ``at`` (e.g. to import a history into the learner, or to set new fixed
    parameters) and re-reads every page's parameters.  ``hedge`` gives its share of the
    crawls to its floor (:meth:`~models.sim.trace_learn.Hedge.floor_pages`).
    """

    def __init__(self, name: str, mu: FloatArray, alpha: FloatArray | None = None,
                 beta: FloatArray | None = None, gamma: FloatArray | None = None, *,
                 learner: OnlineRates | None = None, ping_rule: PingRule = "accept",
                 warm: tuple[float, Callable[[VectorAlgorithm1], None]] | None = None,
                 hedge: Hedge | None = None) -> None:
        self.hedge = hedge
        self.learner = learner
        if learner is not None:
            a, b, g = learner.params()
        else:
            if alpha is None or beta is None or gamma is None:
                raise ValueError("fixed parameters need alpha, beta and gamma")
            a, b, g = (np.asarray(x, dtype=np.float64).copy() for x in (alpha, beta, gamma))
        super().__init__(name, mu, a, b, g, ping_rule=ping_rule)
        self.n_pings = np.zeros(self.mu.size)
        self._warm = warm

    def _rekey_all(self) -> None:
        """Every page's parameters and origin into the index (after new parameters)."""
        for i, (o, a, b, g, u) in enumerate(zip(
                self.origin.tolist(), self.alpha.tolist(), self.beta.tolist(),
                self.gamma.tolist(), self.mu.tolist(), strict=True)):
            self.index.upsert(i, origin=o, alpha=a, beta=b, gamma=g, mu=u)

    def _maybe_warm(self, t: float) -> None:
        if self._warm is not None and t >= self._warm[0]:
            fn = self._warm[1]
            self._warm = None
            fn(self)
            if self.learner is not None:
                self.learner.take_moved()
                self.alpha, self.beta, self.gamma = self.learner.params()
            # pings since each page's last crawl still count, on the new beta
            self.origin = np.where(np.isinf(self.beta) & (self.n_pings > 0), -np.inf,
                                   self.last_crawl - np.where(self.n_pings > 0,
                                                              self.beta * self.n_pings, 0.0))
            self._rekey_all()

    def _believed_rate(self, pages: IntArray) -> FloatArray:
        """The change rate ``Delta`` the parameters of ``pages`` stand for (Sec. 3 of paper
        004: ``Delta = alpha + gamma (1 - exp(-alpha beta))``; ``alpha`` without pings)."""
        a, b, g = self.alpha[pages], self.beta[pages], self.gamma[pages]
        with np.errstate(invalid="ignore", over="ignore"):
            extra = np.where(g > 0, g * -np.expm1(-a * b), 0.0)
        out: FloatArray = a + np.nan_to_num(extra, nan=0.0)
        return out

    def values(self, t: float) -> FloatArray:
        """Every page's crawl value at ``t`` (a full evaluation, for checks)."""
        from models.values import crawl_value

        with np.errstate(invalid="ignore", over="ignore"):
            v = crawl_value(t - self.origin, self.alpha, self.beta, self.gamma, self.mu)
        return np.nan_to_num(np.asarray(v, dtype=np.float64), nan=0.0)

    def on_ping(self, page: int, arrival: float, emitted: float) -> None:
        self.on_pings(np.array([page]), np.array([arrival]), np.array([emitted]))

    def on_pings(self, pages: IntArray, arrivals: FloatArray, emitted: FloatArray) -> None:
        # every accepted ping counts for the learner; only pages with gamma > 0 move
        ok = ping_ok(self.ping_rule, self.t_delay, self.last_crawl[pages], arrivals, emitted)
        got = pages[ok]
        if not got.size:
            return
        np.add.at(self.n_pings, got, 1.0)
        use = got[self.gamma[got] > 0]
        if not use.size:
            return
        before = self.origin[use]
        np.subtract.at(self.origin, use, self.beta[use])  # beta = inf: origin -> -inf
        moved = use[self.origin[use] != before]
        if moved.size:
            set_origins(self.index, moved, self.origin[moved])

    def choose(self, t: float, eligible: Callable[[int], bool] | None) -> int | None:
        self._maybe_warm(t)
        if eligible is None and self.hedge is not None and self.hedge.floor_crawls(1):
            return int(self.hedge.floor_pages(t, self.last_crawl, self.mu, 1)[0])
        return super().choose(t, eligible)

    def choose_many(self, t: float, k: int) -> list[int]:
        self._maybe_warm(t)
        m = self.mu.size
        k = min(k, m)
        n_floor = self.hedge.floor_crawls(k) if self.hedge is not None else 0
        if not n_floor:
            return super().choose_many(t, k)
        assert self.hedge is not None
        old = self.hedge.floor_pages(t, self.last_crawl, self.mu, n_floor)
        rest = k - n_floor
        out: list[int] = old.tolist()
        if rest > 0:
            taken = set(out)
            for p in super().choose_many(t, k):  # the engine's pick (positive values)
                if p not in taken:
                    out.append(p)
                    if len(out) == k:
                        break
        return out

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None:
        self.on_crawls(np.array([page], dtype=np.int64), t, np.array([changed]),
                       np.array([last_modified]))

    def on_crawls(self, pages: IntArray, t: float, changed: npt.NDArray[np.bool_],
                  last_modified: FloatArray) -> None:
        if not pages.size:
            return
        tau = t - self.last_crawl[pages]
        self.last_crawl[pages] = t
        self.origin[pages] = t
        if self.learner is None:
            self.n_pings[pages] = 0.0
            set_origins(self.index, pages, np.full(pages.size, t))
            return
        if self.hedge is not None:
            self.hedge.observe(pages, self._believed_rate(pages), tau, changed, t)
        self.learner.update(pages, tau, changed, self.n_pings[pages], np.full(pages.size, t))
        self.n_pings[pages] = 0.0
        # the pages of hosts whose prior moved rank under its new value (with the crawled)
        pages = np.union1d(pages, self.learner.take_moved())
        a, b, g = self.learner.params(pages)
        self.alpha[pages], self.beta[pages], self.gamma[pages] = a, b, g
        for p, o, ai, bi, gi, ui in zip(pages.tolist(), self.origin[pages].tolist(), a.tolist(),
                                        b.tolist(), g.tolist(), self.mu[pages].tolist(),
                                        strict=True):
            self.index.upsert(p, origin=o, alpha=ai, beta=bi, gamma=gi, mu=ui)
