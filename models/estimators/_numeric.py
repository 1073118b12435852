"""Vectorised numerical core shared by the page, batch and full-data estimators.

The negative log-posterior of the App. E model (paper 004) for one page is::

    F(theta) = lin . theta - sum_m w_m log(1 - exp(-theta . v_m)) - b . theta + theta' A theta / 2

with ``theta = (alpha, kappa_1..kappa_S)``, ``lin`` the weighted sums of ``(tau, n_s)`` over
unchanged intervals, ``v_m = (tau, n_1..n_S)`` the changed intervals (or merged
representatives), and ``(b, A)`` an optional quadratic term (a Gaussian prior; zero in the
estimators of this package).  ``F`` is
convex (``-log(1 - e^-x)`` is convex and ``x`` is linear in ``theta``), so Newton's method with
a fraction-to-boundary rule and Armijo backtracking converges from any positive start.

Intervals whose signals were not recorded (an imported history: :class:`Unknown`) add
``f(Delta) = U*Delta - w*log(1 - exp(-T*Delta))`` with ``Delta(theta) = alpha + sum_s
gamma_s*(1 - exp(-kappa_s))``: the App. E likelihood ``exp(-alpha*tau - kappa.n)`` averaged
over Poisson counts ``n_s ~ Poisson(gamma_s*tau)`` (``E[e^{-kappa n}] = exp(-gamma*tau*(1 -
e^{-kappa}))``), i.e. the change model of paper 003 eq. (1) in the page's whole change rate.
``Delta`` is concave in ``kappa``, so with such intervals ``F`` need not be convex; the Hessian
used is its Gauss-Newton part plus the curvature of ``Delta`` where that is positive
(:func:`unknown_terms`), and the gradient is exact, so the fixed point is the mode.
All functions here work on ``N`` independent problems at once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_X_MIN = 1e-150
_X_MAX = 700.0
#: Relative ridge added to the Hessian diagonal so a problem without data stays solvable.
_RIDGE = 1e-12


def entry_coefficients(x: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """For ``x = theta . v`` return ``log(1-e^-x)``, ``1/(e^x-1)`` and ``1/((e^x-1)(1-e^-x))``.

    The last two are the gradient and curvature coefficients of ``log(1 - exp(-x))``.
    ``x`` is clipped to ``[1e-150, 700]``; beyond 700 the terms vanish in float64.
    """
    c1, c2 = grad_coefficients(x)
    log_term = np.log(-np.expm1(-np.clip(x, _X_MIN, _X_MAX)))
    return log_term, c1, c2


def grad_coefficients(x: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``c1 = 1/(e^x - 1)`` and ``c2 = e^x/(e^x - 1)^2 = c1*(1 + c1)`` (``x`` clipped as above).

    Finite for every input, so entries of weight 0 (padding) contribute exactly 0.
    """
    c1: FloatArray = 1.0 / np.expm1(np.clip(x, _X_MIN, _X_MAX))
    c2: FloatArray = c1 * (1.0 + c1)
    return c1, c2


@dataclass(frozen=True, slots=True)
class Unknown:
    """Intervals with signals unknown, per problem: ``gamma (N,S)`` the signal rates (fixed
    in the fit), ``u (N,)`` their unchanged time, ``(w, t) (N,)`` their representative
    changed interval (module docstring)."""

    gamma: FloatArray
    u: FloatArray
    w: FloatArray
    t: FloatArray

    def take(self, rows: npt.NDArray[np.intp]) -> Unknown:
        """The problems ``rows``."""
        return Unknown(self.gamma[rows], self.u[rows], self.w[rows], self.t[rows])


def known_time(totals: FloatArray, unknown: FloatArray) -> FloatArray:
    """Observed time with signals recorded: ``totals[:, 0]`` (all observed time) less the
    unknown block's time ``unknown[:, 0]``, at least 0."""
    out: FloatArray = np.maximum(totals[:, 0] - unknown[:, 0], 0.0)
    return out


def gamma_rates(totals: FloatArray, unknown: FloatArray) -> FloatArray:
    """Signal rates ``(N,S)``: each source's signals over the time with signals recorded
    (under a second counts as a second; none recorded: 0)."""
    t = known_time(totals, unknown)
    out: FloatArray = np.where((t > 0.0)[:, None],
                               totals[:, 1:] / np.maximum(t, 1.0)[:, None], 0.0)
    return out


