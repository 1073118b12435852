"""What a crawl budget buys, simulated: Algorithm 1 on the worker's engine in worlds drawn
from what the worker has observed (``recrawl plan``, ``GET /plan``).

:func:`simulate_budget` runs :class:`models.sim.live.EngineAlgorithm1` (the worker's pick,
:func:`models.decision.core.choose` over its host index, and its ``"live"`` ping rule with
``t_delay``; App. C of paper 004) through :func:`models.sim.engine.run` with per-host token
buckets (the host limits, burst 1: :func:`models.sim.engine.host_buckets`), at ``R`` evenly
spaced orders per second, and scores the request-weighted share of time the copies are fresh
(Sec. 6.2 of paper 004) over the second half of ``cycles`` round-robin periods ``pages / R``
(every copy fresh at time 0).  The policy ranks pages with the parameters it is given (the
worker's point estimates); the world's changes and pings are drawn from ``world`` (default:
the same parameters, paper 004 Sec. 3: ``Delta = alpha + gamma (1 - e^{-alpha beta})``,
signalled changes at ``gamma (1 - e^{-alpha beta})``, false signals at ``gamma e^{-alpha
beta}``).

Point estimates from a few crawls per page are noisy, and a policy that ranks by them does
worse than the same estimates taken as the truth promise.  :func:`posterior_world` draws a
world from the estimates' posterior instead: a prior over the pages' parameters fitted to all
pages' observations (:func:`fit_prior`, a nonparametric maximum-likelihood mixing
distribution), then each page's parameters drawn given its own observations
(:class:`PageLikelihood`, from its estimator record).

Cost control: the caller simulates a uniform sample of the pages (:func:`sample_pages`;
``share`` scales the budget and every host's rate, so each page keeps its share of both).
Not modelled: the longest-interval floor, ping delays, fetch and outcome lags, failed
fetches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from models.conversions import change_params
from models.estimators import _numeric as nm
from models.sim.engine import Budget, accuracy, run
from models.sim.events import simulate_events
from models.sim.live import EngineAlgorithm1
from models.sim.world import World

__all__ = ["ALPHA_SCALES", "KAPPA_SCALES", "PageLikelihood", "Prior", "SimulatedBudget",
           "fit_prior", "posterior_world", "sample_pages", "simulate_budget"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SimulatedBudget:
    accuracy: float
    #: pages crawled at least once in the scored half
    pages_crawled: int
    #: mean over those pages of the scored half's length / their crawls in it (seconds)
    mean_interval_s: float | None
    #: pages simulated (a sample when the catalogue is larger than ``max_pages``)
    pages_simulated: int


def simulate_budget(
    mu: FloatArray, alpha: FloatArray, beta: FloatArray, gamma: FloatArray, *,
    budget_per_s: float, host: IntArray, host_rate_per_s: FloatArray,
    t_delay_s: float = 0.0, world: tuple[FloatArray, FloatArray, FloatArray] | None = None,
    share: float = 1.0, cycles: float = 6.0, seed: int = 0,
) -> SimulatedBudget:
    """Algorithm 1 acting on ``(mu, alpha, beta, gamma)`` in ``world`` (``(Delta, lambda,
    nu)`` per page; default :func:`models.conversions.change_params` of the same
    parameters) at ``budget_per_s``, page
    ``i`` on host ``host[i]``, limited to ``host_rate_per_s[host[i]]`` crawls per second.
    ``share``: the pages given are this share of the catalogue (:func:`sample_pages`): the
    budget and the host rates are scaled by it and ``pages_crawled`` divided by it."""
    if not (budget_per_s > 0 and math.isfinite(budget_per_s)):
        raise ValueError(f"budget must be positive and finite, got {budget_per_s!r}")
    if not (0.0 < share <= 1.0):
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    n = int(mu.size)
    delta, lam, nu = change_params(alpha, beta, gamma) if world is None else world
    rng = np.random.default_rng(seed)
    budget = budget_per_s * share
    hosts, local = np.unique(host, return_inverse=True)
    local = local.astype(np.int64)
    rates = np.asarray(host_rate_per_s, dtype=np.float64)[hosts] * share
    w = World(mu=mu, delta=delta, lam=lam, nu=nu, host=local, host_rate=rates,
              top=np.zeros(n, dtype=bool))
    horizon = cycles * n / budget
    events = simulate_events(w, horizon, rng)
    policy = EngineAlgorithm1("plan", mu, alpha, beta, gamma, host=local,
                              last_crawl=np.zeros(n), t_delay=t_delay_s)
    res = run(w, events, policy, Budget(budget), host_limits=True)
    start = horizon / 2
    acc = accuracy(w, events, res, start=start)
    crawls = np.bincount(res.crawl_page[res.crawl_time >= start], minlength=n)
    crawled = crawls > 0
    mean_interval = (float(np.mean((horizon - start) / crawls[crawled]))
                     if crawled.any() else None)
    return SimulatedBudget(acc, round(int(crawled.sum()) / share), mean_interval, n)


def sample_pages(m: int, max_pages: int, rng: np.random.Generator) -> IntArray:
    """A uniform sample of ``min(m, max_pages)`` of ``m`` pages (sorted indices)."""
    if m <= max_pages:
        return np.arange(m, dtype=np.int64)
    return np.sort(rng.choice(m, max_pages, replace=False)).astype(np.int64)


@dataclass(frozen=True)
class PageLikelihood:
    """Each page's crawl observations as its change-rate estimator summarises them (App. E
    of paper 004, :mod:`models.estimators.signals`): ``lin (N,d)`` the sums over unchanged
    intervals, ``ring (N,K,d+1)`` the changed intervals kept ``(tau, counts..., weight)``,
    ``quad_a (N,d,d)`` the quadratic summary of older changed intervals with signals, ``rep
    (N,2)`` the representative older changed interval without signals ``(weight, length)``,
    ``totals (N,1+S)`` the observed time and each source group's signals in it; ``theta
    (N,d)`` each page's estimate ``(alpha, kappa_1..kappa_S)``, ``gamma (N,S)`` its signal
    rates; ``usable (N,)`` the pages with a readable record and an observed interval;
    ``unknown (N,4)`` the intervals with signals unknown (time, unchanged time, representative
    weight and length; None: none)."""

    lin: FloatArray
    ring: FloatArray
    quad_a: FloatArray
    rep: FloatArray
    totals: FloatArray
    theta: FloatArray
    gamma: FloatArray
    usable: npt.NDArray[np.bool_]
    unknown: FloatArray | None = None

    def take(self, rows: IntArray) -> PageLikelihood:
        return PageLikelihood(self.lin[rows], self.ring[rows], self.quad_a[rows],
                              self.rep[rows], self.totals[rows], self.theta[rows],
                              self.gamma[rows], self.usable[rows],
                              None if self.unknown is None else self.unknown[rows])

    def log_likelihood(self, atoms: FloatArray) -> FloatArray:
        """``(N, K)``: each page's log-likelihood, up to a constant per page, of each atom
        ``(alpha, kappa_1..kappa_S, gamma_1..gamma_S)`` (rows of ``atoms``): the crawl
        outcomes' (minus the estimator's objective without its prior,
        :func:`models.estimators._numeric.objective`: unchanged intervals ``-theta . lin``,
        changed ones ``log(1 - e^{-theta . (tau, n)})``) plus the signals' (Poisson counts
        over the time with signals recorded: ``n_s log gamma_s - gamma_s T``), and the
        intervals with signals unknown in the atom's change rate ``Delta = alpha + sum_s
        gamma_s*(1 - e^{-kappa_s})``: ``-U*Delta + w log(1 - e^{-T*Delta})``."""
        d = self.lin.shape[1]
        theta = atoms[:, :d]
        x = np.einsum("nmd,kd->nkm", self.ring[:, :, :d], theta)
        log_term = np.log(-np.expm1(-np.clip(x, 1e-300, 700.0)))
        out: FloatArray = (-self.lin @ theta.T
                           + np.einsum("nm,nkm->nk", self.ring[:, :, d], log_term)
                           - 0.5 * np.einsum("kd,nde,ke->nk", theta, self.quad_a, theta))
        xr = np.clip(self.rep[:, 1][:, None] * theta[:, 0][None, :], 1e-300, 700.0)
        out += self.rep[:, 0][:, None] * np.log(-np.expm1(-xr))
        unk = np.zeros((self.lin.shape[0], 4)) if self.unknown is None else self.unknown
        t = np.maximum(self.totals[:, 0] - unk[:, 0], 1.0)[:, None]
        g = np.maximum(atoms[:, d:], 1e-300)
        out += self.totals[:, 1:] @ np.log(g).T - t * g.sum(axis=1)[None, :]
        if np.any(unk[:, 0] > 0.0):
            delta = atoms[:, 0] + np.sum(atoms[:, d:] * -np.expm1(-atoms[:, 1:d]), axis=1)
            out -= unk[:, 1][:, None] * delta[None, :]
            xu = np.clip(unk[:, 3][:, None] * delta[None, :], 1e-300, 700.0)
            out += unk[:, 2][:, None] * np.log(-np.expm1(-xu))
        return out


#: scales of the catalogue's estimates that make the prior's atoms (:func:`fit_prior`): the
#: signals' ``kappa`` (precision ``1 - e^{-kappa}``) and ``alpha``
KAPPA_SCALES = (0.1, 0.3, 1.0, 3.0, 10.0)
ALPHA_SCALES = (0.3, 1.0, 3.0)


@dataclass(frozen=True)
class Prior:
    """A discrete prior over ``(alpha, kappa, gamma)``: ``atoms (K, d+S)``, ``weights (K,)``."""

    atoms: FloatArray
    weights: FloatArray


def fit_prior(lik: PageLikelihood, rng: np.random.Generator, *, base: int = 128,
              iterations: int = 300, tol: float = 1e-6) -> Prior:
    """The prior over the pages' true parameters that makes their observations most likely
    (the nonparametric maximum-likelihood mixing distribution of Kiefer and Wolfowitz, 1956,
    on a fixed set of atoms, fitted by EM: Laird, JASA 1978; empirical Bayes as in Koenker
    and Mizera, JASA 2014).  Atoms: up to ``base`` of the usable pages' estimates
    ``(alpha, kappa, gamma)``, each with ``alpha`` and ``kappa`` scaled by
    :data:`ALPHA_SCALES` x :data:`KAPPA_SCALES` (the estimates of pages seen a few times
    are pulled toward the estimator's prior; the true values spread wider)."""
    ok = np.flatnonzero(lik.usable)
    if ok.size == 0:
        raise ValueError("no page with observations to fit a prior to")
    seeds = ok if ok.size <= base else rng.choice(ok, base, replace=False)
    d = lik.lin.shape[1]
    est = np.concatenate([lik.theta[seeds], lik.gamma[seeds]], axis=1)
    atoms = []
    for ks in KAPPA_SCALES:
        for a_s in ALPHA_SCALES:
            x = est.copy()
            x[:, 0] *= a_s
            x[:, 1:d] *= ks
            atoms.append(x)
    atom = np.concatenate(atoms)
    like = _relative_likelihood(lik.take(ok), atom)
    w = np.full(atom.shape[0], 1.0 / atom.shape[0])
    for _ in range(iterations):
        post = like * w
        post /= post.sum(axis=1, keepdims=True)
        new = post.mean(axis=0)
        done = float(np.abs(new - w).max()) < tol
        w = new
        if done:
            break
    return Prior(atom, w)


def _relative_likelihood(lik: PageLikelihood, atoms: FloatArray) -> FloatArray:
    ll = lik.log_likelihood(atoms)
    out: FloatArray = np.exp(ll - ll.max(axis=1, keepdims=True))
    return out


def posterior_world(
    lik: PageLikelihood, prior: Prior, fallback: tuple[FloatArray, FloatArray, FloatArray],
    rng: np.random.Generator,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """A world ``(Delta, lambda, nu)``: each usable page's ``(alpha, kappa, gamma)`` drawn
    from its posterior under ``prior`` (:func:`fit_prior`) given its own observations
    (:meth:`PageLikelihood.log_likelihood`), then :func:`models.estimators._numeric.derive`
    (paper 004 Sec. 3, sources signalling disjoint changes).  A page with many observed
    intervals draws near its own estimate; a page with few, from nearly the whole prior.
    Pages not usable take ``fallback``."""
    delta, lam, nu = (np.array(x, dtype=np.float64) for x in fallback)
    rows = np.flatnonzero(lik.usable)
    if rows.size == 0:
        return delta, lam, nu
    post = _relative_likelihood(lik.take(rows), prior.atoms) * prior.weights
    cum = np.cumsum(post, axis=1)
    k = (cum < rng.uniform(size=(rows.size, 1)) * cum[:, -1:]).sum(axis=1)
    th = prior.atoms[np.minimum(k, prior.atoms.shape[0] - 1)]
    d = lik.lin.shape[1]
    got = nm.derive(th[:, 0], th[:, 1:d], th[:, d:])
    delta[rows] = got["change_rate"]
    lam[rows] = np.clip(got["recall"].sum(axis=1), 0.0, 1.0)
    nu[rows] = got["nu"].sum(axis=1)
    return delta, lam, nu
