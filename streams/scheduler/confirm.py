"""In-flight marks confirmed against the orders topic when a shard is rebuilt.

An order is issued in two steps: a Lua script marks the page in flight in Redis (with the
order's id and time), then the order goes to the producer; its delivery is not awaited
(marking first is deliberate: sending first could send a page twice).  A worker killed
between the two (SIGKILL, a crash, the machine lost) leaves marks whose orders were still
in its producer's buffer, or never reached it: the pages would wait for the order time-out
(``order_timeout_s``, 600 s by default) with no order out.  Kafka offers no transaction
spanning Redis and a topic, so the marks are the durable half (an outbox in Redis) and the
topic is the confirmation: when a worker rebuilds a shard, it reads the shard's partition
of the orders topic (orders are keyed by host, as the input events: the same partition
number) over the window in which an unconfirmed mark can be, and every mark whose order id
is not there is ended at once, as a time-out would (id-guarded, so a mark replaced
meanwhile is left alone): the page is a candidate again and is ordered anew.

The check waits until the youngest mark is :data:`SETTLE_S` old: a shard handed over by a
live worker (a rebalance without a crash) may still have its last orders in that worker's
producer, which sends them within milliseconds.  Marks older than :data:`WINDOW_S` at the
rebuild are not checked: a live worker ends a mark whose send failed
(:meth:`streams.scheduler.issuing.OrderIssuer._unsend`), and a dead one's last marks are at most the
group's member time-out (``RECRAWL_SESSION_TIMEOUT_S``) plus a rebalance old when its shards
are taken over.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
from collections.abc import Awaitable, Callable

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.retry import Backoff, retry
from streams.scheduler.shard import Shard
from streams.scheduler.state import SchedulerState

__all__ = ["SETTLE_S", "WINDOW_S", "OrderLog", "confirm_flights", "end_unconfirmed",
           "kafka_order_log", "settle", "unconfirmed"]

log = logging.getLogger(__name__)

#: a mark younger than this is not judged yet (its order may still be on its way)
SETTLE_S = 3.0
#: marks older than this at the rebuild are not checked (module docstring)
WINDOW_S = 180.0
#: read the topic from this long before the oldest mark checked (clocks of two machines)
SKEW_S = 30.0
#: the waits between attempts to read the orders topic
READ_BACKOFF = Backoff(0.5, 5.0)

#: order ids on the orders topic's ``partition`` issued since ``since_s`` (epoch seconds)
OrderLog = Callable[[int, float], Awaitable[set[str]]]


def unconfirmed(marks: dict[str, tuple[str, float]], on_topic: set[str], since_s: float
                ) -> list[tuple[str, str]]:
    """The ``(url, order_id)`` of the marks issued at or after ``since_s`` whose order is
    not on the topic."""
    return sorted((url, oid) for url, (oid, at) in marks.items()
                  if at >= since_s and oid not in on_topic)


def kafka_order_log(bootstrap: str, topic: str, timeout_s: float = 10.0) -> OrderLog:
    """An :data:`OrderLog` reading the orders topic with a consumer of no group."""

    async def order_ids(partition: int, since_s: float) -> set[str]:
        tp = TopicPartition(topic, partition)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False,
                                    request_timeout_ms=int(timeout_s * 1000))
        await consumer.start()
        try:
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            found = (await consumer.offsets_for_times({tp: max(0, int(since_s * 1000))}))[tp]
            start = found.offset if found is not None else end
            ids: set[str] = set()
            if start >= end:
                return ids
            consumer.seek(tp, start)
            while await consumer.position(tp) < end:
                got = await consumer.getmany(tp, timeout_ms=int(timeout_s * 1000),
                                             max_records=5000)
                if not got:
                    raise TimeoutError(f"orders {topic}:{partition} not read up to {end}")
                for rec in got.get(tp, []):
                    try:
                        ids.add(str(json.loads(rec.value)["order_id"]))
                    except (ValueError, KeyError, TypeError):
                        continue
            return ids
        finally:
            await consumer.stop()

    return order_ids


async def settle(marks: dict[str, tuple[str, float]], now_s: float, since_s: float) -> None:
    """Wait until the youngest mark checked is :data:`SETTLE_S` old."""
    young = max((at for _oid, at in marks.values() if at >= since_s), default=None)
    if young is not None and young + SETTLE_S > now_s:
        await asyncio.sleep(young + SETTLE_S - now_s)


async def confirm_flights(partition: int, in_flight: dict[str, tuple[str, float]],
                          order_log: OrderLog, now_s: float) -> list[tuple[str, str]]:
    """The marks of a rebuilt shard (``in_flight``: url -> (order id, issued at)) whose
    order never reached the orders topic: ``(url, order_id)``.  Waits for the youngest to
    settle; reads the topic until it answers."""
    since = now_s - WINDOW_S
    marks = {u: f for u, f in in_flight.items() if f[1] >= since}
    if not marks:
        return []
    await settle(marks, now_s, since)
    oldest = min(at for _oid, at in marks.values())
    on_topic = await retry(lambda: order_log(partition, oldest - SKEW_S),
                           what=f"reading the orders of shard {partition}",
                           backoff=READ_BACKOFF, logger=log)
    return unconfirmed(marks, on_topic, since)


async def end_unconfirmed(shard: Shard, order_log: OrderLog, state: SchedulerState) -> None:
    """End the marks of a rebuilt shard whose order never reached the orders topic (a
    worker killed with them in its producer): due at once, as a time-out, in the shard's
    order time-outs (the scheduler's next tick ends them)."""
    lost = await confirm_flights(shard.partition, dict(shard.in_flight), order_log,
                                 state.clock())
    lost = [(u, oid) for u, oid in lost if shard.in_flight.get(u, ("",))[0] == oid]
    if not lost:
        return
    log.warning("shard %d: %d orders marked in flight never reached the orders topic "
                "(their worker stopped before sending them): ordered again",
                shard.partition, len(lost))
    state.metrics.tally["orders.unconfirmed"] += len(lost)
    now = state.clock()
    for url, oid in lost:
        heapq.heappush(shard.timeouts, (0.0, url, oid))
        state.decisions.add(url, f"{now:.3f} order {oid} is not on the orders topic "
                                 "(its worker stopped before sending it): ended")
