"""Several ping sources pooled into the crawl value's ``(alpha, beta, gamma)``.

Each source ``s`` of a page sends pings as Poisson(``gamma_s``), each false with
probability ``nu_s/gamma_s = exp(-alpha beta_s)`` (paper 004 Sec. 3 per source; the
several-source model is derived in :mod:`models.sim.variants`).  A ping of ``s`` moves the
page's origin by its own ``beta_s`` (exact posterior, eq. 1 with one factor per source).
The crawl value needs one ``(alpha, beta, gamma)``: we use the **merged source**,
``gamma = sum_s gamma_s``, ``nu = sum_s nu_s`` and ``beta = ln(gamma/nu)/alpha`` - Sec. 3
of paper 004 applied to the union of the sources' pings, which is itself a valid
one-source model of the same page (the merge of independent Poisson processes is Poisson
with the summed rates; each merged ping is false with probability ``nu/gamma``).  So
Theorem 1 / Lemma 4 give the exact value of a scheduler that treats every future ping
alike, and the value is exact when every active ``beta_s`` is equal.

The alternative the service used before (``beta = sum_s gamma_s beta_s / gamma``, the
gamma-weighted mean) keeps the drift of ``tau_eff`` but describes no process: its implied
false rate ``gamma exp(-alpha beta)`` is below the true ``nu`` (log-sum inequality:
``sum_s gamma_s ln(gamma_s/nu_s) >= gamma ln(gamma/nu)``), so it overstates how much a
future ping tells.  ``recrawl experiments sources`` measured the merged shape against the
exact several-source value (within noise, docs/results.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["pooled_beta", "pooled_params"]

FloatArray = npt.NDArray[np.float64]


def pooled_params(alpha: npt.ArrayLike, beta: npt.ArrayLike,
                  gamma: npt.ArrayLike) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Merge ``S`` sources into one: ``(alpha, beta_bar, gamma_bar)`` per page.

    ``alpha``: shape ``(m,)``; ``beta``, ``gamma``: shape ``(m, S)``.
    ``gamma_bar = sum_s gamma_s``, ``nu = sum_s gamma_s e^{-alpha beta_s}`` (the false
    rates) and ``beta_bar = ln(gamma_bar/nu)/alpha`` (module docstring; ``inf`` if no
    source sends false pings, ``0`` without signals).  ``e^{-alpha beta_bar}`` is the
    pings' mean false probability, so one merged ping weighs as the average ping; when
    every active source has the same ``beta_s``, ``beta_bar`` is that value exactly.
    """
    a = np.asarray(alpha, dtype=np.float64)
    b = np.asarray(beta, dtype=np.float64)
    g = np.asarray(gamma, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        nu_s = np.where(g > 0.0, g * np.exp(-a[:, None] * b), 0.0)
    nu_s = np.where(np.isnan(nu_s), 0.0, nu_s)  # alpha = 0, beta = inf
    gbar = g.sum(axis=1)
    nu = nu_s.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        bbar = np.log(gbar / nu) / a
    bbar = np.where(gbar == nu, 0.0, bbar)  # no signal is informative
    bbar = np.where((gbar > nu) & ((nu == 0.0) | (a == 0.0)), np.inf, bbar)
    # when the active sources share one beta (one source, in particular) it is beta_bar
    # exactly; take it as is rather than through the rounding of exp and log
    active = g > 0.0
    lo = np.where(active, b, np.inf).min(axis=1)
    hi = np.where(active, b, -np.inf).max(axis=1)
    bbar = np.where(active.any(axis=1) & (lo == hi), lo, bbar)
    return a.copy(), bbar, gbar


def pooled_beta(alpha_per_s: float, beta_s: Sequence[float],
                gamma_per_s: Sequence[float]) -> float:
    """``beta_bar`` of one page: :func:`pooled_params`'s formulas and edge cases in scalar
    arithmetic (a page's outcome or ping calls it; numpy on arrays of one row took 134 us
    a call under cProfile, 17.5% of the outcomes' time: docs/benchmarks.md); without any
    signal (every
    ``gamma_s = 0``) the mean of the ``beta_s`` (they then only move the origin of pings
    that do arrive).  ``tests/unit/test_decision_core.py`` checks it against
    :func:`pooled_params`."""
    if not any(g > 0.0 for g in gamma_per_s):
        return sum(beta_s) / len(beta_s) if beta_s else 0.0
    a = float(alpha_per_s)
    active = [float(b) for b, g in zip(beta_s, gamma_per_s, strict=True) if g > 0.0]
    if min(active) == max(active):  # one source, or the active sources share one beta
        return active[0]
    gbar = 0.0
    nu = 0.0
    for b, g in zip(beta_s, gamma_per_s, strict=True):
        gbar += g
        if g > 0.0:
            x = -a * b
            if math.isnan(x):  # alpha = 0, beta = inf: no false pings of this source
                continue
            try:
                nu += g * math.exp(x)
            except OverflowError:
                nu = math.inf
    if gbar == nu:  # no signal is informative
        return 0.0
    if gbar > nu and (nu == 0.0 or a == 0.0):
        return math.inf
    ratio = gbar / nu
    if ratio > 0.0:
        return math.log(ratio) / a
    return -math.inf / a if ratio == 0.0 else math.nan
