"""Offline fits over a page's whole history (not streamed): the full-data MLE of paper 004
App. E's model, the reference the streaming :class:`~models.estimators.signals.SignalEstimator`
is checked against, and the naive precision and recall it improves on.  Split from
:mod:`models.estimators.signals` (the streaming estimator) by concern."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from . import _numeric as nm
from ._prior import SignalPrior
from .signals import (
    DEFAULT_PRIOR,
    SignalEstimate,
    _estimates_from,
    _scalar_estimate,
)

__all__ = ["fit_signal_mle", "naive_precision_recall"]


def _as_signal_matrix(n_signals: npt.ArrayLike | None, m: int) -> nm.FloatArray:
    if n_signals is None:
        return np.zeros((m, 0))
    arr = np.asarray(n_signals, dtype=np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] != m:
        raise ValueError(f"n_signals must have shape ({m},) or ({m}, S), got {arr.shape}")
    if not np.all(np.isfinite(arr) & (arr >= 0.0)):
        raise ValueError("n_signals must be finite counts >= 0")
    return arr


def fit_signal_mle(
    interval_s: npt.ArrayLike,
    n_signals: npt.ArrayLike | None,
    changed: npt.ArrayLike,
    *,
    weights: npt.ArrayLike | None = None,
    prior: SignalPrior | None = DEFAULT_PRIOR,
) -> SignalEstimate:
    """Full-data MAP/MLE of paper 004 App. E for one page (all intervals kept).

    Maximises ``sum_unchanged -(alpha*tau + kappa.n) + sum_changed log(1 - exp(-(alpha*tau +
    kappa.n)))`` plus the prior's pseudo-intervals, over ``alpha, kappa_s > 0``; ``gamma_s``
    is the signal count over the observed time.  ``prior=None`` gives the plain MLE, which
    is only well defined when both changed and unchanged intervals occur (otherwise the
    estimate runs to the boundary and a tiny or huge finite value is returned).

    Parameters
    ----------
    interval_s : array (M,)
        Interval lengths ``tau_elap``.
    n_signals : array (M,) or (M, S), or None
        Signal counts per interval (and source).
    changed : array (M,) of bool
        Whether each interval ended with a change.
    weights : array (M,), optional
        Observation weights (default 1).
    """
    tau = np.asarray(interval_s, dtype=np.float64)
    if tau.ndim != 1 or not np.all(np.isfinite(tau) & (tau >= 0.0)):
        raise ValueError("interval_s must be a 1-D array of finite values >= 0")
    m = tau.size
    sig = _as_signal_matrix(n_signals, m)
    s = sig.shape[1]
    d = 1 + s
    ch = np.asarray(changed).astype(bool)
    if ch.shape != (m,):
        raise ValueError(f"changed must have shape ({m},), got {ch.shape}")
    wt = np.ones(m) if weights is None else np.asarray(weights, dtype=np.float64)
    if wt.shape != (m,) or not np.all(np.isfinite(wt) & (wt >= 0.0)):
        raise ValueError("weights must be finite values >= 0, one per interval")
    vmat = np.concatenate([tau[:, None], sig], axis=1)
    informative = np.any(vmat > 0.0, axis=1)
    lin = (wt[~ch, None] * vmat[~ch]).sum(axis=0)
    keep = ch & informative
    v = vmat[keep]
    w = wt[keep]
    pr = prior if prior is not None else SignalPrior()
    if prior is not None:
        plin, pent = prior.compiled(s)
        lin = lin + np.array(plin)
        if pent:
            v = np.concatenate([v, np.array([e[:d] for e in pent])])
            w = np.concatenate([w, np.array([e[d] for e in pent])])
    theta0 = np.empty((1, d))
    total_t = float((wt * tau).sum())
    n_changed = float(w.sum())
    theta0[0, 0] = max(n_changed, 1.0) / max(total_t, 1e-300) if total_t > 0 else 1e-5
    theta0[0, 1:] = 1.0
    theta, hess = nm.newton_solve(
        theta0, lin[None, :], v[None], w[None], np.zeros((1, d)), np.zeros((1, d, d)),
        max_iter=200,
    )
    totals = np.concatenate([[total_t], (wt[:, None] * sig).sum(axis=0)])[None, :]
    est = _estimates_from(theta, hess, totals, pr, np.zeros((1, 4)))
    return _scalar_estimate(est, 0, m)


def naive_precision_recall(
    n_signals: npt.ArrayLike, changed: npt.ArrayLike
) -> tuple[nm.FloatArray, nm.FloatArray]:
    """The interval-counting estimator of paper 004 App. E (biased; Fig. 13).

    ``precision = #(intervals with a signal and a change) / #(intervals with a signal)`` and
    ``recall = #(intervals with a signal and a change) / #(intervals with a change)`` (the
    brief's correction of the copy's denominator).  Per source when ``n_signals`` is
    ``(M, S)``.  Degenerate: 0 when a denominator is 0.
    """
    ch = np.asarray(changed).astype(bool)
    sig = _as_signal_matrix(np.asarray(n_signals, dtype=np.float64), ch.size)
    has = sig > 0.0
    both = (has & ch[:, None]).sum(axis=0).astype(np.float64)
    n_sig = has.sum(axis=0).astype(np.float64)
    n_ch = float(ch.sum())
    precision = np.where(n_sig > 0, both / np.maximum(n_sig, 1.0), 0.0)
    recall = both / n_ch if n_ch > 0 else np.zeros_like(both)
    return precision, recall
