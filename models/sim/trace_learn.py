"""Online learning for the trace replay: :class:`OnlineRates` (each page's App. E
estimates of paper 004, batched, under a per-host empirical-Bayes prior) and
:class:`Hedge` (the share of the crawls given to a floor that trusts no rate model, round
robin or adaptive intervals, while the learned rates predict no better than it), the parts
of the ``recrawl`` policy of :class:`models.sim.trace.VectorAlgorithm1` that learn.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from models.estimators.host_prior import MIN_PAGES
from models.sim.trace_history import complete_history_intervals, ping_history_crawls

if TYPE_CHECKING:
    from models.estimators.host_prior import GammaPrior
    from models.sim.trace import Trace

__all__ = ["HALF_LIFE_DAYS", "Hedge", "OnlineRates", "nutch_replay"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
DAY_S = 86400.0
#: the replay learner's default forgetting: an interval's weight halves every 180 days of
#: crawl time (chosen on the five trace tables of docs/results.md "Real change histories")
HALF_LIFE_DAYS = 180.0


def nutch_replay(trace: Trace, upto: float, initial: float, min_interval: float,
                 max_interval: float, *, at: tuple[IntArray, FloatArray] | None = None
                 ) -> tuple[FloatArray, FloatArray]:
    """Each page's fetch interval after Apache Nutch's ``AdaptiveFetchSchedule`` rule
    (:func:`models.sim.peers.nutch_interval`: times 1.4 after a fetch that found no change,
    times 0.8 after one that found one, clamped to ``[min_interval, max_interval]``) crawled
    it on its own schedule over ``(0, upto]`` of a complete history: from ``initial``, the
    next fetch one interval after the last, each finding a change where the history has one
    since the previous fetch.  (Nutch's ``sync_delta`` is left out, as in the hedge's
    intervals.)  Returns the intervals at ``upto`` and, for each ``(page, time)`` of ``at``,
    the page's interval then (after its last fetch at or before the time)."""
    from models.sim.peers import nutch_interval

    scale = float(trace.horizon) + 2.0
    key = trace.page_of_change() * scale + trace.change_time
    iv, t = np.full(trace.m, float(initial)), np.zeros(trace.m)
    steps: list[tuple[IntArray, FloatArray, FloatArray]] = []
    while True:
        act = np.flatnonzero(t + iv <= upto)
        if not act.size:
            break
        nxt, base = t[act] + iv[act], act * scale
        found = (np.searchsorted(key, base + nxt, side="right")
                 > np.searchsorted(key, base + t[act], side="right"))
        iv[act] = np.clip(nutch_interval(iv[act], found), min_interval, max_interval)
        t[act] = nxt
        if at is not None:
            steps.append((act, nxt, iv[act].copy()))
    then = np.zeros(0)
    if at is not None:
        qp, qt = np.asarray(at[0], dtype=np.int64), np.asarray(at[1], dtype=np.float64)
        then = np.full(qp.size, float(initial))
        if steps:
            sp, st, siv = (np.concatenate([x[i] for x in steps]) for i in range(3))
            order = np.argsort(sp * scale + st, kind="stable")
            sp, siv, sk = sp[order], siv[order], (sp * scale + st)[order]
            j = np.searchsorted(sk, qp * scale + qt, side="right") - 1
            ok = (j >= 0) & (sp[np.maximum(j, 0)] == qp)
            then[ok] = siv[j[ok]]
    return iv, then


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
    the host's prior moved are stale in the ranking: :meth:`take_moved` gives the policy the
    pages to re-read (those of the hosts whose prior moved).  ``half_life_days``: the
    estimator's forgetting (an interval's weight halves every that many days of crawl time;
    the host prior reads the same weights; default :data:`HALF_LIFE_DAYS`, ``inf``: never).
    """

    def __init__(self, m: int, *, use_pings: bool, variant: str | None = None,
                 prior: str = "host", host: IntArray | None = None,
                 min_pages: int = MIN_PAGES, half_life_days: float = HALF_LIFE_DAYS) -> None:
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
        #: per host: its prior mean moved by more than a quarter since its pages were re-read
        self.h_moved = np.zeros(self.n_hosts, dtype=bool)

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
               n_pings: FloatArray, end: FloatArray | None = None,
               signals_known: npt.NDArray[np.bool_] | None = None) -> None:
        """Add one interval to each of ``pages`` (distinct), ending at ``end`` (default: the
        page's previous end plus ``tau``); ``signals_known`` false: the interval's pings were
        not recorded (``n_pings`` must be 0 there)."""
        from models.estimators import batch_update

        sig = n_pings[:, None] if self.use_pings else None
        # an imported history may end a hair after a crawl time (sums of many intervals)
        end_s = None if end is None else np.maximum(end * DAY_S, self.state.end_s[pages])
        batch_update(self.est, self.state, tau * DAY_S, changed, sig, pages=pages, end_s=end_s,
                     signals_known=signals_known)
        if self.prior == "host":
            self._contribute(pages)

    def _contribute(self, pages: IntArray) -> None:
        """Incremental EM (:func:`models.estimators.host_prior.host_prior_update`, over
        every host at once): the pages' contributions under their host's current prior
        replace their old ones and each touched host's M-step is redone."""
        from models.estimators.host_prior import (
            add_contributions,
            grid_log_likelihood,
            host_contributions,
            host_priors,
        )

        hp = self.host[pages]
        post = host_contributions(grid_log_likelihood(self.state, pages, self._kappa(pages)),
                                  self.h_shape[hp], self.h_rate[hp], self.h_fitted[hp],
                                  self.default_prior)
        add_contributions(self.h_n, self.h_sum_mean, self.h_sum_log, hp, self.c_count[pages],
                          self.c_mean[pages], self.c_log[pages], post)
        self.c_mean[pages], self.c_log[pages], self.c_count[pages] = (
            post.mean_per_s, post.mean_log, 1.0)
        touched = np.unique(hp)
        shape_all, rate_all, ok = host_priors(self.h_n[touched], self.h_sum_mean[touched],
                                              self.h_sum_log[touched])
        self.h_fitted[touched[~ok]] = False
        t = touched[ok]
        if not t.size:
            return
        shape, rate = shape_all[ok], rate_all[ok]
        self.h_shape[t], self.h_rate[t], self.h_fitted[t] = shape, rate, True
        big = self.h_n[t] >= self.min_pages
        if big.any():
            tb, mean = t[big], (shape / rate)[big]
            seen = self._seen_mean[tb]
            with np.errstate(divide="ignore", invalid="ignore"):
                moved = ~(seen > 0) | (np.abs(np.log(mean / seen)) > math.log(1.25))
            if moved.any():
                self._seen_mean[tb[moved]] = mean[moved]
                self.h_moved[tb[moved]] = True

    def take_moved(self) -> IntArray:
        """The pages whose host's prior moved since they were last read (their ranking
        parameters are stale), and forget the moves."""
        if not self.h_moved.any():
            return np.zeros(0, dtype=np.int64)
        pages = np.flatnonzero(self.h_moved[self.host])
        self.h_moved[:] = False
        return pages

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
                       pings: tuple[IntArray, FloatArray] | None = None) -> None:
        """Replace every page's state by its complete history of ``[0, upto]``, one
        vectorised update per interval rank, as ``recrawl import`` gives it to a worker.

        With the history's pings ``(page, arrival day)`` (``recrawl import --ping-log``):
        the crawls of :func:`ping_history_crawls`, each interval with its ping count.
        Without them: the intervals of :func:`complete_history_intervals`, whose signals,
        if the learner uses pings, are unknown (:class:`models.estimators.CrawlInterval`'s
        ``signals_known``): they teach the change rate, not how the changes split into
        announced and unannounced ones."""
        self.reset()
        taus: list[FloatArray] = []
        chg: list[npt.NDArray[np.bool_]] = []
        cnt: list[FloatArray] = []
        owner: list[IntArray] = []
        by_page = None
        if pings is not None and self.use_pings:
            pp, pt = np.asarray(pings[0], dtype=np.int64), np.asarray(pings[1], dtype=np.float64)
            o = np.lexsort((pt, pp))
            pp, pt = pp[o], pt[o]
            by_page = (np.searchsorted(pp, np.arange(trace.m + 1)), pt)
        for i in range(trace.m):
            if by_page is None:
                iv = complete_history_intervals(trace.changes_of(i), 0.0, upto, eps)
                if not iv:
                    continue
                taus.append(np.array([t for t, _ in iv]))
                chg.append(np.array([c for _, c in iv], dtype=bool))
                cnt.append(np.zeros(len(iv)))
            else:
                bounds, pt = by_page
                mine = pt[bounds[i]:bounds[i + 1]]
                times, changed, n = ping_history_crawls(trace.changes_of(i), mine, 0.0, upto)
                taus.append(np.diff(np.concatenate([[0.0], times])))
                chg.append(changed)
                cnt.append(n.astype(np.float64))
            owner.append(np.full(taus[-1].size, i, dtype=np.int64))
        if not taus:
            return
        tau_a, chg_a, cnt_a = np.concatenate(taus), np.concatenate(chg), np.concatenate(cnt)
        own = np.concatenate(owner)
        first = np.searchsorted(own, np.arange(trace.m + 1))
        rank = np.arange(own.size) - first[own]
        # no ping recorded: with pings, signals unknown
        known = None if not self.use_pings else np.full(own.size, by_page is not None)
        prior, self.prior = self.prior, "global"  # the host prior is fitted once, below
        try:
            for r in range(int(rank.max()) + 1):
                k = np.flatnonzero(rank == r)
                self.update(own[k], tau_a[k], chg_a[k], cnt_a[k],  # ends: previous end + tau
                            signals_known=None if known is None else known[k])
        finally:
            self.prior = prior
        if self.prior == "host":
            self.fit_hosts()

    def complete_rates(self, trace: Trace, pages: IntArray, at: FloatArray) -> FloatArray:
        """The change rate per day each ``pages[j]`` would have been given by an import of
        its complete history of ``(0, at[j]]`` (:meth:`learn_complete`), under its host's
        prior as fitted now (the estimator's default Gamma where the host's is not in use).

        A complete history's likelihood is Poisson's, ``lambda^n exp(-lambda E)`` (paper 003
        Sec. 4.2: the complete-data case), so under a ``Gamma(a, b)`` prior the posterior
        mean is the conjugate ``(a + n) / (b + E)``; with the estimator's forgetting each
        interval is weighted as :func:`models.estimators.batch_update` weights it, halving
        every half-life after its end: ``n`` sums ``2^-((at - c) / h)`` over the changes
        ``c``, ``E`` the gaps between them (from 0) each weighted at its closing change,
        plus the time since the last change at full weight.  On the estimator's own
        import this is the rate :meth:`params` gives (a test checks it).  Only the host's
        prior is read as of now, not as of ``at[j]``: one shape and one rate per host.
        """
        pages, at = np.asarray(pages, dtype=np.int64), np.asarray(at, dtype=np.float64)
        hl = self.est.half_life_s / DAY_S
        keep = trace.change_time > 0.0  # as complete_history_intervals: changes in (0, at]
        ct, pc = trace.change_time[keep], trace.page_of_change()[keep]
        first = np.searchsorted(pc, np.arange(trace.m + 1))
        rank = np.arange(ct.size) - first[pc]
        prev = np.where(rank > 0, ct[np.maximum(np.arange(ct.size) - 1, 0)], 0.0)
        gap = ct - prev
        decay = np.exp2(-gap / hl)
        count = np.zeros(ct.size)  # discounted changes up to and with each change
        expo = np.zeros(ct.size)  # discounted exposure up to each change
        for r in range(int(rank.max()) + 1 if rank.size else 0):
            k = np.flatnonzero(rank == r)
            before_c = count[k - 1] if r else np.zeros(k.size)
            before_e = expo[k - 1] if r else np.zeros(k.size)
            count[k] = before_c * decay[k] + 1.0
            expo[k] = before_e * decay[k] + gap[k]
        # the page's last change at or before at[j] (its global index), if any
        scale = float(trace.horizon) + 2.0
        j = np.searchsorted(pc * scale + ct, pages * scale + at, side="right") - 1
        has = (j >= first[pages]) & (j >= 0)
        jj = np.maximum(j, 0)
        since = np.where(has, at - ct[jj] if ct.size else at, at)
        w = np.exp2(-since / hl)
        n = np.where(has, count[jj] * w if ct.size else 0.0, 0.0)
        e = np.where(has, expo[jj] * w if ct.size else 0.0, 0.0) + since
        hp = self.host[pages]
        use = self._usable(hp) if self.prior == "host" else np.zeros(pages.size, dtype=bool)
        a = np.where(use, self.h_shape[hp], self.default_prior.shape)
        b = np.where(use, self.h_rate[hp], self.default_prior.rate_s) / DAY_S
        out: FloatArray = (a + n) / (b + e)
        return out

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
        self.h_moved[:] = True


