"""Compiled per-page loop of the sums of Theorem 1 / Lemma 4 (paper 004).

:func:`ncis_sums` is the element-wise form of the term loop in
:func:`models.values._ncis_sums` (same terms, same cancellation-free recomputation,
same proven truncation bounds), compiled with numba so that a call on a handful of
pages costs microseconds instead of one numpy call per term.  ``R^i(x) = P(i+1, x)``
comes from scipy's ``gammainc`` (``scipy.special.cython_special``), called from the
compiled loop: the special function is scipy's, only the loop is ours.

Elements that would need more than ``max_loop`` terms are flagged (``long[k] = 1``)
and left to the caller's closed residue expansion (``models.values._renewal_sum``).

References
----------
R. Busa-Fekete et al. (paper 004): Theorem 1 (V = mu (w - e^{-alpha tau} psi)),
Lemma 4 (the sums), App. A.1 (Approx-J).  The cancellation-free form of a term and the
truncation bounds are derived in the docstrings of :mod:`models.values`.
"""

from __future__ import annotations

import math
from typing import Any

import llvmlite.binding as llvm_binding
import numba
import numpy as np
import numpy.typing as npt
from numba.extending import get_cython_function_address

__all__ = ["ncis_sums", "solve_time_to_value", "values_at", "values_v"]

# scipy's gammainc(double, double) as an external symbol of the compiled code (a symbol,
# unlike a ctypes pointer, lets numba cache the machine code between processes)
_GAMMAINC_SYMBOL = "recrawl_scipy_gammainc"
llvm_binding.add_symbol(
    _GAMMAINC_SYMBOL, get_cython_function_address("scipy.special.cython_special", "gammainc")
)
_gammainc: Any = numba.types.ExternalFunction(
    _GAMMAINC_SYMBOL, numba.types.float64(numba.types.float64, numba.types.float64)
)


@numba.njit(cache=True, nogil=True)
def _residual_int(i: int, x: float) -> float:  # pragma: no cover - compiled
    """``R^i(x) = P(i + 1, x)`` (``-expm1(-x)`` for ``i = 0``)."""
    if i == 0:
        return -math.expm1(-x)
    r: float = _gammainc(float(i + 1), x)
    return r


@numba.njit(cache=True, nogil=True)
def _term_without_cancellation(  # pragma: no cover - compiled
    i: int, x: float, alpha_s: float, eps: float, rho: float, one_minus_rho: float,
    series_rtol: float,
) -> float:
    """``F_i`` with ``A_i - B_i = q^i / (alpha + gamma) * F_i``, free of cancellation (scalar).

    With ``x = (alpha+gamma) s``, ``rho = gamma / (alpha+gamma)``, ``eps = -ln rho`` and
    ``N ~ Poisson(x)``, expanding ``R^i`` in its Poisson series gives

    ``F_i = R^i(x) - rho^{-(i+1)} e^{-alpha s} R^i(rho x) = E[1{N > i} (1 - rho^{N-i-1})]``

    which we evaluate as a sum of non-negative terms, either

    * (``x >= 1.25(i+1) + 1`` and ``(i+1) eps < alpha s``)
      ``-expm1((i+1) eps - alpha s) + sum_{n<=i} p_n(x) expm1((i+1-n) eps)``, both
      parts non-negative, or
    * (otherwise) ``(1 - rho) p_{i+2}(x) sum_{l>=0} t_l c_l`` with
      ``t_l = p_{i+2+l}/p_{i+2}`` and ``c_l = sum_{k<=l} rho^k``, summed until a
      geometric bound on the rest is below ``1e-17`` of the sum.
    """
    if not (x > 0.0) or not (one_minus_rho > 0.0):
        return 0.0
    closed = x >= 1.25 * (i + 1) + 1.0 and (i + 1) * eps < alpha_s
    if closed:
        first = -math.expm1((i + 1) * eps - alpha_s)
        p = math.exp(-x + i * math.log(x) - math.lgamma(i + 1.0))
        head = p * math.expm1(eps)
        n = i
        # p_{n-1} = p_n n / x with n / x <= 0.8: 200 terms reach 0.8^200 < 1e-19
        while n > 0 and n > i - 200:
            p = p * (n / x)
            n -= 1
            head += p * math.expm1((i + 1 - n) * eps)
        return first + head
    if x > 4.0 * (i + 1) + 40.0:
        return math.nan
    p0 = math.exp(-x + (i + 2) * math.log(x) - math.lgamma(i + 3.0))
    t = 1.0
    c = 1.0
    total = 1.0
    ell = 0
    while True:
        ell += 1
        t = t * (x / (i + 2 + ell))
        c = rho * c + 1.0
        total += t * c
        r = x / (i + 3 + ell)
        if r < 1.0:
            rest = t * (c * r / (1.0 - r) + r / (1.0 - r) ** 2)
            if rest <= series_rtol * total:
                break
        if ell > 1_000_000:
            break
    return one_minus_rho * p0 * total


