"""Crawl values with noisy change-indicating signals (CIS).

A page has importance ``mu``, changes as a Poisson process with rate ``Delta``
(``change_rate``), each change is signalled with probability ``lam`` (``recall``) and
false signals arrive as a Poisson process with rate ``nu`` (``false_signal_rate``).
The scheduler works with the derived parameters of Sec. 3 of Busa-Fekete et al.
(paper 004):

* ``alpha = (1 - lam) * Delta``  rate of changes nobody signals,
* ``gamma = lam * Delta + nu``   rate of observed signals,
* ``beta = -ln(nu / gamma) / alpha``  elapsed-time equivalent of one signal,

and a single number of state per page, the effective elapsed time
``tau_eff = tau_elap + beta * n_signals`` with ``P(fresh) = exp(-alpha * tau_eff)``.

Theorem 1 and Lemma 4 of paper 004 give, for a threshold policy that crawls when
``tau_eff`` reaches ``iota``,

* ``psi(iota) = sum_{i=0}^{floor(iota/beta)} R^i(gamma (iota - i beta)) / gamma``  (eq. 7,
  expected crawl interval),
* ``w(iota) = sum_{i=0}^{floor(iota/beta)} nu^i / (Delta+nu)^(i+1)
  R^i((alpha+gamma)(iota - i beta))`` (eq. 6, expected fresh time per interval),
* ``V(iota) = mu (w(iota) - exp(-alpha iota) psi(iota))`` (crawl value),
  ``f(iota) = 1 / psi(iota)`` (crawl frequency),

with ``R^i(x) = P(Poisson(x) > i)``, the regularised lower incomplete gamma
``P(i + 1, x)``.

Numerics
--------
``R^i`` is evaluated with :func:`scipy.special.gammainc` (``-expm1(-x)`` for ``i = 0``),
never as ``1 - e^{-x} sum``.  The difference of the two sums in ``V`` cancels when
``alpha (iota - i beta)`` is small; a term that loses more than three bits is
recomputed from the cancellation-free forms derived in
:func:`models._kernel._term_without_cancellation`.

The sums over ``i`` are truncated once the dropped tail is provably below
``TRUNCATION_RTOL`` times the partial sum (bound in :func:`_ncis_sums`): the ``i``-th
term of ``V`` is at most ``q^i R^{i+1}(x_i) / (Delta + nu)`` with the geometric ratio
``q = nu / (Delta + nu)`` and the Poisson tail ``R^{i+1}(x_i) <= R^i(x_i) r`` for
``r = x_i / (i + 2)``.

References
----------
R. Busa-Fekete, J. Zimmert, A. György et al., "A Scalable Crawling Algorithm Utilizing
Noisy Change-Indicating Signals" (paper 004): Sec. 3, Theorem 1, Lemmas 2-4, Sec. 5.1
and App. A.1.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from scipy import special as _sp

from models import _kernel
from models._args import FloatArray, as_float_array, as_terms, broadcast

__all__ = [
    "TRUNCATION_RTOL",
    "ChangeParams",
    "PrecisionRecallParams",
    "SignalParams",
    "change_params",
    "crawl_frequency",
    "crawl_value",
    "from_precision_recall",
    "precision_recall",
    "psi",
    "residual",
    "signal_params",
    "time_to_value",
    "value_at_infinity",
    "w",
]

#: Relative tolerance of the truncated sums of Theorem 1 / Lemma 4: the dropped tail
#: is proven (not estimated) to be at most this fraction of the kept partial sum.
TRUNCATION_RTOL = 1e-13

# A term of V = sum_i (A_i - B_i) is recomputed without cancellation when
# A_i - B_i < A_i / 8, i.e. when the subtraction would lose more than 3 bits.
_CANCELLATION_RATIO = 0.125
_SERIES_RTOL = 1e-17
# beta (alpha + gamma) below this: Greedy (the signals are uninformative).
_UNINFORMATIVE_STEP = 1e-30


# --------------------------------------------------------------------------------------
# R^i(x) and small helpers
# --------------------------------------------------------------------------------------


def _gammainc(a: float, x: FloatArray) -> FloatArray:
    """Regularised lower incomplete gamma ``P(a, x)`` (typed wrapper of scipy)."""
    out: FloatArray = np.asarray(_sp.gammainc(a, x), dtype=np.float64)
    return out


_R1_SERIES = tuple(1.0 / math.factorial(k + 2) for k in range(18))


def _residual1(x: FloatArray) -> FloatArray:
    """``R^1(x) = P(2, x)``: closed form for ``x >= 1`` (loses < 2 bits), series below.

    For ``x < 1``, ``R^1(x) = e^{-x} x^2 sum_{k>=0} x^k/(k+2)!``; 18 terms leave a
    relative remainder below ``1/20! < 1e-18``.
    """
    out: FloatArray = -np.expm1(-x) - x * np.exp(-x)
    small = x < 1.0
    if small.any():
        xs = x[small]
        acc = np.full_like(xs, _R1_SERIES[-1])
        for coef in _R1_SERIES[-2::-1]:
            acc = acc * xs + coef
        out[small] = np.exp(-xs) * xs * xs * acc
    return out


def _residual_int(i: int, x: FloatArray) -> FloatArray:
    """``R^i(x) = P(i + 1, x)`` for a scalar integer ``i >= 0`` and an array ``x >= 0``."""
    if i == 0:
        out: FloatArray = -np.expm1(-x)
        return out
    return _gammainc(float(i + 1), x)


def residual(i: npt.ArrayLike, x: npt.ArrayLike) -> FloatArray:
    """Normalised residual of the ``i``-th Taylor polynomial of ``exp``.

    Parameters
    ----------
    i : array_like of int
        Order, ``i >= 0``.
    x : array_like of float
        Argument, ``x >= 0`` (``inf`` allowed).

    Returns
    -------
    ndarray
        ``R^i(x) = 1 - e^{-x} sum_{j<=i} x^j / j! = P(Poisson(x) > i)``.

    Notes
    -----
    ``R^i_exp`` of Theorem 1 of Busa-Fekete et al. (paper 004), computed as the
    regularised lower incomplete gamma ``P(i + 1, x)``, which keeps full relative
    accuracy for small ``x`` where the subtraction would cancel.
    """
    ia = as_float_array("i", i)
    if (ia != np.floor(ia)).any():
        raise ValueError("i must be integers >= 0")
    xa = as_float_array("x", x, allow_inf=True)
    ia, xa = broadcast(i=ia, x=xa)
    return np.asarray(_sp.gammainc(ia + 1.0, xa), dtype=np.float64)


def _kappa(alpha: FloatArray, beta: FloatArray) -> FloatArray:
    """``kappa = alpha * beta = ln(gamma / nu)``; ``0 * inf`` is read as ``inf`` (nu = 0)."""
    with np.errstate(invalid="ignore"):
        k = np.asarray(alpha * beta, dtype=np.float64)
    return np.where(np.isnan(k), np.inf, k)


def _derived(
    alpha: FloatArray, beta: FloatArray, gamma: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Return ``(kappa, nu, Delta)`` from ``(alpha, beta, gamma)`` (Sec. 3 of paper 004)."""
    kappa = _kappa(alpha, beta)
    nu = gamma * np.exp(-kappa)
    delta = alpha + gamma * -np.expm1(-kappa)
    return kappa, nu, delta


