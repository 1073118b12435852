"""Crawl policies for the simulator, all spending the same slots (one crawl per slot).

* :class:`Algorithm1` - Algorithm 1 of paper 004: at each slot crawl the page with the
  largest crawl value among pages whose host has room, picked by the worker's decision
  engine (:func:`models.decision.core.choose` over a
  :class:`models.decision.core.ShardBook`, :func:`greedy_book`), its crawled pages in a
  :class:`models.index.CrawlIndex` (fast with few hosts and many re-keys per slot).
  :func:`algorithm1` builds Greedy, Greedy-CIS, Greedy-NCIS,
  G-NCIS-Approx-1/2 and Greedy-CIS+ (Sec. 5.1, 6.2, 6.7) from true or believed
  parameters; :class:`EstimatingAlgorithm1` re-estimates the parameters online from crawl
  outcomes and pings (App. E MLE, :mod:`models.estimators`).
* :class:`Policy` - what the slot loop needs from any policy; the policies that are no
  Algorithm 1 (a precomputed schedule, the peers Nutch, StormCrawler and round robin) are in
  :mod:`models.sim.peers`.

Ping rules (App. C) are :mod:`models.decision.pings`' (the one rule of the simulator and
the service): ``"accept"`` every ping; ``"tdelay"`` drops a ping arriving within
``t_delay`` after the page's last crawl; ``"strict"`` drops a ping whose emission time
precedes the last crawl; ``"live"`` is the worker's (both, and an arrival before the crawl).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from operator import itemgetter
from typing import Protocol

import numpy as np
import numpy.typing as npt

from models.decision.core import BookIndex, ShardBook, choose
from models.decision.hosts import HostBuckets
from models.decision.pings import APPLIED, PingRule, ping_ok, ping_verdict
from models.index import CrawlIndex
from models.values import change_params, signal_params

__all__ = [
    "POLICY_NAMES",
    "Algorithm1",
    "EstimatingAlgorithm1",
    "PingedPages",
    "Policy",
    "algorithm1",
    "best_page",
    "greedy_book",
    "value_params",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Eligible = Callable[[int], bool] | None

#: Algorithm 1 variants (Sec. 5.1, 6.2, 6.7 of paper 004).
POLICY_NAMES = (
    "greedy", "greedy-cis", "greedy-ncis", "ncis-approx-1", "ncis-approx-2", "greedy-cis-plus",
)


class Policy(Protocol):
    """What the simulation loop needs from a policy."""

    name: str

    def on_ping(self, page: int, arrival: float, emitted: float) -> None: ...

    def choose(self, t: float, eligible: Eligible) -> int | None: ...

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None: ...


def _ping_ok(rule: PingRule, t_delay: float, last_crawl: float, arrival: float,
             emitted: float) -> bool:
    """Whether a ping counts (:func:`models.decision.pings.ping_verdict`; the simulator's
    ``emitted`` is the change time the ping announces)."""
    return ping_verdict(rule, t_delay, last_crawl, arrival, emitted) == APPLIED


def _terms(kind: str) -> int | None:
    """``J`` of ``ncis-approx-J`` (App. A.1: the first J terms of the value), else None."""
    return int(kind.removeprefix("ncis-approx-")) if kind.startswith("ncis-approx-") else None


def value_params(
    kind: str,
    delta: FloatArray,
    lam: FloatArray,
    nu: FloatArray,
    *,
    top: npt.NDArray[np.bool_] | None = None,
) -> tuple[FloatArray, FloatArray, FloatArray, int | None]:
    """``(alpha, beta, gamma, terms)`` a policy ranks pages with (Sec. 5.1 of paper 004).

    ``greedy`` ignores pings (``alpha = Delta``, ``gamma = 0``); ``greedy-cis`` believes
    pings noiseless (``nu = 0``, ``beta = inf``); ``greedy-ncis`` uses the exact value;
    ``ncis-approx-J`` its first J terms; ``greedy-cis-plus`` uses Greedy-CIS on pages
    whose (believed) precision > 0.7 and recall > 0.6, Greedy elsewhere (Sec. 6.7);
    ``top`` overrides that split when given.
    """
    zeros = np.zeros_like(delta)
    if kind == "greedy":
        return delta.copy(), zeros, zeros.copy(), None
    if kind == "greedy-cis":
        a, b, g = signal_params(delta, lam, zeros)
        return a, b, g, None
    if kind in ("greedy-ncis", "ncis-approx-1", "ncis-approx-2"):
        a, b, g = signal_params(delta, lam, nu)
        return a, b, g, _terms(kind)
    if kind == "greedy-cis-plus":
        s = lam * delta
        with np.errstate(divide="ignore", invalid="ignore"):
            precision = np.where(s + nu > 0, s / (s + nu), 0.0)
        good = (precision > 0.7) & (lam > 0.6) if top is None else top
        a, b, g = signal_params(delta, np.where(good, lam, 0.0), zeros)
        return a, b, g, None
    raise ValueError(f"unknown policy kind {kind!r}; expected one of {POLICY_NAMES}")


def greedy_book(mu: FloatArray, alpha: FloatArray, beta: FloatArray, gamma: FloatArray, *,
                origin: FloatArray, host: IntArray | None = None,
                index: BookIndex | None = None, terms: int | None = None) -> ShardBook:
    """A :class:`models.decision.core.ShardBook` of pages ``0 .. m-1``, all crawled, with
    origins ``origin`` and crawl-value parameters ``(alpha, beta, gamma, mu)``: what the
    simulator's Algorithm 1 picks from with :func:`best_page`.

    ``host``: each page's host (default: one host, 0).  ``index``: the book's index of
    crawled pages (default a dense :class:`models.index.CrawlIndex`: few hosts and many
    re-keys per slot, pings and batched steps).  The book's hosts have no limit (a rate of
    ``inf`` and a burst of ``m``: room for every page in one pick) until a run gives it
    its world's host buckets (:func:`models.sim.run`)."""
    m = int(np.asarray(mu).size)
    hosts = np.zeros(m, dtype=np.int64) if host is None else np.asarray(host, dtype=np.int64)
    if hosts.shape != (m,):
        raise ValueError(f"host must have one entry per page ({m}), got shape {hosts.shape}")
    book = ShardBook(HostBuckets(math.inf, burst=float(max(m, 1))),
                     index=index if index is not None else CrawlIndex(terms=terms, dense=True))
    # Sec. 3 of paper 004: Delta = alpha + gamma (1 - exp(-alpha beta)); V(inf) = mu / Delta
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        delta = alpha + np.where(gamma > 0.0, gamma * -np.expm1(-alpha * beta), 0.0)
        max_value = np.nan_to_num(np.where(delta > 0.0, mu / delta, 0.0), nan=0.0)
    book.set_pages(list(range(m)), hosts.tolist(), crawled=np.ones(m, dtype=bool),
                   origin=origin, alpha=alpha, beta=beta, gamma=gamma, mu=mu,
                   max_value=max_value, first_seen_s=0.0, last_crawl_s=origin,
                   delta=np.nan_to_num(delta, nan=0.0), estimated=np.zeros(m, dtype=bool),
                   src_beta=beta[:, None])
    return book


