"""Prometheus metrics of one worker (own registry, so tests can build many apps).

Counts are counters (``*_total``, ``*_seconds_total``): rates are Prometheus's to compute
(``rate(recrawl_orders_total[1m])``).  Gauges are kept for values that are set, not counted:
the budget R (``recrawl_budget_per_s``) and each shard's share of it
(``recrawl_shard_rate_per_s``, an allocation), each shard's threshold, pages and orders in
flight.  The registry also carries prometheus-client's process (``process_*``: CPU,
memory, open files), platform and garbage-collector (``python_*``) collectors.
"""

from __future__ import annotations

import contextlib
import gc
import time
from collections import Counter as _Tally
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)

__all__ = ["FREEZE_AFTER_S", "GC_PAUSES", "GcPauses", "Metrics"]


class GcPauses:
    """Time the interpreter's cyclic garbage collector holds the event loop, by generation
    (``gc.callbacks``), and the worker's answer to it (:meth:`refreeze`).  One per process
    (:data:`GC_PAUSES`), installed once.

    A full collection walks every tracked container, and a book of 10^6 pages is a few
    dicts of 10^6 entries: 0.08-0.12 s a walk for the book alone
    (``benchmarks/bench_book_gc.py``), 0.2-0.3 s in the worker, 50 times in 33 s of orders
    at 10^4/s (``benchmarks/bench_e2e.py throughput``: 30% of the loop).  Objects in the
    interpreter's permanent generation (``gc.freeze``) are not walked.  So the worker
    (:class:`streams.scheduler.Scheduler` with ``manage_gc``):

    - freezes what is alive (:meth:`freeze`, no collection: it takes microseconds) once a
      full collection took longer than :data:`FREEZE_AFTER_S` (:attr:`wants_freeze`): the
      containers that made it long are alive and will stay, the book's among them;
    - refreezes (:meth:`refreeze`: unfreeze, collect everything, freeze) after its shards'
      loads and every ``REFREEZE_S``, so that a cycle frozen while alive that has died
      since is freed then: nothing leaks for longer than that."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.max_s = [0.0, 0.0, 0.0]
        self.refreezes = 0
        self.refreeze_s = 0.0
        self.freezes = 0
        #: a full collection took longer than FREEZE_AFTER_S since the last freeze
        self.wants_freeze = False
        #: objects in the permanent generation, counted at the last refreeze (which
        #: collects everything anyway): counting walks them all (``gc.get_freeze_count``:
        #: ~8 ms per 10^6 objects), too slow for every ``/stats`` answer (a poll every 50 ms
        #: took 27% of the worker's loop) and for every :meth:`freeze` (microseconds)
        self.frozen_objects = 0
        self._t0 = 0.0
        self._installed = False

    def install(self) -> None:
        if not self._installed:
            gc.callbacks.append(self._callback)
            self._installed = True

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        g = int(info.get("generation", 2))
        dt = time.perf_counter() - self._t0
        self.count[g] += 1
        self.seconds[g] += dt
        self.max_s[g] = max(self.max_s[g], dt)
        if g == 2 and dt > FREEZE_AFTER_S:
            self.wants_freeze = True

    def freeze(self) -> None:
        """What is alive now goes to the permanent generation (no collection)."""
        gc.freeze()
        self.freezes += 1
        self.wants_freeze = False

    def refreeze(self) -> float:
        """Unfreeze, collect everything once (so a cycle among objects frozen before that
        has died since is freed: nothing leaks for longer than one refreeze), then freeze
        what is alive; returns the seconds it took (one full collection)."""
        t0 = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.wants_freeze = False
        self.frozen_objects = gc.get_freeze_count()
        dt = time.perf_counter() - t0
        self.refreezes += 1
        self.refreeze_s += dt
        return dt

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            f"gen{g}": {"collections": self.count[g], "seconds": round(self.seconds[g], 4),
                        "max_s": round(self.max_s[g], 4)} for g in range(3)}
        out["frozen_objects"] = self.frozen_objects  # at the last refreeze
        out["refreezes"] = {"count": self.refreezes, "seconds": round(self.refreeze_s, 4)}
        out["freezes"] = self.freezes
        return out


#: a full collection longer than this asks for a freeze (:class:`GcPauses`)
FREEZE_AFTER_S = 0.02
GC_PAUSES = GcPauses()


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
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
        self.consumer_wait = Counter(
            "recrawl_consumer_wait_seconds_total",
            "Seconds the batch consumer waited for records from Kafka", registry=r,
        )
        self.handler_seconds = Counter(
            "recrawl_handler_seconds_total", "Seconds the input handlers took, by topic",
            ["topic"], registry=r,
        )
        #: the same seconds for ``/stats`` (``consumer``): waiting for Kafka against handling
        #: what came (a worker that waits about as long as it works is held by its fetches)
        self.seconds: dict[str, float] = {}
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

    def ping(self, source: str, result: str, n: int = 1) -> None:
        """``n`` pings applied or dropped (``result``: the ping script's code)."""
        child = self._ping_children.get((source, result))
        if child is None:
            child = self._ping_children[source, result] = self.pings.labels(source, result)
        child.inc(n)
        self._pings[source, result] += n

    def pings_by_source(self) -> dict[str, dict[str, int]]:
        """``{source: {result: count, ..., "total": count}}`` for ``/stats``."""
        out: dict[str, dict[str, int]] = {}
        for (source, result), n in sorted(self._pings.items()):
            d = out.setdefault(source, {})
            d[result] = n
            d["total"] = d.get("total", 0) + n
        return out

    def waited(self, seconds: float) -> None:
        """The batch consumer waited ``seconds`` for a fetch's records."""
        self.consumer_wait.inc(seconds)
        self.seconds["wait"] = self.seconds.get("wait", 0.0) + seconds

    def handled(self, topic: str, seconds: float) -> None:
        """A handler of ``topic`` took ``seconds`` for one batch."""
        self.handler_seconds.labels(topic).inc(seconds)
        key = f"handle.{topic}"
        self.seconds[key] = self.seconds.get(key, 0.0) + seconds

    def reject(self, topic: str) -> None:
        self.rejects.labels(topic).inc()
        self.tally[f"{topic}.rejected"] += 1

    def order(self, shard: int, policy: str, n: int = 1) -> None:
        """``n`` orders of ``shard`` by ``policy`` (a tick's, counted once)."""
        self.orders.labels(str(shard), policy).inc(n)
        self.tally[f"orders.{policy}"] += n

    def retry(self, where: str) -> None:
        self.retries.labels(where).inc()
        self.tally[f"retries.{where}"] += 1

    def forget_shard(self, shard: int) -> None:
        for g in (self.shard_rate, self.shard_threshold, self.shard_pages, self.shard_in_flight):
            with contextlib.suppress(KeyError):
                g.remove(str(shard))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