def unknown_of(totals: FloatArray, unknown: FloatArray) -> Unknown | None:
    """The :class:`Unknown` terms of states' ``totals (N,d)`` and ``unknown (N,4)`` blocks
    (None where no problem has any, or without sources: ``Delta = alpha`` there, and the
    intervals are ordinary ones)."""
    if totals.shape[1] < 2 or not np.any(unknown[:, 0] > 0.0):
        return None
    return Unknown(gamma_rates(totals, unknown), unknown[:, 1].copy(), unknown[:, 2].copy(),
                   unknown[:, 3].copy())


def change_rate(theta: FloatArray, gamma: FloatArray) -> FloatArray:
    """``Delta = alpha + sum_s gamma_s*(1 - exp(-kappa_s))`` (paper 004 Sec. 3, :func:`derive`)."""
    out: FloatArray = theta[:, 0] + np.sum(gamma * -np.expm1(-theta[:, 1:]), axis=1)
    return out


def unknown_terms(theta: FloatArray, unk: Unknown) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``f(Delta(theta))`` (module docstring), its gradient ``(N,d)`` and the Hessian used
    ``(N,d,d)``: ``f''*J J' + max(-f', 0)*diag(0, gamma*e^{-kappa})`` with ``J`` the gradient
    of ``Delta`` (its other curvature term, negative, left out: a Gauss-Newton step)."""
    e = np.exp(-theta[:, 1:])
    delta = theta[:, 0] + np.sum(unk.gamma * (1.0 - e), axis=1)
    x = np.clip(unk.t * delta, _X_MIN, _X_MAX)
    c1, c2 = grad_coefficients(x)
    f = unk.u * delta - unk.w * np.log(-np.expm1(-x))
    f1 = unk.u - unk.w * unk.t * c1
    f2 = unk.w * unk.t * unk.t * c2
    jac = np.concatenate([np.ones((theta.shape[0], 1)), unk.gamma * e], axis=1)
    grad: FloatArray = f1[:, None] * jac
    hess: FloatArray = f2[:, None, None] * jac[:, :, None] * jac[:, None, :]
    curv = np.maximum(-f1, 0.0)[:, None] * unk.gamma * e
    idx = np.arange(1, theta.shape[1])
    hess[:, idx, idx] += curv
    out: FloatArray = f
    return out, grad, hess


def objective(
    theta: FloatArray, lin: FloatArray, v: FloatArray, w: FloatArray, b: FloatArray, a: FloatArray,
    unk: Unknown | None = None,
) -> FloatArray:
    """``F(theta)`` for each of the ``N`` problems (shapes ``(N,d)``, ``(N,M,d)``, ``(N,M)``),
    with the :class:`Unknown` terms if given."""
    x = np.einsum("nmd,nd->nm", v, theta)
    log_term = np.log(-np.expm1(-np.clip(x, _X_MIN, _X_MAX)))
    quad = 0.5 * np.einsum("nd,nde,ne->n", theta, a, theta)
    out: FloatArray = (
        np.einsum("nd,nd->n", lin - b, theta) - np.sum(w * log_term, axis=1) + quad
    )
    if unk is not None:
        out = out + unknown_terms(theta, unk)[0]
    return out


def gradient_hessian(
    theta: FloatArray, lin: FloatArray, v: FloatArray, w: FloatArray, b: FloatArray, a: FloatArray,
    unk: Unknown | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Gradient ``(N,d)`` and Hessian ``(N,d,d)`` of :func:`objective` (with :class:`Unknown`
    terms: the Hessian of :func:`unknown_terms`)."""
    x = np.einsum("nmd,nd->nm", v, theta)
    c1, c2 = grad_coefficients(x)
    c1 *= w
    c2 *= w
    grad: FloatArray = lin - b + np.einsum("nde,ne->nd", a, theta) - np.einsum("nm,nmd->nd", c1, v)
    # sum_m c2_m v_m v_m' as one stacked matrix product (10x a three-operand einsum)
    hess: FloatArray = a + np.matmul(np.swapaxes(v * c2[:, :, None], 1, 2), v)
    if unk is not None:
        _, ug, uh = unknown_terms(theta, unk)
        grad = grad + ug
        hess = hess + uh
    return grad, hess


