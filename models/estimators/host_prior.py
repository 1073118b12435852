"""Empirical-Bayes prior over the change rates of one host's pages (a Gamma fitted to them).

A page with little history says little about its rate; its host's other pages say more.
The change rates ``lambda`` of a host's pages are modelled as draws from one
``Gamma(shape a, rate b)``; each page's crawl observations are Cho and Garcia-Molina's
incompletely observed Poisson process: an interval of length ``tau`` is unchanged with
probability ``exp(-lambda*tau)`` and changed with ``1 - exp(-lambda*tau)``, so a page's
log-likelihood is::

    log L(lambda) = sum_l log(1 - exp(-lambda*t_c(l))) - lambda * sum_k t_u(k)

(paper 003 Sec. 4.3: the log-likelihood whose stationarity condition is its eq. (2); with
ping sources the App. E term of paper 004, ``P(no change) = exp(-alpha*tau - kappa.n)``,
read here as a function of ``alpha`` at the page's ``kappa``).  ``(a, b)`` maximise the
marginal likelihood ``sum_i log int L_i(lambda) Gamma(lambda; a, b) dlambda`` of the host's
pages (type-II maximum likelihood, "empirical Bayes": the distribution of the pages already
observed informs a new page's estimate, as paper 003 Sec. 4.4 asks of a prior for an
evolving corpus).  A page's rate is then its posterior mean ``E[lambda | its data]``.

Computation
-----------
No closed form exists for the integral with changed intervals (the product of
``1 - exp(-lambda*t)`` terms is not conjugate to the Gamma), so it is a quadrature on a
fixed log-spaced grid of :data:`GRID_POINTS` rates from :data:`GRID_MIN_PER_S` to
:data:`GRID_MAX_PER_S` (1 per 300 years to 1 per 10 s, 10% apart).  A page's
log-likelihood on the grid is read from its bounded streaming state
(:class:`~models.estimators.batch.BatchSignalState`: the exact unchanged sums, the ring of
recent changed intervals, the representative of older ones and, with sources, the quadratic
summary), so the prior needs no history beyond what the estimator keeps.  Where the
posterior is narrower than two grid steps, its mean is the Laplace value
``exp(u + s^2/2)`` of a parabola through the three grid points around its mode (``u`` the
vertex in ``log lambda``, ``s^2`` the inverse curvature), not the grid sum.

The fit is EM (Dempster, Laird and Rubin 1977): the E-step gives each page's posterior
``E[lambda]`` and ``E[log lambda]``; the M-step is the Gamma maximum-likelihood fit to those
expected sufficient statistics (Minka 2002, "Estimating a Gamma distribution", eq. (7) start
and the generalised Newton update of its Sec. 2):
``log a - digamma(a) = log mean E[lambda] - mean E[log lambda]``, ``b = a / mean E[lambda]``.
Online (:class:`HostPriorState`), the host keeps only the sums of its pages' current
contributions; a page crawled again replaces its contribution with one computed under the
current prior and the M-step is redone: the incremental EM of Neal and Hinton (1998,
"A view of the EM algorithm that justifies incremental, sparse, and other variants",
Sec. 4), whose every step does not decrease the free energy.  Pages never observed carry no
contribution (their posterior is the prior and would only slow the fit down).

Never-changing pages are the Gamma's mass near 0 (a fitted shape ``a < 1`` when many pages
are quiet); a quiet page's posterior is ``Gamma(a, b + U)`` (exactly: no changed interval),
mean ``a / (b + U)``, falling as its unchanged time ``U`` grows.  Drift is the page
estimator's forgetting (``half_life_s``): the weights the state holds are the ones read here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.special import digamma, gammainc, gammaln, polygamma

from . import _numeric as nm
from .batch import BatchSignalState, _ring_weights

__all__ = [
    "GRID_MAX_PER_S",
    "GRID_MIN_PER_S",
    "GRID_POINTS",
    "MIN_PAGES",
    "GammaPrior",
    "HostPriorState",
    "PagePosterior",
    "add_contributions",
    "fit_gamma",
    "fit_gammas",
    "fit_host_prior",
    "grid_log_likelihood",
    "host_contributions",
    "host_prior_update",
    "host_priors",
    "page_posteriors",
]

IntArray = npt.NDArray[np.int64]
#: the rate grid (per second): 1 per 300 years to 1 per 10 s, 24 points a decade
GRID_MIN_PER_S = 1e-10
GRID_MAX_PER_S = 1e-1
GRID_POINTS = 217
_LOG_GRID = np.linspace(math.log(GRID_MIN_PER_S), math.log(GRID_MAX_PER_S), GRID_POINTS)
_GRID = np.exp(_LOG_GRID)
_STEP = float(_LOG_GRID[1] - _LOG_GRID[0])
_STEP_LOG = math.log(_STEP)
#: bounds on the fitted shape: below 0.02 the Gamma puts nearly all its mass under the grid
MIN_SHAPE = 0.02
MAX_SHAPE = 1e4
#: crawled pages a host needs before its prior sets its pages' rates (the trace replay's
#: and the live worker's default; fewer pages say too little about the host's spread)
MIN_PAGES = 20
#: pages per block of the grid computation (bounds the (pages x grid) temporaries)
_BLOCK = 4096


@dataclass(frozen=True, slots=True)
class GammaPrior:
    """``Gamma(shape, rate)`` over a page's change rate (per second): mean ``shape/rate``."""

    shape: float
    rate_s: float

    def __post_init__(self) -> None:
        if not (self.shape > 0.0 and math.isfinite(self.shape)):
            raise ValueError(f"shape must be a finite number > 0, got {self.shape!r}")
        if not (self.rate_s > 0.0 and math.isfinite(self.rate_s)):
            raise ValueError(f"rate_s must be a finite number > 0, got {self.rate_s!r}")

    @property
    def mean_per_s(self) -> float:
        return self.shape / self.rate_s

    def log_density(self, lam: npt.ArrayLike) -> nm.FloatArray:
        """``log Gamma(lam; shape, rate)`` (per second)."""
        x = np.asarray(lam, dtype=np.float64)
        a, b = self.shape, self.rate_s
        out: nm.FloatArray = a * math.log(b) - float(gammaln(a)) + (a - 1.0) * np.log(x) - b * x
        return out


