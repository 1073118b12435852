"""A host's push-back (HTTP 429, or 503 with ``Retry-After``) as a capacity: AIMD.

A host that answers 429 Too Many Requests (RFC 6585 Sec. 4), or 503 Service Unavailable
with ``Retry-After`` (RFC 9110 Sec. 15.6.4, 10.2.3), asks the crawler to slow down.  The
fetcher turns that into a limit on the host's crawls per second, published on
``recrawl.hosts`` (``source: "pushback"``), which the workers apply like any capacity:

* multiplicative decrease: ``rate <- max(min_rate, min(rate * decrease, 1 / retry_after))``
  (the host's current capacity the first time); at most once per hold period, so the
  orders already out, answered 429 too, do not halve the rate again and again;
* hold: no increase before ``max(retry_after, 1 / rate)`` seconds have passed (the host
  said when to come back; at the new rate the next crawl is that far anyway);
* additive increase: then every ``increase_interval_s`` the rate grows by
  ``increase_fraction`` of the capacity the host had before the push-back, and the limit
  is lifted once it reaches it.

This is additive-increase/multiplicative-decrease (Chiu and Jain, "Analysis of the
Increase and Decrease Algorithms for Congestion Avoidance in Computer Networks", 1989;
TCP's congestion avoidance, RFC 5681 Sec. 3.1, halves its window the same way); Scrapy's
AutoThrottle extension adapts its per-host delay to the server the same way in spirit
(it never lowers the delay on an error response).  The state machine is pure: time comes in
as ``now_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC
from email.utils import parsedate_to_datetime

__all__ = ["Change", "HostThrottle", "PushbackPolicy", "parse_retry_after", "pushback_of"]


def parse_retry_after(value: str | None, now_s: float, *, max_s: float = 86400.0
                      ) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (RFC 9110 Sec. 10.2.3:
    ``HTTP-date / delay-seconds``): a non-negative integer of seconds, or an HTTP date
    (IMF-fixdate, and the obsolete RFC 850 and asctime forms, Sec. 5.6.7) counted from
    ``now_s``; a date in the past is 0.  Capped at ``max_s``; ``None`` if absent or not
    one of these."""
    if value is None:
        return None
    v = value.strip()
    if not v:
        return None
    if v.isdigit():  # delay-seconds = 1*DIGIT
        return min(float(int(v)), max_s)
    try:
        when = parsedate_to_datetime(v)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": RFC 9110 dates are in UTC anyway
        when = when.replace(tzinfo=UTC)
    return min(max(0.0, when.timestamp() - now_s), max_s)


def pushback_of(status: int | None, retry_after: str | None, now_s: float,
                max_s: float = 86400.0) -> tuple[bool, float | None]:
    """Whether a response is push-back, and its Retry-After in seconds: 429 always (RFC
    6585 Sec. 4: too many requests), 503 only with a Retry-After (without one it is a
    failure of the server, not a request to slow down)."""
    ra = parse_retry_after(retry_after, now_s, max_s=max_s)
    if status == 429:
        return True, ra
    if status == 503 and ra is not None:
        return True, ra
    return False, None


@dataclass(frozen=True)
class PushbackPolicy:
    #: multiplicative decrease factor (TCP's 1/2)
    decrease: float = 0.5
    #: additive increase per step, as a fraction of the capacity before the push-back
    increase_fraction: float = 0.1
    increase_interval_s: float = 1.0
    #: the rate never goes below this (a host is never cut off for good)
    min_rate_per_s: float = 0.001
    #: Retry-After values beyond this are taken as this
    max_retry_after_s: float = 3600.0

    def __post_init__(self) -> None:
        if not 0.0 < self.decrease < 1.0:
            raise ValueError(f"decrease must be in (0, 1), got {self.decrease!r}")
        if not self.increase_fraction > 0.0:
            raise ValueError(f"increase_fraction must be > 0, got {self.increase_fraction!r}")
        if not self.increase_interval_s > 0.0:
            raise ValueError(f"increase_interval_s must be > 0, got {self.increase_interval_s!r}")
        if not self.min_rate_per_s > 0.0:
            raise ValueError(f"min_rate_per_s must be > 0, got {self.min_rate_per_s!r}")


@dataclass(frozen=True)
class Change:
    """A new push-back limit to publish (``rate_per_s`` None: lifted)."""

    rate_per_s: float | None
    reason: str


@dataclass
class HostThrottle:
    """One host's AIMD state (module docstring).  ``rate_per_s`` None: not limited."""

    policy: PushbackPolicy
    rate_per_s: float | None = None
    #: the capacity before the push-back: recovery ends there
    baseline_per_s: float = math.inf
    hold_until_s: float = -math.inf
    last_step_s: float = -math.inf

    @property
    def limited(self) -> bool:
        return self.rate_per_s is not None

    def on_pushback(self, now_s: float, capacity_per_s: float, status: int,
                    retry_after_s: float | None) -> Change | None:
        """A push-back answer; ``capacity_per_s``: the host's capacity now (used the
        first time, and as the recovery target).  None while holding (one decrease per
        episode)."""
        if self.rate_per_s is not None and now_s < self.hold_until_s:
            return None
        p = self.policy
        if self.rate_per_s is None:
            self.baseline_per_s = capacity_per_s
            current = capacity_per_s
        else:
            current = self.rate_per_s
        new = current * p.decrease
        ra = None if retry_after_s is None else min(retry_after_s, p.max_retry_after_s)
        if ra is not None and ra > 0.0:
            new = min(new, 1.0 / ra)
        new = max(p.min_rate_per_s, new)
        self.rate_per_s = new
        self.hold_until_s = now_s + max(ra or 0.0, 1.0 / new)
        self.last_step_s = self.hold_until_s
        why = f"HTTP {status}" + (f", Retry-After {ra:g}s" if ra is not None else "")
        return Change(new, f"{why}: x{p.decrease:g}")

    def tick(self, now_s: float) -> Change | None:
        """Additive increase when due; the limit is lifted at the baseline."""
        if self.rate_per_s is None or now_s < self.hold_until_s:
            return None
        p = self.policy
        if now_s - self.last_step_s < p.increase_interval_s:
            return None
        self.last_step_s = now_s
        step = p.increase_fraction * self.baseline_per_s
        new = self.rate_per_s + step
        if new >= self.baseline_per_s:
            self.rate_per_s = None
            return Change(None, "recovered")
        self.rate_per_s = new
        return Change(new, f"recovering: +{step:.3g}/s every {p.increase_interval_s:g}s")
