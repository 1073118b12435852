"""The worker's Kafka consumer: Faust's, except that the input topics' records go to their
handlers a fetch at a time instead of one message at a time through Faust's streams.

Why: a py-spy profile of the worker over the end-to-end benchmark's pings and outcomes
phases (docs/benchmarks.md, "Design decisions") put about a quarter of its
loop in Faust's per-message path: for every message, ``Consumer._drain_messages`` wraps the
delivery in ``Service.wait_first`` (two tasks, an ``asyncio.wait``), the conductor takes a
lock, decodes an event and queues it, and the agent's stream takes it out again, while the
handlers themselves already work on whole batches.

What stays Faust's: the subscription (the agents stay registered, so their topics are
subscribed and assigned together, one partition number per shard), the rebalances, the
offsets and their commits.  A batch is delivered from the fetcher's own task, after the
records Faust still streams (the orders' topic has no agent; none of the worker's topics
goes through both paths); its messages are tracked as unacked while the handler runs
(a rebalance's ``wait_empty`` waits for them, so the revocation's commit includes them),
and acked, in offset order, only once the handler returned: a handler that is cancelled
leaves them unacked, and Kafka delivers them again (every store write is offset-guarded).
A handler raises nothing (what it cannot apply goes to the rejects or the dead-letter
topic); should one raise anyway, its records are logged and acked, counted
``batches.failed``: a record that made the worker stop would stop it again at every
restart, and the whole group with it.  The read-offset rule (a record below a partition's
read offset is one already read) and the gap bookkeeping are Faust's, as in
``Consumer._drain_messages``.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from time import monotonic
from typing import Any, cast

from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.types import TP, Message

__all__ = ["BatchConsumer", "BatchEvent", "BatchHandler"]

log = logging.getLogger(__name__)


class BatchEvent:
    """What a handler reads of a Faust event: its ``message``."""

    __slots__ = ("message",)

    def __init__(self, message: Message) -> None:
        self.message = message


BatchHandler = Callable[[Sequence[Any]], Awaitable[None]]


class BatchConsumer(AIOKafkaConsumer):
    """Faust's aiokafka consumer with :meth:`getmany` delivering the records of the topics
    in ``app.recrawl_batch_handlers`` (topic name -> handler of a list of events) in one
    call per topic and fetch."""

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Message]]:
        handlers: dict[str, BatchHandler] = getattr(self.app, "recrawl_batch_handlers", {})
        if not handlers:
            async for item in super().getmany(timeout):
                yield item
            return
        t0 = monotonic()
        records, active = await self._wait_next_records(timeout)
        metrics = getattr(self.app, "recrawl_metrics", None)
        if metrics is not None:  # /stats: waiting for Kafka against handling (the handlers')
            metrics.waited(monotonic() - t0)
        generation = self.app.consumer_generation_id
        if records is None or self.should_stop:
            return
        to_message = self._to_message
        batches: dict[str, list[tuple[TP, Any]]] = {}
        # as Consumer.getmany: nothing once the flow stops or the generation changes (a
        # rebalance: the new assignment starts again from the committed offsets)
        if self.flow_active:
            for tp, record in self.scheduler.iterate(records):
                if not self.flow_active or self.app.consumer_generation_id != generation:
                    break
                if active is None or tp in active or tp in self._buffered_partitions:
                    if tp.topic in handlers:
                        batches.setdefault(tp.topic, []).append((tp, record))
                        continue
                    self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                    yield tp, to_message(tp, record)
        else:  # as Consumer.getmany: the flow stopped while fetching, back to the committed
            try:
                await self.perform_seek()
            except Exception as exc:
                log.warning("exception performing seek when flow not active %r", exc)
            return
        for topic, recs in batches.items():
            if not self.flow_active or self.app.consumer_generation_id != generation:
                return
            await self._deliver(handlers[topic], recs)

    async def _deliver(self, handler: BatchHandler, recs: list[tuple[TP, Any]]) -> None:
        read = self._read_offset
        metrics = getattr(self.app, "recrawl_metrics", None)
        acks_on = self.app.topics.acks_enabled_for(recs[0][0].topic)
        messages: list[Message] = []
        last: dict[TP, int] = {}
        for tp, record in recs:
            offset = record.offset
            r_offset = last.get(tp, read[tp])
            if r_offset is not None and offset < r_offset:
                continue  # read already (Consumer._drain_messages' rule)
            if acks_on and r_offset and offset - r_offset > 1:
                await self._add_gap(tp, r_offset + 1, offset)
            last[tp] = offset
            messages.append(self._to_message(tp, record))
        if not messages:
            return
        # a WeakSet in Faust (typed as a MutableSet)
        unacked = cast(weakref.WeakSet[Message], self._unacked_messages)
        unacked.update(messages)
        inbound = self.app.monitor.stream_inbound_time
        now = monotonic()
        for tp in last:
            inbound[tp] = now  # the aiokafka thread's "stream idle" check reads it
            self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
        try:
            await handler([BatchEvent(m) for m in messages])
        except asyncio.CancelledError:  # a stop: unacked, delivered again
            unacked.difference_update(messages)
            raise
        except Exception:
            # The handlers reject what they cannot apply (streams/worker/agents.py) and
            # raise nothing; should one still raise, the records are logged and acked:
            # raising here would stop the worker, and every restart would read the same
            # records and stop again (the whole group down until the offsets are moved
            # by hand).
            where = ", ".join(f"{tp.topic}[{tp.partition}]@{off}" for tp, off in last.items())
            log.exception("batch handler failed: %d records up to %s acked unhandled",
                          len(messages), where)
            if metrics is not None:
                metrics.tally["batches.failed"] += 1
        ack = self.ack
        for m in messages:
            ack(m)
        unacked.difference_update(messages)
        for tp, offset in last.items():
            read[tp] = offset
        if self._commit_every is not None and self._n_acked >= self._commit_every:
            self._n_acked = 0
            await self.commit()