@numba.njit(cache=True, nogil=True)
def _sums_one(  # pragma: no cover - compiled
    io: float, al: float, be: float, ga: float, nu: float, de: float, mt: float,
    want_psi: bool, want_w: bool, rtol: float, cancellation_ratio: float,
    series_rtol: float, max_loop: int,
) -> tuple[float, float, float, bool]:
    """``(V/mu, psi, w, long)`` of one page: the term loop of :func:`ncis_sums`."""
    c = al + ga
    q = nu / c
    q_ratio = nu / de if de > 0 else math.inf  # q / (1 - q)
    e_ai = math.exp(-al * io)
    eps = math.log1p(al / ga)
    rho = ga / c
    omr = al / c
    qpow = 1.0
    v_acc = 0.0
    psi_acc = 0.0
    w_acc = 0.0
    i = 0
    while True:
        s = io if i == 0 else io - i * be
        x = c * s
        y = ga * s
        a_term = qpow * _residual_int(i, x) / c
        psi_term = _residual_int(i, y) / ga
        d_term = a_term - e_ai * psi_term
        if d_term < cancellation_ratio * a_term:
            f = _term_without_cancellation(i, x, al * s, eps, rho, omr, series_rtol)
            if not math.isnan(f):
                d_term = (qpow / c) * f
        v_acc += d_term
        psi_acc += psi_term
        w_acc += a_term
        done = (i + 1) >= mt
        r = x / (i + 2)
        qr = q * r
        if r < 1.0:
            b = q * r * r / (1.0 - qr)
            tail_v = a_term * (q_ratio if q_ratio < b else b)
        else:
            tail_v = a_term * q_ratio
        conv = tail_v <= rtol * v_acc
        if want_psi:
            ry = y / (i + 2)
            tail_psi = psi_term * ry / (1.0 - ry) if ry < 1.0 else math.inf
            conv = conv and tail_psi <= rtol * psi_acc
        if want_w:
            if r < 1.0:
                b = qr / (1.0 - qr)
                tail_w = a_term * (q_ratio if q_ratio < b else b)
            else:
                tail_w = a_term * q_ratio
            conv = conv and tail_w <= rtol * w_acc
        if done or conv:
            return v_acc, psi_acc, w_acc, False
        qpow = qpow * q
        i += 1
        if i >= max_loop:
            return v_acc, psi_acc, w_acc, True


