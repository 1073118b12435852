"""Page importance ``mu`` (paper 004 Sec. 3 and App. E): from a score, or from requests.

Requests are fully observed, so ``mu`` is a Poisson rate: requests over time, with
exponential forgetting and a weak Gamma prior (``prior_requests`` over ``prior_time_s``).
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

__all__ = [
    "ImportanceEstimate",
    "RequestRateEstimator",
    "RequestRateState",
    "importance_from_score",
]

_FMT = struct.Struct("<ddd")


@dataclass(frozen=True, slots=True)
class ImportanceEstimate:
    """Importance ``mu`` (requests per second, or the score's unit) and its standard error."""

    mu: float
    mu_se: float


def importance_from_score(score: float, score_se: float = 0.0) -> ImportanceEstimate:
    """An explicit importance score (e.g. from a page catalogue), taken as given."""
    if not (score >= 0.0 and math.isfinite(score)):
        raise ValueError(f"score must be a finite number >= 0, got {score!r}")
    if not (score_se >= 0.0 and math.isfinite(score_se)):
        raise ValueError(f"score_se must be a finite number >= 0, got {score_se!r}")
    return ImportanceEstimate(float(score), float(score_se))


@dataclass(frozen=True, slots=True)
class RequestRateState:
    """Forgetting-weighted request count and observed time, and the last update time."""

    end_s: float = -math.inf
    requests: float = 0.0
    time_s: float = 0.0

    def to_bytes(self) -> bytes:
        """24 bytes: three little-endian float64."""
        return _FMT.pack(self.end_s, self.requests, self.time_s)

    @classmethod
    def from_bytes(cls, data: bytes) -> RequestRateState:
        """Inverse of :meth:`to_bytes`."""
        if len(data) != _FMT.size:
            raise ValueError(f"data: expected {_FMT.size} bytes, got {len(data)}")
        return cls(*_FMT.unpack(data))


class RequestRateEstimator:
    """Streaming request rate: posterior mean ``(R + a)/(T + b)`` of a Gamma-Poisson model.

    Parameters
    ----------
    half_life_s
        Forgetting half-life (``inf``: none).
    prior_requests, prior_time_s
        Gamma prior ``a`` and ``b`` (default half a request in one hour: weak, so an hour
        of real observation outweighs it).
    """

    def __init__(
        self,
        *,
        half_life_s: float = math.inf,
        prior_requests: float = 0.5,
        prior_time_s: float = 3600.0,
    ) -> None:
        if not half_life_s > 0.0:
            raise ValueError(f"half_life_s must be > 0, got {half_life_s!r}")
        if not (prior_requests > 0.0 and math.isfinite(prior_requests)):
            raise ValueError(f"prior_requests must be finite and > 0, got {prior_requests!r}")
        if not (prior_time_s > 0.0 and math.isfinite(prior_time_s)):
            raise ValueError(f"prior_time_s must be finite and > 0, got {prior_time_s!r}")
        self.half_life_s = float(half_life_s)
        self.prior_requests = float(prior_requests)
        self.prior_time_s = float(prior_time_s)

    def init(self) -> RequestRateState:
        """No requests observed yet."""
        return RequestRateState()

    def update(
        self,
        state: RequestRateState,
        n_requests: float,
        elapsed_s: float,
        end_s: float | None = None,
    ) -> RequestRateState:
        """Add ``n_requests`` seen over ``elapsed_s`` ending at ``end_s`` (optional)."""
        if not (n_requests >= 0.0 and math.isfinite(n_requests)):
            raise ValueError(f"n_requests must be a finite count >= 0, got {n_requests!r}")
        if not (elapsed_s >= 0.0 and math.isfinite(elapsed_s)):
            raise ValueError(f"elapsed_s must be a finite number >= 0, got {elapsed_s!r}")
        has_prev = state.end_s > -math.inf
        if end_s is None:
            end = state.end_s + elapsed_s if has_prev else elapsed_s
        else:
            if not math.isfinite(end_s):
                raise ValueError(f"end_s must be finite, got {end_s!r}")
            if has_prev and end_s < state.end_s:
                raise ValueError(f"end_s={end_s!r} is before the previous update {state.end_s!r}")
            end = float(end_s)
        decay = 1.0
        if has_prev and self.half_life_s < math.inf:
            decay = math.exp2(-(end - state.end_s) / self.half_life_s)
        return RequestRateState(
            end, state.requests * decay + n_requests, state.time_s * decay + elapsed_s
        )

    def result(self, state: RequestRateState) -> ImportanceEstimate:
        """Posterior mean and standard deviation of the request rate (per second)."""
        a = state.requests + self.prior_requests
        b = state.time_s + self.prior_time_s
        return ImportanceEstimate(a / b, math.sqrt(a) / b)
