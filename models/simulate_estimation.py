"""Simulated pages for the estimators' tests and the paper reproductions (pure; rng passed in).

Changes of a page form a Poisson process of rate ``Delta``; each change is signalled by source
``s`` with probability ``recall_s`` (by at most one source, ``sum_s recall_s <= 1``, when
``overlap="disjoint"``; independently across sources when ``overlap="independent"``), and
source ``s`` also
emits false signals as a Poisson process of rate ``nu_s = recall_s*Delta*(1 - p_s)/p_s``, so
its precision is ``p_s`` (paper 004 Sec. 3).  By Poisson splitting, every crawl interval can
be drawn independently of the others.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["SimulatedIntervals", "simulate_page_intervals"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class SimulatedIntervals:
    """Crawl intervals of one simulated page: ``interval_s (M,)``, ``n_signals (M,S)``,
    ``changed (M,)`` and the number of true changes in each interval ``n_changes (M,)``."""

    interval_s: FloatArray
    n_signals: FloatArray
    changed: BoolArray
    n_changes: npt.NDArray[np.int64]


def simulate_page_intervals(
    rng: np.random.Generator,
    *,
    change_rate_per_s: float,
    crawl_rate_per_s: float,
    n_intervals: int,
    recall: tuple[float, ...] = (),
    precision: tuple[float, ...] = (),
    regular: bool = False,
    overlap: str = "disjoint",
) -> SimulatedIntervals:
    """Draw ``n_intervals`` crawl intervals of one page.

    Crawl intervals are exponential with rate ``crawl_rate_per_s`` (Poisson crawling, the
    irregular-interval setting of paper 003 Sec. 4.3), or constant ``1/crawl_rate_per_s`` if
    ``regular``.
    """
    if len(recall) != len(precision):
        raise ValueError("recall and precision must have one value per source")
    if regular:
        tau = np.full(n_intervals, 1.0 / crawl_rate_per_s)
    else:
        tau = rng.exponential(1.0 / crawl_rate_per_s, size=n_intervals)
    n_changes = rng.poisson(change_rate_per_s * tau)
    sig = np.zeros((n_intervals, len(recall)))
    if overlap == "disjoint":
        if sum(recall) > 1.0 + 1e-12:
            raise ValueError(f"recall must sum to <= 1 for disjoint sources, got {recall!r}")
        probs = [*recall, max(0.0, 1.0 - sum(recall))]
        split = rng.multinomial(n_changes, probs) if recall else np.zeros((n_intervals, 1))
    elif overlap != "independent":
        raise ValueError(f"overlap must be 'disjoint' or 'independent', got {overlap!r}")
    for s, (lam, p) in enumerate(zip(recall, precision, strict=True)):
        true_sig = split[:, s] if overlap == "disjoint" else rng.binomial(n_changes, lam)
        nu = lam * change_rate_per_s * (1.0 - p) / p
        false_sig = rng.poisson(nu * tau)
        sig[:, s] = true_sig + false_sig
    return SimulatedIntervals(tau, sig, n_changes > 0, n_changes.astype(np.int64))