@dataclass(frozen=True, slots=True)
class PagePosterior:
    """Per page: posterior ``E[lambda]`` (per s), ``E[log lambda]`` and the log marginal
    likelihood of its data under the prior (up to the grid's constant)."""

    mean_per_s: nm.FloatArray
    mean_log: nm.FloatArray
    log_marginal: nm.FloatArray


def grid_log_likelihood(state: BatchSignalState, pages: IntArray | None = None,
                        kappa: nm.FloatArray | None = None) -> nm.FloatArray:
    """Each page's log-likelihood at every grid rate, ``(N, GRID_POINTS)``, from its state.

    Terms (module docstring): ``-lambda*U - kappa.n_u`` over the unchanged sums, the ring's
    changed intervals ``w log(1 - exp(-(lambda*t + kappa.n)))``, the representative of older
    changed intervals ``w log(1 - exp(-lambda*T))``, and with sources the quadratic summary
    ``b.theta - theta'A theta/2`` at ``theta = (lambda, kappa)`` and the intervals with
    signals unknown in ``Delta = lambda + sum_s gamma_s*(1 - e^{-kappa_s})``.  ``kappa``
    ``(N, S)`` is each page's source parameters (default: the state's running estimate).
    """
    idx = np.arange(state.n_pages) if pages is None else np.asarray(pages, dtype=np.int64)
    d = state.theta.shape[1]
    kap = state.theta[idx, 1:] if kappa is None else np.asarray(kappa, dtype=np.float64)
    if kap.shape != (idx.size, d - 1):
        raise ValueError(f"kappa must have shape ({idx.size}, {d - 1}), got {kap.shape}")
    lam = _GRID
    unchanged = state.unchanged[idx]
    # (pages x grid) arrays built in place, and each term only on the rows it is not 0 on
    out = np.multiply.outer(-unchanged[:, 0], lam)
    out -= np.sum(unchanged[:, 1:] * kap, axis=1)[:, None]
    ring = state.ring[idx]
    rw = _ring_weights(ring, state.ring_len[idx], state.ring_pos[idx])
    for j in range(ring.shape[1]):
        r = np.flatnonzero(rw[:, j] > 0.0)
        if not r.size:
            continue
        x = np.multiply.outer(ring[r, j, 0], lam)
        x += np.sum(ring[r, j, 1:d] * kap[r], axis=1)[:, None]
        term = _log1mexp(x)
        term *= rw[r, j][:, None]
        out[r] += term
    rep = state.rep[idx]
    r = np.flatnonzero(rep[:, 0] > 0.0)
    if r.size:
        term = _log1mexp(np.multiply.outer(rep[r, 1], lam))
        term *= rep[r, 0][:, None]
        out[r] += term
    unk = state.unknown[idx]
    r = np.flatnonzero(unk[:, 0] > 0.0) if d > 1 else np.zeros(0, dtype=np.int64)
    if r.size:
        # intervals with signals unknown: -U*Delta + w log(1 - exp(-T*Delta)) at the grid
        # rates, Delta = lambda + sum_s gamma_s*(1 - e^{-kappa_s}) (models.estimators._numeric)
        signalled = np.sum(nm.gamma_rates(state.totals[idx][r], unk[r]) * -np.expm1(-kap[r]),
                           axis=1)
        delta = np.add.outer(signalled, lam)
        out[r] -= unk[r, 1][:, None] * delta
        term = _log1mexp(unk[r, 3][:, None] * delta)
        term *= unk[r, 2][:, None]
        out[r] += term
    if d > 1:
        qb, qa = state.quad_b[idx], state.quad_a[idx]
        # theta = (lam, kappa): b.theta - theta'A theta/2, expanded in lam
        c0 = (np.sum(qb[:, 1:] * kap, axis=1)
              - 0.5 * np.einsum("ni,nij,nj->n", kap, qa[:, 1:, 1:], kap))
        c1 = qb[:, 0] - np.einsum("nj,nj->n", qa[:, 0, 1:], kap)
        c2 = 0.5 * qa[:, 0, 0]
        r = np.flatnonzero((c0 != 0.0) | (c1 != 0.0) | (c2 != 0.0))
        if r.size:
            quad = np.multiply.outer(c1[r], lam)
            quad -= np.multiply.outer(c2[r], lam * lam)
            quad += c0[r, None]
            out[r] += quad
    res: nm.FloatArray = out
    return res