# --------------------------------------------------------------------------------------
# Parameter conversions
# --------------------------------------------------------------------------------------


class SignalParams(NamedTuple):
    """``(alpha, beta, gamma)`` of Sec. 3 of paper 004 (rates per unit time)."""

    alpha: FloatArray
    beta: FloatArray
    gamma: FloatArray


class ChangeParams(NamedTuple):
    """``(change_rate Delta, recall lam, false_signal_rate nu)``."""

    change_rate: FloatArray
    recall: FloatArray
    false_signal_rate: FloatArray


class PrecisionRecallParams(NamedTuple):
    """``(change_rate Delta, precision, recall)``."""

    change_rate: FloatArray
    precision: FloatArray
    recall: FloatArray


def signal_params(
    change_rate: npt.ArrayLike, recall: npt.ArrayLike, false_signal_rate: npt.ArrayLike
) -> SignalParams:
    """Convert ``(Delta, lam, nu)`` to ``(alpha, beta, gamma)``.

    Parameters
    ----------
    change_rate : array_like
        ``Delta >= 0``, changes per unit time.
    recall : array_like
        ``lam`` in ``[0, 1]``, probability that a change is signalled.
    false_signal_rate : array_like
        ``nu >= 0``, false signals per unit time.

    Returns
    -------
    SignalParams
        ``alpha = (1 - lam) Delta``, ``gamma = lam Delta + nu`` and
        ``beta = ln(gamma / nu) / alpha``.

    Notes
    -----
    Sec. 3 of Busa-Fekete et al. (paper 004).  Limits: ``nu = 0`` gives ``beta = inf``
    (noiseless signals, Greedy-CIS); ``lam Delta = 0`` (signals carry no information)
    gives ``beta = 0`` so that signals do not move ``tau_eff`` (Greedy); ``alpha = 0``
    with ``nu > 0`` (recall exactly 1) gives ``beta = inf``: the time-equivalent of a
    signal is unbounded because no unsignalled change can ever happen.
    """
    d = as_float_array("change_rate", change_rate)
    lam = as_float_array("recall", recall)
    if (lam > 1).any():
        raise ValueError(f"recall must be <= 1, got max {float(lam.max())!r}")
    nu = as_float_array("false_signal_rate", false_signal_rate)
    d, lam, nu = broadcast(change_rate=d, recall=lam, false_signal_rate=nu)
    alpha = (1.0 - lam) * d
    signalled = lam * d
    gamma = signalled + nu
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        kappa = np.log1p(signalled / nu)  # ln(gamma / nu)
        beta = kappa / alpha
    beta = np.where(signalled == 0, 0.0, beta)
    beta = np.where((signalled > 0) & ((nu == 0) | (alpha == 0)), np.inf, beta)
    return SignalParams(alpha, beta, gamma)


def change_params(alpha: npt.ArrayLike, beta: npt.ArrayLike, gamma: npt.ArrayLike) -> ChangeParams:
    """Convert ``(alpha, beta, gamma)`` to ``(Delta, lam, nu)``.

    Notes
    -----
    Inverts Sec. 3 of paper 004: ``nu = gamma e^{-alpha beta}``,
    ``Delta = alpha + gamma (1 - e^{-alpha beta})``, ``lam = (gamma - nu) / Delta``
    (``lam = 0`` when ``Delta = 0``).  ``alpha = 0`` with ``beta = inf`` is read as
    ``nu = 0``.
    """
    a, b, g = _check_signal_args(alpha, beta, gamma)
    a, b, g = broadcast(alpha=a, beta=b, gamma=g)
    _, nu, delta = _derived(a, b, g)
    signalled = delta - a
    with np.errstate(divide="ignore", invalid="ignore"):
        lam = np.where(delta > 0, signalled / delta, 0.0)
    return ChangeParams(delta, lam, nu)


