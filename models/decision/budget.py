"""Splitting the global budget R among shards so that their thresholds converge.

Each shard's threshold ``Lambda_p`` is the crawl value at which it currently crawls (the
KKT multiplier of its sub-problem, paper 004 Sec. 5.2 and the blog's ``lambda_0``).  If
shard p crawls at a higher value than the others, a unit of budget is worth more there,
so p's weight grows; the shares are ``R * w_p / sum_q w_q`` (their sum is always R).  The
weights follow an integral controller on log-thresholds, so they settle where the
thresholds are equal: one global multiplier, as if the shards were one scheduler (primal
decomposition: the master moves the resource along the difference of the sub-problems'
multipliers; D. P. Palomar and M. Chiang, "A tutorial on decomposition methods for
network utility maximization", IEEE JSAC 24(8), 2006, Sec. III-B).

The controller's gain is set by how fast a threshold answers a change of share
(:func:`update_weight`, :func:`turnover_s`): over about one turnover of the books
``T = pages / R`` (the mean interval between two crawls of a page), not at once.  A fixed
gain per second oscillates wherever ``T`` is long against it (derivation in
:func:`update_weight`).

Pure functions, the one split rule: the streaming scheduler (:mod:`streams.scheduler.core`,
which stores weights and thresholds in Redis so that every worker sees every shard) and
the scale-out simulator (:func:`models.sim.scaleout.simulate_split`) both call them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_WEIGHT", "MIN_WEIGHT", "STARVED_DECAY_PER_S", "live", "mean_log",
           "observe_value", "ready_weights", "split", "turnover_s", "update_weight"]

MIN_WEIGHT = 1e-3
MAX_WEIGHT = 1e3
#: how fast (per second, on the log-weight) a shard that cannot spend its share (no
#: eligible page or host) gives it up: not a threshold, so not paced by the turnover
STARVED_DECAY_PER_S = 0.5


def turnover_s(pages: int, budget_per_s: float, lag_s: float) -> float:
    """The time a shard's threshold takes to answer a change of its share: one turnover
    of the books, ``pages / R`` (the mean interval between two crawls of a page: a
    page's next crawl moves by the change of share only when it comes up, and about all
    of them come up once per turnover), plus ``lag_s``, the lag of the threshold's
    measurement (the average of the values ordered, and the resplit period).  Infinite
    without a budget (nothing moves)."""
    if not budget_per_s > 0.0:
        return math.inf
    return max(0, pages) / budget_per_s + lag_s


def update_weight(
    weight: float,
    log_threshold: float | None,
    mean_log_threshold: float | None,
    *,
    gain: float,
    turnover_s: float,
    dt_s: float,
    starved: bool = False,
) -> float:
    """One controller step for one shard: ``log w += (gain / T) * e * dt`` with ``e`` the
    shard's log-threshold above the mean (clipped to +-2) and ``T`` the turnover
    (:func:`turnover_s`).

    Why ``gain / T``: a shard's log-threshold follows a change of its log-share ``x`` as a
    first-order lag of time constant ``T`` with static gain ``-k`` (the elasticity
    ``-d log Lambda / d log r``: 2 where crawl values grow as the square of the elapsed
    time, ``V ~ mu Delta tau^2 / 2`` for ``Delta tau << 1``, paper 004 Theorem 1 with no
    signals; more where they saturate near ``mu / Delta``).  An integral controller of gain
    ``g`` on it closes the loop ``T s^2 + s + g k = 0``: damping ratio
    ``zeta = 1 / (2 sqrt(g k T))``.  A fixed ``g`` of 0.5/s with ``T`` = 42 s (400 pages at
    R = 10/s) gives ``zeta = 0.08``: a swing that does not die out, which the clip turns
    into a limit cycle (in the simulator one worker's share then varies 23-fold, for ever:
    ``tests/unit/test_split_converges.py``).  With ``g = gain / T`` the damping no longer
    depends on ``T``: ``zeta = 1 / (2 sqrt(gain k))``, 0.5 at ``gain`` = 0.5 and ``k`` = 2
    (overshoot ``exp(-pi zeta / sqrt(1 - zeta^2))`` = 16%), settling in a few turnovers.

    ``starved``: the shard could not spend its share (no eligible pages or hosts): its
    budget is better spent elsewhere, so its weight decays at ``STARVED_DECAY_PER_S``.
    """
    if starved:
        step = -STARVED_DECAY_PER_S * dt_s
    elif (log_threshold is None or mean_log_threshold is None or not gain > 0.0
          or not math.isfinite(turnover_s) or not turnover_s > 0.0):
        step = 0.0
    else:
        err = max(-2.0, min(2.0, log_threshold - mean_log_threshold))
        step = gain / turnover_s * err * dt_s
    return min(MAX_WEIGHT, max(MIN_WEIGHT, weight * math.exp(step)))


def observe_value(log_threshold: float | None, value: float, share_per_s: float,
                  average_s: float) -> float | None:
    """A worker's log-threshold after it ordered a page of crawl value ``value`` at a
    total share of ``share_per_s``: an exponential average over about ``average_s``
    seconds of orders (weight ``1 / (share * average_s)`` per order, at least 1/1).  A
    value that is not positive and finite leaves it as it is (the threshold stays
    finite)."""
    if not 0.0 < value < math.inf:
        return log_threshold
    lv = math.log(value)
    if log_threshold is None:
        return lv
    w = 1.0 / max(1.0, share_per_s * average_s)
    return log_threshold + w * (lv - log_threshold)


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
