"""A shard (an input partition this worker owns): its decision book and the I/O side's
bookkeeping; and the budget switches the scheduler reads from ``P:control``."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any, cast

from models.decision.core import ShardBook
from models.decision.fresh import FreshPages
from models.decision.hostindex import HostIndex
from models.decision.hosts import HostBuckets
from models.decision.table import PageTable
from streams.settings import Settings

__all__ = ["KEEP", "NOT_IN_FLIGHT", "Control", "Shard", "top_hosts"]


@dataclass(slots=True)
class Control:
    budget_per_s: float
    paused: bool = False
    t_delay_s: float = 60.0
    order_timeout_s: float = 600.0
    max_interval_s: float = 0.0

    @classmethod
    def from_redis(cls, raw: dict[str, str], settings: Settings) -> Control:
        def f(name: str, default: float) -> float:
            try:
                return float(raw[name]) if name in raw else default
            except ValueError:
                return default

        return cls(
            budget_per_s=f("budget_per_s", settings.budget_per_s),
            paused=raw.get("paused") == "1",
            t_delay_s=f("t_delay_s", settings.t_delay_s),
            order_timeout_s=f("order_timeout_s", settings.order_timeout_s),
            max_interval_s=f("max_interval_s", settings.max_interval_s),
        )


KEEP = object()
NOT_IN_FLIGHT = object()



@dataclass(eq=False)
class Shard:
    """One input partition this worker owns: its decision book (:mod:`models.decision`)
    and the I/O side's bookkeeping (loading, order time-outs, share of ``R``)."""

    partition: int
    book: ShardBook = field(default_factory=lambda: ShardBook(HostBuckets(1.0)))
    timeouts: list[tuple[float, str, str]] = field(default_factory=list)
    share_per_s: float = 0.0
    weight: float = 1.0
    log_threshold: float | None = None
    level: float = 0.0
    emitted: int = 0
    ready: bool = False
    dirty: set[tuple[str, str]] = field(default_factory=set)
    #: host -> urls its robots.txt disallows (Redis ``P:{host}:blocked``): kept out of the
    #: book until the host's robots.txt changes
    blocked: dict[str, set[str]] = field(default_factory=dict)
    #: host -> robots.txt changes applied (on_blocked ignores a block from before one)
    robots_epoch: dict[str, int] = field(default_factory=dict)

    @property
    def in_flight(self) -> dict[Any, tuple[str, float]]:
        return self.book.in_flight

    @property
    def hosts(self) -> HostBuckets:
        return self.book.hosts

    @property
    def index(self) -> HostIndex:
        # the service's books are built with host indexes (ShardBook's default)
        return cast(HostIndex, self.book.index)

    @property
    def fresh(self) -> FreshPages:
        return self.book.fresh

    @property
    def table(self) -> PageTable:
        return self.book.table

    def host(self, url: str) -> str:
        return str(self.book.table.host_of(url))

    def summary(self) -> dict[str, Any]:
        return {
            "pages": len(self.book),
            "in_flight": len(self.in_flight),
            "share_per_s": self.share_per_s,
            "weight": self.weight,
            "threshold": math.exp(self.log_threshold) if self.log_threshold is not None else None,
            "index_level": self.level,
            "emitted": self.emitted,
            "ready": self.ready,
        }


def top_hosts(shards: dict[int, Shard], n: int, now_s: float) -> dict[str, Any]:
    """The ``n`` hosts of these shards with the most orders in flight (then the highest
    capacity): capacity (``max_crawls_per_s``, ``max_in_flight``; 0: no cap), tokens at
    ``now_s`` and orders in flight, as the shards' buckets hold them."""
    rows = [(b.hosts.in_flight(h), b.hosts.rate(h), str(h), p, b.hosts)
            for p, b in shards.items() for h in b.hosts.buckets]
    top = heapq.nsmallest(max(0, n), rows, key=lambda r: (-r[0], -r[1], r[2]))
    return {
        "count": len(rows),
        "in_flight": sum(r[0] for r in rows),
        "top": [{"host": h, "shard": p, "in_flight": f, "max_crawls_per_s": rate,
                 "max_in_flight": hb.max_in_flight(h), "tokens": hb.tokens(h, now_s)}
                for f, rate, h, p, hb in top],
    }
