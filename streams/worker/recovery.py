"""The catalogue rebuilt from Kafka when Redis lost it.

Redis holds the worker's whole state (pages, estimators, hosts, offsets), Kafka the events
it was built from.  When :mod:`streams.store.logs` finds the state gone
(:class:`~streams.store.logs.CatalogueLost`: the catalogue mark missing or replaced, or a
partition read before with no trace in Redis), the worker replays the partitions it owns
from the start of their logs before it applies anything else:

1. it says so loudly (an ``ERROR`` line, ``catalogue.lost`` in ``/stats``) and holds the
   scheduler's shards of those partitions (:meth:`streams.scheduler.Scheduler.hold`): no
   order is chosen from a partial catalogue;
2. it writes a new catalogue mark, so that every other worker finds the loss within a
   second and replays its own partitions;
3. it reads each input topic's partitions (control, hosts, pages, pings, outcomes) with a
   consumer of no group, from the log's start to its end when the replay began, merged in
   the order of the records' Kafka timestamps (the topics of one partition were applied
   interleaved; ties in the order catalogue first), and applies them with the agents'
   own handlers (an :class:`~streams.worker.agents.Agents` that sends no reject, no
   re-routed event and no discovered page: all were sent the first time);
4. it anchors each replayed partition's log at its last record, and lets the scheduler
   rebuild the shards from Redis.

The records the group consumer then delivers again are at or below the replayed offsets:
redeliveries, skipped by the offset guards.  What comes back is what the topics still hold
(docs/reliability.md, "What is durable where"); in-flight marks are not events and do not
come back (a page whose order was out when Redis was lost can be ordered once more).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.retry import Backoff, retry
from streams.settings import Settings
from streams.store import StateStore
from streams.store.logs import Anchor, CatalogueLost, LogEpochs
from streams.telemetry.metrics import Metrics
from streams.worker.consumer import BatchEvent, BatchHandler

__all__ = ["REPLAY_ORDER", "Recovery", "ReplayMessage", "attach", "merged"]

log = logging.getLogger(__name__)

#: the input topics (logical names) in the order a replay applies records of equal timestamp
REPLAY_ORDER = ("control", "hosts", "pages", "pings", "outcomes")
#: records handed to a handler at once
REPLAY_BATCH = 500
#: the waits between attempts to replay (a replay is idempotent: run again from the start)
REPLAY_BACKOFF = Backoff(0.5, 10.0)


@dataclass(slots=True)
class ReplayMessage:
    """What the handlers read of a Faust message, for a record read by the replay."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: float  # seconds, as Faust gives it
    headers: Sequence[tuple[str, bytes]] = field(default_factory=tuple)


def merged(streams: Sequence[Sequence[ReplayMessage]], rank: dict[str, int]
           ) -> list[ReplayMessage]:
    """The records of several logs in one order: Kafka timestamp, then the topic's rank,
    then the offset (each log stays in its own order when its timestamps do, as the
    producers' create times or the broker's append times are)."""
    return list(heapq.merge(*streams, key=lambda m: (m.timestamp, rank[m.topic], m.offset)))


