"""Paper 003's staleness-versus-crawl cost model and its optimal re-crawl interval.

Paper 003 writes the change *period* ``Delta`` (hours between changes; paper 004's
change rate is its inverse) and crawls a page every ``t = r * Delta`` hours.  With
``C_c`` the cost of one crawl and ``C_s`` the cost of one stale hour, the expected
cost per hour is (Sec. 3.1 of paper 003)::

    C(r) = (1 - (1 - e^{-r}) / r) C_s + C_c / (r Delta)

Setting ``dC/dr = 0`` gives ``e^r = (1 + r) / (1 - C_c / (C_s Delta))`` (Sec. 3.2),
which has a finite positive root only when ``C_c < C_s Delta``; for long periods
``t ~ sqrt(2 Delta C_c / C_s)`` (Sec. 3.4).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from models._args import FloatArray, as_float_array, broadcast
from models._special import phi_inverse

__all__ = [
    "asymptotic_interval",
    "cost_per_hour",
    "optimal_interval",
    "optimal_ratio",
    "stale_fraction",
]

# 1 - (1 - e^{-r})/r = sum_{k>=1} (-1)^{k+1} r^k/(k+1)!; for r < 0.5, 20 terms leave
# a remainder below 0.5^20/21! relative to r/2.
_STALE_SERIES = tuple((-1.0) ** (k + 1) / float(np.prod(np.arange(1, k + 2))) for k in range(1, 21))


def stale_fraction(ratio: npt.ArrayLike) -> FloatArray:
    """Expected stale fraction of a crawl interval ``r`` change periods long.

    Parameters
    ----------
    ratio : array_like
        ``r = t / Delta`` (crawl interval over change period), ``>= 0``; ``inf`` allowed.

    Returns
    -------
    ndarray
        ``1 - (1 - e^{-r}) / r`` (``0`` at ``r = 0``, ``1`` at ``inf``).

    Notes
    -----
    ``1 - E(match)`` of Sec. 3.1 of paper 003; a series is used for ``r < 0.5`` where
    the closed form cancels.
    """
    r = as_float_array("ratio", ratio, allow_inf=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = 1.0 + np.expm1(-r) / r
    out = np.where(np.isinf(r), 1.0, out)
    small = r < 0.5
    if small.any():
        rs = r[small]
        acc = np.full_like(rs, _STALE_SERIES[-1])
        for coef in _STALE_SERIES[-2::-1]:
            acc = acc * rs + coef
        out[small] = acc * rs
    result: FloatArray = np.asarray(out, dtype=np.float64)
    return result


def cost_per_hour(
    ratio: npt.ArrayLike,
    change_period: npt.ArrayLike,
    crawl_cost: npt.ArrayLike,
    stale_cost: npt.ArrayLike,
) -> FloatArray:
    """Expected cost per hour of crawling every ``ratio * change_period`` hours.

    Parameters
    ----------
    ratio : array_like
        ``r > 0``, crawl interval over change period.
    change_period : array_like
        Mean time between changes ``Delta`` (hours in paper 003; any unit, the
        interval comes out in the same unit), ``> 0``.
    crawl_cost : array_like
        ``C_c >= 0``, cost of one crawl.
    stale_cost : array_like
        ``C_s >= 0``, cost of one hour of staleness.

    Returns
    -------
    ndarray
        ``(1 - (1 - e^{-r})/r) C_s + C_c / (r Delta)`` (Sec. 3.1 of paper 003).
    """
    r = as_float_array("ratio", ratio, allow_zero=False)
    d = as_float_array("change_period", change_period, allow_zero=False)
    cc = as_float_array("crawl_cost", crawl_cost)
    cs = as_float_array("stale_cost", stale_cost)
    r, d, cc, cs = broadcast(ratio=r, change_period=d, crawl_cost=cc, stale_cost=cs)
    out: FloatArray = stale_fraction(r) * cs + cc / (r * d)
    return out


def _optimal_ratio_array(
    change_period: npt.ArrayLike, crawl_cost: npt.ArrayLike, stale_cost: npt.ArrayLike
) -> FloatArray:
    d = as_float_array("change_period", change_period, allow_zero=False)
    cc = as_float_array("crawl_cost", crawl_cost)
    cs = as_float_array("stale_cost", stale_cost)
    d, cc, cs = broadcast(change_period=d, crawl_cost=cc, stale_cost=cs)
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(cs > 0, cc / (cs * d), np.inf)
    ok = z < 1
    # e^r = (1+r)/(1-z)  <=>  r - log1p(r) = -log1p(-z)
    c = np.where(ok, -np.log1p(-np.where(ok, z, 0.0)), 0.0)
    r = phi_inverse(c)
    out: FloatArray = np.where(ok, r, np.nan)
    return out


def optimal_ratio(
    change_period: npt.ArrayLike, crawl_cost: npt.ArrayLike, stale_cost: npt.ArrayLike
) -> FloatArray | float | None:
    """Cost-minimising ratio ``r = t / Delta`` of crawl interval to change period.

    Parameters
    ----------
    change_period : array_like
        Mean time between changes ``Delta`` (hours in paper 003; any unit, the
        interval comes out in the same unit), ``> 0``.
    crawl_cost : array_like
        ``C_c >= 0``.
    stale_cost : array_like
        ``C_s >= 0``.

    Returns
    -------
    float, None or ndarray
        The positive root of ``e^r = (1 + r)/(1 - C_c/(C_s Delta))`` (Sec. 3.2 of
        paper 003).  Where no finite optimum exists (``C_c >= C_s Delta``: crawling
        never pays, the cost decreases all the way to ``r = inf``) a scalar call
        returns ``None`` and an array call returns ``NaN`` in that position.

    Notes
    -----
    Solved as ``r - log1p(r) = -log1p(-z)`` with ``z = C_c/(C_s Delta)`` by a
    monotone Newton iteration, to full double precision.  Paper 003 quotes
    ``r ~ 0.3`` for ``C_c = C_s = 1``, ``Delta = 24`` h, and ``r ~ 0.15`` when
    ``C_s = 4 C_c``.
    """
    r = _optimal_ratio_array(change_period, crawl_cost, stale_cost)
    if r.ndim == 0:
        value = float(r)
        return None if np.isnan(value) else value
    return r


def optimal_interval(
    change_period: npt.ArrayLike, crawl_cost: npt.ArrayLike, stale_cost: npt.ArrayLike
) -> FloatArray:
    """Cost-minimising crawl interval in hours, ``r * Delta`` (``inf`` where none).

    Notes
    -----
    Sec. 3.2 of paper 003.  Where ``C_c >= C_s Delta`` the cost keeps falling as the
    interval grows, so the optimum is "never crawl": ``inf``.
    """
    r = _optimal_ratio_array(change_period, crawl_cost, stale_cost)
    d = as_float_array("change_period", change_period, allow_zero=False)
    out: FloatArray = np.where(np.isnan(r), np.inf, r * d)
    return out


def asymptotic_interval(
    change_period: npt.ArrayLike, crawl_cost: npt.ArrayLike, stale_cost: npt.ArrayLike
) -> FloatArray:
    """Large-period asymptote of the optimal interval, ``sqrt(2 Delta C_c / C_s)`` hours.

    Notes
    -----
    Sec. 3.4 of paper 003: with ``z = C_c/(C_s Delta) -> 0``, ``r ~ sqrt(2 z)``, so
    the interval grows like the square root of the change period.
    """
    d = as_float_array("change_period", change_period, allow_zero=False)
    cc = as_float_array("crawl_cost", crawl_cost)
    cs = as_float_array("stale_cost", stale_cost, allow_zero=False)
    d, cc, cs = broadcast(change_period=d, crawl_cost=cc, stale_cost=cs)
    out: FloatArray = np.sqrt(2.0 * d * cc / cs)
    return out
