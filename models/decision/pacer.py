"""The credit pacer: how many orders a tick may emit so that the rate is ``R`` and there
are no spikes (Algorithm 1 of paper 004 emits one crawl per slot ``1/R``; the service
emits the same count in even ticks).

Credit accrues at ``R`` per second and is capped at ``cap = R * tick_s + 1``; a tick may
emit ``floor(credit)`` orders and each order spends one credit.  Hence:

* **no spikes**: in any window of ``L`` seconds at most ``R * (L + tick_s) + 1`` orders
  leave (the credit at the window's start is at most ``cap``, and ``R * L`` accrues in it);
* **the rate is held**: while the caller wakes up at least once per ``tick_s`` and has
  orders to give, the credit never reaches the cap (after a tick it is below 1, and at most
  ``R * tick_s`` accrues before the next), so nothing is clipped and the emitted count
  over ``T`` seconds is ``R * T`` within one order.  The cap only clips credit that could
  not be spent (no eligible page, hosts without tokens, a late wake-up), which is never
  banked beyond one tick.

The earlier cap ``max(1, R * tick_s)`` clipped the fractional credit left at each wake-up
when ``R * tick_s < 1`` (e.g. ``R = 40/s``, ``tick = 10 ms``, wake-ups every 5 ms: the
credit went 0.8 -> 1.0 instead of 1.0 -> 1.0 + 0.2 carried), 10% below ``R``.

``clipped`` totals the credit the cap dropped while the rate was positive: budget that a
late wake-up or a lack of eligible pages left unspent.  The service shows it (``/stats``
``credit_clipped``) so an operator sees why the emitted rate is below ``R`` on a loaded
machine: catching up would break the no-spike bound.

Time comes in as an argument (``now_s``, any monotonic clock): the pacer never reads a
clock.
"""

from __future__ import annotations

import math

__all__ = ["CreditPacer"]


class CreditPacer:
    """Credit at ``rate_per_s``, capped at ``rate_per_s * tick_s + 1`` (module docstring)."""

    __slots__ = ("clipped", "credit", "last_s", "tick_s")

    def __init__(self, tick_s: float) -> None:
        if not (tick_s > 0.0 and math.isfinite(tick_s)):
            raise ValueError(f"tick_s must be finite and > 0, got {tick_s!r}")
        self.tick_s = float(tick_s)
        self.credit = 0.0
        self.last_s: float | None = None
        self.clipped = 0.0

    def cap(self, rate_per_s: float) -> float:
        return rate_per_s * self.tick_s + 1.0

    def advance(self, now_s: float, rate_per_s: float) -> int:
        """Accrue the credit since the last call at ``rate_per_s``; returns the orders the
        tick may emit (``floor(credit)``).  A rate of 0 (paused, no share) drops the
        credit."""
        last = self.last_s
        self.last_s = now_s
        if not (rate_per_s > 0.0 and math.isfinite(rate_per_s)):
            self.credit = 0.0
            return 0
        dt = max(0.0, now_s - last) if last is not None else 0.0
        want = self.credit + rate_per_s * dt
        cap = self.cap(rate_per_s)
        if want > cap:
            self.clipped += want - cap
        self.credit = min(cap, want)
        return int(self.credit)

    def spend(self, n: int = 1) -> None:
        """``n`` orders left."""
        self.credit -= n
