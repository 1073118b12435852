"""Prometheus metrics of one worker (own registry, so tests can build many apps)."""

from __future__ import annotations

import contextlib
from collections import Counter as _Tally
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

__all__ = ["Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.events = Counter(
            "recrawl_events_total", "Input events by topic and result", ["topic", "result"],
            registry=r,
        )
        self.rejects = Counter(
            "recrawl_rejects_total", "Events sent to rejects", ["topic"], registry=r
        )
        self.orders = Counter(
            "recrawl_orders_total", "Orders emitted", ["shard", "policy"], registry=r
        )
        self.order_timeouts = Counter(
            "recrawl_order_timeouts_total", "Orders without outcome in time", registry=r
        )
        self.retries = Counter(
            "recrawl_retries_total", "Redis or Kafka failures retried", ["where"], registry=r
        )
        self.budget = Gauge("recrawl_budget_per_s", "Global budget R", registry=r)
        self.shard_rate = Gauge(
            "recrawl_shard_rate_per_s", "Share of R of a shard", ["shard"], registry=r
        )
        self.shard_threshold = Gauge(
            "recrawl_shard_threshold", "Current threshold of a shard", ["shard"], registry=r
        )
        self.shard_pages = Gauge("recrawl_shard_pages", "Pages in a shard", ["shard"], registry=r)
        self.shard_in_flight = Gauge(
            "recrawl_shard_in_flight", "Orders in flight of a shard", ["shard"], registry=r
        )
        self.pings = Counter(
            "recrawl_pings_total", "Pings by source and result", ["source", "result"],
            registry=r,
        )
        #: The same counts as plain numbers for ``/stats``.
        self.tally: _Tally[str] = _Tally()
        self._pings: _Tally[tuple[str, str]] = _Tally()
        self._event_children: dict[tuple[str, str], Any] = {}
        self._ping_children: dict[tuple[str, str], Any] = {}

    def event(self, topic: str, result: str, n: int = 1) -> None:
        child = self._event_children.get((topic, result))
        if child is None:  # ``labels()`` looks its child up under a lock: once per pair
            child = self._event_children[topic, result] = self.events.labels(topic, result)
        child.inc(n)
        self.tally[f"{topic}.{result}"] += n

    def ping(self, source: str, result: str) -> None:
        """One ping applied or dropped (``result``: the ping script's code)."""
        child = self._ping_children.get((source, result))
        if child is None:
            child = self._ping_children[source, result] = self.pings.labels(source, result)
        child.inc()
        self._pings[source, result] += 1

    def pings_by_source(self) -> dict[str, dict[str, int]]:
        """``{source: {result: count, ..., "total": count}}`` for ``/stats``."""
        out: dict[str, dict[str, int]] = {}
        for (source, result), n in sorted(self._pings.items()):
            d = out.setdefault(source, {})
            d[result] = n
            d["total"] = d.get("total", 0) + n
        return out

    def reject(self, topic: str) -> None:
        self.rejects.labels(topic).inc()
        self.tally[f"{topic}.rejected"] += 1

    def order(self, shard: int, policy: str) -> None:
        self.orders.labels(str(shard), policy).inc()
        self.tally[f"orders.{policy}"] += 1

    def retry(self, where: str) -> None:
        self.retries.labels(where).inc()
        self.tally[f"retries.{where}"] += 1

    def forget_shard(self, shard: int) -> None:
        for g in (self.shard_rate, self.shard_threshold, self.shard_pages, self.shard_in_flight):
            with contextlib.suppress(KeyError):
                g.remove(str(shard))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