def solve_spd(hess: FloatArray, grad: FloatArray) -> FloatArray:
    """Solve ``hess @ step = grad`` for a stack of small symmetric positive matrices.

    Closed forms for ``d = 1, 2``; ``numpy.linalg.solve`` otherwise.  A relative ridge of
    1e-12 on the diagonal keeps singular (data-free) problems finite.
    """
    d = grad.shape[1]
    diag = np.einsum("ndd->nd", hess)
    ridge = _RIDGE * np.maximum(diag, 1e-300)
    if d == 1:
        out1: FloatArray = grad / (hess[:, :, 0] + ridge)
        return out1
    if d == 2:
        h00 = hess[:, 0, 0] + ridge[:, 0]
        h11 = hess[:, 1, 1] + ridge[:, 1]
        h01 = hess[:, 0, 1]
        det = h00 * h11 - h01 * h01
        det = np.where(det > 0.0, det, 1e-300)
        out2: FloatArray = np.empty_like(grad)
        out2[:, 0] = (h11 * grad[:, 0] - h01 * grad[:, 1]) / det
        out2[:, 1] = (h00 * grad[:, 1] - h01 * grad[:, 0]) / det
        return out2
    h = hess + ridge[:, :, None] * np.eye(d)[None, :, :]
    out: FloatArray = np.linalg.solve(h, grad[:, :, None])[:, :, 0]
    return out


def boundary_fraction(theta: FloatArray, step: FloatArray) -> FloatArray:
    """Largest ``t <= 1`` keeping ``theta - t*step >= theta/10`` (fraction to boundary)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = np.where(step > 0.0, 0.9 * theta / step, np.inf)
    out: FloatArray = np.minimum(1.0, np.min(ratio, axis=1))
    return out


def newton_step(
    theta: FloatArray, lin: FloatArray, v: FloatArray, w: FloatArray, b: FloatArray, a: FloatArray,
    unk: Unknown | None = None,
) -> FloatArray:
    """One Newton step with the fraction-to-boundary rule, no line search (streaming update)."""
    grad, hess = gradient_hessian(theta, lin, v, w, b, a, unk)
    step = solve_spd(hess, grad)
    t = boundary_fraction(theta, step)
    out: FloatArray = theta - t[:, None] * step
    return out


def newton_solve(
    theta0: FloatArray,
    lin: FloatArray,
    v: FloatArray,
    w: FloatArray,
    b: FloatArray,
    a: FloatArray,
    *,
    max_iter: int = 100,
    rtol: float = 1e-10,
    unk: Unknown | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Minimise :func:`objective` for every problem; return ``(theta, hessian at theta)``.

    Damped Newton: fraction to boundary, then Armijo backtracking on ``F``; stops when every
    coordinate's step is below ``rtol`` relative to the coordinate.
    """
    theta = np.array(theta0, dtype=np.float64, copy=True)
    theta = np.where(theta > 0.0, theta, 1e-12)
    f_cur = objective(theta, lin, v, w, b, a, unk)
    # the problems still running, and their data: shrunk only when some finish (each
    # problem's arithmetic is its own, so this is the same computation as indexing anew)
    idx = np.arange(theta.shape[0])
    li, vv, ww, bb, aa, uu = lin, v, w, b, a, unk
    th, f0 = theta, f_cur
    for _ in range(max_iter):
        if idx.size == 0:
            break
        grad, hess = gradient_hessian(th, li, vv, ww, bb, aa, uu)
        step = solve_spd(hess, grad)
        t = boundary_fraction(th, step)
        slope = np.einsum("nd,nd->n", grad, step)
        # Armijo backtracking: the first try (t from the boundary rule) is usually accepted
        cand = th - t[:, None] * step
        fc = objective(cand, li, vv, ww, bb, aa, uu)
        accepted = fc <= f0 - 1e-4 * t * slope + 1e-13 * np.abs(f0)
        new_th = np.where(accepted[:, None], cand, th)
        new_f = np.where(accepted, fc, f0)
        for _ in range(59):
            if accepted.all():
                break
            t[~accepted] *= 0.5
            sub = np.flatnonzero(~accepted)
            cand = th[sub] - t[sub, None] * step[sub]
            fc = objective(cand, li[sub], vv[sub], ww[sub], bb[sub], aa[sub],
                           None if uu is None else uu.take(sub))
            ok = fc <= f0[sub] - 1e-4 * t[sub] * slope[sub] + 1e-13 * np.abs(f0[sub])
            new_th[sub[ok]] = cand[ok]
            new_f[sub[ok]] = fc[ok]
            accepted[sub[ok]] = True
        moved = np.max(np.abs(new_th - th) / np.maximum(th, 1e-300), axis=1)
        theta[idx] = new_th  # (th may be a view of theta: measured first)
        f_cur[idx] = new_f
        keep = ~((moved <= rtol) | ~accepted)
        if keep.all():
            th, f0 = new_th, new_f
            continue
        idx = idx[keep]
        th, f0 = new_th[keep], new_f[keep]
        li, vv, ww, bb, aa = li[keep], vv[keep], ww[keep], bb[keep], aa[keep]
        uu = None if uu is None else uu.take(np.flatnonzero(keep))
    _, hess = gradient_hessian(theta, lin, v, w, b, a, unk)
    return theta, hess


