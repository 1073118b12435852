"""Which incarnation of an input partition's log the stored offsets belong to.

Every event is applied once thanks to the offsets kept with the state
(``streams/store/redis_store.py``):
an event at or below the last applied offset of its (host, topic, partition) is a
redelivery.  That holds while a partition's offsets name the same records.  If an input
topic is deleted and created again (or its log replaced), offsets start again at 0 and
every event of a known host would be taken for a redelivery until the offsets pass the old
maximum: silently lost.

So each input partition has an *epoch* and an *anchor* in ``P:{logs}`` (one hash, field
``<topic>:<partition>``, value ``epoch|offset|timestamp_ms``): the offset and Kafka
timestamp of a record applied from it.  The first batch a worker takes from a partition
after an assignment is checked against the anchor before anything is applied:

* the record at the anchor's offset is in the batch, or read from the broker (a consumer
  without a group, :func:`kafka_probe`): same timestamp, same log; another timestamp, a
  new log;
* the log now ends at or before the anchor's offset: a new log (the old one was longer);
* the log now starts after it (retention deleted it) or the batch starts after it: the same
  log (a new one starts at 0).

A new log gets the next epoch, and its offsets are stored under ``<topic>:<partition>~<epoch>``
(:meth:`streams.store.redis_store.Store.offset_field`), so the old offsets no longer hide its
events. Consumer-group offsets reset *backwards* on the same log are not a new log: those events
were applied, and are skipped as the redeliveries they are.  After each batch the anchor
moves to the batch's last record (one ``HSET`` per batch).

A lost Redis (restarted without its append-only file, flushed, a new empty server) takes the
anchors and every offset with it, while the group's committed offsets stay ahead in Kafka:
nothing would replay, and the worker would go on from an empty catalogue.  Two checks catch
it before a batch is applied (:class:`CatalogueLost`):

* the *catalogue mark*: field ``catalogue`` of the same hash holds a random id written by the
  first worker on an empty Redis (``HSETNX``); a worker remembers the id it saw, and checks it
  with every batch (and every second, :meth:`LogEpochs.lost`).  The field missing, or another
  id (a peer found it missing first and wrote a new one), means the state it ran on is gone;
* a partition with *no anchor* whose batch does not start at the beginning of its log (the
  record before the batch is still in the log, :func:`kafka_probe`): the group read that log
  before, and Redis has no trace of it (a worker started on a lost Redis).  A partition whose
  batch starts at offset 0, or right after what retention deleted, is new: epoch 0.

What the worker then does (replay the partitions from Kafka) is
:mod:`streams.worker.recovery`.

The probe asks the broker: when it cannot (broker away, a time-out), it raises, and
:attr:`LogEpochs.retry` runs it again (the worker sets it to its Kafka retry, backing off:
the batch waits, nothing of it is applied or rejected until the probe answers).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

__all__ = ["CATALOGUE_FIELD", "Anchor", "CatalogueLost", "LogEpochs", "kafka_probe"]

log = logging.getLogger(__name__)

#: the record at an offset: its timestamp (ms), or "end" (the log ends at or before it),
#: "gone" (the log starts after it: retention), None (not found: compacted, or no answer)
ProbeResult = int | str | None
Probe = Callable[[str, int, int], Awaitable[ProbeResult]]
#: how a probe is run: given the call, its result (e.g. retried until the broker answers)
ProbeRetry = Callable[[Callable[[], Awaitable[ProbeResult]]], Awaitable[ProbeResult]]


async def _once(call: Callable[[], Awaitable[ProbeResult]]) -> ProbeResult:
    return await call()

#: the field of ``P:{logs}`` holding the catalogue mark (module docstring)
CATALOGUE_FIELD = "catalogue"


class CatalogueLost(Exception):
    """Redis lost the state of these partitions (module docstring): they must be read again
    from the start of their logs before anything else is applied."""

    def __init__(self, partitions: set[int], reason: str) -> None:
        super().__init__(f"partitions {sorted(partitions)}: {reason}")
        self.partitions = partitions
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Anchor:
    epoch: int
    offset: int
    timestamp_ms: int

    def encode(self) -> str:
        return f"{self.epoch}|{self.offset}|{self.timestamp_ms}"

    @classmethod
    def decode(cls, text: str) -> Anchor:
        e, o, t = text.split("|")
        return cls(int(e), int(o), int(t))


def _ms(ts: Any) -> int:
    """Faust gives a message's timestamp in seconds (float): back to Kafka's ms."""
    return round(float(ts) * 1000) if ts is not None else -1


class LogEpochs:
    """The epoch of each input partition this worker reads (module docstring)."""

    def __init__(self, redis: Any, prefix: str, probe: Probe | None) -> None:
        self.redis = redis
        self.key = f"{prefix}:{{logs}}"
        self.probe = probe
        #: runs each probe call (default: once; the worker retries transient Kafka errors)
        self.retry: ProbeRetry = _once
        #: (topic, partition) -> epoch, checked since the last assignment
        self.known: dict[tuple[str, int], int] = {}
        self.new_logs = 0
        #: the catalogue mark this worker runs on (None: not read yet)
        self.mark_id: str | None = None

    async def lost(self) -> str | None:
        """Why the catalogue this worker ran on is gone (None: it is not): the mark missing,
        or another one.  The first call adopts the mark, writing one on an empty Redis."""
        raw = await self.redis.hget(self.key, CATALOGUE_FIELD)
        found = raw.decode() if isinstance(raw, bytes) else raw
        if self.mark_id is None:
            if found is None:
                await self.redis.hsetnx(self.key, CATALOGUE_FIELD, secrets.token_hex(8))
                raw = await self.redis.hget(self.key, CATALOGUE_FIELD)
                found = raw.decode() if isinstance(raw, bytes) else raw
            self.mark_id = found
            return None
        if found == self.mark_id:
            return None
        return ("the catalogue mark is missing: Redis restarted empty or was flushed"
                if found is None else
                "the catalogue mark changed: another worker found Redis empty")

    async def renew(self) -> None:
        """After a replay: run on the mark now in Redis (written anew if missing)."""
        self.mark_id = None
        await self.lost()

    def replayed(self, tp: tuple[str, int]) -> None:
        """``tp`` was read again from its start into an empty Redis: epoch 0."""
        self.known[tp] = 0

    def forget(self) -> None:
        """After a rebalance: check each partition again (another worker may have moved
        its epoch meanwhile)."""
        self.known.clear()

    def epoch(self, topic: str, partition: int) -> int:
        return self.known.get((topic, partition), 0)

    async def resolve(self, messages: Sequence[Any]) -> None:
        """Check the partitions of ``messages`` (Faust messages of one batch, in offset
        order per partition) not checked since the last assignment."""
        why = await self.lost()
        if why is not None:
            raise CatalogueLost({m.partition for m in messages}, why)
        first: dict[tuple[str, int], list[Any]] = {}
        for m in messages:
            tp = (m.topic, m.partition)
            if tp not in self.known:
                first.setdefault(tp, []).append(m)
        if not first:
            return
        fields = [f"{t}:{p}" for t, p in first]
        stored = await self.redis.hmget(self.key, fields)
        for (tp, msgs), field, raw in zip(first.items(), fields, stored, strict=True):
            if raw is None:
                if await self._read_before(tp, msgs[0].offset):
                    raise CatalogueLost(
                        {tp[1]}, f"{tp[0]}:{tp[1]} has no anchor in Redis, but the group read "
                        f"its log before (the batch starts at offset {msgs[0].offset})")
                self.known[tp] = 0
                continue
            anchor = Anchor.decode(raw.decode() if isinstance(raw, bytes) else str(raw))
            if await self._same_log(tp, msgs, anchor):
                self.known[tp] = anchor.epoch
                continue
            epoch = anchor.epoch + 1
            self.known[tp] = epoch
            self.new_logs += 1
            log.warning("%s:%d is a new log (offsets restarted below %d): its events are "
                        "applied under epoch %d", tp[0], tp[1], anchor.offset, epoch)
            # the anchor moves to the new log at once, so another worker agrees
            last = msgs[-1]
            await self.redis.hset(self.key, field,
                                  Anchor(epoch, last.offset, _ms(last.timestamp)).encode())

    async def _read_before(self, tp: tuple[str, int], offset: int) -> bool:
        """Whether the log still holds a record before ``offset`` (the group read it)."""
        if offset <= 0 or self.probe is None:
            return False
        return await self._probe(tp, offset - 1) != "gone"

    async def _same_log(self, tp: tuple[str, int], msgs: Sequence[Any], a: Anchor) -> bool:
        if msgs[0].offset > a.offset:
            return True  # past the anchor: a new log would have started again at 0
        for m in msgs:
            if m.offset == a.offset:
                return _ms(m.timestamp) == a.timestamp_ms
        if self.probe is None:
            return True
        got = await self._probe(tp, a.offset)
        if got == "end":
            return False
        if isinstance(got, int):
            return got == a.timestamp_ms
        return True  # "gone" (retention) or unknown: the same log

    async def _probe(self, tp: tuple[str, int], offset: int) -> ProbeResult:
        probe = self.probe
        assert probe is not None
        return await self.retry(lambda: probe(tp[0], tp[1], offset))

    async def mark(self, messages: Sequence[Any]) -> None:
        """Move the anchors to the last record of each partition in ``messages`` (applied)."""
        last: dict[tuple[str, int], Any] = {}
        for m in messages:
            last[(m.topic, m.partition)] = m
        if not last:
            return
        mapping = {f"{t}:{p}": Anchor(self.epoch(t, p), m.offset, _ms(m.timestamp)).encode()
                   for (t, p), m in last.items()}
        await self.redis.hset(self.key, mapping=mapping)


def kafka_probe(bootstrap: str, timeout_s: float = 5.0) -> Probe:
    """A :data:`Probe` reading one record from the broker with a consumer of no group."""

    async def probe(topic: str, partition: int, offset: int) -> ProbeResult:
        tp = TopicPartition(topic, partition)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                    group_id=None, request_timeout_ms=int(timeout_s * 1000))
        try:  # a start that fails (broker away) is stopped too: no client left behind
            await consumer.start()
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            if end <= offset:
                return "end"
            start = (await consumer.beginning_offsets([tp]))[tp]
            if start > offset:
                return "gone"
            consumer.seek(tp, offset)
            batch = await consumer.getmany(tp, timeout_ms=int(timeout_s * 1000), max_records=1)
            for rec in batch.get(tp, []):
                return int(rec.timestamp) if rec.offset == offset else None
            return None
        finally:
            await consumer.stop()

    return probe