def best_page(book: ShardBook, t: float) -> int | None:
    """The book's Greedy pick at ``t`` (None: no page of positive value has room): the one
    order of :func:`models.decision.core.choose` (floor off), the worker's pick, so that
    every Algorithm-1 policy of the simulator picks by the engine's rule."""
    picks = choose([book], 1, t, floor=False)
    if not picks:
        return None
    page = picks[0].page
    assert isinstance(page, int)
    return page


def _no_filter(eligible: Eligible) -> None:
    """A book's policy picks under its book's host buckets, not a per-page filter."""
    if eligible is not None:
        raise ValueError("this policy picks under its book's host buckets "
                         "(models.sim.run gives the book its world's); a per-page "
                         "eligible filter is not applied")


class PingedPages:
    """Pages ranked by Algorithm 1 of paper 004 with given ``(alpha, beta, gamma)``: their
    parameters, last crawls and origins, and how a ping moves an origin (the base of
    :class:`Algorithm1`, over the simulator's index, and of
    :class:`models.sim.live.EngineAlgorithm1`, over the worker's engine).

    The state of page ``i`` is its origin ``last_crawl - beta_i n_i`` (Sec. 3); a
    page with ``gamma_i = 0`` ignores pings, one with ``beta_i = inf`` jumps to
    ``origin = -inf`` (value ``mu/Delta``) on its first accepted ping.
    """

    def __init__(self, name: str, mu: FloatArray, alpha: FloatArray, beta: FloatArray,
                 gamma: FloatArray, *, ping_rule: PingRule = "accept",
                 t_delay: float = 0.0) -> None:
        self.name = name
        self.mu = np.asarray(mu, dtype=np.float64)
        self.alpha = np.asarray(alpha, dtype=np.float64)
        self.beta = np.asarray(beta, dtype=np.float64)
        self.gamma = np.asarray(gamma, dtype=np.float64)
        self.ping_rule: PingRule = ping_rule
        self.t_delay = float(t_delay)
        m = self.mu.size
        self.last_crawl = np.zeros(m)
        self.origin = np.zeros(m)

    def pinged_origin(self, page: int, arrival: float, emitted: float) -> float | None:
        """The page's origin after a ping, None if the ping does not move it."""
        if self.gamma[page] == 0.0:
            return None
        if not _ping_ok(self.ping_rule, self.t_delay, float(self.last_crawl[page]), arrival,
                        emitted):
            return None
        b = float(self.beta[page])
        o = -math.inf if b == math.inf else float(self.origin[page]) - b
        return o if o != self.origin[page] else None


