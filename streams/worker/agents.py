"""Faust agents: decode, validate, write the state (:class:`streams.store.StateStore`:
Redis in production, one Lua script per event; memory in unit tests), tell the scheduler,
and send what cannot be processed to ``recrawl.rejects``.

Every agent runs with ``concurrency=1`` (faust-streaming issue #606) and takes events in
batches (``stream.take_events``), applied in one store call (one Redis pipeline); a batch
is acked only after it has been applied.  With ``RECRAWL_BATCH_CONSUMER`` (the default) the
same handlers get each fetch's records directly from the consumer
(:class:`streams.worker.consumer.BatchConsumer`), not through the agents' streams.
Nothing escapes an agent (an escaped exception would ack the message anyway): bad input
goes to rejects with its reason, a Redis or Kafka outage is retried with backoff until it
ends (the batch waits; offsets make the retry harmless).

Over 600 lines: the five input topics' handlers share one class's validation, rerouting,
reject, dead-letter and delivery plumbing (a batch's life from its records to its ack);
split across modules, that life would be read in pieces.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import faust
from aiokafka.errors import (
    InvalidTopicError,
    KafkaError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    TopicAuthorizationFailedError,
)
from pydantic import BaseModel, ValidationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from infra.kafka import topic_config
from streams.estimates.estimation import Estimation, Observation
from streams.events.records import (
    ControlEvent,
    HostEvent,
    OutcomeEvent,
    PageEvent,
    PingEvent,
    cut_key,
    dead_letter_payload,
    reject_payload,
    shard_of,
    validation_reason,
)
from streams.events.urls import canonical_host
from streams.reach import OutageReport, redis_address
from streams.retry import Backoff, retry
from streams.settings import Settings
from streams.store import (
    ControlOp,
    HostOp,
    OutcomeOp,
    PageOp,
    PingBatch,
    StateStore,
    StoreUnavailable,
)
from streams.store.logs import CatalogueLost, LogEpochs, kafka_probe
from streams.store.page_record import PageState, estimator_part
from streams.store.redis_store import (
    TRANSIENT_REPLY_PREFIXES,
    TRANSIENT_REPLY_TYPES,
    Store,
    transient_reply,
)
from streams.telemetry.decisions import DecisionRing
from streams.telemetry.metrics import Metrics
from streams.worker.consumer import BatchHandler

__all__ = [
    "KAFKA_PERMANENT",
    "MAX_CAS_ATTEMPTS",
    "REROUTED_HEADER",
    "SHARDED",
    "TRANSIENT",
    "TRANSIENT_REPLY_PREFIXES",
    "TRANSIENT_REPLY_TYPES",
    "Agents",
    "Job",
    "RedisUnavailable",
    "RejectSink",
    "kafka_cause",
    "kafka_transient",
    "register_agents",
    "transient_reply",
]

if TYPE_CHECKING:
    from streams.scheduler import Scheduler
    from streams.scheduler.loading import PageUpdate

log = logging.getLogger(__name__)
_R = TypeVar("_R")

RejectSink = Callable[[bytes | None, bytes], Awaitable[Any]]
#: Compare-and-set rounds of an outcome before it is applied without its estimator update.
MAX_CAS_ATTEMPTS = 5
#: Outcomes per vectorised estimator update (``Estimation.observe``, ~70 us a page on this
#: 2-core machine: a slice holds the event loop for ~35 ms at most).
OBSERVE_SLICE = 512
#: A batch's pages, pings or outcomes are handled in at most this many groups of hosts at once, one
#: group per HOST_GROUP_MIN events at most: while Redis runs one group's scripts the loop
#: prepares or finishes another's (:func:`by_host_groups`).
HOST_GROUPS = 4
HOST_GROUP_MIN = 64
#: Events validated between two yields to the event loop (a batch of 5000 is validated in
#: ten slices, not in one stretch of the loop)
VALIDATE_SLICE = 512

#: Kafka errors that no retry gets past (a record too large, a topic that cannot be written)
KAFKA_PERMANENT = (MessageSizeTooLargeError, RecordTooLargeError, RecordListTooLargeError,
                   InvalidTopicError, TopicAuthorizationFailedError)


def kafka_cause(exc: BaseException) -> BaseException:
    """The Kafka client's error behind ``exc``: Faust's producer raises aiokafka's errors
    wrapped in its ``ProducerSendError`` (``raise ... from exc``)."""
    seen = 0
    while not isinstance(exc, KafkaError) and exc.__cause__ is not None and seen < 5:
        exc, seen = exc.__cause__, seen + 1
    return exc


def kafka_transient(exc: BaseException) -> bool:
    """A Kafka client error to retry (broker down, leader moving, timeouts), by type (also
    when wrapped by Faust's producer: :func:`kafka_cause`)."""
    exc = kafka_cause(exc)
    return isinstance(exc, KafkaError) and not isinstance(exc, KAFKA_PERMANENT)


#: what a batch sent and has not seen delivered yet: (delivery, what to do if it failed),
#: one list per handler call (:meth:`Agents._safely`), shared by the host groups it runs
_DELIVERIES: contextvars.ContextVar[list[tuple[Awaitable[Any], Callable[
    [BaseException], Awaitable[None]]]] | None] = contextvars.ContextVar(
        "recrawl_deliveries", default=None)


#: header of an event a worker sent again to its host's partition
REROUTED_HEADER = "recrawl-rerouted"
#: the inputs keyed by host, whose partition is a shard: their batches wait for the
#: shards being rebuilt (:meth:`streams.scheduler.Scheduler.wait_loaded`)
SHARDED = frozenset({"pages", "pings", "outcomes", "hosts"})


def _key_host(key: str) -> str:
    """A Kafka key as a canonical host name (:func:`streams.events.urls.canonical_host`)."""
    try:
        return canonical_host(key)
    except ValueError:
        return key


def _rerouted(msg: Any) -> bool:
    headers = getattr(msg, "headers", None) or ()
    items = headers.items() if isinstance(headers, dict) else headers
    return any(k == REROUTED_HEADER for k, _v in items)


#: the store's transient failure under its old name (a batch to run again)
RedisUnavailable = StoreUnavailable

TRANSIENT = (RedisConnectionError, RedisTimeoutError, ConnectionError, OSError,
             StoreUnavailable)
#: the waits between a batch's attempts while Redis or Kafka is away
OUTAGE_BACKOFF = Backoff(0.05, 2.0)


@dataclass(slots=True)
class Job:
    event: faust.types.EventT[Any]
    record: Any
    topic: str
    partition: int
    offset: int


class Agents:
    """The agents' logic, independent of Faust's plumbing so it is testable directly."""

    def __init__(
        self,
        settings: Settings,
        store: StateStore,
        metrics: Metrics,
        reject_sink: RejectSink,
        *,
        scheduler: Scheduler | None = None,
        forward: Callable[[bytes, bytes], Awaitable[Any]] | None = None,
        clock: Callable[[], float] = time.time,
        decisions: DecisionRing | None = None,
        reroute: Callable[[str, bytes, bytes | None], Awaitable[Any]] | None = None,
        logs: LogEpochs | None = None,
        dead_letter_sink: RejectSink | None = None,
    ) -> None:
        self.settings = settings
        #: where an input goes (a pointer, no copy) when its reject cannot be written
        #: (None: logged and counted only)
        self.dead_letter_sink = dead_letter_sink
        #: epochs of the input partitions' logs (None: not checked, e.g. unit tests)
        self.logs = logs
        if logs is not None:
            store.epoch_of = logs.epoch
            # the log probe asks the broker: retried as any Kafka call (the batch waits)
            logs.retry = lambda call: self._retry("kafka", call)
        self.store = store
        self.metrics = metrics
        self.reject_sink = reject_sink
        self.scheduler = scheduler
        self.forward = forward
        self.clock = clock
        #: sends an event to ``topic`` again, keyed by its host (None: no partition check)
        self.reroute = reroute
        # why a ping or an outcome did what it did: the worker's ring (not Redis)
        if decisions is None:
            decisions = (scheduler.decisions if scheduler is not None
                         else DecisionRing(per_page=settings.decisions_per_page))
        self.decisions = decisions
        self.stopping = False
        #: what to do when Redis lost the state of partitions (streams.worker.recovery);
        #: None: the batch fails (and is rejected as an internal error)
        self.recover: Callable[[CatalogueLost], Awaitable[None]] | None = None
        #: outages retried, reported with the address every ``outage_report_s``
        self.outages = {
            "redis": OutageReport("redis", redis_address(settings.redis_url),
                                  settings.outage_report_s, log),
            "kafka": OutageReport("kafka", settings.kafka_bootstrap,
                                  settings.outage_report_s, log)}
        half_life = settings.estimator_half_life_s or math.inf
        self.estimation = Estimation(half_life,
                                     host_min_pages=self.settings.host_prior_min_pages)

    # -- plumbing ------------------------------------------------------------------------
    async def reject(self, event: faust.types.EventT[Any], reason: str) -> None:
        """Send ``event`` to the rejects with ``reason``; never raises (but a cancellation).

        The reject is bounded (:func:`streams.events.records.reject_payload`: key and value
        cut, their sizes and digests kept); an outage is retried until it ends; a reject that
        is refused for good (the producer or the broker: a record too large for the topic,
        a topic that cannot be written) goes to the dead-letter topic instead
        (:meth:`dead_letter`).  Its delivery is awaited at the end of the batch
        (:meth:`_settle`), before the batch is acked."""
        msg = event.message
        self.metrics.reject(_logical(msg.topic))
        try:
            payload = reject_payload(msg.value, msg.topic, msg.partition, msg.offset, reason,
                                     key=msg.key)
            key, body = cut_key(msg.key), json.dumps(payload).encode()
            sent = await self._retry("kafka", lambda: self.reject_sink(key, body))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self.dead_letter(event, reason, exc)
            return
        await self._track(sent, lambda exc: self._reject_failed(event, reason, key, body, exc))

    async def _track(self, sent: Any,
                     on_error: Callable[[BaseException], Awaitable[None]]) -> None:
        """A send's delivery (an awaitable from the producer, if any), awaited with the
        batch's others (:meth:`_settle`), or here outside a batch: a failed one calls
        ``on_error``."""
        if not asyncio.isfuture(sent):
            return  # a sink that returns once delivered (or a test's)
        pending = _DELIVERIES.get()
        if pending is not None:
            pending.append((sent, on_error))
            return
        try:
            await sent
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await on_error(exc)

    async def _reject_failed(self, event: faust.types.EventT[Any], reason: str,
                             key: bytes | None, body: bytes, exc: BaseException) -> None:
        """A reject the broker did not take: sent again while the cause is an outage (and
        awaited), else the event goes to the dead-letter topic."""
        while kafka_transient(exc):
            self.metrics.retry("kafka")
            log.warning("reject not delivered (%r); sending it again", exc)
            await asyncio.sleep(0.2)
            try:
                sent = await self.reject_sink(key, body)
                if asyncio.isfuture(sent):
                    await sent
                return
            except asyncio.CancelledError:
                raise
            except Exception as again:
                exc = again
        await self.dead_letter(event, reason, exc)

    async def dead_letter(self, event: faust.types.EventT[Any], reason: str,
                          error: BaseException) -> None:
        """``event``'s pointer (topic, partition, offset, why, the reject's error, the sizes
        and digests of its key and value) to the dead-letter topic, delivery awaited; if
        even that fails, logged with the same fields and counted (``rejects.lost``).
        Never raises (but a cancellation): the group keeps consuming."""
        msg = event.message
        payload = dead_letter_payload(msg.value, msg.key, msg.topic, msg.partition,
                                      msg.offset, reason, kafka_cause(error))
        body = json.dumps(payload)
        self.metrics.tally["rejects.dead-lettered"] += 1
        log.error("reject not written (%r): sent to the dead-letter topic instead: %s",
                  kafka_cause(error), body)
        if self.dead_letter_sink is not None:
            try:
                sent = await self._retry("kafka", lambda: self.dead_letter_sink(  # type: ignore[misc]
                    None, body.encode()))
                if asyncio.isfuture(sent):
                    await sent
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("dead-letter record not written either (%r)", exc)
        self.metrics.tally["rejects.lost"] += 1
        log.error("input neither rejected nor dead-lettered (counted rejects.lost): %s", body)

    async def _settle(self, pending: list[tuple[Awaitable[Any], Callable[
            [BaseException], Awaitable[None]]]]) -> None:
        """Await the batch's deliveries; each failed one is handled by its ``on_error``."""
        while pending:
            now, pending[:] = list(pending), []
            results = await asyncio.gather(*(d for d, _ in now), return_exceptions=True)
            for (_d, on_error), res in zip(now, results, strict=True):
                if isinstance(res, asyncio.CancelledError):
                    raise res
                if isinstance(res, BaseException):
                    await on_error(res)

    async def _retry(self, where: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Run ``fn`` until it succeeds; transient failures (outages of ``where``: "redis"
        or "kafka") back off and retry (:func:`streams.retry.retry`), reported with the
        service's address (:attr:`outages`) and counted; any other failure is raised."""
        def transient(exc: Exception) -> bool:
            return isinstance(exc, TRANSIENT) or (where == "kafka" and kafka_transient(exc))

        return await retry(fn, what="", backoff=OUTAGE_BACKOFF, retryable=transient,
                           report=self.outages[where],
                           on_retry=lambda _exc: self.metrics.retry(where))

    async def _checked(self, events: Sequence[faust.types.EventT[Any]],
                       model: type[BaseModel]) -> list[Job]:
        """The events that are valid and on their host's partition; the invalid ones go to
        the rejects with their reason, the ones on another partition (no key, or a producer
        with another partitioner) are sent again keyed by their host, so that each host's
        events stay on one partition and one shard (counted ``<topic>.rerouted``)."""
        jobs: list[Job] = []
        bad: list[tuple[faust.types.EventT[Any], str]] = []
        moved: list[tuple[faust.types.EventT[Any], str]] = []
        for i in range(0, len(events), VALIDATE_SLICE):
            if i:
                await asyncio.sleep(0)  # a large batch does not hold the loop throughout
            j, b, m = self._validate(events[i:i + VALIDATE_SLICE], model)
            jobs += j
            bad += b
            moved += m
        for ev, reason in bad:
            await self.reject(ev, reason)
        for ev, host in moved:
            await self._move(ev, host)
        return jobs

    async def _move(self, ev: faust.types.EventT[Any], host: str) -> None:
        """``ev`` sent again keyed by ``host`` (its host's partition); one the producer or
        the broker refuses (e.g. too large once its key and header are added) is rejected
        alone with that reason, its batch-mates are not affected."""
        msg = ev.message
        reroute = self.reroute
        assert reroute is not None
        home = shard_of(host, self.settings.partitions)

        async def refused(exc: BaseException) -> None:
            # (not "<topic>.*": those counters are the events' ends, and this one ends
            # as a reject)
            self.metrics.tally[f"reroutes-failed.{_logical(msg.topic)}"] += 1
            await self.reject(ev, f"on partition {msg.partition}, but host {host!r} belongs "
                                  f"on {home}, and it could not be sent there: "
                                  f"{kafka_cause(exc)!r}")

        try:
            sent = await self._retry("kafka", lambda: reroute(msg.topic, host.encode(),
                                                              msg.value))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await refused(exc)
            return
        self.metrics.event(_logical(msg.topic), "rerouted")
        await self._track(sent, refused)

    def _validate(
        self, events: Sequence[faust.types.EventT[Any]], model: type[BaseModel]
    ) -> tuple[list[Job], list[tuple[faust.types.EventT[Any], str]],
               list[tuple[faust.types.EventT[Any], str]]]:
        ctx = {"now_s": self.clock(), "max_future_s": self.settings.max_future_s}
        jobs: list[Job] = []
        bad: list[tuple[faust.types.EventT[Any], str]] = []
        moved: list[tuple[faust.types.EventT[Any], str]] = []
        n = self.settings.partitions
        for ev in events:
            msg = ev.message
            try:
                rec = model.model_validate_json(msg.value or b"", context=ctx)
            except ValidationError as exc:
                bad.append((ev, validation_reason(exc)))
                continue
            except Exception as exc:  # e.g. a value that is not bytes at all
                bad.append((ev, f"undecodable: {exc!r}"))
                continue
            key_host = getattr(rec, "host", None)
            if msg.key and key_host is not None:
                key = msg.key.decode("utf-8", "replace") if isinstance(
                    msg.key, bytes) else str(msg.key)
                if key != key_host and _key_host(key) != key_host:  # any spelling will do
                    bad.append((ev, f"key {key!r} does not match the url's host {key_host!r}"))
                    continue
            if key_host is not None and self.reroute is not None:
                home = shard_of(key_host, n)
                if msg.partition != home:
                    if _rerouted(msg):  # sent here by a worker already: a setup error
                        bad.append((ev, f"on partition {msg.partition}, but host {key_host!r} "
                                        f"belongs on {home} of {n} (RECRAWL_PARTITIONS): "
                                        "the topic has another partition count"))
                    else:
                        moved.append((ev, key_host))
                    continue
            jobs.append(Job(ev, rec, msg.topic, msg.partition, msg.offset))
        return jobs, bad, moved

    async def _store(self, call: Callable[[], Awaitable[_R]]) -> _R:
        """A store batch, run again until the store takes it (an outage; every mutation is
        offset-guarded, so a batch run twice is applied once).  After a failed attempt
        (Redis away) the catalogue mark is checked before the next: a Redis that came back
        empty gets the batch only after its rebuild (:class:`CatalogueLost`, handled by
        :meth:`_safely`), else the batch's offsets would hide the earlier events from it."""
        tried = False

        async def attempt() -> _R:
            nonlocal tried
            if tried and self.logs is not None:
                why = await self.logs.lost()
                if why is not None:
                    raise CatalogueLost(set(), why)
            tried = True
            return await call()

        result: _R = await self._retry("redis", attempt)
        return result

    async def _safely(self, events: Sequence[faust.types.EventT[Any]], name: str,
                      fn: Callable[[], Awaitable[None]]) -> None:
        pending: list[tuple[Awaitable[Any], Callable[[BaseException], Awaitable[None]]]] = []
        token = _DELIVERIES.set(pending)
        try:
            messages = [ev.message for ev in events]
            if self.scheduler is not None and name in SHARDED:
                await self.scheduler.wait_loaded({m.partition for m in messages})
            if self.logs is not None:  # a partition's log replaced? (streams/store/logs.py)
                await self._retry("redis", lambda: self._resolve(messages))
            try:
                await fn()
            except CatalogueLost as lost:  # Redis came back empty while the batch waited
                if self.recover is None:
                    raise
                await self.recover(lost)
                await self._retry("redis", lambda: self._resolve(messages))
                await fn()  # (its records are redeliveries of the replay's now)
            if self.logs is not None:
                await self._retry("redis", lambda: self.logs.mark(messages))  # type: ignore[union-attr]
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: make it visible, never lose the batch silently
            log.exception("%s batch failed", name)
            for ev in events:
                await self.reject(ev, f"internal error: {exc!r}")
        finally:
            _DELIVERIES.reset(token)
        # the batch's rejects and moved events delivered (or dead-lettered) before its ack
        await self._settle(pending)

    async def _resolve(self, messages: list[Any]) -> None:
        """The epochs of the batch's partitions; a lost catalogue is rebuilt first."""
        assert self.logs is not None
        try:
            await self.logs.resolve(messages)
        except CatalogueLost as lost:
            if self.recover is None:
                raise
            await self.recover(lost)
            await self.logs.resolve(messages)

    # -- pages ---------------------------------------------------------------------------
    async def on_pages(self, events: Sequence[faust.types.EventT[Any]]) -> None:
        await self._safely(events, "pages", lambda: self._pages(events))

    async def _pages(self, events: Sequence[faust.types.EventT[Any]]) -> None:
        jobs = await self._checked(events, PageEvent)
        await all_of([self._pages_of(g) for g in by_host_groups(jobs)])

    async def _pages_of(self, jobs: list[Job]) -> None:
        ops = [PageOp(j.record.url, j.record.host, j.record.importance,
                      j.record.change_rate_per_s, j.record.deleted, j.topic, j.partition,
                      j.offset) for j in jobs]
        results = await self._store(lambda: self.store.apply_pages(ops))
        updates: list[PageUpdate] = []
        for j, res in zip(jobs, results, strict=True):
            p = j.record
            if isinstance(res, Exception):
                await self.reject(j.event, f"internal error: {res!r}")
                continue
            code, value = _s(res[0]), _s(res[1])
            self.metrics.event("pages", code)
            updates.append((j.partition, p.host, p.url, value or None, False, None))
        if self.scheduler is not None and updates:
            self.scheduler.on_pages(updates)

    # -- pings ---------------------------------------------------------------------------
    async def on_pings(self, events: Sequence[faust.types.EventT[Any]]) -> None:
        await self._safely(events, "pings", lambda: self._pings(events))

    async def _pings(self, events: Sequence[faust.types.EventT[Any]]) -> None:
        jobs = await self._checked(events, PingEvent)
        await all_of([self._pings_of(g) for g in by_host_groups(jobs)])

    async def _pings_of(self, jobs: list[Job]) -> None:
        ctl = self.scheduler.control if self.scheduler is not None else None
        t_delay = ctl.t_delay_s if ctl is not None else self.settings.t_delay_s

        # one script call per (host, partition): the offset checked once per batch
        groups: dict[tuple[str, str, int], list[Job]] = {}
        for j in jobs:
            groups.setdefault((j.record.host, j.topic, j.partition), []).append(j)

        batches = [PingBatch(host, topic, partition,
                             [(j.offset, j.record.url, j.record.source, j.record.changed_at,
                               j.record.received_at, j.record.fingerprint()) for j in group])
                   for (host, topic, partition), group in groups.items()]
        replies = await self._store(lambda: self.store.apply_pings(batches, t_delay_s=t_delay))
        results: list[Any] = []
        for group, res in zip(groups.values(), replies, strict=True):
            for k, j in enumerate(group):
                results.append((j, res if isinstance(res, Exception) else res[k]))
        updates: list[PageUpdate] = []
        counts: collections.Counter[tuple[str, str]] = collections.Counter()
        try:
            for j, res in results:
                g = j.record
                if isinstance(res, Exception):
                    await self.reject(j.event, f"internal error: {res!r}")
                    continue
                code, value = _s(res[0]), _s(res[1])
                counts[g.source, code] += 1
                if code == "before-crawl":
                    self.decisions.add(g.url, f"{g.received_at:.3f} ping {g.source} dropped: "
                                              "change precedes the last crawl")
                elif code == "within-delay":
                    self.decisions.add(g.url, f"{g.received_at:.3f} ping {g.source} dropped: "
                                              f"within T_DELAY={t_delay:g}s of the crawl")
                if code == "unknown" and self.forward is not None:
                    await self._forward(g.host, g.url)
                if code in ("applied", "dup-offset") and value:
                    updates.append((j.partition, g.host, g.url, value, False, None))
        finally:  # counted once per (source, result) of the batch, not once per ping
            for (source, code), n in counts.items():
                self.metrics.event("pings", code, n)
                self.metrics.ping(source, code, n)
        if self.scheduler is not None and updates:
            self.scheduler.on_pages(updates)  # the book's update, on arrays

    async def _forward(self, host: str, url: str) -> None:
        """A pinged page not in the catalogue, sent to the pages topic as a discovery; one
        the producer refuses for good is logged and counted (``forwards.failed``),
        the ping itself is applied (counted ``unknown``)."""
        forward = self.forward
        assert forward is not None
        body = json.dumps({"url": url}).encode()

        async def failed(exc: BaseException) -> None:
            self.metrics.tally["forwards.failed"] += 1
            log.error("discovery of %s not forwarded to the pages topic: %r", url,
                      kafka_cause(exc))

        try:
            sent = await self._retry("kafka", lambda: forward(host.encode(), body))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await failed(exc)
            return
        await self._track(sent, failed)

    # -- outcomes ------------------------------------------------------------------------
    async def on_outcomes(self, events: Sequence[faust.types.EventT[Any]]) -> None:
        await self._safely(events, "outcomes", lambda: self._outcomes(events))

    async def _outcomes(self, events: Sequence[faust.types.EventT[Any]]) -> None:
        jobs = await self._checked(events, OutcomeEvent)
        await all_of([self._outcomes_of(g) for g in by_host_groups(jobs)])

    async def _outcomes_of(self, jobs: list[Job]) -> None:
        # A url at most once per chunk: its estimator update reads the previous one's result.
        chunk: list[Job] = []
        urls: set[str] = set()
        for j in jobs:
            if j.record.url in urls:
                await self._outcome_chunk(chunk)
                chunk, urls = [], set()
            chunk.append(j)
            urls.add(j.record.url)
        if chunk:
            await self._outcome_chunk(chunk)

    async def _outcome_chunk(self, jobs: list[Job]) -> None:
        """Apply outcomes (each url once): read the page and its estimator record, add the
        crawl interval to the estimator (vectorised: ``Estimation.observe``), then write it in
        the outcome's offset-guarded Lua step with a compare-and-set on what was read; the
        few that lose the race (a ping arrived in between) are read and computed again."""
        todo = jobs
        for attempt in range(MAX_CAS_ATTEMPTS):
            todo = await self._outcome_attempt(todo, cas=attempt < MAX_CAS_ATTEMPTS - 1)
            if not todo:
                return
        log.error("outcomes: %d events kept conflicting; applied without estimator", len(todo))

    async def _outcome_attempt(self, jobs: list[Job], *, cas: bool) -> list[Job]:
        # the pages, and their hosts' prior sums as they are before this chunk (each page's
        # posterior under its host's prior: Estimation.host_contributions), in one round trip
        current, sums = await self._store(lambda: self.store.read_outcome_inputs(
            [(j.record.host, j.record.url) for j in jobs]))
        observations: list[Observation] = []
        observed: list[int] = []
        reads: list[str | None] = []
        for i, j in enumerate(jobs):
            o = j.record
            value = _opt(current[i])
            reads.append(value)  # what the outcome script compares
            est = estimator_part(value)  # the page value's tail
            if value and o.changed is not None:
                state = PageState.decode(value)
                # a fetch at the last crawl's time (to the ms kept) is that crawl again
                if state.crawled and float(f"{o.fetched_at:.3f}") > state.last_crawl_s:
                    observed.append(i)
                    observations.append(Observation(
                        est, o.fetched_at - state.last_crawl_s,
                        o.interval_signals(state.signals), o.changed,
                        o.fetched_at, state.prior_change_rate_per_s, sums[o.host],
                        o.signals_known))
        new_records: dict[int, str] = {}
        if observations:
            try:
                # vectorised, in slices: the loop (the scheduler's ticks) runs in between
                new: list[str] = []
                for k in range(0, len(observations), OBSERVE_SLICE):
                    if k:
                        await asyncio.sleep(0)
                    new += self.estimation.observe(observations[k : k + OBSERVE_SLICE])
                new_records = dict(zip(observed, new, strict=True))
            except Exception:  # a numerical failure must not block the crawl bookkeeping
                log.exception("estimator update failed; outcomes applied without it")
        plans: list[tuple[Job, str | None, str, str | None]] = []
        for i, j in enumerate(jobs):
            o = j.record
            new_est = new_records.get(i)
            status = o.error or (f"HTTP {o.status}" if o.status is not None else "")
            changed = {True: "changed", False: "unchanged", None: "change unknown"}[o.changed]
            decision = f"{o.fetched_at:.3f} fetched: {changed} {status}".rstrip()
            if o.disallowed:
                decision = (f"{o.fetched_at:.3f} not fetched: {o.error or 'robots.txt disallows'}"
                            "; not ordered until the host's robots.txt changes")
            plans.append((j, new_est, decision,
                          new_est or estimator_part(reads[i])))

        ops = [OutcomeOp(j.record.url, j.record.host, j.record.order_id, j.record.fetched_at,
                         new_est, j.topic, j.partition, j.offset,
                         expect=reads[i] if (cas and new_est is not None) else None,
                         disallowed=j.record.disallowed, robots_digest=j.record.robots_digest)
               for i, (j, new_est, _decision, _after) in enumerate(plans)]

        # robots.txt epochs before the write: a change applied while it runs (the hosts
        # agent interleaves) must not be undone in memory by this batch's 'blocked'
        epochs = ({(j.partition, j.record.host): self.scheduler.robots_epoch(
            j.partition, j.record.host) for j, *_ in plans} if self.scheduler is not None else {})
        results = await self._store(lambda: self.store.apply_outcomes(ops))
        retry: list[Job] = []
        updates: list[PageUpdate] = []
        codes: collections.Counter[str] = collections.Counter()
        try:
            for (j, _e, decision, est_after), res in zip(plans, results, strict=True):
                o = j.record
                if isinstance(res, Exception):
                    await self.reject(j.event, f"internal error: {res!r}")
                    continue
                code, value, cleared = _s(res[0]), _s(res[1]), int(res[2])
                if code == "conflict":
                    retry.append(j)
                    continue
                codes[code] += 1
                if code in ("applied", "stale", "blocked"):
                    self.decisions.add(o.url, decision if code != "stale"
                                       else f"{decision} (older than the last crawl: ignored)")
                elif code == "stale-robots":
                    self.decisions.add(o.url, f"{o.fetched_at:.3f} robots.txt disallowed it, but "
                                              "a newer robots.txt was announced since: ignored")
                if code == "blocked" and self.scheduler is not None:
                    self.scheduler.on_blocked(j.partition, o.host, o.url,
                                              epoch=epochs.get((j.partition, o.host)))
                if code == "dup-offset":
                    est_after = None  # the stored record is what the scheduler already has
                if value:
                    updates.append((j.partition, o.host, o.url, value, bool(cleared), est_after))
        finally:  # counted once per result of the batch
            for code, n in codes.items():
                self.metrics.event("outcomes", code, n)
        if self.scheduler is not None and updates:
            self.scheduler.on_pages(updates)
        return retry

    # -- hosts ---------------------------------------------------------------------------
    async def on_hosts(self, events: Sequence[faust.types.EventT[Any]]) -> None:
        await self._safely(events, "hosts", lambda: self._hosts(events))

    async def _hosts(self, events: Sequence[faust.types.EventT[Any]]) -> None:
        jobs = await self._checked(events, HostEvent)

        ops = [HostOp(j.record.host, j.record.max_crawls_per_s, j.record.max_in_flight, j.topic,
                      j.partition, j.offset, source=j.record.source, reason=j.record.reason,
                      robots_digest=j.record.robots_digest,
                      default_rate_per_s=self.settings.default_host_crawls_per_s)
               for j in jobs]
        results = await self._store(lambda: self.store.apply_hosts(ops))
        for j, res in zip(jobs, results, strict=True):
            h = j.record
            if isinstance(res, Exception):
                await self.reject(j.event, f"internal error: {res!r}")
                continue
            code, rate, cleared = _s(res[0]), _s(res[1]), int(res[2])
            self.metrics.event("hosts", code)
            if self.scheduler is not None and code in ("applied", "dup-offset"):
                # the host's capacity is the smallest of its sources' (the script's answer)
                mif = (h.max_in_flight if h.source == "operator"
                       else self.scheduler.max_in_flight_of(j.partition, h.host))
                self.scheduler.on_host(j.partition, h.host, float(rate) if rate else None, mif)
                if cleared:
                    await self.scheduler.on_robots_changed(j.partition, h.host)

    # -- control -------------------------------------------------------------------------
    async def on_control(self, events: Sequence[faust.types.EventT[Any]]) -> None:
        await self._safely(events, "control", lambda: self._control(events))

    async def _control(self, events: Sequence[faust.types.EventT[Any]]) -> None:
        jobs = await self._checked(events, ControlEvent)

        ops = [ControlOp(j.record.fields(), j.topic, j.partition, j.offset) for j in jobs]
        results = await self._store(lambda: self.store.apply_control(ops))
        for j, res in zip(jobs, results, strict=True):
            if isinstance(res, Exception):
                await self.reject(j.event, f"internal error: {res!r}")
                continue
            self.metrics.event("control", _s(res))
        if jobs and self.scheduler is not None:
            await self.scheduler.refresh_control()


def by_host_groups(jobs: list[Job], groups: int = HOST_GROUPS,
                   least: int = HOST_GROUP_MIN) -> list[list[Job]]:
    """``jobs`` split into groups of whole hosts, every group in the batch's order: at most
    ``groups``, and at most one per ``least`` jobs (one group for a small batch); hosts are
    dealt to the groups in turn as they first appear.

    Handled at once (:func:`all_of`), one group's Redis scripts run while the event loop
    builds the next group's or applies the last one's replies, instead of waiting: end to
    end, the worker's loop sat in ``epoll`` about a third of the pings phase, the time Redis
    took (docs/benchmarks.md).  What must stay in order does: a page's events, and each
    host's offsets (the scripts guard them per host and partition), are in one group, in
    order, and one group's commands go to Redis in one write."""
    k = min(groups, len(jobs) // max(least, 1))
    if k <= 1:
        return [jobs] if jobs else []
    out: list[list[Job]] = [[] for _ in range(k)]
    slot: dict[str, int] = {}
    for j in jobs:
        host = j.record.host
        g = slot.get(host)
        if g is None:
            g = slot[host] = len(slot) % k
        out[g].append(j)
    return [g for g in out if g]


async def all_of(calls: Sequence[Awaitable[None]]) -> None:
    """Run ``calls`` at once; once all have ended, raise the first exception if any (so
    that no group is left running when the batch's error handling starts)."""
    if len(calls) == 1:
        await calls[0]
        return
    results = await asyncio.gather(*calls, return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _opt(x: Any) -> str | None:
    if x is None or x == "":
        return None
    return _s(x)


def _logical(topic: str) -> str:
    return topic.rsplit(".", 1)[-1]


def register_agents(
    app: faust.App,
    settings: Settings,
    *,
    store: StateStore | None = None,
    reject_sink: RejectSink | None = None,
    metrics: Metrics | None = None,
    scheduler: Scheduler | None = None,
    reroute: bool = True,
    batch_consumer: bool = False,
) -> dict[str, faust.types.AgentT[Any]]:
    """Attach the agents to ``app``; ``store`` and ``reject_sink`` default to the real ones.
    ``reroute``: events on another partition than their host's are sent again to it
    (:meth:`Agents._checked`); off for ``agent.test_context()`` tests (no broker).
    ``batch_consumer``: the app's consumer is :class:`streams.worker.consumer.BatchConsumer`
    (``create_app``), which hands the records to the handlers itself."""
    if store is None:
        store = Store.from_url(settings.redis_url, settings.key_prefix)
    metrics = metrics or Metrics()
    app.recrawl_store = store  # type: ignore[attr-defined]

    def topic(name: str) -> Any:
        # created by Faust when missing: the catalogue's topics with infra's retention
        return app.topic(settings.topic(name), value_serializer="raw", key_serializer="raw",
                         config=topic_config(settings.topic(name)) or None)

    rejects_topic = topic("rejects")
    inputs = {name: topic(name) for name in ("pages", "pings", "outcomes", "hosts", "control")}
    by_name = {settings.topic(name): t for name, t in inputs.items()}

    dead_letter_topic = topic("deadletter")

    # each returns once the record is in the producer, with its delivery to await
    # (Agents._track): a record the broker refuses is seen, not lost.  ``force``: sent now,
    # not attached to the event being handled (Faust would send it at the event's ack,
    # after the batch that awaits its delivery)
    async def send_to_rejects(key: bytes | None, value: bytes) -> Any:
        return await rejects_topic.send(key=key, value=value, force=True)

    async def send_to_dead_letter(key: bytes | None, value: bytes) -> Any:
        return await dead_letter_topic.send(key=key, value=value, force=True)

    async def forward_page(key: bytes, value: bytes) -> Any:
        return await inputs["pages"].send(key=key, value=value, force=True)

    async def send_again(topic_name: str, key: bytes, value: bytes | None) -> Any:
        return await by_name[topic_name].send(key=key, value=value,
                                              headers={REROUTED_HEADER: b"1"}, force=True)

    # which incarnation of each input log the offsets belong to: kept in Redis beside them
    # (an in-memory store starts empty with every process: nothing to tell apart)
    logs = (LogEpochs(store.redis, settings.key_prefix, kafka_probe(settings.kafka_bootstrap))
            if isinstance(store, Store) else None)
    logic = Agents(
        settings, store, metrics, reject_sink or send_to_rejects, scheduler=scheduler,
        forward=forward_page if settings.forward_discoveries else None,
        reroute=send_again if reroute else None, logs=logs,
        dead_letter_sink=send_to_dead_letter if reject_sink is None else None,
    )

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]
    async def _check_logs_again(sender: Any, assigned: Any, **_kw: Any) -> None:
        if logs is not None:
            logs.forget()
    app.recrawl_agents = logic  # type: ignore[attr-defined]
    handlers: dict[str, BatchHandler] = {
        "pages": logic.on_pages,
        "pings": logic.on_pings,
        "outcomes": logic.on_outcomes,
        "hosts": logic.on_hosts,
        "control": logic.on_control,
    }
    if logs is not None:
        from streams.worker.recovery import attach

        handlers = attach(app, settings, store, metrics, scheduler, logic, logs, handlers)
    # each batch counted per topic (/stats: events per batch), whichever path delivers it
    handlers = {name: _counted(handler, name, metrics) for name, handler in handlers.items()}
    if batch_consumer:  # read by streams.worker.consumer.BatchConsumer
        app.recrawl_metrics = metrics  # type: ignore[attr-defined]
        app.recrawl_batch_handlers = {  # type: ignore[attr-defined]
            settings.topic(name): handler for name, handler in handlers.items()}
    # with the batch consumer the agents' streams stay empty (they keep their topics
    # subscribed): a long wait spares the loop a wake-up of each every RECRAWL_BATCH_WAIT_S
    wait_s = 1.0 if batch_consumer else settings.batch_wait_s
    agents: dict[str, faust.types.AgentT[Any]] = {}
    for name, handler in handlers.items():
        agents[name] = _make_agent(app, inputs[name], name, handler, settings.batch_size,
                                   wait_s)
    return agents


def _counted(handler: BatchHandler, name: str, metrics: Metrics) -> BatchHandler:
    tally, key = metrics.tally, f"batches.{name}"

    async def counted(events: Sequence[Any]) -> None:
        tally[key] += 1
        t0 = time.perf_counter()
        try:
            await handler(events)
        finally:
            metrics.handled(name, time.perf_counter() - t0)

    return counted


def _make_agent(
    app: faust.App, channel: Any, name: str,
    handler: BatchHandler, batch: int, wait_s: float,
) -> faust.types.AgentT[Any]:
    async def agent(stream: faust.StreamT[Any]) -> None:
        async for events in stream.take_events(batch, within=wait_s):  # type: ignore[attr-defined]
            await handler(events)

    agent.__name__ = agent.__qualname__ = f"recrawl_{name}"
    return app.agent(channel, name=f"recrawl.{name}", concurrency=1)(agent)
