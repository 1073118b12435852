"""Several ping sources per page: a capability beyond paper 004.

:class:`SourceWorld`, :func:`two_source_world`, :func:`simulate_source_events`,
:func:`multi_source_value`, :class:`MultiSourceAlgorithm1`, :func:`source_policy`: each
source ``s`` has its own recall ``lam_s``, false rate ``nu_s``, lag, and time-equivalent
``beta_s``.  Split out of :mod:`models.sim.variants`, which re-exports every
name.  Over 600 lines on purpose: the world, its events, the exact value and the two
policies share the one model below and read as one derivation.

The model
---------
Paper 004 treats one source and notes that "it is straightforward to extend the model to
multiple independent sources of CI signals" (Sec. 3, footnote 2) without giving the
formulas; the ones below are ours, derived the way the paper derives the one-source case.

A page changes as Poisson(``Delta``).  Each change is announced by *at most one* source:
by source ``s`` with probability ``lam_s`` (``sum_s lam_s <= 1``); source ``s`` also
sends false pings as Poisson(``nu_s``).  This is the reading under which the App. E
likelihood with several sources is exact (:mod:`models.estimators.signals`, whose
``derive`` uses ``Delta = alpha + sum_s recall_s Delta``).  By the thinning and merging
properties of Poisson processes (Sec. 3 of paper 004), unannounced changes are
Poisson(``alpha``) with ``alpha = Delta (1 - sum_s lam_s)`` and the pings of source
``s`` are Poisson(``gamma_s``) with ``gamma_s = lam_s Delta + nu_s``, all independent;
each ping of ``s`` is false with probability ``nu_s/gamma_s``.  Eq. (1) of paper 004
becomes::

    P(fresh | H_t) = exp(-alpha tau_elap) prod_s (nu_s/gamma_s)^{n_s} = exp(-alpha tau_eff),
    tau_eff = tau_elap + sum_s beta_s n_s,       beta_s = ln(gamma_s/nu_s) / alpha,

so a ping of source ``s`` moves the page's origin (``tau_eff = t - origin``) back by
``beta_s`` and objective (2) is unchanged.  The crawl value, however, is **not** Theorem
1's ``V(tau_eff)`` with the combined ``alpha`` and ``gamma = sum_s gamma_s``: ``V =
mu (w - e^{-alpha iota} psi)`` (Theorem 1; App. A, from Lemma 3, whose proof holds for any
jump process) still holds, but Lemma 4's sums become sums over one count per source (see
:func:`multi_source_value`).  Merging all pings into one source (``nu = sum_s nu_s``,
``beta_bar = ln(gamma/nu)/alpha``) is a valid one-source model of the same page and its
value is Lemma 4's; it equals the several-source value when every ``beta_s`` is the same.

:class:`MultiSourceAlgorithm1` moves the origin by each ping's own ``beta_s`` (exact
posterior) and ranks with Theorem 1's value at the merged ``(alpha, beta_bar, gamma)``
(the *pooled shape*, so that the :class:`models.index.CrawlIndex` can serve it); the
difference from the exact several-source value is measured in the tests.

Pure: numpy and scipy; randomness from a :class:`numpy.random.Generator` passed in.

References
----------
[004] R. Busa-Fekete, J. Zimmert, A. György et al., "A Scalable Crawling Algorithm
Utilizing Noisy Change-Indicating Signals": Sec. 3 (eqs. 1-2, footnote 2), Sec. 4
(Theorem 1 and the remark on abandoned pages after eq. 5), Algorithm 1, App. A (Lemmas
3-4, eqs. 6-7), App. C (ping rules), App. E (estimation).
[003] The change-rate estimation paper: Sec. 5.3 ("the chance of being very wrong about
Delta": very stale pages while the estimate converges)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special

from models.decision.pings import APPLIED, PingRule, ping_verdict
from models.decision.pooling import pooled_params
from models.index import CrawlIndex
from models.sim.events import Events
from models.sim.policies import Eligible, best_page, greedy_book
from models.sim.world import World
from models.values import crawl_value

__all__ = [
    "SOURCE_POLICIES",
    "ExactSourceAlgorithm1",
    "MultiSourceAlgorithm1",
    "SourceEvents",
    "SourceWorld",
    "multi_source_value",
    "pooled_params",
    "simulate_source_events",
    "source_policy",
    "two_source_world",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SourceWorld:
    """True parameters of a web whose pages are announced by ``S`` ping sources.

    Attributes
    ----------
    mu, delta : ndarray (m,)
        Importance and change rate.
    lam, nu : ndarray (m, S)
        Per page and source: probability that a change is announced by that source
        (disjoint: ``sum_s lam[i, s] <= 1``), false-ping rate.
    delay_mean : ndarray (S,)
        Lag of each source's pings: ``Poisson(delay_mean_s) * delay_unit`` after emission
        (App. C of paper 004, per source).
    names : tuple of str
    """

    mu: FloatArray
    delta: FloatArray
    lam: FloatArray
    nu: FloatArray
    delay_mean: FloatArray
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        m = self.mu.size
        s = len(self.names)
        if self.delta.shape != (m,) or self.lam.shape != (m, s) or self.nu.shape != (m, s):
            raise ValueError("mu, delta (m,), lam, nu (m, S) and names (S) must agree")
        if self.delay_mean.shape != (s,):
            raise ValueError(f"delay_mean must have shape ({s},)")
        if (self.lam < 0).any() or (self.lam.sum(axis=1) > 1.0 + 1e-12).any():
            raise ValueError("lam must be >= 0 with sum over sources <= 1 (disjoint sources)")
        if (self.nu < 0).any() or (self.delta < 0).any() or (self.mu < 0).any():
            raise ValueError("mu, delta and nu must be >= 0")

    @property
    def m(self) -> int:
        return int(self.mu.size)

    @property
    def n_sources(self) -> int:
        return len(self.names)

    def signal_params(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        """``(alpha (m,), beta (m, S), gamma (m, S))`` with every source (module docstring).

        ``alpha = Delta (1 - sum_s lam_s)``, ``gamma_s = lam_s Delta + nu_s``,
        ``beta_s = ln(gamma_s/nu_s)/alpha`` (``inf`` for a noiseless source or
        ``alpha = 0``; ``0`` for a source that never announces a change of the page).
        """
        return _source_params(self.delta, self.lam, self.nu)

    def world(self, sources: Sequence[int] | None = None) -> World:
        """The one-source :class:`World` seen through ``sources`` (default: all, merged).

        Pings of the chosen sources are merged into one source (recall ``sum lam_s``,
        false rate ``sum nu_s``); the other sources' announced changes count as
        unannounced.  Its ``signal_params()`` are the merged (or single-source)
        parameters; :func:`models.sim.accuracy` and :func:`models.sim.engine.stale_share`
        only read ``mu`` and ``delta``.
        """
        sel = list(range(self.n_sources)) if sources is None else list(sources)
        lam = self.lam[:, sel].sum(axis=1) if sel else np.zeros(self.m)
        nu = self.nu[:, sel].sum(axis=1) if sel else np.zeros(self.m)
        return World(mu=self.mu, delta=self.delta, lam=np.minimum(lam, 1.0), nu=nu,
                     host=np.zeros(self.m, dtype=np.int64), host_rate=np.array([np.inf]),
                     top=np.zeros(self.m, dtype=bool))


def _source_params(delta: FloatArray, lam: FloatArray,
                   nu: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    alpha = delta * np.maximum(1.0 - lam.sum(axis=1), 0.0)
    signalled = lam * delta[:, None]
    gamma = signalled + nu
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        beta = np.log1p(signalled / nu) / alpha[:, None]
    beta = np.where(signalled == 0.0, 0.0, beta)
    beta = np.where((signalled > 0.0) & ((nu == 0.0) | (alpha[:, None] == 0.0)), np.inf, beta)
    return alpha, beta, gamma


#: Source presets of :func:`two_source_world`: ``(lam range, nu range, delay_mean)``.
SITEMAP = ((0.3, 0.6), (0.1, 0.6), 10.0)
INDEXNOW = ((0.1, 0.3), (0.005, 0.05), 0.0)


def two_source_world(
    m: int,
    rng: np.random.Generator,
    *,
    sitemap: tuple[tuple[float, float], tuple[float, float], float] = SITEMAP,
    indexnow: tuple[tuple[float, float], tuple[float, float], float] = INDEXNOW,
) -> SourceWorld:
    """Sec. 6.1-style pages (``mu, Delta ~ U(0, 1)``) with two ping sources.

    ``sitemap``: high recall, many false pings (``lastmod`` bumps without a content
    change) and late (polled; lag ``Poisson(10)`` slots by default).  ``indexnow``: low
    recall, precise, immediate.  Each is ``((lam_lo, lam_hi), (nu_lo, nu_hi),
    delay_mean)``, drawn uniformly per page; the two recalls must sum to at most 1.
    """
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m!r}")
    mu = rng.uniform(0.0, 1.0, m)
    delta = rng.uniform(0.0, 1.0, m)
    lam = np.stack([rng.uniform(*sitemap[0], m), rng.uniform(*indexnow[0], m)], axis=1)
    nu = np.stack([rng.uniform(*sitemap[1], m), rng.uniform(*indexnow[1], m)], axis=1)
    return SourceWorld(mu, delta, lam, nu, np.array([sitemap[2], indexnow[2]]),
                       ("sitemap", "indexnow"))


@dataclass(frozen=True)
class SourceEvents:
    """Changes and pings of a :class:`SourceWorld`: merged :class:`Events` plus sources.

    ``ping_source[k]`` is the source of ``events``' ``k``-th ping (arrival order).
    """

    events: Events
    ping_source: IntArray

    def only(self, sources: Sequence[int]) -> Events:
        """The same changes with only the pings of ``sources``."""
        keep = np.isin(self.ping_source, np.asarray(list(sources), dtype=np.int64))
        ev = self.events
        return Events(ev.change_time, ev.change_start, ev.ping_arrival[keep],
                      ev.ping_emitted[keep], ev.ping_page[keep], ev.ping_true[keep],
                      ev.horizon)

    def source_lookup(self) -> Callable[[int, float, float], int]:
        """``source_of(page, arrival, emitted)`` for a policy fed through ``on_ping``.

        Keyed by the exact floats the simulation loop passes (a ping's page, arrival and
        emission time are unique with probability 1).
        """
        ev = self.events
        table: dict[tuple[int, float, float], int] = dict(
            zip(zip(ev.ping_page.tolist(), ev.ping_arrival.tolist(), ev.ping_emitted.tolist(),
                    strict=True), self.ping_source.tolist(), strict=True))

        def source_of(page: int, arrival: float, emitted: float) -> int:
            return table[(int(page), float(arrival), float(emitted))]

        return source_of


def simulate_source_events(
    world: SourceWorld, horizon: float, rng: np.random.Generator, *, delay_unit: float = 1.0,
) -> SourceEvents:
    """Draw changes and every source's pings on ``[0, horizon]`` (module docstring model).

    Each change is announced by source ``s`` with probability ``lam_s`` and by none with
    ``1 - sum_s lam_s``; source ``s`` adds Poisson(``nu_s``) false pings; a ping of ``s``
    arrives ``Poisson(delay_mean_s) * delay_unit`` after its emission (App. C of paper
    004).  Pings arriving after ``horizon`` are dropped.
    """
    if horizon <= 0:
        raise ValueError(f"horizon must be > 0, got {horizon!r}")
    m, s_n = world.m, world.n_sources
    counts = rng.poisson(world.delta * horizon)
    cp = np.repeat(np.arange(m, dtype=np.int64), counts)
    ct = rng.uniform(0.0, horizon, cp.size)
    order = np.lexsort((ct, cp))
    ct, cp = ct[order], cp[order]
    start = np.searchsorted(cp, np.arange(m + 1)).astype(np.int64)
    u = rng.uniform(size=ct.size)
    cum = np.cumsum(world.lam[cp], axis=1)  # (changes, S)
    who = (u[:, None] >= cum).sum(axis=1)  # S: announced by nobody
    emitted, page, src, true = [], [], [], []
    for s in range(s_n):
        hit = who == s
        fc = rng.poisson(world.nu[:, s] * horizon)
        fp = np.repeat(np.arange(m, dtype=np.int64), fc)
        ft = rng.uniform(0.0, horizon, fp.size)
        emitted += [ct[hit], ft]
        page += [cp[hit], fp]
        n = int(hit.sum()) + fp.size
        src.append(np.full(n, s, dtype=np.int64))
        true += [np.ones(int(hit.sum()), dtype=bool), np.zeros(fp.size, dtype=bool)]
    em = np.concatenate(emitted)
    pg = np.concatenate(page)
    sr = np.concatenate(src)
    tr = np.concatenate(true)
    dm = world.delay_mean[sr]
    lag = rng.poisson(dm) * delay_unit
    arr = em + lag
    keep = arr <= horizon
    o = np.argsort(arr[keep], kind="stable")
    ev = Events(change_time=ct, change_start=start, ping_arrival=arr[keep][o],
                ping_emitted=em[keep][o], ping_page=pg[keep][o], ping_true=tr[keep][o],
                horizon=float(horizon))
    return SourceEvents(ev, sr[keep][o])


def _multi_indices(beta: FloatArray, x_max: float, k_max: int) -> IntArray:
    """All ``i`` in ``N^S`` with ``sum_s i_s beta_s < x_max`` and ``|i| <= k_max``."""
    ranges = []
    for b in beta.tolist():
        if b == math.inf:
            ranges.append(range(1))
        elif b <= 0.0:
            ranges.append(range(k_max + 1))
        else:
            ranges.append(range(min(k_max, math.ceil(x_max / b)) + 1))
    idx = np.array(list(itertools.product(*ranges)), dtype=np.int64).reshape(-1, beta.size)
    fin = np.where(np.isinf(beta), 0.0, beta)
    keep = (idx.sum(axis=1) <= k_max) & (idx @ fin < x_max)
    out: IntArray = idx[keep]
    return out


def multi_source_value(
    tau_eff: npt.ArrayLike,
    alpha: float,
    beta: npt.ArrayLike,
    gamma: npt.ArrayLike,
    mu: float = 1.0,
) -> FloatArray:
    """Exact crawl value of one page with ``S`` independent ping sources.

    Parameters
    ----------
    tau_eff : array_like
        ``tau_elap + sum_s beta_s n_s`` (``>= 0``; ``inf`` allowed).
    alpha : float
        Rate of changes no source announces, ``> 0``.
    beta, gamma : array_like (S,)
        Per source: time-equivalent of one ping (``> 0``, ``inf`` = noiseless) and ping
        rate (``>= 0``).
    mu : float
        Importance.

    Notes
    -----
    Theorem 1 of paper 004 (``V = mu (w - e^{-alpha iota} psi)``, derived in App. A from
    Lemma 3 and eqs. 6-7) with Lemma 4 redone for ``tau_eff(t) = t + sum_s beta_s
    N_s(t)``, ``N_s`` independent Poisson(``gamma_s``) (module docstring).  With ``G =
    sum_s gamma_s``, ``A = alpha + G``, ``nu_s = gamma_s e^{-alpha beta_s}`` and the
    multinomial ``C(i) = |i|! / prod_s i_s!``::

        psi(x) = int_0^inf P(tau_eff(t) < x) dt
               = sum_{i: i.beta < x} C(i) prod_s (gamma_s/G)^{i_s} R^{|i|}(G (x - i.beta)) / G
        w(x)   = int_0^inf E[1{tau_eff(t) < x} e^{-alpha tau_eff(t)}] dt
               = sum_{i: i.beta < x} C(i) prod_s nu_s^{i_s} / A^{|i|+1} R^{|i|}(A (x - i.beta))

    (integrate ``prod_s e^{-gamma_s t} (gamma_s t)^{i_s} / i_s!`` over ``t < x -
    i.beta``; ``gamma_s e^{-alpha beta_s} = nu_s``).  For ``S = 1`` these are Lemma 4.
    Terms with ``|i|`` beyond ``A x + 12 sqrt(A x) + 30`` are dropped (their Poisson
    weight is below 1e-30).  Cost grows like ``prod_s x/beta_s``: for tests and checks,
    not for a scheduler's inner loop.  ``V(inf) = mu/Delta`` with ``Delta = alpha +
    sum_s (gamma_s - nu_s)``.
    """
    x = np.asarray(tau_eff, dtype=np.float64)
    b = np.atleast_1d(np.asarray(beta, dtype=np.float64))
    g = np.atleast_1d(np.asarray(gamma, dtype=np.float64))
    if b.shape != g.shape or b.ndim != 1:
        raise ValueError(f"beta and gamma must be 1-D of one length, got {b.shape}, {g.shape}")
    if not (alpha > 0.0 and math.isfinite(alpha)):
        raise ValueError(f"alpha must be finite and > 0, got {alpha!r}")
    if (b <= 0.0).any() or np.isnan(b).any():
        raise ValueError("beta must be > 0 (inf allowed)")
    if (g < 0.0).any() or not np.isfinite(g).all():
        raise ValueError("gamma must be finite and >= 0")
    if np.isnan(x).any() or (x < 0.0).any():
        raise ValueError("tau_eff must be >= 0")
    act = g > 0.0
    b, g = b[act], g[act]
    nu = g * np.exp(-alpha * b)
    big_g = float(g.sum())
    a_tot = alpha + big_g
    delta = alpha + float((g - nu).sum())
    flat = x.ravel()
    out = np.empty(flat.size)
    inf = np.isinf(flat)
    out[inf] = mu / delta
    fin = flat[~inf]
    if big_g == 0.0:
        out[~inf] = crawl_value(fin, alpha, 0.0, 0.0, mu)
        return out.reshape(x.shape)
    if fin.size == 0:
        return out.reshape(x.shape)
    x_max = float(fin.max())
    lam_x = a_tot * x_max
    k_max = math.ceil(lam_x + 12.0 * math.sqrt(lam_x) + 30.0)
    idx = _multi_indices(b, x_max, k_max)
    k = idx.sum(axis=1)
    fb = np.where(np.isinf(b), 0.0, b)
    shift = idx @ fb
    log_c = special.gammaln(k + 1.0) - special.gammaln(idx + 1.0).sum(axis=1)
    log_psi = log_c + idx @ np.log(g / big_g) - math.log(big_g)
    log_nu = np.log(np.where(nu > 0.0, nu, 1.0))  # nu_s = 0 only with i_s = 0
    log_w = log_c + idx @ log_nu - (k + 1.0) * math.log(a_tot)
    psi = np.zeros(fin.size)
    w = np.zeros(fin.size)
    step = max(1, 2_000_000 // max(fin.size, 1))
    for lo in range(0, k.size, step):
        sl = slice(lo, lo + step)
        arg = np.maximum(fin[None, :] - shift[sl, None], 0.0)
        kk = k[sl, None] + 1.0
        psi += (np.exp(log_psi[sl, None]) * special.gammainc(kk, big_g * arg)).sum(axis=0)
        w += (np.exp(log_w[sl, None]) * special.gammainc(kk, a_tot * arg)).sum(axis=0)
    out[~inf] = mu * (w - np.exp(-alpha * fin) * psi)
    return out.reshape(x.shape)


class MultiSourceAlgorithm1:
    """Algorithm 1 with several ping sources, each moving ``tau_eff`` by its own ``beta_s``.

    The state of page ``i`` is its origin ``last_crawl - sum_s beta_s n_s`` (module
    docstring: eq. 1 of paper 004 with one factor per source); a ping of source ``s``
    moves it back by ``beta[i, s]`` (to ``-inf`` for ``beta = inf``) and is ignored when
    ``gamma[i, s] = 0`` (a source the policy does not use).  Pages are ranked with Theorem
    1's value at ``(alpha, value_beta, sum_s gamma_s)`` through a
    :class:`~models.index.CrawlIndex`; ``value_beta`` defaults to the merged
    ``beta_bar`` of :func:`pooled_params` (the pooled shape).  With one source this is
    :class:`~models.sim.policies.Algorithm1` exactly.

    ``source_of(page, arrival, emitted)`` names the source of each ping
    (:meth:`SourceEvents.source_lookup`).  Ping rules as in App. C.
    """

    def __init__(
        self,
        name: str,
        mu: FloatArray,
        alpha: FloatArray,
        beta: FloatArray,
        gamma: FloatArray,
        *,
        source_of: Callable[[int, float, float], int],
        value_beta: FloatArray | None = None,
        ping_rule: PingRule = "accept",
        t_delay: float = 0.0,
    ) -> None:
        self.name = name
        self.mu = np.asarray(mu, dtype=np.float64)
        self.alpha = np.asarray(alpha, dtype=np.float64)
        self.beta = np.atleast_2d(np.asarray(beta, dtype=np.float64))
        self.gamma = np.atleast_2d(np.asarray(gamma, dtype=np.float64))
        m = self.mu.size
        if self.beta.shape != self.gamma.shape or self.beta.shape[0] != m:
            raise ValueError("beta and gamma must have shape (m, S)")
        _, bbar, gbar = pooled_params(self.alpha, self.beta, self.gamma)
        self.value_beta = bbar if value_beta is None else np.asarray(value_beta, np.float64)
        self.value_gamma = gbar
        self.source_of = source_of
        self.ping_rule: PingRule = ping_rule
        self.t_delay = float(t_delay)
        self.last_crawl = np.zeros(m)
        self.origin = np.zeros(m)
        self.host = np.zeros(m, dtype=np.int64)
        # the worker's engine picks (best_page); the pooled shape is what the index ranks by
        self.index = CrawlIndex()
        self.book = greedy_book(self.mu, self.alpha, self.value_beta, gbar, origin=self.origin,
                                host=self.host, index=self.index)

    def on_ping(self, page: int, arrival: float, emitted: float) -> None:
        s = self.source_of(page, arrival, emitted)
        if self.gamma[page, s] == 0.0:
            return
        if ping_verdict(self.ping_rule, self.t_delay, float(self.last_crawl[page]), arrival,
                        emitted) != APPLIED:
            return
        b = float(self.beta[page, s])
        o = -math.inf if b == math.inf else float(self.origin[page]) - b
        if o != self.origin[page]:
            self.origin[page] = o
            self.index.set_origin(page, o)

    def plan(self, times: FloatArray) -> None:
        self.index.plan(times)

    def choose(self, t: float, eligible: Eligible) -> int | None:
        if eligible is not None:
            raise ValueError("this policy picks under its book's host buckets "
                             "(models.sim.run gives the book its world's)")
        return best_page(self.book, t)

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None:
        self.last_crawl[page] = t
        self.origin[page] = t
        self.index.set_origin(page, t)


class ExactSourceAlgorithm1(MultiSourceAlgorithm1):
    """:class:`MultiSourceAlgorithm1` ranking with the exact several-source value.

    Same state (origin moved by ``beta_s`` per ping); the value is
    :func:`multi_source_value` instead of the pooled shape.  Each page's value is
    tabulated on the grid ``x_j = x0 (exp(j d) - 1)`` with ``x0 = 8/(alpha + gamma)``
    and ``d = 1/(8 points_per_unit)`` (``points_per_unit`` points per mean time between
    the page's events near 0, spacing growing with ``x``), linear interpolation (the
    tests bound its error).  The table is extended by doubling when a page's
    ``tau_eff`` leaves it, only if the page could win (its ``V(inf) = mu/Delta`` is
    above the best value inside the tables: V is increasing, Lemma 2), and is held at
    its last entry once it reaches ``(1 - 1e-7) mu/Delta``.  The argmax is a full scan.
    """

    def __init__(self, name: str, mu: FloatArray, alpha: FloatArray, beta: FloatArray,
                 gamma: FloatArray, *, source_of: Callable[[int, float, float], int],
                 ping_rule: PingRule = "accept", t_delay: float = 0.0,
                 points_per_unit: float = 32.0, initial_points: int = 512) -> None:
        super().__init__(name, mu, alpha, beta, gamma, source_of=source_of,
                         ping_rule=ping_rule, t_delay=t_delay)
        m = self.mu.size
        rate = np.maximum(self.alpha + self.gamma.sum(axis=1), 1e-12)
        self._x0 = 8.0 / rate
        self._d = 1.0 / (8.0 * float(points_per_unit))
        with np.errstate(over="ignore", invalid="ignore"):
            nu = np.where(self.gamma > 0.0, self.gamma * np.exp(-self.alpha[:, None] * self.beta),
                          0.0)
        nu = np.where(np.isnan(nu), 0.0, nu)
        delta = self.alpha + (self.gamma - nu).sum(axis=1)
        self._cap = np.where(delta > 0.0, self.mu / np.maximum(delta, 1e-300), 0.0)
        self._table = np.zeros((m, int(initial_points)))
        self._len = np.zeros(m, dtype=np.int64)
        self._saturated = np.zeros(m, dtype=bool)
        for i in range(m):
            self._extend(i, int(initial_points))

    def _extend(self, i: int, n: int) -> None:
        """Tabulate page ``i`` on grid points ``0 .. n - 1``."""
        have = int(self._len[i])
        if n <= have or self._saturated[i]:
            return
        if n > self._table.shape[1]:
            grown = np.zeros((self._table.shape[0], max(n, 2 * self._table.shape[1])))
            grown[:, : self._table.shape[1]] = self._table
            self._table = grown
        x = self._x0[i] * np.expm1(np.arange(have, n, dtype=np.float64) * self._d)
        if self.alpha[i] > 0.0:
            v = multi_source_value(x, float(self.alpha[i]), self.beta[i], self.gamma[i],
                                   float(self.mu[i]))
        else:  # no unannounced change: fresh until a ping (value via the pooled form)
            v = crawl_value(x, 0.0, float(self.value_beta[i]), float(self.value_gamma[i]),
                            float(self.mu[i]))
        self._table[i, have:n] = v
        self._len[i] = n
        if v[-1] >= (1.0 - 1e-7) * self._cap[i]:
            self._saturated[i] = True

    def exact_values(self, t: float, *, above: float = -math.inf) -> FloatArray:
        """Several-source values of every page at ``t`` (table interpolation).

        A page whose ``tau_eff`` is beyond its table is tabulated further only when its
        ``mu/Delta`` exceeds ``above``; otherwise its last tabulated value (a lower
        bound, below ``above``) is returned.
        """
        tau = np.maximum(t - self.origin, 0.0)
        with np.errstate(invalid="ignore"):
            pos = np.log1p(tau / self._x0) / self._d
        need = np.nonzero((pos >= self._len - 1) & ~self._saturated & np.isfinite(pos)
                          & (self._cap > above))[0]
        for i in need.tolist():
            n = int(self._len[i])
            while n - 1 <= pos[i] and not self._saturated[i]:
                n *= 2
                self._extend(i, n)
        last = self._len - 1
        p = np.minimum(pos, last)
        j = np.minimum(np.floor(p), np.maximum(last - 1, 0)).astype(np.int64)
        frac = np.clip(p - j, 0.0, 1.0)
        rows = np.arange(self.mu.size)
        lo = self._table[rows, j]
        hi = self._table[rows, np.minimum(j + 1, last)]
        v = lo + frac * (hi - lo)
        out: FloatArray = np.where(np.isinf(tau), self._cap, v)
        return out

    def plan(self, times: FloatArray) -> None:
        return None

    def choose(self, t: float, eligible: Eligible) -> int | None:
        # pass 1: values inside the tables; pass 2: extend the pages that could beat them
        v = self.exact_values(t, above=math.inf)
        order = np.argsort(-v, kind="stable").tolist()
        best = next((p for p in order if eligible is None or eligible(p)), None)
        if best is None:
            return None
        v = self.exact_values(t, above=float(v[best]))
        for p in np.argsort(-v, kind="stable").tolist():
            if eligible is None or eligible(p):
                return int(p)
        return None


#: Policies of :func:`source_policy`.
SOURCE_POLICIES = ("greedy", "per-source", "per-source-exact", "merged", "only-0", "only-1")


def source_policy(kind: str, world: SourceWorld, events: SourceEvents, *,
                  ping_rule: PingRule = "strict") -> MultiSourceAlgorithm1:
    """The compared policies of the ``sources`` experiment, true parameters.

    * ``per-source``: every source, each ping moves the origin by its own ``beta_s``,
      pooled-shape value (:class:`MultiSourceAlgorithm1`);
    * ``per-source-exact``: the same state ranked by the exact several-source value
      (:class:`ExactSourceAlgorithm1`);
    * ``merged``: every source, all pings alike (one merged source, ``beta_bar``; exact
      one-source Greedy-NCIS for the merged pings);
    * ``only-s``: source ``s`` alone (the others' announced changes count as
      unannounced: ``alpha = Delta (1 - lam_s)``);
    * ``greedy``: no pings (``alpha = Delta``).
    """
    mu = world.mu
    lookup = events.source_lookup()
    s_n = world.n_sources
    if kind == "greedy":
        z = np.zeros((world.m, s_n))
        return MultiSourceAlgorithm1(kind, mu, world.delta.copy(), z, z.copy(),
                                     source_of=lookup, ping_rule=ping_rule)
    if kind.startswith("only-"):
        s = int(kind.split("-", 1)[1])
        a1, b1, g1 = _source_params(world.delta, world.lam[:, [s]], world.nu[:, [s]])
        beta = np.zeros((world.m, s_n))
        gamma = np.zeros((world.m, s_n))
        beta[:, s], gamma[:, s] = b1[:, 0], g1[:, 0]
        return MultiSourceAlgorithm1(kind, mu, a1, beta, gamma, source_of=lookup,
                                     ping_rule=ping_rule)
    alpha, beta, gamma = world.signal_params()
    if kind == "per-source":
        return MultiSourceAlgorithm1(kind, mu, alpha, beta, gamma, source_of=lookup,
                                     ping_rule=ping_rule)
    if kind == "per-source-exact":
        return ExactSourceAlgorithm1(kind, mu, alpha, beta, gamma, source_of=lookup,
                                     ping_rule=ping_rule)
    if kind == "merged":
        _, bbar, _ = pooled_params(alpha, beta, gamma)
        same = np.repeat(bbar[:, None], s_n, axis=1)
        return MultiSourceAlgorithm1(kind, mu, alpha, same, gamma, source_of=lookup,
                                     ping_rule=ping_rule)
    raise ValueError(f"unknown source policy {kind!r}; expected one of {SOURCE_POLICIES}")