class Algorithm1(PingedPages):
    """Algorithm 1 of paper 004 on the worker's decision engine (:class:`PingedPages`):
    the pages in a :class:`models.decision.core.ShardBook` (:func:`greedy_book`), each
    pick :func:`models.decision.core.choose`'s (:func:`best_page`; the largest crawl value
    among pages whose host has room).  ``index``: the book's index (default a dense
    :class:`models.index.CrawlIndex`; the service's
    :class:`models.decision.hostindex.HostIndex` gives the same picks).  ``host``: each
    page's host (default one); ``last_crawl``: each page's copy time before the run, its
    first origin (default 0).

    An :class:`models.sim.live.EnginePolicy` too: :func:`models.sim.live.run_timed` puts
    its orders in flight in the book (out of the index until :meth:`on_crawl`)."""

    def __init__(
        self,
        name: str,
        mu: FloatArray,
        alpha: FloatArray,
        beta: FloatArray,
        gamma: FloatArray,
        *,
        terms: int | None = None,
        ping_rule: PingRule = "accept",
        t_delay: float = 0.0,
        index: BookIndex | None = None,
        host: IntArray | None = None,
        last_crawl: FloatArray | None = None,
    ) -> None:
        super().__init__(name, mu, alpha, beta, gamma, ping_rule=ping_rule, t_delay=t_delay)
        m = self.mu.size
        if last_crawl is not None:
            self.last_crawl = np.asarray(last_crawl, dtype=np.float64).copy()
            self.origin = self.last_crawl.copy()
        #: the book's clock is the simulator's (run_timed: its epoch)
        self.offset = 0.0
        self.host = np.zeros(m, dtype=np.int64) if host is None else np.asarray(
            host, dtype=np.int64).copy()
        self.book = greedy_book(self.mu, self.alpha, self.beta, self.gamma, origin=self.origin,
                                host=self.host, index=index, terms=terms)
        self.index = self.book.index

    def _move(self, page: int, origin: float) -> None:
        """The page's origin in the book: re-keyed in the index, or kept in the table
        while its order is in flight (it enters the index again at :meth:`on_crawl`)."""
        b = self.book
        if b.in_flight and page in b.in_flight:
            b.table.origin[b.table.slot[page]] = origin
        else:
            self.index.set_origin(page, origin)

    def on_ping(self, page: int, arrival: float, emitted: float) -> None:
        o = self.pinged_origin(page, arrival, emitted)
        if o is not None:
            self.origin[page] = o
            self._move(page, o)

    def on_pings(self, pages: IntArray, arrivals: FloatArray, emitted: FloatArray) -> None:
        """All pings that arrived since the last slot, at once (same result as calling
        :meth:`on_ping` for each: between two slots no crawl changes ``last_crawl``,
        so the rule's verdicts do not depend on the order)."""
        if type(self).on_ping is not Algorithm1.on_ping:  # a subclass's own ping rule
            for p, a, e in zip(pages.tolist(), arrivals.tolist(), emitted.tolist(),
                               strict=True):
                self.on_ping(p, a, e)
            return
        ok = (self.gamma[pages] != 0.0) & ping_ok(self.ping_rule, self.t_delay,
                                                  self.last_crawl[pages], arrivals, emitted)
        got = pages[ok]
        if not got.size:
            return
        before = self.origin[got]
        np.subtract.at(self.origin, got, self.beta[got])  # beta = inf: origin -> -inf
        moved = got[self.origin[got] != before]  # a page pinged twice: same origin twice
        if not moved.size:
            return
        if self.book.in_flight:
            for p in moved.tolist():
                self._move(p, float(self.origin[p]))
        else:
            set_origins(self.index, moved, self.origin[moved])

    def plan(self, times: FloatArray) -> None:
        """The slot times of the run (:func:`models.sim.run` calls this once): a
        :class:`models.index.CrawlIndex` evaluates values over upcoming slots at once."""
        plan = getattr(self.index, "plan", None)
        if plan is not None:
            plan(times)

    def choose(self, t: float, eligible: Eligible) -> int | None:
        _no_filter(eligible)
        return best_page(self.book, t)

    def choose_many(self, t: float, k: int) -> list[int]:
        """The ``k`` orders of one step at ``t`` (a batched budget):
        :func:`models.decision.core.choose`'s, the largest values under the hosts' room."""
        return list(map(itemgetter(1), choose([self.book], k, t, floor=False)))  # the pages

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None:
        self.last_crawl[page] = t
        self.origin[page] = t
        if page in self.index:
            self.index.set_origin(page, t)
            return
        # its order ended (run_timed): the page enters the book's index again
        b = self.book
        s = b.table.slot[page]
        b.set_page(page, int(self.host[page]), crawled=True, origin=t,
                   alpha=float(self.alpha[page]), beta=float(self.beta[page]),
                   gamma=float(self.gamma[page]), mu=float(self.mu[page]),
                   max_value=float(b.table.max_value[s]), last_crawl_s=t,
                   delta=float(b.table.delta[s]), first_seen_s=0.0)

    def on_crawls(self, pages: IntArray, t: float, changed: npt.NDArray[np.bool_],
                  last_modified: FloatArray) -> None:
        """A step's crawls at time ``t``, at once (same result as :meth:`on_crawl` for
        each page: the pages of one step are distinct)."""
        if type(self).on_crawl is not Algorithm1.on_crawl:  # a subclass's own update
            for p, c, lm in zip(pages.tolist(), changed.tolist(), last_modified.tolist(),
                                strict=True):
                self.on_crawl(p, t, c, lm)
            return
        if not pages.size:
            return
        if self.book.in_flight:  # pages may come back from flight: one at a time
            for p, c, lm in zip(pages.tolist(), changed.tolist(), last_modified.tolist(),
                                strict=True):
                self.on_crawl(p, t, c, lm)
            return
        self.last_crawl[pages] = t
        self.origin[pages] = t
        set_origins(self.index, pages, np.full(pages.size, t))


