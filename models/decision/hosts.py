"""Per-host crawl limits: token buckets, orders in flight, and a timer heap of the hosts
that have no room until a refill.

A host ``h`` may take ``rate_h`` crawls per second with bursts of at most ``burst``
tokens, and at most ``max_in_flight_h`` orders without an outcome (0: unlimited).  This is
the blog's per-host constraint ``sum_j rho_hj <= k_h`` enforced where it binds (the
scheduler orders a page only when its host has a token); the store (Redis) holds the
authoritative bucket and the service mirrors it here.

With ``burst = 1`` a host is available again exactly ``1/rate_h`` after its last order,
which is the simulator's host limit (:mod:`models.sim.engine`).

Hosts without room are *parked* in a heap keyed by the time their next token arrives;
:meth:`HostBuckets.unpark` returns the ones whose time has come, so a caller can keep the
set of hosts with room without looking at every host at every tick.  Time comes in as an
argument.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

__all__ = ["MAX_IN_FLIGHT", "NO_TOKEN", "Bucket", "HostBuckets", "admit", "refill"]

#: :func:`admit`'s refusals (the store's codes, ``streams/store/lua/issue.lua``)
NO_TOKEN = "no-token"
MAX_IN_FLIGHT = "max-in-flight"


def refill(tokens: float | None, ts: float | None, now_s: float, rate_per_s: float,
           burst: float) -> float:
    """A bucket's tokens at ``now_s``: ``tokens`` at ``ts`` plus ``rate_per_s`` a second
    since, at most ``burst`` (``tokens`` None: full, never used; ``ts`` None or not before
    ``now_s``: nothing accrues; an infinite rate: always full).  The one refill rule: the
    scheduler's mirror (:class:`HostBuckets`), the memory store and ``issue.lua`` (Redis's
    twin, differentially tested against this function)."""
    if rate_per_s == math.inf:
        return burst
    if tokens is None:
        tokens = burst
    if ts is not None and now_s > ts:
        tokens = min(burst, tokens + (now_s - ts) * rate_per_s)
    return tokens


def binding_rate(rates: Sequence[float | None], default: float) -> int | None:
    """Which of a host's rates it runs at: ``rates[0]`` (the operator's; None: not set,
    then ``default``) lowered by any lower of the others (robots.txt's Crawl-delay,
    push-back; None: not set), so a limit never raises a host above the operator's rate or
    the default.  Returns the index of the binding rate, None for the default (the first
    of equal rates binds).  ``apply_host.lua`` is its twin in Redis (tested against it)."""
    best = default if rates[0] is None else rates[0]
    which: int | None = None if rates[0] is None else 0
    for i, r in enumerate(rates[1:], start=1):
        if r is not None and r < best:
            best, which = r, i
    return which


def admit(tokens: float, in_flight: int, max_in_flight: int) -> str | None:
    """Whether a host may take one more order: None if it may, else why not
    (:data:`NO_TOKEN`: less than one token; :data:`MAX_IN_FLIGHT`: ``in_flight`` at the
    limit, 0 meaning none).  A taken order spends one token and adds one in flight."""
    if tokens < 1:
        return NO_TOKEN
    if max_in_flight > 0 and in_flight >= max_in_flight:
        return MAX_IN_FLIGHT
    return None


@dataclass(slots=True)
class Bucket:
    rate_per_s: float | None = None  # None: the default rate
    max_in_flight: int | None = None  # None: the default
    tokens: float | None = None  # None: full (never used)
    ts: float = 0.0
    in_flight: int = 0
    parked_until: float = -math.inf


class HostBuckets:
    """All hosts' buckets (module docstring)."""

    __slots__ = ("_parked", "buckets", "burst", "default_max_in_flight", "default_rate_per_s")

    def __init__(self, default_rate_per_s: float, burst: float = 1.0,
                 default_max_in_flight: int = 0) -> None:
        if not (default_rate_per_s > 0.0):
            raise ValueError(f"default_rate_per_s must be > 0, got {default_rate_per_s!r}")
        if not (burst >= 1.0):
            raise ValueError(f"burst must be >= 1, got {burst!r}")
        self.default_rate_per_s = float(default_rate_per_s)
        self.burst = float(burst)
        self.default_max_in_flight = int(default_max_in_flight)
        self.buckets: dict[Hashable, Bucket] = {}
        self._parked: list[tuple[float, int, Hashable]] = []

    def __len__(self) -> int:
        return len(self.buckets)

    def __contains__(self, host: object) -> bool:
        return host in self.buckets

    def bucket(self, host: Hashable) -> Bucket:
        b = self.buckets.get(host)
        if b is None:
            b = self.buckets[host] = Bucket()
        return b

    def forget(self, host: Hashable) -> None:
        self.buckets.pop(host, None)

    # -- capacity ------------------------------------------------------------------------
    def set_capacity(self, host: Hashable, rate_per_s: float | None,
                     max_in_flight: int | None) -> None:
        b = self.bucket(host)
        b.rate_per_s = rate_per_s if rate_per_s is None or rate_per_s > 0.0 else None
        b.max_in_flight = max_in_flight
        b.parked_until = -math.inf  # re-evaluated at the next look

    def rate(self, host: Hashable) -> float:
        b = self.buckets.get(host)
        r = b.rate_per_s if b is not None else None
        return r if r is not None else self.default_rate_per_s

    def set_tokens(self, host: Hashable, tokens: float | None, at_s: float) -> None:
        """Mirror the store's bucket (tokens at ``at_s``; None: full)."""
        b = self.bucket(host)
        b.tokens, b.ts = tokens, at_s
        b.parked_until = -math.inf

    def tokens(self, host: Hashable, now_s: float) -> float:
        b = self.buckets.get(host)
        if b is None or b.tokens is None:
            return self.burst
        return refill(b.tokens, b.ts, now_s, b.rate_per_s or self.default_rate_per_s,
                      self.burst)

    def max_in_flight(self, host: Hashable) -> int:
        b = self.buckets.get(host)
        m = b.max_in_flight if b is not None else None
        return m if m is not None else self.default_max_in_flight

    def room(self, host: Hashable, now_s: float) -> int:
        """Orders the host can take now: whole tokens, and ``max_in_flight - in_flight``
        when limited (never negative)."""
        r = int(self.tokens(host, now_s))
        mif = self.max_in_flight(host)
        if mif > 0:
            b = self.buckets.get(host)
            r = min(r, mif - (b.in_flight if b is not None else 0))
        return max(0, r)

    def ready_at(self, host: Hashable, now_s: float) -> float:
        """When the host has room for one order (``now_s`` if it has; ``inf`` while its
        orders in flight are at the limit: that ends with an outcome, not a time)."""
        mif = self.max_in_flight(host)
        b = self.buckets.get(host)
        if mif > 0 and b is not None and b.in_flight >= mif:
            return math.inf
        t = self.tokens(host, now_s)
        if t >= 1.0:
            return now_s
        return now_s + (1.0 - t) / self.rate(host)

    # -- changes -----------------------------------------------------------------------
    def take(self, host: Hashable, now_s: float, n: int = 1) -> None:
        """``n`` orders of the host left at ``now_s`` (a token each)."""
        b = self.bucket(host)
        b.tokens = self.tokens(host, now_s) - n
        b.ts = now_s

    def empty(self, host: Hashable, now_s: float) -> None:
        """The store said the host has no token: none until it refills."""
        b = self.bucket(host)
        b.tokens, b.ts = 0.0, now_s

    def add_in_flight(self, host: Hashable, delta: int) -> None:
        b = self.bucket(host)
        b.in_flight = max(0, b.in_flight + delta)
        if delta < 0:
            if b.parked_until > -math.inf:  # parked: looked at again at the next unpark
                # (a host parked at its in-flight cap would otherwise wait a refill time)
                heapq.heappush(self._parked, (-math.inf, id(host), host))
            b.parked_until = -math.inf

    def in_flight(self, host: Hashable) -> int:
        b = self.buckets.get(host)
        return b.in_flight if b is not None else 0

    # -- parking -----------------------------------------------------------------------
    def park(self, host: Hashable, now_s: float) -> float:
        """Park a host without room until its next token (returns that time; a host at
        its in-flight limit is looked at again after one refill interval).  Every park is
        answered by exactly one :meth:`unpark` at or after that time."""
        t = self.ready_at(host, now_s)
        if not math.isfinite(t):  # at its in-flight limit: look again after a refill time
            t = now_s + 1.0 / self.rate(host)
        t = max(t, now_s)
        b = self.bucket(host)
        b.parked_until = t
        heapq.heappush(self._parked, (t, id(host), host))
        return t

    def is_parked(self, host: Hashable, now_s: float) -> bool:
        b = self.buckets.get(host)
        return b is not None and b.parked_until > now_s

    def unpark(self, now_s: float) -> list[Hashable]:
        """Hosts whose parking time has come (each once)."""
        if not self._parked or self._parked[0][0] > now_s:
            return []
        out: list[Hashable] = []
        seen: set[Hashable] = set()
        heap = self._parked
        while heap and heap[0][0] <= now_s:
            t, _, host = heapq.heappop(heap)
            b = self.buckets.get(host)
            # parked_until -inf: released early (capacity, tokens or flight changed)
            if b is not None and b.parked_until in (t, -math.inf) and host not in seen:
                b.parked_until = -math.inf
                seen.add(host)
                out.append(host)
        return out

    def next_unpark(self) -> float:
        return self._parked[0][0] if self._parked else math.inf