def covariance(hess: FloatArray) -> FloatArray:
    """Inverse of each Hessian (the Laplace posterior covariance), symmetrised."""
    d = hess.shape[1]
    diag = np.einsum("ndd->nd", hess)
    h = hess + (_RIDGE * np.maximum(diag, 1e-300))[:, :, None] * np.eye(d)[None, :, :]
    cov: FloatArray = np.linalg.inv(h)
    return 0.5 * (cov + np.swapaxes(cov, 1, 2))


def derive(alpha: FloatArray, kappa: FloatArray, gamma: FloatArray) -> dict[str, FloatArray]:
    """Model quantities from ``alpha (N,)``, ``kappa (N,S)``, ``gamma (N,S)`` (paper 004 Sec. 3).

    Per source ``s``: ``precision_s = 1 - exp(-kappa_s)``, signalled change rate
    ``a_s = recall_s*Delta = gamma_s*precision_s``, false-signal rate
    ``nu_s = gamma_s*exp(-kappa_s)``, ``beta_s = kappa_s/alpha``.  Sources are taken to signal
    disjoint sets of changes (the assumption under which the App. E likelihood with several
    sources is exact), so ``Delta = alpha + sum_s a_s`` and ``recall_s = a_s/Delta``.
    """
    precision = -np.expm1(-kappa)
    signalled = gamma * precision
    nu = gamma * np.exp(-kappa)
    delta = alpha + np.sum(signalled, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        recall = np.where(delta[:, None] > 0.0, signalled / delta[:, None], 0.0)
        beta = np.where(alpha[:, None] > 0.0, kappa / alpha[:, None], np.inf)
    return {
        "change_rate": delta,
        "precision": precision,
        "recall": recall,
        "nu": nu,
        "beta": beta,
    }



def derived_standard_errors(
    alpha: FloatArray,
    kappa: FloatArray,
    gamma: FloatArray,
    cov: FloatArray,
    var_gamma: FloatArray,
) -> dict[str, FloatArray]:
    """Delta-method standard errors of :func:`derive`'s outputs.

    ``cov`` is the ``(N,d,d)`` covariance of ``(alpha, kappa)``; ``var_gamma (N,S)`` the
    variances of the (independent) signal rates.  Jacobians by central differences with
    steps of 1e-6 of each parameter's magnitude or standard deviation, whichever is larger.
    """
    n, s = kappa.shape
    d = 1 + s
    params = np.concatenate([alpha[:, None], kappa, gamma], axis=1)
    full_cov = np.zeros((n, d + s, d + s))
    full_cov[:, :d, :d] = cov
    for j in range(s):
        full_cov[:, d + j, d + j] = var_gamma[:, j]
    base = derive(alpha, kappa, gamma)
    jac: dict[str, list[FloatArray]] = {k: [] for k in base}
    # steps relative to the parameter or, when larger, its standard deviation: a parameter
    # at 0 (a source never heard from: gamma = 0) took a step of 1e-18 before, and the
    # quotient was rounding noise (1e-3 of a recall's standard error from 1 ulp of input)
    scale = np.maximum(np.abs(params), np.sqrt(np.maximum(np.einsum("npp->np", full_cov), 0.0)))
    for p in range(d + s):
        h = 1e-6 * np.maximum(scale[:, p], 1e-12)
        up = params.copy()
        dn = params.copy()
        up[:, p] += h
        dn[:, p] = np.maximum(dn[:, p] - h, 0.0)
        width = up[:, p] - dn[:, p]
        du = derive(up[:, 0], up[:, 1:d], up[:, d:])
        dd = derive(dn[:, 0], dn[:, 1:d], dn[:, d:])
        for k in base:
            diff = du[k] - dd[k]
            diff = np.where(np.isfinite(diff), diff, 0.0)
            shape = (n,) if diff.ndim == 1 else (n, 1)
            jac[k].append(diff / width.reshape(shape))
    out: dict[str, FloatArray] = {}
    for k, cols in jac.items():
        jm = np.stack(cols, axis=-1)  # (N, P) or (N, S, P)
        if jm.ndim == 2:
            var = np.einsum("np,npq,nq->n", jm, full_cov, jm)
        else:
            var = np.einsum("nsp,npq,nsq->ns", jm, full_cov, jm)
        out[k] = np.sqrt(np.maximum(var, 0.0))
    return out


def merge_representative(
    alpha: FloatArray, w0: FloatArray, t0: FloatArray, w1: FloatArray, t1: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """One changed interval ``(w, T)`` standing for two, ``(w0, t0)`` and ``(w1, t1)``.

    The log-likelihood of changed intervals without signals is ``w log(1 - exp(-alpha T))``
    (paper 003 eq. 1).  The merged term has the same first and second derivative in
    ``alpha`` at ``alpha`` as the sum of the two: with ``G = sum w t c1(alpha t)`` and
    ``H = sum w t^2 c2(alpha t)`` (``c1``, ``c2`` of :func:`grad_coefficients`), the merged
    ``x = alpha T`` solves ``x/(1 - exp(-x)) = alpha H/G`` (each term's ratio is that
    function of its own ``x``, so the sum's lies between them and the root exists) and
    ``w = G/(T c1(x))``.  Hence: intervals of one length merge exactly (``w0 + w1`` at that
    length); intervals with ``alpha t << 1``, whose log-likelihood is ``log(alpha) +
    log(t)``, merge with the exact count ``w0 + w1`` whatever their lengths; the term is
    exact at ``alpha`` to second order and keeps the right shape elsewhere.  ``w0 = 0``
    (nothing merged yet) gives ``(w1, t1)``.
    """
    a = np.asarray(alpha, dtype=np.float64)
    c1a, c2a = grad_coefficients(a * t0)
    c1b, c2b = grad_coefficients(a * t1)
    g = w0 * t0 * c1a + w1 * t1 * c1b
    h = w0 * t0 * t0 * c2a + w1 * t1 * t1 * c2b
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.where(g > 0.0, a * h / g, np.inf)
        # phi(x) = x/(1 - e^-x) lies in [max(1, x), 1 + x]: the root is in [r - 1, r]
        lo = np.maximum(r - 1.0, 0.0)
        hi = np.maximum(r, 1e-300)
        ok = np.isfinite(r) & (r < _X_MAX) & (a > 0.0)
        lo = np.where(ok, lo, 0.0)
        hi = np.where(ok, hi, 1.0)
        for _ in range(64):
            mid = 0.5 * (lo + hi)
            phi = np.where(mid > 0.0, mid / -np.expm1(-np.maximum(mid, 1e-300)), 1.0)
            up = phi < r
            lo = np.where(up, mid, lo)
            hi = np.where(up, hi, mid)
        x = np.maximum(0.5 * (lo + hi), _X_MIN)
        t_new = x / np.where(a > 0.0, a, 1.0)
        w_new = g / (t_new * grad_coefficients(x)[0])
    # both terms past float64's reach (alpha t > 700: changed for certain, no information),
    # or no rate yet: the count and the weighted geometric mean of the lengths
    wt = w0 + w1
    safe = np.where(wt > 0.0, wt, 1.0)
    geo = np.exp((w0 * np.log(np.maximum(t0, 1e-300)) + w1 * np.log(np.maximum(t1, 1e-300)))
                 / safe)
    fallback = ~ok | ~np.isfinite(w_new) | ~np.isfinite(t_new)
    w_out: FloatArray = np.where(w0 > 0.0, np.where(fallback, wt, w_new), w1)
    t_out: FloatArray = np.where(w0 > 0.0, np.where(fallback, geo, t_new), t1)
    return w_out, t_out