def set_origins(index: BookIndex, pages: IntArray, origins: FloatArray) -> None:
    """Re-key several pages of a book's index at once (one call on a
    :class:`models.index.CrawlIndex`, page by page otherwise)."""
    many = getattr(index, "set_origins", None)
    if many is not None:
        many(pages, origins)
        return
    for p, o in zip(pages.tolist(), origins.tolist(), strict=True):
        index.set_origin(p, o)


def algorithm1(
    kind: str,
    mu: FloatArray,
    delta: FloatArray,
    lam: FloatArray,
    nu: FloatArray,
    *,
    top: npt.NDArray[np.bool_] | None = None,
    ping_rule: PingRule = "accept",
    t_delay: float = 0.0,
    host: IntArray | None = None,
) -> Algorithm1:
    """Algorithm 1 with the value function of ``kind`` (see :func:`value_params`);
    ``host``: each page's host (needed for a run with host limits)."""
    a, b, g, terms = value_params(kind, delta, lam, nu, top=top)
    return Algorithm1(kind, mu, a, b, g, terms=terms, ping_rule=ping_rule, t_delay=t_delay,
                      host=host)


class EstimatingAlgorithm1(Algorithm1):
    """Algorithm 1 with ``(alpha, beta, gamma)`` estimated online (App. E of paper 004).

    Each crawl closes an interval ``(tau_elap, n_pings, changed)``; the page's estimator
    state (:class:`models.estimators.SignalEstimator`, Grimes-Ford pseudo-datapoints for
    young pages) is updated and the page is re-keyed in the index with the new estimate.
    ``mu`` is taken as known (Sec. E: requests are observed directly).

    ``variant`` is the value function ranked with (one of :data:`POLICY_NAMES`; default
    ``greedy-ncis`` with pings, ``greedy`` without): the estimate is read as believed
    ``(Delta, lam, nu)`` (:func:`models.values.change_params`) and passed through
    :func:`value_params`, exactly as :func:`algorithm1` does with true parameters, so
    e.g. ``greedy-cis`` believes the estimated pings noiseless and ``greedy-cis-plus``
    splits pages on their *estimated* precision and recall (Sec. 6.7).  Every variant
    but ``greedy`` counts pings per interval for the estimator, whatever it ranks with.
    """

    def __init__(
        self,
        name: str,
        mu: FloatArray,
        *,
        use_pings: bool = True,
        variant: str | None = None,
        ping_rule: PingRule = "accept",
        t_delay: float = 0.0,
        refit_every: int = 1,
    ) -> None:
        from models.estimators import PseudoDatapoints, SignalEstimator, SignalPrior

        if variant is None:
            variant = "greedy-ncis" if use_pings else "greedy"
        if variant not in POLICY_NAMES:
            raise ValueError(f"unknown variant {variant!r}; expected one of {POLICY_NAMES}")
        if variant == "greedy" and use_pings:
            use_pings = False  # Greedy ranks without pings: nothing to estimate about them
        if variant != "greedy" and not use_pings:
            raise ValueError(f"variant {variant!r} ranks with pings; use_pings must be True")
        self.variant = variant

        # Grimes-Ford's 1 h / 57 h pseudo-intervals, rescaled to the simulator's time unit
        # (the prior rate ln(1 + 1/57)/0.05 = 0.35 is near the mean change rate 0.5).
        prior = SignalPrior(
            change=PseudoDatapoints(changed_interval_s=0.05, unchanged_interval_s=2.85),
            precision_changed=(1.0,) if use_pings else (),
            precision_unchanged=(1.0,) if use_pings else (),
        )
        self._est = SignalEstimator(1 if use_pings else 0, prior=prior)
        m = np.asarray(mu).size
        self._state = [self._est.init() for _ in range(m)]
        self._n = np.zeros(m, dtype=np.int64)
        self._use_pings = use_pings
        self._refit_every = max(1, int(refit_every))
        self._crawls = np.zeros(m, dtype=np.int64)
        a0, b0, g0 = self._params(0)
        super().__init__(
            name, mu, np.full(m, a0), np.full(m, b0), np.full(m, g0),
            terms=_terms(variant), ping_rule=ping_rule, t_delay=t_delay,
        )

    def _params(self, page: int) -> tuple[float, float, float]:
        """``(alpha, beta, gamma)`` of the page's estimate, as ``variant`` ranks with."""
        r = self._est.result(self._state[page])
        if not self._use_pings:
            return float(r.change_rate_per_s), 0.0, 0.0
        delta, lam, nu = change_params(np.array([r.alpha_per_s]), np.array([r.beta_s[0]]),
                                       np.array([r.gamma_per_s[0]]))
        va, vb, vg, _ = value_params(self.variant, delta, lam, nu)
        return float(va[0]), float(vb[0]), float(vg[0])

    def on_ping(self, page: int, arrival: float, emitted: float) -> None:
        if self._use_pings and _ping_ok(self.ping_rule, self.t_delay,
                                        float(self.last_crawl[page]), arrival, emitted):
            self._n[page] += 1
        super().on_ping(page, arrival, emitted)

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None:
        from models.estimators import CrawlInterval

        tau = t - float(self.last_crawl[page])
        self._state[page] = self._est.update(
            self._state[page],
            CrawlInterval(
                tau, bool(changed), (float(self._n[page]),) if self._use_pings else (), t
            ),
        )
        self._n[page] = 0
        self._crawls[page] += 1
        self.last_crawl[page] = t
        self.origin[page] = t
        if self._crawls[page] % self._refit_every == 0:
            a, b, g = self._params(page)
            self.alpha[page], self.beta[page], self.gamma[page] = a, b, g
            self.index.upsert(page, origin=t, alpha=a, beta=b, gamma=g,
                              mu=float(self.mu[page]))
        else:
            self.index.set_origin(page, t)
