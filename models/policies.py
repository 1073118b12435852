"""Optimal continuous crawl policies and Azar et al.'s low-discrepancy discretisation.

* Without signals (eq. 5 of Busa-Fekete et al., paper 004): choose crawl rates
  ``xi_i >= 0`` with ``sum xi_i <= R`` maximising ``sum G(xi_i)``,
  ``G(xi) = (mu/Delta) xi (1 - e^{-Delta/xi})``.  :func:`optimal_rates`.
* With signals (eq. 4 and Theorem 1): thresholds ``iota_i`` with ``V(iota_i) = Lambda``
  (or ``iota_i = inf`` when ``mu_i/Delta_i <= Lambda``) and ``sum f(iota_i) = R``, by
  Lemma 2's nested line search.  :func:`optimal_thresholds`.
* The LDS comparison policy of Sec. 6.4 (Algorithm 3 of Azar et al. 2018): a constant-
  rate crawl sequence whose per-page empirical rates track given rates.
  :func:`low_discrepancy_schedule`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import optimize as _opt

from models._args import FloatArray, as_float_array, broadcast
from models._special import phi_inverse
from models.values import (
    _check_signal_args,
    _derived,
    _evaluate,
    time_to_value,
)

__all__ = [
    "RatesSolution",
    "ThresholdSolution",
    "expected_accuracy",
    "low_discrepancy_schedule",
    "optimal_rates",
    "optimal_thresholds",
    "solve_optimal_rates",
]


@dataclass(frozen=True)
class RatesSolution:
    """Optimal continuous policy without signals (eq. 5 of paper 004).

    Attributes
    ----------
    rates : ndarray
        Crawl rates ``xi_i`` (crawls per unit time), ``0`` for pages not worth crawling.
    multiplier : float
        Lagrange multiplier ``Lambda`` of the budget (``G'(xi_i) = Lambda`` where
        ``xi_i > 0``).
    accuracy : float
        Request-weighted fraction of time the cached copy is fresh,
        ``sum G(xi_i) / sum mu_i`` (Sec. 6.2 of paper 004).
    """

    rates: FloatArray
    multiplier: float
    accuracy: float


@dataclass(frozen=True)
class ThresholdSolution:
    """Optimal continuous policy with signals (eq. 4 and Theorem 1 of paper 004).

    Attributes
    ----------
    thresholds : ndarray
        ``iota_i``: crawl page ``i`` when its effective elapsed time reaches it
        (``inf``: never).
    rates : ndarray
        Crawl frequencies ``f(iota_i) = 1/psi(iota_i)``; they sum to the budget.
    multiplier : float
        ``Lambda`` with ``V(iota_i) = Lambda`` for every crawled page.
    accuracy : float
        ``sum mu_i w(iota_i)/psi(iota_i) / sum mu_i``, the request-weighted expected
        freshness ``o(iota)`` of the proof of Theorem 1.
    """

    thresholds: FloatArray
    rates: FloatArray
    multiplier: float
    accuracy: float


def _check_budget(budget: float) -> float:
    try:
        b = float(budget)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"budget must be a positive number, got {budget!r}") from exc
    if not (b > 0 and math.isfinite(b)):
        raise ValueError(f"budget must be positive and finite, got {budget!r}")
    return b


def expected_accuracy(
    importance: npt.ArrayLike, change_rate: npt.ArrayLike, rates: npt.ArrayLike
) -> float:
    """Request-weighted freshness of a continuous policy crawling at fixed ``rates``.

    Parameters
    ----------
    importance : array_like
        ``mu_i >= 0``.
    change_rate : array_like
        ``Delta_i >= 0`` (changes per unit time).
    rates : array_like
        ``xi_i >= 0`` (crawls per unit time, evenly spaced).

    Returns
    -------
    float
        ``sum_i G(xi_i; mu_i, Delta_i) / sum_i mu_i`` with
        ``G(xi) = (mu/Delta) xi (1 - e^{-Delta/xi})`` (Sec. 6.2 and eq. 5 of paper 004).
        A page that never changes is always fresh; an uncrawled changing page never is.
    """
    mu = as_float_array("importance", importance)
    d = as_float_array("change_rate", change_rate)
    xi = as_float_array("rates", rates, allow_inf=True)
    mu, d, xi = broadcast(importance=mu, change_rate=d, rates=xi)
    return _accuracy(mu, d, xi)


def _accuracy(mu: FloatArray, d: FloatArray, xi: FloatArray) -> float:
    """``sum G(xi) / sum mu`` on validated arrays (see :func:`expected_accuracy`)."""
    total = float(mu.sum())
    if total == 0:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        x = d / xi  # crawl interval in units of the change period
        fresh = -np.expm1(-x)
        fresh /= x
    fresh[x == 0] = 1.0  # crawled continuously
    fresh[np.isinf(x)] = 0.0  # changes but never crawled
    fresh[d == 0] = 1.0  # never changes
    return float(np.dot(mu, fresh) / total)


def solve_optimal_rates(
    importance: npt.ArrayLike, change_rate: npt.ArrayLike, budget: float
) -> RatesSolution:
    """Optimal crawl rates without signals, with multiplier and accuracy.

    Parameters
    ----------
    importance : array_like
        ``mu_i >= 0`` (request rate or weight).
    change_rate : array_like
        ``Delta_i >= 0``, changes per unit time.
    budget : float
        ``R > 0``, crawls per unit time.

    Returns
    -------
    RatesSolution

    Notes
    -----
    Eq. (5) of Busa-Fekete et al. (paper 004), eq. 6 of Azar et al.  KKT:
    ``G'(xi_i) = (mu_i/Delta_i) R^1(Delta_i/xi_i) = Lambda`` or ``xi_i = 0`` when
    ``mu_i/Delta_i <= Lambda`` (the blog's crawl value at ``tau = 1/xi``).  With
    ``x_i = Delta_i/xi_i`` the condition ``R^1(x) = 1 - e^{-x}(1 + x) = Lambda
    Delta/mu`` is ``x - log1p(x) = -log(1 - Lambda Delta/mu)``, solved by monotone
    Newton iterations; the outer equation ``sum xi_i(Lambda) = R`` by Brent's method
    in ``log s`` with ``Lambda = max(mu/Delta) (1 - e^{-s})`` (so tiny budgets, where
    ``Lambda`` is within an ulp of its maximum, stay resolved), to double precision;
    the budget binds to about 1e-13.
    Pages with ``mu = 0`` or ``Delta = 0`` get rate 0; if no page is worth crawling the
    rates are all 0 and the multiplier is 0.
    """
    mu = as_float_array("importance", importance)
    d = as_float_array("change_rate", change_rate)
    mu, d = broadcast(importance=mu, change_rate=d)
    r_budget = _check_budget(budget)
    shape = mu.shape
    mu, d = mu.ravel(), d.ravel()
    rates = np.zeros(mu.size)
    act = (mu > 0) & (d > 0)
    if not act.any():
        return RatesSolution(rates.reshape(shape), 0.0, _accuracy(mu, d, rates))
    mu_a, d_a = mu[act], d[act]
    ratio = d_a / mu_a  # Delta/mu: page i is crawled iff Lambda * ratio < 1
    rel = ratio / ratio.min()  # >= 1, exactly 1 for the most valuable page(s)
    lam_max = float(1.0 / ratio.min())
    one_minus_rel = 1.0 - rel

    # Unknown u = log s with Lambda = lam_max (1 - e^{-s}).  Page i is crawled iff
    # p_i = rel_i (1 - e^{-s}) < 1, and c_i = -log(1 - p_i) is computed as
    # -log1p(-p_i) while s < 1/2 (all p_i < 1 - 1/e there... or not crawled) and as
    # -log((1 - rel_i) + rel_i e^{-s}) beyond (all crawled p_i > 0.39 there), so
    # that rates far below Delta/37, where 1 - p is below the spacing of doubles near
    # 1, stay resolved and small p keep full relative accuracy.
    n_act = rel.size
    warm_x = np.full(n_act, np.nan)
    chunk = 1 << 16

    def evaluate(log_s: float) -> tuple[FloatArray, float]:
        sv = math.exp(log_s)
        e_s = math.exp(-sv)
        xi = np.empty(n_act)
        slope = 0.0
        for lo_i in range(0, n_act, chunk):  # cache-sized blocks
            sl = slice(lo_i, min(lo_i + chunk, n_act))
            r_c = rel[sl]
            with np.errstate(divide="ignore", invalid="ignore"):
                if sv < 0.5:
                    p = r_c * -math.expm1(-sv)
                    c = np.where(p < 1.0, -np.log1p(-np.minimum(p, 1.0)), np.inf)
                else:
                    gap = one_minus_rel[sl] + r_c * e_s
                    c = np.where(gap > 0, -np.log(gap), np.inf)
            w0 = warm_x[sl]
            start = np.where(np.isfinite(w0) & (w0 > 0), w0, np.sqrt(2.0 * c) + c)
            x = phi_inverse(c, start)
            warm_x[sl] = x
            on = np.isfinite(x)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                xc = np.where(on, d_a[sl] / x, 0.0)  # x = 0 (Lambda = 0): infinite rate
                # d xi / d log s = -(xi/x) ((1+x)/x) rel e^{c - s} s
                dxi = -xc / x * (1.0 + x) / x * r_c * np.exp(c - sv) * sv
            xi[sl] = xc
            slope += float(np.nansum(np.where(on, dxi, 0.0)))
        return xi, slope

    # safeguarded Newton on the decreasing sum(xi(u)) - R, started from the solution
    # of an evenly strided ~20k-page subsample with the proportional budget
    u = 0.0
    if n_act > 50_000:
        stride = n_act // 20_000
        sub = solve_optimal_rates(
            mu_a[::stride], d_a[::stride], r_budget * len(d_a[::stride]) / n_act
        ).multiplier
        if 0 < sub < lam_max:
            u = math.log(-math.log1p(-sub / lam_max))
    lo, hi = -math.inf, math.inf
    xi_lo = xi_hi = np.zeros(0)
    xi, slope = evaluate(u)
    for _ in range(200):
        excess = float(xi.sum()) / r_budget - 1.0
        if excess > 0:
            lo, xi_lo = u, xi
        else:
            hi, xi_hi = u, xi
        if abs(excess) <= 1e-14 or hi - lo <= 4e-16 * max(1.0, abs(u)):
            break
        step = -excess * r_budget / slope if slope < 0 else math.inf
        new = u + max(-4.0, min(4.0, step)) if math.isfinite(step) else math.nan
        if not (lo < new < hi):
            if math.isfinite(lo) and math.isfinite(hi):
                new = 0.5 * (lo + hi)
            else:
                new = u + (4.0 if excess > 0 else -4.0)
        if new in (lo, hi):
            break
        u = new
        xi, slope = evaluate(u)
    if abs(float(xi.sum()) / r_budget - 1.0) > 1e-14 and xi_lo.size and xi_hi.size:
        # The bracket is one ulp wide in Lambda but the rates still jump: a page whose
        # mu/Delta equals Lambda to double precision drops out with infinite slope
        # (xi ~ Delta / log(1/(1 - p))).  Any rate between the two sides satisfies the
        # KKT conditions to double precision, so share the rest of the budget among
        # the pages that differ, in proportion to their jump.
        jump = xi_lo - xi_hi
        xi = xi_hi + jump * ((r_budget - float(xi_hi.sum())) / float(jump.sum()))
    multiplier = lam_max * -math.expm1(-math.exp(u))
    rates[act] = xi
    return RatesSolution(rates.reshape(shape), multiplier, _accuracy(mu, d, rates))


def optimal_rates(
    importance: npt.ArrayLike, change_rate: npt.ArrayLike, budget: float
) -> FloatArray:
    """Optimal continuous crawl rates without signals (eq. 5 of paper 004).

    Parameters
    ----------
    importance : array_like
        ``mu_i >= 0``.
    change_rate : array_like
        ``Delta_i >= 0``, changes per unit time.
    budget : float
        ``R > 0``, crawls per unit time.

    Returns
    -------
    ndarray
        Rates ``xi_i`` summing to ``R`` (1e-12 relative), ``0`` for pages not worth
        crawling.  See :func:`solve_optimal_rates` for the multiplier and accuracy.
    """
    return solve_optimal_rates(importance, change_rate, budget).rates


def _brentq(fun: Callable[[float], float], lo: float, hi: float) -> float:
    """Typed wrapper of :func:`scipy.optimize.brentq` (tight tolerances)."""
    root = _opt.brentq(fun, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=200)
    return float(root)


def optimal_thresholds(
    importance: npt.ArrayLike,
    alpha: npt.ArrayLike,
    beta: npt.ArrayLike,
    gamma: npt.ArrayLike,
    budget: float,
) -> ThresholdSolution:
    """Optimal continuous policy with signals: thresholds, rates and ``Lambda``.

    Parameters
    ----------
    importance : array_like
        ``mu_i >= 0``.
    alpha, beta, gamma : array_like
        Signal parameters of each page (see :func:`models.values.crawl_value`).
    budget : float
        ``R > 0``, crawls per unit time.

    Returns
    -------
    ThresholdSolution

    Notes
    -----
    Theorem 1 of Busa-Fekete et al. (paper 004): ``V(iota_i) = Lambda`` or
    (``V < Lambda`` and ``iota_i = inf``) with ``sum_i f(iota_i) = R``.  Lemma 2's
    nested line search: the inner search is :func:`models.values.time_to_value`
    (``V`` is increasing), the outer one Brent's method on ``log Lambda`` for the
    decreasing ``sum_i f(iota_i(Lambda))``, over ``(0, max mu_i/Delta_i)``.
    """
    mu = as_float_array("importance", importance)
    a, b, g = _check_signal_args(alpha, beta, gamma)
    mu, a, b, g = broadcast(importance=mu, alpha=a, beta=b, gamma=g)
    r_budget = _check_budget(budget)
    shape = mu.shape
    mu, a, b, g = (z.ravel() for z in (mu, a, b, g))
    _, _, delta = _derived(a, b, g)
    act = (mu > 0) & (delta > 0)
    thresholds = np.full(mu.size, np.inf)
    rates = np.zeros(mu.size)
    if not act.any():
        acc = _threshold_accuracy(mu, a, b, g, delta, thresholds)
        return ThresholdSolution(thresholds.reshape(shape), rates.reshape(shape), 0.0, acc)
    mu_a, a_a, b_a, g_a = mu[act], a[act], b[act], g[act]
    lam_max = float((mu_a / delta[act]).max())

    def freq_at(log_lam: float) -> tuple[FloatArray, FloatArray]:
        iota = time_to_value(math.exp(log_lam), a_a, b_a, g_a, mu_a)
        ps = _evaluate(iota, a_a, b_a, g_a, None, want_psi=True, want_w=False).psi
        with np.errstate(divide="ignore"):
            f = np.where(np.isfinite(iota), 1.0 / ps, 0.0)
        return iota, f

    def excess(log_lam: float) -> float:
        return float(freq_at(log_lam)[1].sum()) / r_budget - 1.0

    hi = math.log(lam_max)
    lo = hi - 1.0
    while excess(lo) <= 0:
        lo -= 2.0 * (hi - lo)
    root = _brentq(excess, lo, hi)
    iota, f = freq_at(root)
    thresholds[act] = iota
    rates[act] = f
    acc = _threshold_accuracy(mu, a, b, g, delta, thresholds)
    return ThresholdSolution(thresholds.reshape(shape), rates.reshape(shape), math.exp(root), acc)


def _threshold_accuracy(
    mu: FloatArray,
    alpha: FloatArray,
    beta: FloatArray,
    gamma: FloatArray,
    delta: FloatArray,
    thresholds: FloatArray,
) -> float:
    """``sum mu w(iota)/psi(iota) / sum mu`` (o(iota) of the proof of Theorem 1)."""
    total = float(mu.sum())
    if total == 0:
        return 0.0
    fresh = np.where(delta == 0, 1.0, 0.0)
    crawled = np.isfinite(thresholds) & (delta > 0) & (thresholds > 0)
    if crawled.any():
        s = _evaluate(
            thresholds[crawled],
            alpha[crawled],
            beta[crawled],
            gamma[crawled],
            None,
            want_psi=True,
            want_w=True,
        )
        fresh[crawled] = s.w / s.psi
    fresh[(thresholds == 0) & (delta > 0)] = 1.0  # crawled continuously
    return float((mu * fresh).sum() / total)


def low_discrepancy_schedule(
    rates: npt.ArrayLike, n_slots: int, *, seed: int = 0
) -> npt.NDArray[np.int64]:
    """Constant-rate crawl sequence tracking the given rates (the LDS policy).

    Parameters
    ----------
    rates : array_like
        ``xi_i >= 0`` per page (e.g. from :func:`optimal_rates`), not all zero.
    n_slots : int
        Number of crawl slots; slot ``j`` is at time ``(j + 1)/R`` with
        ``R = sum xi_i``.
    seed : int
        Seed of the random phases; the schedule is a deterministic function of
        ``(rates, n_slots, seed)``.

    Returns
    -------
    ndarray of int64
        ``n_slots`` page indices, the page crawled in each slot.

    Notes
    -----
    Our reading of Algorithm 3 of Azar et al. (2018), the LDS comparison of Sec. 6.4
    of paper 004: each page gets a random phase ``u_i ~ U(0, 1)`` and ideal, evenly
    spaced crawl times ``(k + u_i)/xi_i``, ``k = 0, 1, ...``; the slots are filled in
    the order of these ideal times (earliest deadline first; ties by page index).
    Page ``i`` is then crawled ``xi_i T / 1 +- 1`` times in any prefix of length
    ``T`` of the ideal timeline, so its empirical rate converges to ``xi_i``.
    """
    xi = as_float_array("rates", rates)
    if xi.ndim != 1:
        raise ValueError(f"rates must be one-dimensional, got shape {xi.shape}")
    if isinstance(n_slots, bool) or not isinstance(n_slots, int | np.integer) or n_slots < 0:
        raise ValueError(f"n_slots must be an int >= 0, got {n_slots!r}")
    total = float(xi.sum())
    if total <= 0:
        raise ValueError("rates must not all be zero")
    rng = np.random.default_rng(seed)
    phase = rng.random(xi.size)
    # every page's events up to a horizon that holds at least n_slots events in total
    horizon = (n_slots + 1) / total
    while True:
        with np.errstate(divide="ignore", invalid="ignore"):
            counts = np.where(xi > 0, np.floor(horizon * xi - phase) + 1, 0).astype(np.int64)
        counts = np.maximum(counts, 0)
        if int(counts.sum()) >= n_slots:
            break
        horizon *= 2.0
    page = np.repeat(np.arange(xi.size, dtype=np.int64), counts)
    starts = np.cumsum(counts) - counts
    k = np.arange(page.size, dtype=np.int64) - np.repeat(starts, counts)
    times = (k + phase[page]) / xi[page]
    order = np.lexsort((page, times))[:n_slots]
    out: npt.NDArray[np.int64] = page[order]
    return out
