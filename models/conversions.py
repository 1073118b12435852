"""Conversions between the parameterisations of a page with noisy change signals.

``(Delta, lam, nu)`` (change rate, recall, false-signal rate), the derived ``(alpha, beta,
gamma)`` of Sec. 3 of Busa-Fekete et al. (paper 004) and precision/recall; see the docstring
of :mod:`models.values` for the definitions.  Re-exported by :mod:`models.values`.

References
----------
R. Busa-Fekete, J. Zimmert, A. György et al., "A Scalable Crawling Algorithm Utilizing
Noisy Change-Indicating Signals" (paper 004): Sec. 3.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from models._args import FloatArray, as_float_array, broadcast
from models._series import _check_signal_args, _derived

__all__ = [
    "ChangeParams",
    "PrecisionRecallParams",
    "SignalParams",
    "change_params",
    "from_precision_recall",
    "precision_recall",
    "signal_params",
]


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


