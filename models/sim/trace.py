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
learned online by :class:`OnlineRates` (``recrawl``: the App. E estimator of
:mod:`models.estimators`, batched), fast enough for 10^5 pages and 10^6 crawls.
:func:`complete_history_intervals` gives a page's complete change history as the crawl
intervals an estimator consumes; a policy can swap in estimates learned from it at a given
time (``--learn-days``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np
import numpy.typing as npt

from models.decision.pings import PingRule, ping_ok
from models.sim.events import Events
from models.sim.policies import Algorithm1, best_page
from models.sim.world import World

if TYPE_CHECKING:
    from models.estimators.host_prior import GammaPrior

__all__ = [
    "Hedge",
    "OnlineRates",
    "Trace",
    "VectorAlgorithm1",
    "average_rates",
    "complete_history_intervals",
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




class OnlineRates:
    """Per-page App. E estimates (paper 004) over all pages, updated in batches.

    The state is :mod:`models.estimators.batch`'s structure of arrays; each update adds one
    crawl interval ``(tau, changed, pings in it)`` to each listed page and returns the pages'
    value parameters ``(alpha, beta, gamma)`` as ``variant`` ranks with
    (:func:`models.sim.policies.value_params` on the believed ``(Delta, lam, nu)``), exactly
    as :class:`~models.sim.policies.EstimatingAlgorithm1` reads its estimates.  The
    estimator is :class:`models.estimators.SignalEstimator` with its default prior, the one
    a live worker starts from; it works in seconds, so the trace's days are converted on
    the way in (``tau``) and out (rates per day, ``beta`` in days).

    ``prior="host"`` (default): a page's ``alpha`` is its posterior mean under its host's
    empirical-Bayes Gamma prior (:mod:`models.estimators.host_prior`, fitted online by
    incremental EM to the host's crawled pages; ``host`` gives each page's host, default one
    host), once the host has ``min_pages`` crawled pages; before that, and with
    ``prior="global"``, the estimator's MAP under its default prior.  Pages not crawled since
    the host's prior moved are stale in the ranking: :attr:`prior_moved` tells the policy to
    re-read every page.  ``half_life_days``: the estimator's forgetting (an interval's
    weight halves every that many days of crawl time; the host prior reads the same
    weights).
    """

    def __init__(self, m: int, *, use_pings: bool, variant: str | None = None,
                 prior: str = "host", host: IntArray | None = None,
                 min_pages: int = 20, half_life_days: float = math.inf) -> None:
        from models.estimators import SignalEstimator, batch_init
        from models.estimators.host_prior import GammaPrior

        if prior not in ("host", "global"):
            raise ValueError(f"prior must be 'host' or 'global', got {prior!r}")
        self.use_pings = use_pings
        self.variant = variant or ("greedy-ncis" if use_pings else "greedy")
        self.est = SignalEstimator(1 if use_pings else 0, half_life_s=half_life_days * DAY_S)
        self.m = m
        self.state = batch_init(self.est, m)
        self.prior = prior
        self.host = (np.zeros(m, dtype=np.int64) if host is None
                     else np.asarray(host, dtype=np.int64))
        if self.host.shape != (m,) or (m and self.host.min() < 0):
            raise ValueError(f"host must be {m} host indices >= 0")
        self.n_hosts = int(self.host.max()) + 1 if m else 0
        self.min_pages = int(min_pages)
        g = self.est.init().theta[0]
        #: the prior of a host without enough pages: the default MAP's rate, shape 1
        self.default_prior = GammaPrior(1.0, 1.0 / g)
        #: per host: the incremental EM's sums (pages, E[lambda], E[log lambda]) and the
        #: Gamma they fit (:class:`models.estimators.host_prior.HostPriorState`, as arrays)
        self.h_n = np.zeros(self.n_hosts)
        self.h_sum_mean = np.zeros(self.n_hosts)
        self.h_sum_log = np.zeros(self.n_hosts)
        self.h_shape = np.ones(self.n_hosts)
        self.h_rate = np.ones(self.n_hosts)
        self.h_fitted = np.zeros(self.n_hosts, dtype=bool)
        #: per page: its current contribution to its host's sums
        self.c_mean = np.zeros(m)
        self.c_log = np.zeros(m)
        self.c_count = np.zeros(m)
        self._seen_mean = np.zeros(self.n_hosts)
        #: set when a host's prior mean moved by more than a quarter since the last re-read
        self.prior_moved = False

    def reset(self) -> None:
        from models.estimators import batch_init

        self.state = batch_init(self.est, self.m)
        for arr in (self.h_n, self.h_sum_mean, self.h_sum_log, self.c_mean, self.c_log,
                    self.c_count):
            arr[:] = 0.0
        self.h_fitted[:] = False
        self._seen_mean[:] = 0.0

    def host_prior(self, h: int) -> GammaPrior | None:
        """Host ``h``'s fitted prior, ``None`` while it has under ``min_pages`` pages."""
        from models.estimators.host_prior import GammaPrior

        if not self.h_fitted[h] or self.h_n[h] < self.min_pages:
            return None
        return GammaPrior(float(self.h_shape[h]), float(self.h_rate[h]))

    def _usable(self, hosts: IntArray) -> npt.NDArray[np.bool_]:
        out: npt.NDArray[np.bool_] = self.h_fitted[hosts] & (self.h_n[hosts] >= self.min_pages)
        return out

    def update(self, pages: IntArray, tau: FloatArray, changed: npt.NDArray[np.bool_],
               n_pings: FloatArray, end: FloatArray | None = None) -> None:
        """Add one interval to each of ``pages`` (distinct), ending at ``end`` (default: the
        page's previous end plus ``tau``)."""
        from models.estimators import batch_update

        sig = n_pings[:, None] if self.use_pings else None
        # an imported history may end a hair after a crawl time (sums of many intervals)
        end_s = None if end is None else np.maximum(end * DAY_S, self.state.end_s[pages])
        batch_update(self.est, self.state, tau * DAY_S, changed, sig, pages=pages, end_s=end_s)
        if self.prior == "host":
            self._contribute(pages)

    def _contribute(self, pages: IntArray) -> None:
        """Incremental EM (:func:`models.estimators.host_prior.host_prior_update`, over
        every host at once): the pages' contributions under their host's current prior
        replace their old ones and each touched host's M-step is redone."""
        from models.estimators.host_prior import fit_gammas, grid_log_likelihood, page_posteriors

        hp = self.host[pages]
        has = self.h_fitted[hp]
        a = np.where(has, self.h_shape[hp], self.default_prior.shape)
        b = np.where(has, self.h_rate[hp], self.default_prior.rate_s)
        post = page_posteriors(grid_log_likelihood(self.state, pages, self._kappa(pages)),
                               (a, b))
        H = self.n_hosts
        oc = self.c_count[pages]
        self.h_n += np.bincount(hp, weights=1.0 - oc, minlength=H)
        self.h_sum_mean += np.bincount(hp, weights=post.mean_per_s - oc * self.c_mean[pages],
                                       minlength=H)
        self.h_sum_log += np.bincount(hp, weights=post.mean_log - oc * self.c_log[pages],
                                      minlength=H)
        self.c_mean[pages], self.c_log[pages], self.c_count[pages] = (
            post.mean_per_s, post.mean_log, 1.0)
        touched = np.unique(hp)
        ok = (self.h_n[touched] >= 0.5) & (self.h_sum_mean[touched] > 0.0)
        self.h_fitted[touched[~ok]] = False
        t = touched[ok]
        if not t.size:
            return
        shape, rate = fit_gammas(self.h_sum_mean[t] / self.h_n[t], self.h_sum_log[t] / self.h_n[t])
        self.h_shape[t], self.h_rate[t], self.h_fitted[t] = shape, rate, True
        big = self.h_n[t] >= self.min_pages
        if big.any():
            tb, mean = t[big], (shape / rate)[big]
            seen = self._seen_mean[tb]
            with np.errstate(divide="ignore", invalid="ignore"):
                moved = ~(seen > 0) | (np.abs(np.log(mean / seen)) > math.log(1.25))
            if moved.any():
                self._seen_mean[tb[moved]] = mean[moved]
                self.prior_moved = True

    def _kappa(self, pages: IntArray) -> FloatArray | None:
        if not self.use_pings:
            return None
        from models.estimators import batch_result

        out: FloatArray = batch_result(self.est, self.state, pages=pages).kappa
        return out

    def change_rates(self, pages: IntArray | None = None) -> tuple[FloatArray, FloatArray,
                                                                      FloatArray]:
        """``(alpha, kappa, gamma)`` of ``pages`` per second: the MAP's, with ``alpha``
        the host posterior mean where the host's prior is fitted."""
        from models.estimators import batch_result
        from models.estimators.host_prior import grid_log_likelihood, page_posteriors

        idx = np.arange(self.m) if pages is None else np.asarray(pages, dtype=np.int64)
        r = batch_result(self.est, self.state, pages=idx)
        alpha = r.alpha_per_s.copy()
        if self.prior == "host":
            hp = self.host[idx]
            k = np.flatnonzero(self._usable(hp))
            if k.size:
                ll = grid_log_likelihood(self.state, idx[k], r.kappa[k] if self.use_pings
                                         else None)
                alpha[k] = page_posteriors(ll, (self.h_shape[hp[k]], self.h_rate[hp[k]])
                                           ).mean_per_s
        return alpha, r.kappa, r.gamma_per_s

    def params(self, pages: IntArray | None = None) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``(alpha, beta, gamma)`` of ``pages`` (default all) as ``variant`` ranks with."""
        from models.conversions import change_params
        from models.estimators._numeric import derive
        from models.sim.policies import value_params

        alpha, kappa, gamma = self.change_rates(pages)
        if not self.use_pings:
            z = np.zeros_like(alpha)
            return alpha * DAY_S, z, z.copy()
        der = derive(alpha, kappa, gamma)
        delta, lam, nu = change_params(alpha * DAY_S, der["beta"][:, 0] / DAY_S,
                                       gamma[:, 0] * DAY_S)
        a, b, g, _ = value_params(self.variant, np.asarray(delta), np.asarray(lam),
                               np.asarray(nu))
        return a, b, g

    def learn_complete(self, trace: Trace, upto: float, eps: float,
                       ping_page: IntArray, ping_arrival: FloatArray) -> None:
        """Replace every page's state by its complete history of ``[0, upto]``
        (:func:`complete_history_intervals`, with the pings that arrived in each interval),
        one vectorised update per interval rank."""
        self.reset()
        taus: list[float] = []
        chg: list[bool] = []
        owner: list[int] = []
        for i in range(trace.m):
            for tau, c in complete_history_intervals(trace.changes_of(i), 0.0, upto, eps):
                taus.append(tau)
                chg.append(c)
                owner.append(i)
        if not taus:
            return
        tau_a = np.asarray(taus)
        chg_a = np.asarray(chg, dtype=bool)
        own = np.asarray(owner, dtype=np.int64)
        first = np.searchsorted(own, np.arange(trace.m + 1))
        rank = np.arange(own.size) - first[own]
        end = np.empty_like(tau_a)  # each interval's end: cumulative time within its page
        csum = np.cumsum(tau_a)
        base = np.where(first[own] > 0, csum[np.maximum(first[own] - 1, 0)], 0.0)
        end[:] = csum - base
        n = np.zeros(own.size)
        if self.use_pings and ping_page.size:
            sel = ping_arrival <= upto
            pk = ping_page[sel] * (4.0 * upto + 4.0) + ping_arrival[sel]
            pk.sort()
            ek = own * (4.0 * upto + 4.0)
            n = (np.searchsorted(pk, ek + end, side="right")
                 - np.searchsorted(pk, ek + end - tau_a, side="right")).astype(np.float64)
        prior, self.prior = self.prior, "global"  # the host prior is fitted once, below
        try:
            for r in range(int(rank.max()) + 1):
                k = np.flatnonzero(rank == r)
                self.update(own[k], tau_a[k], chg_a[k], n[k])  # ends: previous end + tau
        finally:
            self.prior = prior
        if self.prior == "host":
            self.fit_hosts()

    def fit_hosts(self) -> None:
        """Fit every host's prior to all its observed pages at once (batch EM,
        :func:`models.estimators.host_prior.fit_host_prior`) and store the pages'
        contributions under it (the start of the incremental EM)."""
        from models.estimators.host_prior import (
            fit_host_prior,
            grid_log_likelihood,
            page_posteriors,
        )

        seen = self.state.n_intervals > 0
        for h in range(self.n_hosts):
            pg = np.flatnonzero((self.host == h) & seen)
            self.c_mean[self.host == h] = self.c_log[self.host == h] = 0.0
            self.c_count[self.host == h] = 0.0
            self.h_n[h] = self.h_sum_mean[h] = self.h_sum_log[h] = 0.0
            self.h_fitted[h] = False
            if not pg.size:
                continue
            ll = grid_log_likelihood(self.state, pg, self._kappa(pg))
            prior = fit_host_prior(ll)
            post = page_posteriors(ll, prior)
            self.c_mean[pg], self.c_log[pg], self.c_count[pg] = post.mean_per_s, post.mean_log, 1.0
            self.h_n[h] = float(pg.size)
            self.h_sum_mean[h] = float(post.mean_per_s.sum())
            self.h_sum_log[h] = float(post.mean_log.sum())
            self.h_shape[h], self.h_rate[h], self.h_fitted[h] = prior.shape, prior.rate_s, True
            self._seen_mean[h] = prior.mean_per_s
        self.prior_moved = True


class Hedge:
    """How well the learned rates predict what the crawls find, and the floor share it sets.

    Each crawl of a page after ``tau`` with believed rate ``r`` predicted a change with
    probability ``p = 1 - exp(-r tau)`` (paper 003 Sec. 3: Poisson changes); a site-wide
    rate ``r0`` (changes found / time crawled, over all pages) predicted ``p0``.  Both
    predictions' log losses on the outcome are summed with a discount (half-life
    ``half_life`` crawls); the *skill* is ``1 - loss / loss0``: above 0 when the per-page
    rates predict better than one rate for the whole site.  The share of crawls given back
    to the longest-interval floor (the pages crawled longest ago) is
    ``max_share * clip(1 - skill / good_skill, 0, 1)``: all of ``max_share`` while the
    learned rates predict no better than the site's average, none once they are clearly
    better.  Before ``warmup`` crawls the share is ``max_share``.
    """

    def __init__(self, *, max_share: float = 0.5, good_skill: float = 0.1,
                 half_life: float = 2000.0, warmup: int = 200) -> None:
        if not 0.0 <= max_share <= 1.0:
            raise ValueError(f"max_share must be in [0, 1], got {max_share!r}")
        if good_skill <= 0 or half_life <= 0:
            raise ValueError("good_skill and half_life must be > 0")
        self.max_share, self.good_skill = float(max_share), float(good_skill)
        self.keep = 0.5 ** (1.0 / half_life)
        self.warmup = int(warmup)
        self.loss = self.loss0 = 0.0
        self.changed_sum = self.time_sum = 0.0
        self.n = 0
        self._debt = 0.0

    @staticmethod
    def _log_loss(p: FloatArray, y: npt.NDArray[np.bool_]) -> FloatArray:
        q = np.clip(p, 1e-6, 1.0 - 1e-6)
        out: FloatArray = -np.where(y, np.log(q), np.log1p(-q))
        return out

    def observe(self, rate: FloatArray, tau: FloatArray, changed: npt.NDArray[np.bool_]) -> None:
        """Score the predictions of one batch of crawls (``rate``: believed before them)."""
        if not tau.size:
            return
        r0 = self.changed_sum / self.time_sum if self.time_sum > 0 else 0.0
        p = -np.expm1(-rate * tau)
        p0 = -np.expm1(-r0 * tau)
        k = self.keep ** tau.size
        self.loss = k * self.loss + float(self._log_loss(p, changed).sum())
        self.loss0 = k * self.loss0 + float(self._log_loss(p0, changed).sum())
        self.changed_sum = k * self.changed_sum + float(changed.sum())
        self.time_sum = k * self.time_sum + float(tau.sum())
        self.n += int(tau.size)

    @property
    def skill(self) -> float:
        return 1.0 - self.loss / self.loss0 if self.loss0 > 0 else 0.0

    @property
    def share(self) -> float:
        if self.n < self.warmup:
            return self.max_share
        return self.max_share * min(max(1.0 - self.skill / self.good_skill, 0.0), 1.0)

    def floor_crawls(self, k: int) -> int:
        """How many of the next ``k`` crawls go to the floor (the fractions carried over)."""
        self._debt += self.share * k
        n = min(k, int(self._debt))
        self._debt -= n
        return n


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
    crawls to the pages crawled longest ago.
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
                self.learner.prior_moved = False
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
            self.index.set_origins(moved, self.origin[moved])

    def choose(self, t: float, eligible: Callable[[int], bool] | None) -> int | None:
        self._maybe_warm(t)
        if eligible is None and self.hedge is not None and self.hedge.floor_crawls(1):
            return int(np.argmin(self.last_crawl))
        return best_page(self.index, t, eligible)

    def choose_many(self, t: float, k: int) -> list[int]:
        self._maybe_warm(t)
        m = self.mu.size
        k = min(k, m)
        n_floor = self.hedge.floor_crawls(k) if self.hedge is not None else 0
        if not n_floor:
            return super().choose_many(t, k)
        old = np.argpartition(self.last_crawl, n_floor - 1)[:n_floor] \
            if n_floor < m else np.arange(m)
        rest = k - n_floor
        out: list[int] = old.tolist()
        if rest > 0:
            taken = set(out)
            for p, _ in self.index.best(t, k=k):
                if p not in taken:
                    out.append(int(cast(int, p)))
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
            self.index.set_origins(pages, np.full(pages.size, t))
            return
        if self.hedge is not None:
            self.hedge.observe(self._believed_rate(pages), tau, changed)
        self.learner.update(pages, tau, changed, self.n_pings[pages], np.full(pages.size, t))
        self.n_pings[pages] = 0.0
        if self.learner.prior_moved:  # every page ranks under the host's new prior
            self.learner.prior_moved = False
            self.alpha, self.beta, self.gamma = self.learner.params()
            self.origin[pages] = t
            self._rekey_all()
            return
        a, b, g = self.learner.params(pages)
        self.alpha[pages], self.beta[pages], self.gamma[pages] = a, b, g
        for p, ai, bi, gi, ui in zip(pages.tolist(), a.tolist(), b.tolist(), g.tolist(),
                                     self.mu[pages].tolist(), strict=True):
            self.index.upsert(p, origin=t, alpha=ai, beta=bi, gamma=gi, mu=ui)
