"""Small special functions shared by the policy and cost modules.

``phi(x) = x - log(1 + x)`` and its inverse appear twice: the optimal crawl rate
without signals solves ``e^{-x}(1 + x) = 1 - p`` (eq. 5 of paper 004, ``x = Delta/xi``)
and paper 003's optimal interval ratio solves ``e^r = (1 + r)/(1 - z)``; both are
``phi(x) = c``.
"""

from __future__ import annotations

import numpy as np

from models._args import FloatArray

# phi(x) = sum_{k>=2} (-1)^k x^k / k for |x| < 1; for x < 0.1 seventeen terms leave a
# remainder below 0.1^17 * 2/19 < 1e-17 relative to x^2/2.  Above 0.1 the direct
# form loses at most log2(0.1 / phi(0.1)) < 5 bits.
_PHI_SERIES = tuple((-1.0) ** k / k for k in range(2, 19))
_PHI_SERIES_MAX = 0.1


def phi(x: FloatArray) -> FloatArray:
    """``x - log1p(x)`` for ``x >= 0`` with full relative accuracy (series below 0.25)."""
    x = np.asarray(x, dtype=np.float64)
    out: FloatArray = np.atleast_1d(x - np.log1p(x))
    x1 = np.atleast_1d(x)
    small = x1 < _PHI_SERIES_MAX
    if small.any():
        xs = x1[small]
        acc = np.full_like(xs, _PHI_SERIES[-1])
        for coef in _PHI_SERIES[-2::-1]:
            acc = acc * xs + coef
        out[small] = acc * xs * xs
    return out.reshape(x.shape)


def phi_inverse(c: FloatArray, start: FloatArray | None = None) -> FloatArray:
    """Solve ``x - log1p(x) = c`` for ``x >= 0``, elementwise (``c >= 0``, may be inf).

    Newton's method on the convex increasing ``phi``; started at ``sqrt(2c) + c``,
    which is never below the root, it decreases monotonically to it.  An optional
    warm ``start`` below the root is pushed above it by the first step (convexity).
    Stops when every step is below ``2e-15`` relative (a few ulps: rounding of
    ``phi`` near large roots keeps smaller steps from settling).
    """
    shape = np.shape(c)
    c = np.asarray(c, dtype=np.float64).ravel()
    x = np.sqrt(2.0 * c) + c if start is None else np.array(start, dtype=np.float64).ravel()
    x = np.where(np.isfinite(c), x, np.inf)
    active = np.isfinite(c) & (c > 0)
    x = np.where(c == 0, 0.0, x)
    idx = np.flatnonzero(active)
    xa = x[idx]
    ca = c[idx]
    for _ in range(100):
        if not idx.size:
            break
        step = (phi(xa) - ca) * (1.0 + xa) / xa
        xa = xa - step
        moving = np.abs(step) > 2e-15 * xa
        x[idx] = xa
        if not moving.all():
            idx, xa, ca = idx[moving], xa[moving], ca[moving]
    return x.reshape(shape)
