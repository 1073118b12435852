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

The module is split by concern: the sums and their numerics in
:mod:`models._series`, the parameter conversions in :mod:`models.conversions`, the inverse
``time_to_value`` in :mod:`models.inverse`; every public name (and the private entry points
``models.index`` uses) is still importable from here.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from models._args import FloatArray, as_float_array, as_terms, broadcast
from models._series import _CANCELLATION_RATIO as _CANCELLATION_RATIO
from models._series import _MAX_LOOP_TERMS as _MAX_LOOP_TERMS
from models._series import _SERIES_RTOL as _SERIES_RTOL
from models._series import _UNINFORMATIVE_STEP as _UNINFORMATIVE_STEP
from models._series import TRUNCATION_RTOL as TRUNCATION_RTOL
from models._series import _check_signal_args as _check_signal_args
from models._series import _crawl_value_unchecked as _crawl_value_unchecked
from models._series import _derived as _derived
from models._series import _evaluate as _evaluate
from models._series import _greedy_value as _greedy_value
from models._series import _ncis_sums as _ncis_sums
from models._series import _prepare as _prepare
from models._series import _renewal_sum as _renewal_sum
from models._series import _values_at as _values_at
from models._series import _values_only as _values_only
from models._series import residual as residual
from models.conversions import ChangeParams as ChangeParams
from models.conversions import PrecisionRecallParams as PrecisionRecallParams
from models.conversions import SignalParams as SignalParams
from models.conversions import change_params as change_params
from models.conversions import from_precision_recall as from_precision_recall
from models.conversions import precision_recall as precision_recall
from models.conversions import signal_params as signal_params
from models.inverse import _solve_numpy as _solve_numpy
from models.inverse import _solve_time_to_value as _solve_time_to_value
from models.inverse import _time_to_value_unchecked as _time_to_value_unchecked
from models.inverse import time_to_value as time_to_value

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