def _log1mexp(x: nm.FloatArray) -> nm.FloatArray:
    """``log(1 - exp(-x))`` for ``x >= 0`` (``-inf`` at 0): ``log(-expm1(-x))``, within
    ~1e-16 of the exact value everywhere (absolute: where ``exp(-x)`` is below the double's
    epsilon the result is 0 instead of ``-exp(-x)``), which is what a sum of
    log-likelihood terms needs."""
    out: nm.FloatArray = np.log(-np.expm1(-np.maximum(x, 1e-300)))
    return out


def page_posteriors(loglik: nm.FloatArray, prior: GammaPrior | tuple[nm.FloatArray, nm.FloatArray]
                    ) -> PagePosterior:
    """Posterior ``E[lambda]``, ``E[log lambda]`` and log marginal likelihood of each page
    (rows of ``loglik``, :func:`grid_log_likelihood`) under ``prior`` (grid quadrature in
    ``u = log lambda``: weight ``L(lambda) p(lambda) lambda du``, plus the prior's mass
    under the grid).  ``prior`` is one Gamma for every row or ``(shape, rate_s)`` arrays,
    one Gamma per row (pages of several hosts at once)."""
    ll = np.asarray(loglik, dtype=np.float64)
    if ll.ndim != 2 or ll.shape[1] != GRID_POINTS:
        raise ValueError(f"loglik must have shape (N, {GRID_POINTS}), got {ll.shape}")
    if isinstance(prior, GammaPrior):
        a = np.full(ll.shape[0], prior.shape)
        b = np.full(ll.shape[0], prior.rate_s)
    else:
        a = np.asarray(prior[0], dtype=np.float64)
        b = np.asarray(prior[1], dtype=np.float64)
        if a.shape != (ll.shape[0],) or b.shape != a.shape or not (
                np.all(a > 0) and np.all(b > 0)):
            raise ValueError(f"prior arrays must be {ll.shape[0]} shapes and rates > 0")
    # log Gamma density + log lambda (the jacobian), built in place
    logp = np.multiply.outer(a, _LOG_GRID)
    logp -= np.multiply.outer(b, _GRID)
    logp += (a * np.log(b) - gammaln(a))[:, None]
    logp += ll
    # the prior's mass under the grid, where the likelihood is its value at the grid's
    # first point (constant there unless the page changed, and then negligible):
    # P(lambda < l0) = P(a, b*l0) (regularised lower incomplete gamma), and under a
    # density ~ lambda^(a-1) the mean is l0*a/(a+1) and E[log lambda] is log l0 - 1/a
    tail_mass = gammainc(a, b * GRID_MIN_PER_S)
    with np.errstate(divide="ignore"):
        log_tail = ll[:, 0] + np.log(tail_mass) - _STEP_LOG
    top = np.maximum(np.max(logp, axis=1), log_tail)[:, None]
    w = np.subtract(logp, top)
    np.exp(w, out=w)
    wt = np.exp(log_tail - top[:, 0])
    z = np.sum(w, axis=1) + wt
    mean = (w @ _GRID + wt * GRID_MIN_PER_S * a / (a + 1.0)) / z
    mlog = (w @ _LOG_GRID + wt * (_LOG_GRID[0] - 1.0 / a)) / z
    logm = top[:, 0] + np.log(z) + math.log(_STEP)
    # narrow posteriors: the Laplace mean of a parabola through the mode's three grid points
    g = np.argmax(logp, axis=1)
    inner = (g > 0) & (g < GRID_POINTS - 1)
    if inner.any():
        r = np.flatnonzero(inner)
        gi = g[r]
        ym, y0, yp = logp[r, gi - 1], logp[r, gi], logp[r, gi + 1]
        curv = (2.0 * y0 - ym - yp) / (_STEP * _STEP)
        narrow = curv > 1.0 / (2.0 * _STEP) ** 2
        if narrow.any():
            rr, gg = r[narrow], gi[narrow]
            c = curv[narrow]
            # the vertex of y0 + B x - c x^2 / 2 through x = -h, 0, h: B / c, B = (yp - ym) / 2h
            u = _LOG_GRID[gg] + (yp[narrow] - ym[narrow]) / (2.0 * _STEP * c)
            var = 1.0 / c
            mean[rr] = np.exp(u + 0.5 * var)
            mlog[rr] = u
    return PagePosterior(mean, mlog, logm)