def precision_recall(
    alpha: npt.ArrayLike, beta: npt.ArrayLike, gamma: npt.ArrayLike
) -> PrecisionRecallParams:
    """Convert ``(alpha, beta, gamma)`` to ``(Delta, precision, recall)``.

    Notes
    -----
    ``precision = lam Delta / gamma = 1 - e^{-alpha beta}`` (0 when ``gamma = 0``),
    ``recall = lam`` (Sec. 3 of paper 004; the copy's second "precision" means recall).
    """
    a, b, g = _check_signal_args(alpha, beta, gamma)
    a, b, g = broadcast(alpha=a, beta=b, gamma=g)
    kappa, _, delta = _derived(a, b, g)
    precision = np.where(g > 0, -np.expm1(-kappa), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        recall = np.where(delta > 0, (delta - a) / delta, 0.0)
    return PrecisionRecallParams(delta, precision, recall)


def from_precision_recall(
    change_rate: npt.ArrayLike, precision: npt.ArrayLike, recall: npt.ArrayLike
) -> SignalParams:
    """Convert ``(Delta, precision, recall)`` to ``(alpha, beta, gamma)``.

    Notes
    -----
    ``nu = lam Delta (1 - precision) / precision``; with ``precision = 0`` or
    ``lam Delta = 0`` the signals carry no information and ``gamma = 0`` (Greedy).
    """
    d = as_float_array("change_rate", change_rate)
    p = as_float_array("precision", precision)
    lam = as_float_array("recall", recall)
    if (p > 1).any():
        raise ValueError(f"precision must be <= 1, got max {float(p.max())!r}")
    if (lam > 1).any():
        raise ValueError(f"recall must be <= 1, got max {float(lam.max())!r}")
    d, p, lam = broadcast(change_rate=d, precision=p, recall=lam)
    informative = (p > 0) & (lam * d > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        nu = np.where(informative, lam * d * (1.0 - p) / p, 0.0)
    lam_eff = np.where(informative, lam, 0.0)
    return signal_params(d, lam_eff, nu)


# --------------------------------------------------------------------------------------
# The sums of Theorem 1 / Lemma 4
# --------------------------------------------------------------------------------------


def _lambertw_log(log_z: FloatArray, k: int) -> npt.NDArray[np.complex128]:
    """Branch ``k`` of Lambert's W at ``z = exp(log_z)`` (real ``log_z``), overflow-free.

    Uses scipy's ``lambertw`` where ``z`` is representable, else Newton's method on
    ``u + log(u) = log_z + 2 pi i k`` from ``u0 = T - log(T)``.
    """
    small = log_z < 600.0
    out = np.empty(log_z.shape, dtype=np.complex128)
    if small.any():
        out[small] = _sp.lambertw(np.exp(log_z[small]), k)
    if (~small).any():
        t = log_z[~small] + 2j * np.pi * k
        u = t - np.log(t)
        for _ in range(50):
            step = (u + np.log(u) - t) / (1.0 + 1.0 / u)
            u = u - step
            if np.all(np.abs(step) <= 1e-16 * np.abs(u)):
                break
        out[~small] = u
    return out


def _expm1_minus_x_over_x(u: FloatArray) -> FloatArray:
    """``(e^u - 1 - u) / u`` without cancellation (series for ``|u| < 0.1``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = (np.expm1(u) - u) / u
    small = np.abs(u) < 0.1
    if small.any():
        us = u[small]
        acc = np.full_like(us, 1.0 / math.factorial(16))
        for k in range(15, 1, -1):
            acc = acc * us + 1.0 / math.factorial(k)
        out[small] = acc * us
    return out


def _principal_pole(one_minus_q: FloatArray, h: FloatArray) -> FloatArray:
    """Real root ``p_0`` in ``(-1, 0)`` of ``(1 + p) e^{p h} = q`` (``q = 1 - one_minus_q``).

    Newton on ``log1p(p) + h p = log1p(-(1-q))``, which keeps relative accuracy as
    ``q -> 1`` (where ``W_0(q h e^h)/h - 1`` would cancel); safeguarded by bisection
    on ``(-1, 0)``.
    """
    target = np.log1p(-one_minus_q)
    lo = np.full(h.shape, -1.0)
    hi = np.zeros(h.shape)
    p = np.maximum(-one_minus_q / (1.0 + h), -0.5)
    for _ in range(200):
        g = np.log1p(p) + h * p - target
        lo = np.where(g < 0, p, lo)
        hi = np.where(g < 0, hi, p)
        step = g / (1.0 / (1.0 + p) + h)
        converged = np.abs(step) <= 4e-16 * np.abs(p)
        pn = p - step
        outside = ((pn <= lo) | (pn >= hi)) & ~converged
        pn = np.where(outside, 0.5 * (lo + hi), pn)
        if converged.all():
            return pn
        p = pn
    return p


def _renewal_sum(
    x: FloatArray, q: FloatArray, h: FloatArray, one_minus_q: FloatArray
) -> FloatArray:
    """``sum_{i>=0}^{floor(x/h)} q^i R^i(x - i h)`` by its residue expansion.

    With ``Y = E + h`` (``E ~ Exp(1)``) and ``W_n`` the sum of ``n`` copies, the sum is
    the discounted renewal function ``U = sum_{n>=1} q^{n-1} P(W_n <= x + h)``, whose
    Laplace transform is ``e^{-ph} / (p ((1+p) - q e^{-ph}))``.  Its poles are ``p = 0``
    and ``p_k = W_k(q h e^h)/h - 1`` (Lambert W), so

    ``U = 1/(1-q) + sum_k e^{p_k x} / (p_k (1 + h (1 + p_k)))``  (``q < 1``), and with
    ``q = 1`` the double pole at 0 gives ``(x + h^2/(2(1+h)))/(1+h)`` instead of
    ``1/(1-q)``.  For ``q < 1`` the constant and the real pole ``p_0`` are combined as
    ``-(1+p_0)(e^{p_0 h}-1-p_0 h)/((1-q) p_0 (1+h+h p_0)) + a_0 expm1(p_0 x)`` so that
    nothing of size ``1/(1-q)`` cancels.  ``Re p_k -> -inf`` like ``-log|k|/h``, so for
    ``x/h`` in the hundreds (the only use) a few branches reach full precision;
    branches are added in pairs until two consecutive ones are below ``1e-17`` of
    the sum.
    """
    one = one_minus_q <= 0.0
    total = np.zeros(x.shape, dtype=np.complex128)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lin = (x + h * h / (2 * (1 + h))) / (1 + h)
        omq = np.where(one, 0.5, one_minus_q)
        p0 = _principal_pole(omq, h)
        d0 = p0 * (1.0 + h + h * p0)
        a0 = 1.0 / d0
        # -(1+p0)(e^{p0 h}-1-p0 h)/((1-q) p0 (1+h+h p0)), arranged against underflow
        const = -(1.0 + p0) * h * (_expm1_minus_x_over_x(p0 * h) / omq) / (1.0 + h + h * p0)
        real_part = const + a0 * np.expm1(p0 * x)
        total += np.where(one, lin, real_part)
        log_z = np.log(q) + np.log(h) + h
    quiet = 0
    for k in range(1, 400):
        size = np.zeros(x.shape)
        for kk in (k, -k):
            u = _lambertw_log(log_z, kk)
            p = u / h - 1.0
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                term = np.exp(p * x) / (p * (1.0 + h * (1.0 + p)))
            total += term
            size = np.maximum(size, np.abs(term))
        quiet = quiet + 1 if np.all(size <= 1e-17 * np.abs(total.real)) else 0
        if quiet >= 2:
            break
    out: FloatArray = total.real
    return out


# More terms than this per element and the sums switch to the residue expansion.
_MAX_LOOP_TERMS = 300


class _Sums(NamedTuple):
    v: FloatArray  # V / mu
    psi: FloatArray
    w: FloatArray


def _ncis_sums(
    iota: FloatArray,
    alpha: FloatArray,
    beta: FloatArray,
    gamma: FloatArray,
    nu: FloatArray,
    delta: FloatArray,
    max_terms: FloatArray,
    want_psi: bool,
    want_w: bool,
) -> _Sums:
    """Truncated sums of Theorem 1 / Lemma 4 for ``0 < iota < inf`` and ``gamma > 0``.

    ``max_terms`` is ``floor(iota/beta) + 1`` capped by Approx-J's ``J`` (may be inf).

    Truncation bound: after term ``i`` (``A_i`` the ``w`` term, ``x_i = (alpha+gamma)
    (iota - i beta)``, ``r = x_i / (i+2)``, ``q = nu / (Delta + nu)``) the rest of
    ``V / mu`` is at most ``A_i min(q/(1-q), q r^2/(1-q r))`` (the second only when
    ``r < 1``), because ``A_j - B_j <= q^j R^{j+1}(x_j) / (alpha+gamma)`` and
    ``R^{j+1}(x) <= R^j(x) x/(j+2)``; the rest of ``psi`` is at most
    ``R^i(y_i)/gamma * r_y/(1 - r_y)`` with ``r_y = y_i/(i+2)``, and that of ``w`` at
    most ``A_i min(q/(1-q), q r/(1-q r))``.  We stop once each requested bound is below
    ``TRUNCATION_RTOL`` times its partial sum.
    """
    n = iota.size
    v_out = np.zeros(n)
    psi_out = np.zeros(n)
    w_out = np.zeros(n)
    long = np.zeros(n, dtype=np.int8)
    # the term loop, element by element (compiled: models._kernel)
    _kernel.ncis_sums(
        np.ascontiguousarray(iota), np.ascontiguousarray(alpha), np.ascontiguousarray(beta),
        np.ascontiguousarray(gamma), np.ascontiguousarray(nu), np.ascontiguousarray(delta),
        np.ascontiguousarray(max_terms), want_psi, want_w, TRUNCATION_RTOL,
        _CANCELLATION_RATIO, _SERIES_RTOL, _MAX_LOOP_TERMS, v_out, psi_out, w_out, long,
    )
    lg = long.astype(bool)
    if lg.any():
        # long sums (tau/beta in the hundreds): closed residue expansion
        io, al, be, ga, nu_l, de = (z[lg] for z in (iota, alpha, beta, gamma, nu, delta))
        c = al + ga
        q = nu_l / c
        e_ai = np.exp(-al * io)
        u_w = _renewal_sum(c * io, q, c * be, de / c)
        u_psi = _renewal_sum(ga * io, np.ones_like(q), ga * be, np.zeros_like(q))
        w_out[lg] = u_w / c
        psi_out[lg] = u_psi / ga
        v_out[lg] = w_out[lg] - e_ai * psi_out[lg]
    return _Sums(v_out, psi_out, w_out)


def _check_signal_args(
    alpha: npt.ArrayLike, beta: npt.ArrayLike, gamma: npt.ArrayLike
) -> tuple[FloatArray, FloatArray, FloatArray]:
    a = as_float_array("alpha", alpha)
    b = as_float_array("beta", beta, allow_inf=True)
    g = as_float_array("gamma", gamma)
    return a, b, g


_SATURATION_LOG_RTOL = math.log(1e-17)


def _evaluate(
    iota: FloatArray,
    alpha: FloatArray,
    beta: FloatArray,
    gamma: FloatArray,
    terms: int | None,
    want_psi: bool,
    want_w: bool,
) -> _Sums:
    """``V / mu``, ``psi`` and ``w`` on flat, validated, broadcast arrays.

    Special cases (exact):

    * ``gamma = 0`` (no signals) or ``beta = 0`` without ``terms`` (uninformative
      signals): Greedy, ``V/mu = R^1(alpha iota) / alpha``, ``psi = iota``,
      ``w = (1 - e^{-alpha iota}) / alpha`` (Sec. 5.1).
    * ``iota = 0``: all zero.  ``iota = inf``: ``V/mu = w(inf) = (1 - q^J)/Delta``
      (``1/Delta`` for the exact value), ``psi = inf``.
    * ``Delta = 0`` (the page never changes): ``V = 0``.
    * ``Delta e^{-alpha iota} (iota + 1/alpha) <= 1e-17``: ``V/mu = 1/Delta`` to machine
      precision, since ``V(inf) - V(iota) = mu alpha int_iota^inf e^{-alpha s} psi(s) ds``
      (Lemma 2) and ``psi(s) <= s``.
    """
    _, nu, delta = _derived(alpha, beta, gamma)
    n = iota.size
    v = np.zeros(n)
    ps = np.zeros(n)
    ww = np.zeros(n)
    finite = np.isfinite(iota)
    # beta (alpha+gamma) below 1e-30: signals carry no information to machine precision
    # (V differs from Greedy's by O(alpha iota * beta (alpha+gamma)) relative), and the
    # residue expansion would divide by a subnormal step
    with np.errstate(invalid="ignore"):
        uninformative = beta * (alpha + gamma) < _UNINFORMATIVE_STEP
    greedy = (gamma == 0) | ((beta == 0) & (terms is None)) | (uninformative & (terms is None))
    # --- Greedy (Sec. 5.1): Delta = alpha
    g = greedy & finite & (iota > 0)
    if g.any():
        a = alpha[g]
        t = iota[g]
        x = a * t
        with np.errstate(divide="ignore", invalid="ignore"):
            v[g] = np.where(a > 0, _residual1(x) / a, 0.0)
            ww[g] = np.where(a > 0, -np.expm1(-x) / a, t)
        ps[g] = t
    gi = greedy & ~finite
    if gi.any():
        a = alpha[gi]
        with np.errstate(divide="ignore"):
            v[gi] = np.where(a > 0, 1.0 / a, 0.0)
            ww[gi] = 1.0 / a
        ps[gi] = np.inf
    # --- general (Theorem 1)
    gen = ~greedy
    j_cap = np.inf if terms is None else float(terms)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        n_terms = np.where(np.isinf(beta), 1.0, np.floor(iota / beta) + 1.0)
    n_terms = np.minimum(n_terms, j_cap)
    inf_gen = gen & ~finite
    if inf_gen.any():
        q = nu[inf_gen] / (alpha[inf_gen] + gamma[inf_gen])
        d = delta[inf_gen]
        nt = n_terms[inf_gen]
        with np.errstate(divide="ignore", invalid="ignore"):
            w_inf = np.where(np.isinf(nt), 1.0 / d, -np.expm1(nt * np.log(q)) / d)
            w_inf = np.where(q == 0, 1.0 / (alpha[inf_gen] + gamma[inf_gen]), w_inf)
        ww[inf_gen] = w_inf
        v[inf_gen] = np.where(d > 0, w_inf, 0.0)
        ps[inf_gen] = np.inf
    core = gen & finite & (iota > 0)
    if not (want_psi or want_w):
        core &= delta > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            log_gap = np.log(delta) - alpha * iota + np.log(iota + 1.0 / alpha)
        sat = core & (alpha > 0) & (log_gap <= _SATURATION_LOG_RTOL) & (terms is None)
        if sat.any():
            v[sat] = 1.0 / delta[sat]
            ps[sat] = np.nan
            ww[sat] = np.nan
        core &= ~sat
    if core.any():
        sums = _ncis_sums(
            iota[core],
            alpha[core],
            beta[core],
            gamma[core],
            nu[core],
            delta[core],
            n_terms[core],
            want_psi,
            want_w,
        )
        v[core] = np.where(delta[core] > 0, np.maximum(sums.v, 0.0), 0.0)
        ps[core] = sums.psi
        ww[core] = sums.w
    return _Sums(v, ps, ww)


def _values_only(
    tau: FloatArray, alpha: FloatArray, beta: FloatArray, gamma: FloatArray,
    terms: int | None,
) -> FloatArray:
    """``V / mu`` on flat validated arrays: the cases of :func:`_evaluate`, element by
    element in the compiled loop (:func:`models._kernel.values_v`); Greedy elements take
    the numpy formula of ``_evaluate`` (same bits on every path) and long sums its
    residue expansion."""
    n = tau.size
    out = np.empty(n)
    flag = np.zeros(n, dtype=np.int8)
    _kernel.values_v(
        np.ascontiguousarray(tau), np.ascontiguousarray(alpha), np.ascontiguousarray(beta),
        np.ascontiguousarray(gamma), math.inf if terms is None else float(terms),
        terms is None, TRUNCATION_RTOL, _CANCELLATION_RATIO, _SERIES_RTOL, _MAX_LOOP_TERMS,
        _UNINFORMATIVE_STEP, _SATURATION_LOG_RTOL, out, flag,
    )
    if flag.any():
        redo = flag != 0
        out[redo] = _evaluate(tau[redo], alpha[redo], beta[redo], gamma[redo], terms,
                              want_psi=False, want_w=False).v
    return out


def _values_at(
    slots: npt.NDArray[np.int64], now: float, origin: FloatArray, alpha: FloatArray,
    beta: FloatArray, gamma: FloatArray, mu: FloatArray, terms: int | None,
) -> FloatArray:
    """``crawl_value(max(now - origin, 0), ...)[slots]`` of stored parameter arrays
    (``models.index.CrawlIndex``) without gathering them first: the compiled loop of
    :func:`_values_only`, Greedy and long sums by the same numpy paths."""
    out = np.empty(slots.size)
    flag = np.zeros(slots.size, dtype=np.int8)
    _kernel.values_at(
        slots, now, origin, alpha, beta, gamma, mu,
        math.inf if terms is None else float(terms), terms is None, TRUNCATION_RTOL,
        _CANCELLATION_RATIO, _SERIES_RTOL, _MAX_LOOP_TERMS, _UNINFORMATIVE_STEP,
        _SATURATION_LOG_RTOL, out, flag,
    )
    if flag.any():
        redo = np.flatnonzero(flag)
        sl = slots[redo]
        tau = np.maximum(now - origin[sl], 0.0)
        out[redo] = _crawl_value_unchecked(tau, alpha[sl], beta[sl], gamma[sl], mu[sl], terms)
    return out


def _prepare(
    tau_eff: npt.ArrayLike,
    alpha: npt.ArrayLike,
    beta: npt.ArrayLike,
    gamma: npt.ArrayLike,
    tau_name: str = "tau_eff",
) -> tuple[tuple[int, ...], FloatArray, FloatArray, FloatArray, FloatArray]:
    t = as_float_array(tau_name, tau_eff, allow_inf=True)
    a, b, g = _check_signal_args(alpha, beta, gamma)
    t, a, b, g = broadcast(**{tau_name: t, "alpha": a, "beta": b, "gamma": g})
    return t.shape, t.ravel(), a.ravel(), b.ravel(), g.ravel()


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------


def crawl_value(
    tau_eff: npt.ArrayLike,
    alpha: npt.ArrayLike,
    beta: npt.ArrayLike,
    gamma: npt.ArrayLike,
    mu: npt.ArrayLike = 1.0,
    *,
    terms: int | None = None,
) -> FloatArray:
    """Crawl value ``V(tau_eff)`` of Theorem 1 (Greedy-NCIS and its special cases).

    Parameters
    ----------
    tau_eff : array_like
        Effective elapsed time ``tau_elap + beta * n_signals``, ``>= 0``; ``inf`` means
        "fresh with probability 0" (e.g. a noiseless signal has arrived).
    alpha : array_like
        Rate of unsignalled changes ``(1 - lam) Delta`` per unit time, ``>= 0``.
    beta : array_like
        Time-equivalent of one signal ``ln(gamma/nu)/alpha``, ``>= 0``; ``inf`` means
        noiseless signals (Greedy-CIS).
    gamma : array_like
        Rate of observed signals ``lam Delta + nu`` per unit time, ``>= 0``; ``0``
        means no signals (Greedy, ``Delta = alpha``).
    mu : array_like, optional
        Importance (request rate or weight), ``>= 0``.
    terms : int, optional
        Approx-J: keep only the first ``J`` terms of both sums (App. A.1).

    Returns
    -------
    ndarray
        ``V = mu (w(tau) - e^{-alpha tau} psi(tau))``, broadcast shape of the inputs.
        ``0 <= V <= mu / Delta``; ``V(0) = 0``; ``V(inf) = mu / Delta``.

    Raises
    ------
    ValueError
        Negative or NaN arguments, infinite ``alpha``/``gamma``/``mu``, shapes that
        do not broadcast, ``terms < 1``.

    Notes
    -----
    Theorem 1 and Lemma 4 of Busa-Fekete et al. (paper 004)::

        V(iota) = mu sum_{i=0}^{floor(iota/beta)} [ nu^i/(Delta+nu)^(i+1)
                  R^i((alpha+gamma)(iota - i beta)) - e^{-alpha iota}/gamma
                  R^i(gamma (iota - i beta)) ]

    Special cases of Sec. 5.1: ``gamma = 0`` gives Greedy,
    ``V = mu/Delta R^1(Delta tau)`` (the blog's crawl value); ``beta = inf`` gives
    Greedy-CIS, ``V = mu (R^0((alpha+gamma) tau)/(alpha+gamma) - e^{-alpha tau}
    R^0(gamma tau)/gamma)`` and ``mu/Delta`` at ``tau = inf``.  A page with
    ``Delta = 0`` never goes stale and has ``V = 0`` everywhere.  With ``terms = J``
    the value at ``tau = inf`` is the limit of the truncated sum,
    ``mu (1 - q^J) / Delta`` with ``q = nu/(Delta+nu)``.

    The sums are truncated with the proven bound described in the module docstring
    (relative tolerance ``TRUNCATION_RTOL``); terms whose two halves cancel are
    recomputed in a cancellation-free form, so the result keeps about 1e-13 relative
    accuracy at the limits ``alpha -> 0``, ``nu -> 0``, ``tau -> 0``.  When more than
    300 terms would be needed (``tau/beta`` in the hundreds or more), ``w`` and
    ``psi`` come from their residue (Lambert-W) expansion and ``V = mu (w - e^{-alpha
    tau} psi)`` is accurate to about ``1e-15 mu psi`` in absolute terms: relative
    accuracy degrades like ``1e-16 / (alpha tau)`` when ``alpha tau`` is tiny there.
    """
    t = as_float_array("tau_eff", tau_eff, allow_inf=True)
    a, b, g = _check_signal_args(alpha, beta, gamma)
    m = as_float_array("mu", mu)
    nterms = as_terms(terms)
    if g.size == 1 and float(g.reshape(())) == 0.0:
        return _greedy_value(t, a, m)
    t, a, b, g, m = broadcast(tau_eff=t, alpha=a, beta=b, gamma=g, mu=m)
    full = t.shape
    t, a, b, g = (z.ravel() for z in (t, a, b, g))
    out: FloatArray = m * _values_only(t, a, b, g, nterms).reshape(full)
    return out


def _crawl_value_unchecked(
    tau: FloatArray,
    alpha: FloatArray,
    beta: FloatArray,
    gamma: FloatArray,
    mu: FloatArray,
    terms: int | None = None,
) -> FloatArray:
    """:func:`crawl_value` on flat, validated float64 arrays of one length (no checks).

    For callers that validated their inputs once (``models.index.CrawlIndex``).  Gives
    bit-for-bit the result of ``crawl_value`` on the same 1-D arrays (``gamma`` an
    array): all-Greedy inputs take the same formulas as the Greedy branch of
    ``_evaluate`` without its bookkeeping.
    """
    if tau.size and not gamma.any():
        v = np.zeros(tau.size)
        g = np.isfinite(tau) & (tau > 0)
        if g.all():
            a, t = alpha, tau
        else:
            a, t = alpha[g], tau[g]
        x = a * t
        with np.errstate(divide="ignore", invalid="ignore"):
            val = np.where(a > 0, _residual1(x) / a, 0.0)
        if g.all():
            v = val
        else:
            v[g] = val
            gi = ~np.isfinite(tau)
            if gi.any():
                ai = alpha[gi]
                with np.errstate(divide="ignore"):
                    v[gi] = np.where(ai > 0, 1.0 / ai, 0.0)
        out: FloatArray = mu * v
        return out
    res: FloatArray = mu * _values_only(tau, alpha, beta, gamma, terms)
    return res


def _time_to_value_unchecked(
    level: float,
    alpha: FloatArray,
    beta: FloatArray,
    gamma: FloatArray,
    mu: FloatArray,
    start: FloatArray | None = None,
) -> FloatArray:
    """:func:`time_to_value` for a scalar level on flat validated arrays (no checks).

    ``start`` (optional, nan: none) is a first Newton iterate per element, e.g. the
    root at a nearby level; it only changes how fast the iteration converges.
    """
    _, _, delta = _derived(alpha, beta, gamma)
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = np.where((delta > 0) & (mu > 0), mu / delta, 0.0)
    out = np.zeros(alpha.size)
    if level <= 0:
        return out
    out[level >= cap] = np.inf
    out[alpha == 0] = np.inf
    solve = (level < cap) & (alpha > 0)
    if solve.any():
        out[solve] = _solve_time_to_value(
            np.full(int(solve.sum()), float(level)), alpha[solve], beta[solve], gamma[solve],
            mu[solve], None if start is None else start[solve],
        )
    return out


def _greedy_value(tau: FloatArray, alpha: FloatArray, mu: FloatArray) -> FloatArray:
    """Greedy fast path (``gamma = 0``): ``mu R^1(alpha tau) / alpha``, chunked.

    Sec. 5.1 of paper 004 (the blog's crawl value).  ``R^1(x) = 1 - e^{-x}(1 + x)``
    for ``x >= 0.5`` (at most 4 bits lost there), the series of :func:`_residual1`
    below; ``alpha = 0`` gives 0, ``tau = inf`` gives ``mu / alpha``.  Works in
    cache-sized chunks on flat views so that each page costs one ``exp``.
    """
    try:
        shape = np.broadcast_shapes(tau.shape, alpha.shape, mu.shape)
    except ValueError as exc:
        raise ValueError(
            f"arguments do not broadcast: tau_eff {tau.shape}, alpha {alpha.shape}, mu {mu.shape}"
        ) from exc
    n = math.prod(shape)
    flat = []
    for arr in (tau, alpha, mu):
        if arr.size == 1:
            flat.append(arr.reshape(1))
        else:
            flat.append(np.ascontiguousarray(np.broadcast_to(arr, shape)).reshape(-1))
    t_all, a_all, m_all = flat
    out = np.empty(n)
    step = 1 << 16
    for start in range(0, n, step):
        stop = min(start + step, n)
        t_c = t_all if t_all.size == 1 else t_all[start:stop]
        a_c = a_all if a_all.size == 1 else a_all[start:stop]
        m_c = m_all if m_all.size == 1 else m_all[start:stop]
        with np.errstate(invalid="ignore"):  # 0 * inf: fixed below
            x = np.multiply(a_c, t_c)
            e = np.exp(-x)
            r = np.add(x, 1.0)
            r *= e
            np.subtract(1.0, r, out=r)
        small = x < 0.5
        if small.any():
            xs = np.broadcast_to(x, r.shape)[small] if x.shape != r.shape else x[small]
            acc = np.full_like(xs, _R1_SERIES[-1])
            for coef in _R1_SERIES[-2::-1]:
                acc = acc * xs + coef
            r[small] = np.exp(-xs) * xs * xs * acc
        with np.errstate(divide="ignore", invalid="ignore"):
            v = r * m_c / a_c
        bad = ~np.isfinite(v)
        if bad.any():  # alpha = 0 (V = 0) or tau = inf (V = mu/alpha, 0 if alpha = 0)
            a_b = np.broadcast_to(a_c, v.shape)[bad]
            m_b = np.broadcast_to(m_c, v.shape)[bad]
            with np.errstate(divide="ignore", invalid="ignore"):
                v[bad] = np.where(a_b > 0, m_b / a_b, 0.0)
        out[start:stop] = v
    return out.reshape(shape)


def psi(
    iota: npt.ArrayLike,
    alpha: npt.ArrayLike,
    beta: npt.ArrayLike,
    gamma: npt.ArrayLike,
    *,
    terms: int | None = None,
) -> FloatArray:
    """Expected crawl interval ``psi(iota)`` under the threshold policy ``pi(iota)``.

    Notes
    -----
    Eq. (7) and Lemma 4 of Busa-Fekete et al. (paper 004):
    ``psi(iota) = sum_{i=0}^{floor(iota/beta)} R^i(gamma (iota - i beta)) / gamma``;
    ``psi = iota`` without signals; ``psi(inf) = inf``.  Same time unit as ``iota``.
    """
    shape, t, a, b, g = _prepare(iota, alpha, beta, gamma, "iota")
    sums = _evaluate(t, a, b, g, as_terms(terms), want_psi=True, want_w=False)
    return sums.psi.reshape(shape)


def w(
    iota: npt.ArrayLike,
    alpha: npt.ArrayLike,
    beta: npt.ArrayLike,
    gamma: npt.ArrayLike,
    *,
    terms: int | None = None,
) -> FloatArray:
    """Expected fresh time per crawl interval ``w(iota)`` under ``pi(iota)``.

    Notes
    -----
    Eq. (6) and Lemma 4 of Busa-Fekete et al. (paper 004):
    ``w(iota) = sum_{i=0}^{floor(iota/beta)} nu^i/(Delta+nu)^(i+1)
    R^i((alpha+gamma)(iota - i beta))``; Lemma 3: ``w'(x) = e^{-alpha x} psi'(x)``.
    """
    shape, t, a, b, g = _prepare(iota, alpha, beta, gamma, "iota")
    sums = _evaluate(t, a, b, g, as_terms(terms), want_psi=False, want_w=True)
    return sums.w.reshape(shape)


def crawl_frequency(
    iota: npt.ArrayLike,
    alpha: npt.ArrayLike,
    beta: npt.ArrayLike,
    gamma: npt.ArrayLike,
    *,
    terms: int | None = None,
) -> FloatArray:
    """Crawl frequency ``f(iota) = 1 / psi(iota)`` (crawls per unit time).

    Notes
    -----
    Theorem 1 of Busa-Fekete et al. (paper 004); decreasing in ``iota`` (Lemma 2);
    ``f(0) = inf`` and ``f(inf) = 0``.
    """
    p = psi(iota, alpha, beta, gamma, terms=terms)
    with np.errstate(divide="ignore"):
        out: FloatArray = 1.0 / p
    return out


def value_at_infinity(
    alpha: npt.ArrayLike,
    beta: npt.ArrayLike,
    gamma: npt.ArrayLike,
    mu: npt.ArrayLike = 1.0,
) -> FloatArray:
    """``V(inf) = mu / Delta``, the largest crawl value a page can reach.

    Notes
    -----
    Theorem 1 of paper 004 with ``iota -> inf``: ``w -> 1/Delta`` and
    ``e^{-alpha iota} psi -> 0``.  A page with ``mu/Delta <= Lambda`` is never crawled
    at multiplier ``Lambda``.  ``Delta = 0`` (never changes) gives 0.
    """
    a, b, g = _check_signal_args(alpha, beta, gamma)
    m = as_float_array("mu", mu)
    a, b, g, m = broadcast(alpha=a, beta=b, gamma=g, mu=m)
    _, _, delta = _derived(a, b, g)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = np.where(delta > 0, m / delta, 0.0)
    return out


def time_to_value(
    level: npt.ArrayLike,
    alpha: npt.ArrayLike,
    beta: npt.ArrayLike,
    gamma: npt.ArrayLike,
    mu: npt.ArrayLike = 1.0,
) -> FloatArray:
    """Effective time at which the crawl value reaches ``level`` (inverse of V).

    Parameters
    ----------
    level : array_like
        Target value (e.g. a Lagrange multiplier ``Lambda``); any real number.
    alpha, beta, gamma, mu : array_like
        As in :func:`crawl_value`.

    Returns
    -------
    ndarray
        ``iota >= 0`` with ``V(iota) = level``; ``0`` where ``level <= 0``; ``inf``
        where ``mu / Delta <= level`` (the page is never worth crawling) and where
        ``alpha = 0`` (only a noiseless signal, ``tau_eff = inf``, gives value).

    Notes
    -----
    V is continuous and strictly increasing (Lemma 2 of paper 004,
    ``V'(iota) = mu alpha e^{-alpha iota} psi(iota) > 0``), so the root is unique.
    Vectorised safeguarded Newton: each element keeps a bracket ``[lo, hi]`` (``hi``
    found by growing a start guess ``sqrt(2 level / (mu alpha))``, exact for small
    values since ``V ~ mu alpha iota^2 / 2``); a Newton step leaving the bracket is
    replaced by bisection.  Iterates until the step is below ``1e-13`` relative, so
    the result is accurate to about 1e-12 relative where V is well conditioned.
    """
    lv = as_float_array("level", level, allow_negative=True, allow_inf=True)
    a, b, g = _check_signal_args(alpha, beta, gamma)
    m = as_float_array("mu", mu)
    lv, a, b, g, m = broadcast(level=lv, alpha=a, beta=b, gamma=g, mu=m)
    shape = lv.shape
    lv, a, b, g, m = (z.ravel() for z in (lv, a, b, g, m))
    _, _, delta = _derived(a, b, g)
    with np.errstate(divide="ignore", invalid="ignore"):
        cap = np.where((delta > 0) & (m > 0), m / delta, 0.0)
    out = np.zeros(lv.size)
    out[lv >= cap] = np.inf
    out[lv <= 0] = 0.0
    # alpha = 0 (with Delta > 0, i.e. noiseless signals): V = 0 until a signal makes
    # tau_eff infinite, so no finite effective time reaches a positive level
    out[(lv > 0) & (a == 0)] = np.inf
    solve = (lv > 0) & (lv < cap) & (a > 0)
    if solve.any():
        out[solve] = _solve_time_to_value(lv[solve], a[solve], b[solve], g[solve], m[solve])
    return out.reshape(shape)


def _solve_time_to_value(
    level: FloatArray, alpha: FloatArray, beta: FloatArray, gamma: FloatArray, mu: FloatArray,
    start: FloatArray | None = None,
) -> FloatArray:
    """Safeguarded Newton for ``V(iota) = level`` with ``0 < level < mu/Delta``.

    The general case (informative signals) runs element by element in the compiled
    loop (:func:`models._kernel.solve_time_to_value`); Greedy and sums needing the
    residue expansion use :func:`_solve_numpy`.
    """
    with np.errstate(invalid="ignore"):
        gen = (gamma > 0) & (beta > 0) & ~(beta * (alpha + gamma) < _UNINFORMATIVE_STEP)
    out = np.full(level.size, np.nan)
    rest = ~gen
    if gen.any():
        a, b, g = alpha[gen], beta[gen], gamma[gen]
        _, nu, delta = _derived(a, b, g)
        st = np.full(a.size, np.nan) if start is None else np.ascontiguousarray(start[gen])
        got = np.empty(a.size)
        long = np.zeros(a.size, dtype=np.int8)
        _kernel.solve_time_to_value(
            np.ascontiguousarray(level[gen] / mu[gen]), np.ascontiguousarray(a),
            np.ascontiguousarray(b), np.ascontiguousarray(g), nu, delta, st,
            TRUNCATION_RTOL, _CANCELLATION_RATIO, _SERIES_RTOL, _MAX_LOOP_TERMS, got, long,
        )
        out[gen] = got
        redo = np.zeros(level.size, dtype=bool)
        redo[np.flatnonzero(gen)[long.astype(bool)]] = True
        rest |= redo
    if rest.any():
        out[rest] = _solve_numpy(
            level[rest], alpha[rest], beta[rest], gamma[rest], mu[rest],
            None if start is None else start[rest],
        )
    return out


#: :func:`_solve_numpy` gives up growing its bracket here: the level is never reached
_MAX_IOTA = 1e300


def _solve_numpy(
    level: FloatArray, alpha: FloatArray, beta: FloatArray, gamma: FloatArray, mu: FloatArray,
    start: FloatArray | None = None,
) -> FloatArray:
    """Vectorised safeguarded Newton for ``V(iota) = level`` (any case of _evaluate)."""
    n = level.size
    target = level / mu
    x = np.sqrt(2.0 * target / alpha)  # alpha > 0 here since Delta > 0 and V < cap
    if start is not None:
        x = np.where(np.isfinite(start) & (start > 0), start, x)
    lo = np.zeros(n)
    hi = np.full(n, np.inf)
    result = np.full(n, np.nan)
    idx = np.arange(n)
    for _ in range(400):
        sums = _evaluate(x, alpha, beta, gamma, None, want_psi=True, want_w=False)
        f = sums.v - target
        ps = np.where(np.isnan(sums.psi), x, sums.psi)
        fp = alpha * np.exp(-alpha * x) * ps
        below = f < 0
        lo = np.where(below, x, lo)
        hi = np.where(below, hi, x)
        # Newton only where the step |f/fp| is shorter than the bracket (or, with no upper
        # end yet, finite): far out in a saturated region V' underflows (fp ~ 1e-310 after
        # a long first step) and f/fp would overflow; such a step would be rejected below
        # anyway, so it is never computed and the bracket decides instead
        span = np.where(np.isfinite(hi), hi - lo, np.finfo(np.float64).max)
        newton = np.abs(f) / span < fp
        with np.errstate(invalid="ignore"):
            xn = np.where(newton, x - f / np.where(newton, fp, 1.0), np.nan)
        # a Newton step below 1e-13 relative is convergence even when it rounds onto
        # the bracket end just set to x (else bisection would restart from the bracket)
        tiny = np.isfinite(xn) & (np.abs(xn - x) <= 1e-13 * x)
        bad = (~np.isfinite(xn) | (xn <= lo) | (xn >= hi)) & ~tiny
        fallback = np.where(np.isfinite(hi), 0.5 * (lo + hi), np.minimum(x, _MAX_IOTA) * 4.0)
        xn = np.where(bad, fallback, xn)
        # a level within rounding of mu/Delta: V(x) stays below it in double precision
        # however far x grows, so the page never reaches it (growing x would overflow)
        unreachable = ~np.isfinite(hi) & (x >= _MAX_IOTA)
        done = (
            (f == 0) | tiny | (np.abs(xn - x) <= 1e-13 * x)
            | (np.isfinite(hi) & (hi - lo <= 1e-14 * hi)) | unreachable
        )
        xn = np.where(f == 0, x, np.where(unreachable, np.inf, xn))
        if done.any():
            result[idx[done]] = xn[done]
            keep = ~done
            idx = idx[keep]
            xn, lo, hi, alpha, beta, gamma, target = (
                z[keep] for z in (xn, lo, hi, alpha, beta, gamma, target)
            )
        x = xn
        if not idx.size:
            break
    if idx.size:  # pragma: no cover - bisection alone converges in < 400 steps
        result[idx] = x
    return result
