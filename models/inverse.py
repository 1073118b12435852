"""The inverse of the crawl value: the time ``tau`` at which ``V(tau)`` reaches a level.

Newton's method bracketed by bisection on the sums of Theorem 1 (``V`` is increasing,
``V'(iota) = mu alpha e^{-alpha iota} psi(iota) > 0``); see :func:`time_to_value`.
Re-exported by :mod:`models.values`.

References
----------
R. Busa-Fekete, J. Zimmert, A. György et al., "A Scalable Crawling Algorithm Utilizing
Noisy Change-Indicating Signals" (paper 004): Theorem 1, Lemma 4.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from models import _kernel
from models._args import FloatArray, as_float_array, broadcast
from models._series import (
    _CANCELLATION_RATIO,
    _MAX_LOOP_TERMS,
    _SERIES_RTOL,
    _UNINFORMATIVE_STEP,
    TRUNCATION_RTOL,
    _check_signal_args,
    _derived,
    _evaluate,
)

__all__ = ["time_to_value"]


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