def fit_gamma(mean_lam: float, mean_log: float) -> GammaPrior:
    """The Gamma whose ``E[lambda]`` and ``E[log lambda]`` are the given averages (the
    M-step; Minka 2002 eq. (7) start, then his generalised Newton iterations), shape
    clipped to [:data:`MIN_SHAPE`, :data:`MAX_SHAPE`] (:func:`fit_gammas` for one)."""
    if not (mean_lam > 0.0 and math.isfinite(mean_lam) and math.isfinite(mean_log)):
        raise ValueError(f"mean_lam must be > 0 and both finite, got {mean_lam!r}, {mean_log!r}")
    a, b = fit_gammas(np.array([mean_lam]), np.array([mean_log]))
    return GammaPrior(float(a[0]), float(b[0]))


def fit_gammas(mean_lam: nm.FloatArray, mean_log: nm.FloatArray
               ) -> tuple[nm.FloatArray, nm.FloatArray]:
    """:func:`fit_gamma` of many hosts at once: ``(shape, rate_s)`` arrays (``mean_lam``
    must be finite and > 0, ``mean_log`` finite)."""
    m = np.asarray(mean_lam, dtype=np.float64)
    s = np.log(m) - np.asarray(mean_log, dtype=np.float64)
    point = ~(s > 1.0 / (2.0 * MAX_SHAPE))  # Jensen: s >= 0; s -> 0 is a point mass
    s = np.where(point, 1.0, s)
    a = (3.0 - s + np.sqrt((s - 3.0) ** 2 + 24.0 * s)) / (12.0 * s)
    for _ in range(20):
        num = np.log(a) - digamma(a) - s
        den = a * a * (1.0 / a - polygamma(1, a))
        with np.errstate(divide="ignore", invalid="ignore"):
            a_new = 1.0 / (1.0 / a + num / den)
        ok = (a_new > 0.0) & np.isfinite(a_new)
        done = ~ok | (np.abs(a_new - a) <= 1e-10 * a)
        a = np.where(ok, a_new, a)
        if done.all():
            break
    a = np.where(point, MAX_SHAPE, np.clip(a, MIN_SHAPE, MAX_SHAPE))
    return a, a / m


def fit_host_prior(loglik: nm.FloatArray, *, start: GammaPrior | None = None,
                   iterations: int = 200, tol: float = 1e-9,
                   weights: nm.FloatArray | None = None) -> GammaPrior:
    """Batch EM for the Gamma maximising ``sum_i w_i log m_i(a, b)`` over the pages' grid
    log-likelihoods (module docstring); ``start`` defaults to a wide Gamma at the median
    page's maximum-likelihood grid rate."""
    ll = np.asarray(loglik, dtype=np.float64)
    if ll.ndim != 2 or ll.shape[1] != GRID_POINTS or ll.shape[0] < 1:
        raise ValueError(f"loglik must have shape (N >= 1, {GRID_POINTS}), got {ll.shape}")
    w = np.ones(ll.shape[0]) if weights is None else np.asarray(weights, dtype=np.float64)
    if start is None:
        mode = float(np.median(_GRID[np.argmax(ll, axis=1)]))
        start = GammaPrior(0.5, 0.5 / mode)
    prior = start
    last = -math.inf
    for _ in range(iterations):
        post = page_posteriors(ll, prior)
        total = float(np.sum(w * post.log_marginal))
        prior = fit_gamma(float(np.average(post.mean_per_s, weights=w)),
                          float(np.average(post.mean_log, weights=w)))
        if total - last <= tol * max(1.0, abs(total)):
            break
        last = total
    return prior


