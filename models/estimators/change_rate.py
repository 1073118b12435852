"""Change rate of a page without signals (paper 003 Sec. 4).

* :func:`cho_garcia_molina_mle` - the irregular-interval MLE, eq. (2) of paper 003:
  ``sum_changed t/(exp(rate*t) - 1) = sum_unchanged t``, optionally with the Grimes-Ford
  pseudo-datapoints (Sec. 4.4), on all data;
* :class:`ChangeRateEstimator` - the same estimate in streaming form over a bounded state
  (the zero-source case of :class:`~models.estimators.signals.SignalEstimator`);
* :func:`naive_change_rate` - changes / time (Sec. 4.2), biased under censoring;
* :func:`fit_pseudo_datapoints` - the two pseudo-datapoints fitted to a corpus of rates;
* :func:`conservative_change_rate` - an upper quantile of the rate, for a more conservative
  crawl interval while the estimate converges (Sec. 5.3 and 6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from . import _numeric as nm
from ._prior import GRIMES_FORD, PseudoDatapoints, SignalPrior
from .signals import CrawlInterval, SignalEstimator, SignalState

__all__ = [
    "GRIMES_FORD",
    "ChangeRateEstimate",
    "ChangeRateEstimator",
    "cho_garcia_molina_mle",
    "conservative_change_rate",
    "fit_pseudo_datapoints",
    "naive_change_rate",
    "pseudo_datapoint_log_density",
]

def _clean(name: str, values: nm.FloatArray | list[float] | tuple[float, ...]) -> nm.FloatArray:
    arr = np.asarray(values, dtype=np.float64).ravel()
    if not np.all(np.isfinite(arr) & (arr >= 0.0)):
        raise ValueError(f"{name} must contain finite values >= 0")
    return arr


def cho_garcia_molina_mle(
    changed_interval_s: nm.FloatArray | list[float] | tuple[float, ...],
    unchanged_interval_s: nm.FloatArray | list[float] | tuple[float, ...],
    *,
    pseudo: PseudoDatapoints | None = GRIMES_FORD,
) -> float:
    """Change rate (per second) solving eq. (2) of paper 003 (Cho and Garcia-Molina).

    Solves ``sum_l t_c(l)/(exp(rate*t_c(l)) - 1) = sum_k t_u(k)`` for ``rate`` with the
    pseudo-datapoints (paper 003 Sec. 4.4) added to the two sides; scale-free points
    (:data:`GRIMES_FORD`, the default) are scaled by the mean of the given intervals
    (:meth:`PseudoDatapoints.scale_for`), as the streaming estimator scales them.

    Degenerate data (``pseudo=None`` only), as paper 003 Sec. 4.3 recommends: no change seen
    gives ``1/sum(all intervals)`` (period = the total time observed); changes in every
    interval give ``1/min(intervals)``; no data at all gives ``0.0``.
    """
    tc = _clean("changed_interval_s", changed_interval_s)
    tu = _clean("unchanged_interval_s", unchanged_interval_s)
    n_obs = int(np.count_nonzero(tc > 0.0) + np.count_nonzero(tu > 0.0))
    scale = 1.0 if pseudo is None else pseudo.scale_for(float(tc.sum() + tu.sum()), n_obs)
    tc = tc[tc > 0.0]
    wc = np.ones(tc.size)
    su = float(tu.sum())
    if pseudo is not None and pseudo.weight > 0.0:
        tc = np.append(tc, scale * pseudo.changed_interval_s)
        wc = np.append(wc, pseudo.weight)
        su += pseudo.weight * scale * pseudo.unchanged_interval_s
    if tc.size == 0:
        return 1.0 / su if su > 0.0 else 0.0
    if su <= 0.0:
        return 1.0 / float(tc.min())

    def excess(log_rate: float) -> float:
        x = np.exp(log_rate) * tc
        _, c1, _ = nm.entry_coefficients(x)
        return float(np.sum(wc * tc * c1)) - su

    # the left side decreases from sum(w)/rate-ish to 0: bracket the root in log-rate.
    lo = math.log(1e-3 / (su + float(tc.sum())))
    hi = math.log(50.0 * float(wc.sum()) / float(tc.min()) + 1.0 / su)
    while excess(lo) < 0.0:
        lo -= 5.0
    while excess(hi) > 0.0:
        hi += 5.0
    return math.exp(optimize.brentq(excess, lo, hi, xtol=1e-14, rtol=1e-14))


def naive_change_rate(
    n_changes: nm.FloatArray | float, total_time_s: nm.FloatArray | float
) -> nm.FloatArray:
    """Changes seen per unit time (paper 003 Sec. 4.2), ``0`` where no time was observed."""
    n = np.asarray(n_changes, dtype=np.float64)
    t = np.asarray(total_time_s, dtype=np.float64)
    if not np.all(np.isfinite(n) & (n >= 0.0)):
        raise ValueError("n_changes must be finite counts >= 0")
    if not np.all(np.isfinite(t) & (t >= 0.0)):
        raise ValueError("total_time_s must be finite values >= 0")
    out: nm.FloatArray = np.where(t > 0.0, n / np.where(t > 0.0, t, 1.0), 0.0)
    return out


def pseudo_datapoint_log_density(
    change_rate_per_s: nm.FloatArray, pseudo: PseudoDatapoints
) -> nm.FloatArray:
    """Log density of ``log(rate)`` under the pseudo-datapoints' normalised likelihood.

    The two points' likelihood ``L(rate) = (1 - exp(-rate*t_c)) * exp(-rate*t_u)`` read as a
    density of ``u = log(rate)`` integrates to ``ln(1 + t_c/t_u)`` (a Frullani integral), so
    ``log p(u) = log L(e^u) - log ln(1 + t_c/t_u)``.
    """
    r = np.asarray(change_rate_per_s, dtype=np.float64)
    tc, tu = pseudo.changed_interval_s, pseudo.unchanged_interval_s
    log_l = np.log(-np.expm1(-r * tc)) - r * tu
    out: nm.FloatArray = log_l - math.log(math.log1p(tc / tu))
    return out


def fit_pseudo_datapoints(
    change_rate_per_s: nm.FloatArray | list[float],
    *,
    initial: PseudoDatapoints = GRIMES_FORD,
) -> PseudoDatapoints:
    """Fit the two Grimes-Ford pseudo-datapoints to a corpus of estimated change rates.

    Paper 003 Sec. 4.4 chooses "a change observed after 1 hour and no change observed after
    57 hours" as "the best match ... to the prior likelihood observed in a sample of 10,000
    web pages".  We read "best match" as maximum likelihood: the pseudo-likelihood, normalised
    as a density of ``log(rate)`` (:func:`pseudo_datapoint_log_density`), is fitted to the
    corpus' log-rates over ``(t_c, t_u)``.

    Notes
    -----
    ``t_u`` sets the location (the density peaks near ``rate = 1/t_u`` when ``t_c << t_u``)
    and ``t_c`` the width; a narrow corpus (``t_c << t_u``) pins ``t_c`` only weakly.
    Rates ``<= 0`` or non-finite raise ``ValueError``.
    """
    r = np.asarray(change_rate_per_s, dtype=np.float64).ravel()
    if r.size < 2 or not np.all(np.isfinite(r) & (r > 0.0)):
        raise ValueError("change_rate_per_s must hold at least 2 finite rates > 0")

    def nll(p: nm.FloatArray) -> float:
        tc, tu = math.exp(p[0]), math.exp(p[1])
        log_l = np.log(-np.expm1(-r * tc)) - r * tu
        return -float(np.mean(log_l)) + math.log(math.log1p(tc / tu))

    scale = 1.0 / float(np.exp(np.mean(np.log(r))))
    starts = [
        (math.log(initial.changed_interval_s), math.log(initial.unchanged_interval_s)),
        (math.log(0.05 * scale), math.log(scale)),
        (math.log(scale), math.log(scale)),
        (math.log(10.0 * scale), math.log(0.1 * scale)),
    ]
    best: tuple[float, nm.FloatArray] | None = None
    for st in starts:
        res = optimize.minimize(nll, np.array(st), method="Nelder-Mead",
                                options={"xatol": 1e-8, "fatol": 1e-12, "maxiter": 4000})
        if best is None or res.fun < best[0]:
            best = (float(res.fun), np.asarray(res.x, dtype=np.float64))
    assert best is not None
    return PseudoDatapoints(math.exp(best[1][0]), math.exp(best[1][1]), initial.weight)


def conservative_change_rate(
    change_rate_per_s: nm.FloatArray | float,
    change_rate_se_per_s: nm.FloatArray | float,
    quantile: float = 0.9,
) -> nm.FloatArray:
    """Upper ``quantile`` of the change rate under a log-normal posterior approximation.

    ``rate * exp(z_q * se/rate)``: with the delta method ``se(log rate) = se/rate``.  Crawling
    at this rate gives the shorter, more conservative interval paper 003 (Sec. 5.3, 6)
    suggests while the estimate converges, bounding the risk of very stale pages; it tends
    to the estimate as ``se -> 0``.  A rate of 0 stays 0.
    """
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
    r = np.asarray(change_rate_per_s, dtype=np.float64)
    se = np.asarray(change_rate_se_per_s, dtype=np.float64)
    if not np.all(np.isfinite(r) & (r >= 0.0)):
        raise ValueError("change_rate_per_s must be finite values >= 0")
    if not np.all(se >= 0.0):
        raise ValueError("change_rate_se_per_s must be values >= 0")
    z = float(special.ndtri(quantile))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rel = np.where(r > 0.0, se / np.where(r > 0.0, r, 1.0), 0.0)
        out: nm.FloatArray = np.where(r > 0.0, r * np.exp(np.minimum(z * rel, 700.0)), 0.0)
    return out


@dataclass(frozen=True, slots=True)
class ChangeRateEstimate:
    """Change rate with its standard error (Laplace posterior of the MAP)."""

    change_rate_per_s: float
    change_rate_se_per_s: float
    n_intervals: int
    observed_time_s: float

    @property
    def change_period_s(self) -> float:
        """``1/rate`` (paper 003's Delta), ``inf`` for a rate of 0."""
        return 1.0 / self.change_rate_per_s if self.change_rate_per_s > 0.0 else math.inf


class ChangeRateEstimator:
    """Streaming Cho and Garcia-Molina MLE from Grimes-Ford pseudo-datapoints (paper 003).

    The MAP with the pseudo-datapoints solves eq. (2) of paper 003 on the kept data; the
    state is a :class:`~models.estimators.signals.SignalState` without sources (at most 108
    bytes serialised): exact sums over unchanged intervals, the last ``ring_capacity``
    changed intervals exactly, older ones as a quadratic summary.

    Parameters
    ----------
    pseudo
        The two pseudo-datapoints (default :data:`GRIMES_FORD`: 1 h changed, 57 h unchanged
        at a daily crawl interval, scaled with the page's mean interval).
    half_life_s
        Exponential forgetting half-life in crawl time (``inf``: none).
    ring_capacity
        Changed intervals kept exactly (default 8).
    """

    def __init__(
        self,
        pseudo: PseudoDatapoints | None = None,
        *,
        half_life_s: float = math.inf,
        ring_capacity: int | None = None,
    ) -> None:
        self.pseudo = pseudo if pseudo is not None else GRIMES_FORD
        self._inner = SignalEstimator(
            0,
            prior=SignalPrior(self.pseudo),
            half_life_s=half_life_s,
            ring_capacity=ring_capacity,
        )

    @property
    def signal_estimator(self) -> SignalEstimator:
        """The zero-source :class:`SignalEstimator` doing the work (for batch functions)."""
        return self._inner

    def init(self) -> SignalState:
        """State of a page never crawled."""
        return self._inner.init()

    def update(self, state: SignalState, obs: CrawlInterval) -> SignalState:
        """Add one crawl interval (``obs.n_signals`` must be ``()``)."""
        return self._inner.update(state, obs)

    def result(self, state: SignalState) -> ChangeRateEstimate:
        """Rate solving eq. (2) with the pseudo-datapoints, and its standard error."""
        r = self._inner.result(state)
        return ChangeRateEstimate(
            r.change_rate_per_s, r.change_rate_se_per_s, r.n_intervals, r.observed_time_s
        )