@numba.njit(cache=True, nogil=True)
def ncis_sums(  # pragma: no cover - compiled
    iota: npt.NDArray[np.float64],
    alpha: npt.NDArray[np.float64],
    beta: npt.NDArray[np.float64],
    gamma: npt.NDArray[np.float64],
    nu: npt.NDArray[np.float64],
    delta: npt.NDArray[np.float64],
    max_terms: npt.NDArray[np.float64],
    want_psi: bool,
    want_w: bool,
    rtol: float,
    cancellation_ratio: float,
    series_rtol: float,
    max_loop: int,
    v_out: npt.NDArray[np.float64],
    psi_out: npt.NDArray[np.float64],
    w_out: npt.NDArray[np.float64],
    long: npt.NDArray[np.int8],
) -> None:
    """Truncated sums ``V/mu``, ``psi``, ``w`` for ``0 < iota < inf``, ``gamma > 0``.

    Term ``i`` (``s = iota - i beta``, ``x = (alpha+gamma) s``, ``y = gamma s``,
    ``q = nu/(alpha+gamma)``): ``A_i = q^i R^i(x)/(alpha+gamma)``,
    ``B_i = e^{-alpha iota} R^i(y)/gamma``; ``V/mu = sum (A_i - B_i)``,
    ``psi = sum R^i(y)/gamma``, ``w = sum A_i`` (Lemma 4).  Stops at ``max_terms``
    or when the proven tail bounds (see ``models.values._ncis_sums``) are below
    ``rtol`` times the partial sums.
    """
    for k in range(iota.size):
        v, ps, w, lg = _sums_one(
            iota[k], alpha[k], beta[k], gamma[k], nu[k], delta[k], max_terms[k],
            want_psi, want_w, rtol, cancellation_ratio, series_rtol, max_loop,
        )
        v_out[k] = v
        psi_out[k] = ps
        w_out[k] = w
        long[k] = 1 if lg else 0


@numba.njit(cache=True, nogil=True)
def solve_time_to_value(  # pragma: no cover - compiled
    target: npt.NDArray[np.float64],
    alpha: npt.NDArray[np.float64],
    beta: npt.NDArray[np.float64],
    gamma: npt.NDArray[np.float64],
    nu: npt.NDArray[np.float64],
    delta: npt.NDArray[np.float64],
    start: npt.NDArray[np.float64],
    rtol: float,
    cancellation_ratio: float,
    series_rtol: float,
    max_loop: int,
    out: npt.NDArray[np.float64],
    long: npt.NDArray[np.int8],
) -> None:
    """Safeguarded Newton for ``V(iota)/mu = target`` (``0 < target < 1/Delta``).

    The element-wise form of ``models.values._solve_time_to_value`` for the general
    case (``gamma > 0``, informative signals): ``dV/dtau = mu alpha e^{-alpha tau}
    psi(tau)`` (Lemma 2), bracket kept from the signs of ``V - level``, bisection when
    a Newton step leaves the bracket.  ``long[k] = 1``: a sum needed more than
    ``max_loop`` terms; the caller solves that element.
    """
    for k in range(target.size):
        al = alpha[k]
        be = beta[k]
        ga = gamma[k]
        tg = target[k]
        x = math.sqrt(2.0 * tg / al)
        if math.isfinite(start[k]) and start[k] > 0:
            x = start[k]
        lo = 0.0
        hi = math.inf
        long[k] = 0
        res = math.nan
        for _ in range(400):
            mt = 1.0 if math.isinf(be) else np.floor(x / be) + 1.0
            v, ps, _w, lg = _sums_one(
                x, al, be, ga, nu[k], delta[k], mt, True, False, rtol,
                cancellation_ratio, series_rtol, max_loop,
            )
            if lg:
                long[k] = 1
                break
            v = max(v, 0.0)
            f = v - tg
            fp = al * math.exp(-al * x) * ps
            if f < 0:
                lo = x
            else:
                hi = x
            xn = x - f / fp if fp != 0.0 else math.nan
            tiny = math.isfinite(xn) and abs(xn - x) <= 1e-13 * x
            bad = (not math.isfinite(xn) or xn <= lo or xn >= hi) and not tiny
            if bad:
                xn = 0.5 * (lo + hi) if math.isfinite(hi) else 4.0 * x
            done = (
                f == 0 or tiny or abs(xn - x) <= 1e-13 * x
                or (math.isfinite(hi) and hi - lo <= 1e-14 * hi)
            )
            if f == 0:
                xn = x
            res = xn
            if done:
                break
            x = xn
        out[k] = res