@dataclass(frozen=True, slots=True)
class HostPriorState:
    """Bounded online summary of a host: the sums of its pages' current contributions
    (``E[lambda]``, ``E[log lambda]``, one count per page) and the prior they fit."""

    n_pages: float = 0.0
    sum_mean: float = 0.0
    sum_log: float = 0.0
    prior: GammaPrior | None = None


def host_prior_update(host: HostPriorState, old_mean: nm.FloatArray, old_log: nm.FloatArray,
                      old_count: nm.FloatArray, new: PagePosterior,
                      default: GammaPrior) -> HostPriorState:
    """Replace pages' contributions (``old_*``; ``old_count`` 0 for a page not yet counted)
    by their new posteriors ``new`` and redo the M-step (incremental EM, module docstring).
    ``default`` is the prior while the host has no page."""
    n = host.n_pages + float(new.mean_per_s.size) - float(np.sum(old_count))
    sm = host.sum_mean + float(np.sum(new.mean_per_s)) - float(np.sum(old_count * old_mean))
    sl = host.sum_log + float(np.sum(new.mean_log)) - float(np.sum(old_count * old_log))
    if n < 0.5 or not sm > 0.0:
        return HostPriorState(max(n, 0.0), max(sm, 0.0), sl, None)
    try:
        prior = fit_gamma(sm / n, sl / n)
    except ValueError:
        prior = default
    return HostPriorState(n, sm, sl, prior)


def host_priors(n: nm.FloatArray, sum_mean: nm.FloatArray, sum_log: nm.FloatArray
                ) -> tuple[nm.FloatArray, nm.FloatArray, npt.NDArray[np.bool_]]:
    """Each host's Gamma from the sums of its pages' contributions (the M-step of the
    incremental EM, :func:`fit_gammas`): ``(shape, rate_s, fitted)``, ``fitted`` false
    (shape and rate 1) where the sums hold no page (``n < 0.5``, or ``sum_mean`` not > 0:
    every page left, up to rounding)."""
    n = np.asarray(n, dtype=np.float64)
    sm = np.asarray(sum_mean, dtype=np.float64)
    sl = np.asarray(sum_log, dtype=np.float64)
    ok = (n >= 0.5) & (sm > 0.0) & np.isfinite(sm) & np.isfinite(sl)
    shape, rate = np.ones(n.shape), np.ones(n.shape)
    if ok.any():
        a, b = fit_gammas(sm[ok] / n[ok], sl[ok] / n[ok])
        shape[ok], rate[ok] = a, b
    return shape, rate, ok


def host_contributions(loglik: nm.FloatArray, shape: nm.FloatArray, rate: nm.FloatArray,
                       fitted: npt.NDArray[np.bool_],
                       default: GammaPrior | tuple[nm.FloatArray, nm.FloatArray]
                       ) -> PagePosterior:
    """The E-step of the incremental EM for pages (rows of ``loglik``): each page's
    posterior under its host's Gamma (``shape``, ``rate`` per row, :func:`host_priors`), or
    under ``default`` (one Gamma, or one per row) where the host is not ``fitted``."""
    d_a, d_b = ((default.shape, default.rate_s) if isinstance(default, GammaPrior)
                else default)
    a = np.where(fitted, shape, d_a)
    b = np.where(fitted, rate, d_b)
    return page_posteriors(loglik, (np.asarray(a, dtype=np.float64),
                                    np.asarray(b, dtype=np.float64)))


def add_contributions(n: nm.FloatArray, sum_mean: nm.FloatArray, sum_log: nm.FloatArray,
                      hosts: IntArray, old_count: nm.FloatArray, old_mean: nm.FloatArray,
                      old_log: nm.FloatArray, new: PagePosterior) -> None:
    """Replace pages' contributions to their hosts' sums, in place (``hosts``: each page's
    index into the sums; ``old_count`` 0 for a page not yet counted): the bookkeeping of
    :func:`host_prior_update` for many hosts at once."""
    h = np.asarray(hosts, dtype=np.int64)
    size = n.shape[0]
    oc = np.asarray(old_count, dtype=np.float64)
    n += np.bincount(h, weights=1.0 - oc, minlength=size)
    sum_mean += np.bincount(h, weights=new.mean_per_s - oc * old_mean, minlength=size)
    sum_log += np.bincount(h, weights=new.mean_log - oc * old_log, minlength=size)