class Hedge:
    """How well three predictors of each crawl's finding do, and which crawls that decides.

    Each crawl of a page after ``tau`` with rate ``r`` predicts a change with probability
    ``p = 1 - exp(-r tau)`` (paper 003 Sec. 3: Poisson changes).  Three rates are scored,
    each on the same crawls, before their outcome is known:

    * *learned*: the page's rate as the policy believes it (``rate`` of :meth:`observe`);
    * *site*: one rate ``r0`` for every page (changes found / time crawled, all pages);
    * *adaptive*: ``c / I_i``, with ``I_i`` the page's interval under Apache Nutch's
      ``AdaptiveFetchSchedule`` rule (:func:`models.sim.peers.nutch_interval`: times 1.4
      after a crawl that found no change, times 0.8 after one that found one; from 1, in
      units of no clock, so only the intervals' ratios matter) and ``c`` the changes found
      per unit of ``tau / I`` over all crawls (the site rate of the intervals' clock).

    Log losses are summed with a discount (half-life ``half_life`` crawls).  The *floor*
    is the better of the two predictors that trust no per-page rate model: under *site*
    (one rate for all, so the page crawled longest ago is the likeliest changed) it crawls
    the pages crawled longest ago (round robin); under *adaptive* it crawls the pages of
    largest Greedy crawl value (paper 004 Algorithm 1 without pings) under the rates
    ``c / I_i``.  Ordering by the overdue ratio ``(t - last crawl) / I_i`` instead would
    crawl each page in proportion to its rate, which keeps fewer pages fresh than even
    round robin (Cho and Garcia-Molina, "Effective page refresh policies for Web crawlers",
    ACM TODS 28(4), 2003: their comparison of the proportional and uniform policies).
    The *skill* is ``1 - loss / loss_floor``, above 0 when the learned rates predict
    better than the floor's.  The share of crawls given to the floor is
    ``max_share * clip(1 - skill / good_skill, 0, 1)``: all of ``max_share`` while the
    learned rates predict no better than the floor, none once they are clearly better.
    Before ``warmup`` crawls the share is ``max_share`` and the floor is round robin.
    """

    #: Apache Nutch AdaptiveFetchSchedule's interval never leaves ``[min, max]``; here the
    #: intervals' ratio to their start is kept within this factor either way
    SPAN = 2.0 ** 20

    def __init__(self, m: int, *, max_share: float = 0.5, good_skill: float = 0.1,
                 half_life: float = 2000.0, warmup: int = 200, record: bool = False) -> None:
        if not 0.0 <= max_share <= 1.0:
            raise ValueError(f"max_share must be in [0, 1], got {max_share!r}")
        if good_skill <= 0 or half_life <= 0:
            raise ValueError("good_skill and half_life must be > 0")
        if m < 0:
            raise ValueError(f"m must be >= 0, got {m!r}")
        self.max_share, self.good_skill = float(max_share), float(good_skill)
        self.keep = 0.5 ** (1.0 / half_life)
        self.warmup = int(warmup)
        self.loss = self.loss0 = self.loss_a = 0.0
        self.changed_sum = self.time_sum = self.scaled_time_sum = 0.0
        #: each page's adaptive interval (Nutch's rule, scale-free)
        self.interval = np.ones(m)
        self.n = 0
        self._debt = 0.0
        #: with ``record``: each batch of crawls scored, ``(pages, tau, changed, end, n)``
        #: (``n``: the crawls scored once it was), for :meth:`rescore`
        self.crawls: list[tuple[IntArray, FloatArray, npt.NDArray[np.bool_], float, int]] | None
        self.crawls = [] if record else None

    @staticmethod
    def _log_loss(p: FloatArray, y: npt.NDArray[np.bool_]) -> FloatArray:
        q = np.clip(p, 1e-6, 1.0 - 1e-6)
        out: FloatArray = -np.where(y, np.log(q), np.log1p(-q))
        return out

    def observe(self, pages: IntArray, rate: FloatArray, tau: FloatArray,
                changed: npt.NDArray[np.bool_], end: float = math.nan) -> None:
        """Score the predictions of one batch of crawls of ``pages`` (``rate``: the learned
        rates believed before them; ``end``: the crawls' time, kept for :meth:`rescore`
        while recording), then step the pages' adaptive intervals."""
        from models.sim.peers import nutch_interval

        if not tau.size:
            return
        iv = self.interval[pages]
        r0 = self.changed_sum / self.time_sum if self.time_sum > 0 else 0.0
        c = self.changed_sum / self.scaled_time_sum if self.scaled_time_sum > 0 else 0.0
        p = -np.expm1(-rate * tau)
        p0 = -np.expm1(-r0 * tau)
        pa = -np.expm1(-c * tau / iv)
        k = self.keep ** tau.size
        self.loss = k * self.loss + float(self._log_loss(p, changed).sum())
        self.loss0 = k * self.loss0 + float(self._log_loss(p0, changed).sum())
        self.loss_a = k * self.loss_a + float(self._log_loss(pa, changed).sum())
        self.changed_sum = k * self.changed_sum + float(changed.sum())
        self.time_sum = k * self.time_sum + float(tau.sum())
        self.scaled_time_sum = k * self.scaled_time_sum + float((tau / iv).sum())
        self.interval[pages] = np.clip(nutch_interval(iv, changed), 1.0 / self.SPAN, self.SPAN)
        self.n += int(tau.size)
        if self.crawls is not None:
            self.crawls.append((np.array(pages, dtype=np.int64), np.array(tau, dtype=np.float64),
                                np.array(changed, dtype=bool), float(end), self.n))

    def rescore(self, rate_at: Callable[[IntArray, FloatArray], FloatArray],
                interval_at: Callable[[IntArray, FloatArray], tuple[FloatArray, FloatArray]]
                | None = None) -> bool:
        """Replace the learned rates' loss by what other learned rates would have scored on
        the same crawls, and stop recording.

        ``rate_at(pages, starts)`` gives each crawl's rate as the new learner would have
        believed it at the crawl's start (before its outcome, as every prediction here is
        scored: prequentially, Dawid, "Present position and potential developments: some
        personal views. Statistical theory: the prequential approach", JRSS A 147(2),
        1984).  An import of a complete history changes the learned rates, not the crawls:
        rescored, the hedge weighs the imported rates by how they would have predicted the
        crawls of the imported period, each crawl with its discount as scored.

        ``interval_at(pages, starts)``: other adaptive intervals, ``(now, then)``: every
        page's interval now and each crawl's at its start, in the units of ``interval``
        (e.g. :func:`nutch_replay` of an imported history).  They replace the pages'
        intervals, and the adaptive predictor's loss and clock, if the adaptive predictor
        would have scored lower with them on the same crawls (returns whether they did).
        """
        log, self.crawls = self.crawls, None
        if not log:
            return False
        pages, tau, changed = (np.concatenate([c[i] for c in log]) for i in range(3))
        sizes = [c[0].size for c in log]
        end = np.repeat([c[3] for c in log], sizes)
        n_after = np.repeat(np.array([c[4] for c in log], dtype=np.float64), sizes)
        rate = np.asarray(rate_at(pages, end - tau), dtype=np.float64)
        weight = self.keep ** (self.n - n_after)
        self.loss = float((weight * self._log_loss(-np.expm1(-rate * tau), changed)).sum())
        if interval_at is None:
            return False
        now, then = interval_at(pages, end - tau)
        iv = np.clip(then, 1.0 / self.SPAN, self.SPAN)
        # the adaptive predictor as observe() scores it, batch by batch, on the new clock
        loss_a, changed_sum, scaled, lo = 0.0, 0.0, 0.0, 0
        for c in log:
            hi = lo + c[0].size
            k = self.keep ** (hi - lo)
            rate_c = changed_sum / scaled if scaled > 0 else 0.0
            p = -np.expm1(-rate_c * tau[lo:hi] / iv[lo:hi])
            loss_a = k * loss_a + float(self._log_loss(p, changed[lo:hi]).sum())
            changed_sum = k * changed_sum + float(changed[lo:hi].sum())
            scaled = k * scaled + float((tau[lo:hi] / iv[lo:hi]).sum())
            lo = hi
        if not loss_a < self.loss_a:
            return False
        self.loss_a, self.scaled_time_sum = loss_a, scaled
        self.interval[:] = np.clip(now, 1.0 / self.SPAN, self.SPAN)
        return True

    @property
    def adaptive(self) -> bool:
        """The floor is the adaptive intervals' (else the longest-ago pages')."""
        return self.n >= self.warmup and self.loss_a < self.loss0

    @property
    def skill(self) -> float:
        ref = min(self.loss0, self.loss_a) if self.n >= self.warmup else self.loss0
        return 1.0 - self.loss / ref if ref > 0 else 0.0

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

    def floor_pages(self, t: float, last_crawl: FloatArray, mu: FloatArray,
                    n: int) -> IntArray:
        """The floor's ``n`` pages at ``t``: the ``n`` of largest Greedy crawl value
        (:func:`models.values.crawl_value`, no pings) under the adaptive rates
        ``c / I_i``, or the longest uncrawled (:attr:`adaptive`)."""
        from models.values import crawl_value

        m = last_crawl.size
        n = min(n, m)
        if n <= 0:
            return np.zeros(0, dtype=np.int64)
        if n >= m:
            return np.arange(m, dtype=np.int64)
        elapsed = t - last_crawl
        c = self.changed_sum / self.scaled_time_sum if self.scaled_time_sum > 0 else 0.0
        if self.adaptive and c > 0:
            z = np.zeros(m)
            key = np.asarray(crawl_value(elapsed, c / self.interval, z, z, mu), dtype=np.float64)
        else:
            key = elapsed
        out: IntArray = np.argpartition(-key, n - 1)[:n].astype(np.int64)
        return out