@numba.njit(cache=True, nogil=True)
def _value_one(  # pragma: no cover - compiled
    t: float, a: float, b: float, g: float, j_cap: float, exact: bool, rtol: float,
    cancellation_ratio: float, series_rtol: float, max_loop: int,
    uninformative_step: float, saturation_log_rtol: float,
) -> tuple[float, int]:
    """``(V/mu, flag)`` of one page: the cases of ``models.values._evaluate``.

    ``flag``: 0 done, 1 Greedy (left to the caller's numpy formula, so Greedy values
    are the same bits on every path), 2 the sum needs the residue expansion.
    ``kappa = alpha beta`` (``0 * inf = inf``), ``nu = gamma e^{-kappa}``,
    ``Delta = alpha + gamma (1 - e^{-kappa})`` (Sec. 3 of paper 004).
    """
    uninf = b * (a + g) < uninformative_step
    if g == 0.0 or (exact and (b == 0.0 or uninf)):
        return 0.0, 1
    kap = a * b
    if math.isnan(kap):
        kap = math.inf
    nu = g * math.exp(-kap)
    de = a + g * -math.expm1(-kap)
    nt = math.inf  # beta = 0 (Approx-J only): J terms
    if math.isinf(b):
        nt = 1.0
    elif b > 0.0:
        nt = np.floor(t / b) + 1.0
    if nt > j_cap:
        nt = j_cap
    if math.isinf(t):
        if not (de > 0.0):
            return 0.0, 0
        c = a + g
        q = nu / c
        if q == 0.0:
            w_inf = 1.0 / c
        elif math.isinf(nt):
            w_inf = 1.0 / de
        else:
            w_inf = -math.expm1(nt * math.log(q)) / de
        return w_inf, 0
    if not (t > 0.0) or not (de > 0.0):
        return 0.0, 0
    if exact and a > 0.0:
        log_gap = math.log(de) - a * t + math.log(t + 1.0 / a)
        if log_gap <= saturation_log_rtol:
            return 1.0 / de, 0
    v, _p, _w, lg = _sums_one(
        t, a, b, g, nu, de, nt, False, False, rtol, cancellation_ratio, series_rtol,
        max_loop,
    )
    if lg:
        return 0.0, 2
    return (v if v > 0.0 else 0.0), 0


@numba.njit(cache=True, nogil=True)
def values_v(  # pragma: no cover - compiled
    tau: npt.NDArray[np.float64],
    alpha: npt.NDArray[np.float64],
    beta: npt.NDArray[np.float64],
    gamma: npt.NDArray[np.float64],
    j_cap: float,
    exact: bool,
    rtol: float,
    cancellation_ratio: float,
    series_rtol: float,
    max_loop: int,
    uninformative_step: float,
    saturation_log_rtol: float,
    out: npt.NDArray[np.float64],
    flag: npt.NDArray[np.int8],
) -> None:
    """``V/mu`` of every element (:func:`_value_one`; flagged ones left to the caller)."""
    for k in range(tau.size):
        v, f = _value_one(tau[k], alpha[k], beta[k], gamma[k], j_cap, exact, rtol,
                          cancellation_ratio, series_rtol, max_loop, uninformative_step,
                          saturation_log_rtol)
        out[k] = v
        flag[k] = f


@numba.njit(cache=True, nogil=True)
def values_at(  # pragma: no cover - compiled
    slots: npt.NDArray[np.int64],
    now: float,
    origin: npt.NDArray[np.float64],
    alpha: npt.NDArray[np.float64],
    beta: npt.NDArray[np.float64],
    gamma: npt.NDArray[np.float64],
    mu: npt.NDArray[np.float64],
    j_cap: float,
    exact: bool,
    rtol: float,
    cancellation_ratio: float,
    series_rtol: float,
    max_loop: int,
    uninformative_step: float,
    saturation_log_rtol: float,
    out: npt.NDArray[np.float64],
    flag: npt.NDArray[np.int8],
) -> None:
    """``V = mu V/mu`` at ``tau = max(now - origin, 0)`` for pages given by index
    (``models.index.CrawlIndex``'s storage), flagged ones left to the caller."""
    for k in range(slots.size):
        s = slots[k]
        t = now - origin[s]
        if t < 0.0:
            t = 0.0
        v, f = _value_one(t, alpha[s], beta[s], gamma[s], j_cap, exact, rtol,
                          cancellation_ratio, series_rtol, max_loop, uninformative_step,
                          saturation_log_rtol)
        out[k] = mu[s] * v
        flag[k] = f
