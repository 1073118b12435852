"""The sums of Theorem 1 / Lemma 4 of Busa-Fekete et al. (paper 004) behind :mod:`models.values`.

``R^i(x)`` and its small helpers, the truncated sums with their proven tail bound, the
residue (Lambert-W) expansion for long sums, and the unchecked flat-array entry points that
``models.index`` calls.  The formulas, the numerics and the references are described in the
docstring of :mod:`models.values`; the public names are imported from there.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from scipy import special as _sp

from models import _kernel
from models._args import FloatArray, as_float_array, broadcast

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
