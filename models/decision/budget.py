"""Splitting the global budget R among shards so that their thresholds converge.

Each shard's threshold ``Lambda_p`` is the crawl value at which it currently crawls (the
KKT multiplier of its sub-problem, paper 004 Sec. 5.2 and the blog's ``lambda_0``).  If
shard p crawls at a higher value than the others, a unit of budget is worth more there,
so p's weight grows; the shares are ``R * w_p / sum_q w_q`` (their sum is always R).  The
weights follow an integral controller on log-thresholds, so they settle where the
thresholds are equal: one global multiplier, as if the shards were one scheduler.

Pure functions, the one split rule: the streaming scheduler (:mod:`streams.scheduler.core`,
which stores weights and thresholds in Redis so that every worker sees every shard) and
the scale-out simulator (:func:`models.sim.scaleout.simulate_split`) both call them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_WEIGHT", "MIN_WEIGHT", "live", "mean_log", "ready_weights", "split",
           "update_weight"]

MIN_WEIGHT = 1e-3
MAX_WEIGHT = 1e3


def update_weight(
    weight: float,
    log_threshold: float | None,
    mean_log_threshold: float | None,
    *,
    gain_per_s: float,
    dt_s: float,
    starved: bool = False,
) -> float:
    """One controller step for one shard.

    ``starved``: the shard could not spend its share (no eligible pages or hosts): its
    budget is better spent elsewhere, so its weight decays.
    """
    if starved:
        step = -gain_per_s * dt_s
    elif log_threshold is None or mean_log_threshold is None:
        step = 0.0
    else:
        err = max(-2.0, min(2.0, log_threshold - mean_log_threshold))
        step = gain_per_s * err * dt_s
    return min(MAX_WEIGHT, max(MIN_WEIGHT, weight * math.exp(step)))


def split(budget_per_s: float, weights: Mapping[int, float]) -> dict[int, float]:
    """Shares of R proportional to the weights; they sum to R exactly (up to rounding)."""
    total = sum(weights.values())
    if total <= 0.0:
        n = len(weights)
        return {p: budget_per_s / n for p in weights} if n else {}
    return {p: budget_per_s * w / total for p, w in weights.items()}


def mean_log(values: Mapping[int, float | None]) -> float | None:
    logs = [v for v in values.values() if v is not None and math.isfinite(v)]
    return sum(logs) / len(logs) if logs else None


def live(entries: Mapping[int, Mapping[str, Any]], now: float,
         alive_s: float) -> dict[int, Mapping[str, Any]]:
    """The shard entries whose ``ts`` (Redis's clock, re-stamped by their worker's
    heartbeat) is less than ``alive_s`` old at ``now`` (Redis's clock too): the others are
    a dead worker's, or a shard that was revoked and not yet taken, and get no share."""
    out: dict[int, Mapping[str, Any]] = {}
    for p, e in entries.items():
        try:
            ts = float(e.get("ts", 0.0))
        except (TypeError, ValueError):
            continue
        if now - ts < alive_s:
            out[p] = e
    return out


def ready_weights(weights: Mapping[int, float], loading: set[int]) -> dict[int, float]:
    """A shard still loading cannot spend: weight 0, so its share goes to the ready shards
    (of any worker) until it is ready, unless no shard is ready (then the weights stand,
    and nothing is spent until one is)."""
    if loading and len(set(weights) & loading) < len(weights):
        return {p: (0.0 if p in loading else w) for p, w in weights.items()}
    return dict(weights)