class Recovery:
    """Replays lost partitions (module docstring).  ``handlers``: topic name -> a handler of
    a list of events that applies them without rejects, re-routes or forwards;
    ``assigned``: the input partitions this worker owns now."""

    def __init__(self, bootstrap: str, topics: dict[str, str], logs: LogEpochs,
                 handlers: dict[str, Callable[[list[Any]], Awaitable[None]]],
                 assigned: Callable[[], set[int]], *, scheduler: Any = None,
                 tally: Any = None) -> None:
        self.bootstrap = bootstrap
        #: logical name -> topic name, in REPLAY_ORDER
        self.topics = {name: topics[name] for name in REPLAY_ORDER}
        self.rank = {t: i for i, t in enumerate(self.topics.values())}
        self.logs = logs
        self.handlers = handlers
        self.assigned = assigned
        self.scheduler = scheduler
        self.tally = tally
        self.replays = 0
        self.replayed_events = 0

    async def recover(self, lost: CatalogueLost) -> None:
        """Replay ``lost.partitions`` and the others this worker owns; retried until it
        works (a replay is idempotent: every write is offset-guarded)."""
        partitions = set(lost.partitions) | self.assigned()
        log.error("REDIS LOST ITS STATE (%s): replaying partitions %s from the start of "
                  "their Kafka logs; no order from them until it is done", lost.reason,
                  sorted(partitions))
        if self.tally is not None:
            self.tally["catalogue.lost"] += 1
        if self.scheduler is not None:
            self.scheduler.hold(partitions)

        async def attempt() -> tuple[float, int]:
            await self.logs.renew()  # the others find the loss at their next check
            t0 = time.monotonic()
            return t0, await self.replay(partitions)

        try:
            t0, n = await retry(attempt, what=f"replaying partitions {sorted(partitions)}",
                                backoff=REPLAY_BACKOFF, logger=log)
        finally:
            if self.scheduler is not None:
                self.scheduler.release(partitions)
        self.replays += 1
        self.replayed_events += n
        if self.tally is not None:
            self.tally["catalogue.replayed_events"] += n
        log.warning("catalogue of partitions %s rebuilt from Kafka: %d events in %.1fs",
                    sorted(partitions), n, time.monotonic() - t0)

    async def replay(self, partitions: set[int]) -> int:
        """Read and apply every input record of ``partitions`` up to the logs' current ends;
        returns how many were applied."""
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            # (every input topic has the partition count of the worker's, infra.kafka)
            tps = [TopicPartition(t, p) for t in self.topics.values() for p in sorted(partitions)]
            consumer.assign(tps)
            ends = await consumer.end_offsets(tps)
            starts = await consumer.beginning_offsets(tps)
            log.info("replaying %s", {f"{tp.topic}:{tp.partition}": (starts[tp], ends[tp])
                                      for tp in tps})
            total = 0
            for p in sorted(partitions):
                mine = [tp for tp in tps if tp.partition == p and ends[tp] > starts[tp]]
                for tp in mine:
                    consumer.seek(tp, starts[tp])
                    self.logs.replayed((tp.topic, tp.partition))
                records = [await self._read(consumer, tp, ends[tp]) for tp in mine]
                order = merged(records, self.rank)
                total += await self._apply(order)
                last = {(m.topic, m.partition): m for m in order}
                if last:
                    await self.logs.redis.hset(self.logs.key, mapping={
                        f"{t}:{q}": Anchor(0, m.offset, round(m.timestamp * 1000)).encode()
                        for (t, q), m in last.items()})
            return total
        finally:
            await consumer.stop()

    async def _read(self, consumer: AIOKafkaConsumer, tp: TopicPartition, end: int
                    ) -> list[ReplayMessage]:
        out: list[ReplayMessage] = []
        while await consumer.position(tp) < end:
            got = await consumer.getmany(tp, timeout_ms=1000, max_records=5000)
            for rec in got.get(tp, []):
                if rec.offset >= end:
                    break
                out.append(ReplayMessage(tp.topic, tp.partition, rec.offset, rec.key,
                                         rec.value, rec.timestamp / 1000.0,
                                         tuple(rec.headers or ())))
        return out

    async def _apply(self, order: list[ReplayMessage]) -> int:
        """Hand ``order`` to the handlers in runs of one topic (at most REPLAY_BATCH)."""
        i = 0
        while i < len(order):
            topic = order[i].topic
            j = i
            while j < len(order) and j - i < REPLAY_BATCH and order[j].topic == topic:
                j += 1
            await self.handlers[topic]([BatchEvent(m) for m in order[i:j]])  # type: ignore[arg-type]
            i = j
        return len(order)


def attach(app: faust.App, settings: Settings, store: StateStore, metrics: Metrics,
                   scheduler: Any, logic: Any, logs: LogEpochs,
                   handlers: dict[str, BatchHandler]) -> dict[str, BatchHandler]:
    """Attach a :class:`Recovery` to the agents' ``logic`` (an
    :class:`~streams.worker.agents.Agents`) and return ``handlers`` serialised with it.
    A lost catalogue rebuilt from Kafka (:mod:`streams.worker.recovery`): found by a
    batch (:meth:`Agents._resolve`) or by a check every second while no batch comes; one
    lock keeps a replay and the batches apart."""
    pages_topic = settings.topic("pages")

    def assigned() -> set[int]:
        return {tp.partition for tp in app.consumer.assignment() if tp.topic == pages_topic}

    # the same handlers, for records sent once already: no reject, re-route or forward
    async def nothing(*_a: Any) -> None:
        return None

    replayer = type(logic)(settings, store, metrics, nothing, scheduler=scheduler, forward=None,
                      reroute=nothing, decisions=logic.decisions)
    names = {"pages": replayer._pages, "pings": replayer._pings,
             "outcomes": replayer._outcomes, "hosts": replayer._hosts,
             "control": replayer._control}
    recovery = Recovery(
        settings.kafka_bootstrap, {n: settings.topic(n) for n in names}, logs,
        {settings.topic(n): fn for n, fn in names.items()}, assigned, scheduler=scheduler,
        tally=metrics.tally)
    logic.recover = recovery.recover
    app.recrawl_recovery = recovery  # type: ignore[attr-defined]
    lock = asyncio.Lock()

    @app.timer(1.0)  # type: ignore[untyped-decorator]
    async def _check_catalogue() -> None:
        if logs.mark_id is None or lock.locked():
            return
        async with lock:
            try:
                why = await logs.lost()
            except Exception as exc:  # Redis away: the batches' retries say so
                log.debug("catalogue check failed: %r", exc)
                return
            if why is not None:
                await recovery.recover(CatalogueLost(assigned(), why))

    def one_at_a_time(handler: BatchHandler) -> BatchHandler:
        async def locked(events: Sequence[Any]) -> None:
            async with lock:
                await handler(events)
        return locked

    return {name: one_at_a_time(h) for name, h in handlers.items()}
