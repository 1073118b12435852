"""Per-host pooling of ping-source quality, used as the prior of pages with little data.

Each page's :class:`~models.estimators.signals.SignalEstimator` estimates its own
``(alpha, kappa_s)``, one ``kappa_s`` (hence ``beta_s``) per source, so ``tau_eff`` can add one
``beta_s*n_s`` per source.  A young page has little data; its host's other pages say more.
:class:`HostPool` keeps a small running summary of the host's page estimates (geometric mean
of ``alpha``, mean precision per source, each page weighted by how much data it has), and
:meth:`HostPoolEstimate.prior` turns it into a :class:`SignalPrior` (pseudo-observations
centred on the pool, worth ``strength`` intervals) to pass to ``SignalEstimator.result``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ._prior import SignalPrior
from .signals import SignalEstimate

__all__ = ["HostPool", "HostPoolEstimate", "HostPoolState"]


@dataclass(frozen=True, slots=True)
class HostPoolState:
    """Weighted sums over a host's pages: weight, ``log alpha``, and precision per source."""

    n_sources: int
    weight: float = 0.0
    log_alpha: float = 0.0
    precision: tuple[float, ...] = ()
    n_pages: int = 0


@dataclass(frozen=True, slots=True)
class HostPoolEstimate:
    """Pooled ``alpha`` (geometric mean) and per-source precision of a host's pages."""

    alpha_per_s: float
    precision: tuple[float, ...]
    weight: float
    n_pages: int

    def prior(self, strength: float = 4.0) -> SignalPrior:
        """Pseudo-observations centred on the pool (see :meth:`SignalPrior.centred`)."""
        return SignalPrior.centred(self.alpha_per_s, self.precision, strength)


class HostPool:
    """Streaming pool of page estimates of one host (``init/update/result``).

    Parameters
    ----------
    n_sources
        Number of ping sources.
    saturation_intervals
        A page's weight is ``n/(n + saturation_intervals)`` for ``n`` observed intervals, so
        pages still near their prior barely move the pool.
    default
        Result of an empty pool (default: the estimator's default prior, i.e. the
        Grimes-Ford rate and precision 0.5).
    """

    def __init__(
        self,
        n_sources: int,
        *,
        saturation_intervals: float = 20.0,
        default: HostPoolEstimate | None = None,
    ) -> None:
        if not (isinstance(n_sources, int) and n_sources >= 0):
            raise ValueError(f"n_sources must be an integer >= 0, got {n_sources!r}")
        if not saturation_intervals > 0.0:
            raise ValueError(f"saturation_intervals must be > 0, got {saturation_intervals!r}")
        self.n_sources = n_sources
        self.saturation_intervals = float(saturation_intervals)
        self.default = default or HostPoolEstimate(
            math.log1p(1.0 / 57.0) / 3600.0, (0.5,) * n_sources, 0.0, 0
        )

    def init(self) -> HostPoolState:
        """An empty pool."""
        return HostPoolState(self.n_sources, 0.0, 0.0, (0.0,) * self.n_sources, 0)

    def update(self, state: HostPoolState, page: SignalEstimate) -> HostPoolState:
        """Add one page's estimate (call again with a newer estimate of another page)."""
        if len(page.precision) != self.n_sources:
            raise ValueError(f"page has {len(page.precision)} sources, pool {self.n_sources}")
        if not (page.alpha_per_s > 0.0 and math.isfinite(page.alpha_per_s)):
            raise ValueError(f"page.alpha_per_s must be finite and > 0, got {page.alpha_per_s!r}")
        w = page.n_intervals / (page.n_intervals + self.saturation_intervals)
        return HostPoolState(
            self.n_sources,
            state.weight + w,
            state.log_alpha + w * math.log(page.alpha_per_s),
            tuple(p + w * q for p, q in zip(state.precision, page.precision, strict=True)),
            state.n_pages + 1,
        )

    def result(self, state: HostPoolState) -> HostPoolEstimate:
        """Pooled estimate; the ``default`` while the pool holds no weight."""
        if state.weight <= 0.0:
            return self.default
        w = state.weight
        return HostPoolEstimate(
            math.exp(state.log_alpha / w), tuple(p / w for p in state.precision), w, state.n_pages
        )
