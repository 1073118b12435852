"""The Faust application: built by :func:`create_app` from :class:`~streams.settings.Settings`.

No module-level app: tests build one per test (own topics, consumer group, key prefix).
Pieces: the agents (:mod:`streams.worker.agents`), one scheduler task (:mod:`streams.scheduler`)
and the HTTP views (:mod:`streams.worker.web`), sharing one Redis store and one metrics registry.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from typing import Any

import faust
from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    InvalidProducerEpoch,
    LeaderNotAvailableError,
    NotLeaderForPartitionError,
    OutOfOrderSequenceNumber,
    ProducerClosed,
    ProducerFenced,
    UnknownProducerId,
)
from aiokafka.partitioner import DefaultPartitioner

from streams.settings import Settings

__all__ = ["OrdersProducer", "create_app"]

log = logging.getLogger(__name__)


class OrdersProducer:
    """The orders' own Kafka producer, idempotent: a send that aiokafka retries across a
    broker restart is written once (Faust's producer is not idempotent, and an order
    written twice reached the fetcher twice: two fetches, two outcomes for one order, seen
    by ``tests/integration/test_faults.py`` on a broker restart).  Started at the first
    order; :meth:`stop` flushes what is buffered (the worker's shutdown)."""

    #: the largest record batch :meth:`send_many` builds (Kafka's default
    #: ``max.message.bytes`` is 1 MiB)
    MAX_BATCH_BYTES = 256 * 1024
    #: keys whose partition is remembered (one per host: cleared when full)
    MAX_KEYS = 100_000

    #: delivery errors of an idempotent producer after which its batch was not written
    #: (the broker refused it, or had no leader for it) and its later batches, numbered
    #: after it, would be refused for their sequence (as seen after a broker restart:
    #: LeaderNotAvailable on the batches in flight, then OutOfOrderSequenceNumber on every
    #: later one): the producer is replaced and the batch sent again, same order ids
    REPLACE_ON = (OutOfOrderSequenceNumber, UnknownProducerId, InvalidProducerEpoch,
                  ProducerFenced, LeaderNotAvailableError, NotLeaderForPartitionError)
    #: seconds the orders a replaced producer refused wait for it to stop before they are
    #: sent again (its stop goes on in the background: :meth:`_replace`)
    STOP_S = 5.0

    def __init__(self, bootstrap: str, max_request_bytes: int = 1_048_576,
                 request_timeout_s: float = 40.0) -> None:
        self.bootstrap = bootstrap
        self.max_request_bytes = max_request_bytes
        self.request_timeout_s = request_timeout_s
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()
        self.stopped = False
        self._partitioner = DefaultPartitioner()
        self._partition_of: dict[tuple[bytes, int], int] = {}
        #: the tasks awaiting the deliveries (:meth:`_watch`)
        self._watchers: set[asyncio.Task[None]] = set()
        #: per producer, done once its stop returned: a batch of it still unsettled then
        #: never will be (:meth:`_delivered`)
        self._closed: dict[AIOKafkaProducer, asyncio.Future[None]] = {}
        #: replaced producers' stops going on in the background (:meth:`_replace`)
        self._stopping: set[asyncio.Task[None]] = set()
        #: orders sent again on a new producer, and orders whose delivery failed otherwise
        self.resent = 0
        self.undelivered = 0

    def _watch(self, fut: Any, topic: str, partition: int | None,
               records: list[tuple[bytes, bytes]], p: AIOKafkaProducer,
               outcome: asyncio.Future[list[int]] | None = None) -> None:
        """Await a batch's delivery in the background: one the broker refused for a reason
        in :data:`REPLACE_ON` (not written) is sent again on a new producer; any other
        failure is logged and counted (``undelivered``).  Without this, an idempotent
        producer whose sequence the broker stopped taking after a broker restart accepted
        every later order into its buffer and delivered none, while their pages stayed
        marked in flight (``tests/integration/test_faults.py``, "Kafka broker restart").
        ``outcome`` (if given) gets the positions in ``records`` of the orders given up at
        the end ([] when all were delivered, sent again or not), or fails when all were."""
        task = asyncio.ensure_future(
            self._delivered(fut, topic, partition, records, p, outcome))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _delivered(self, fut: Any, topic: str, partition: int | None,
                         records: list[tuple[bytes, bytes]], p: AIOKafkaProducer,
                         outcome: asyncio.Future[list[int]] | None) -> None:
        def settle(given_up: list[int], error: BaseException | None = None) -> None:
            if outcome is None or outcome.done():
                return
            if error is not None and len(given_up) == len(records):
                outcome.set_exception(error)
            else:
                outcome.set_result(given_up)
        closed = self._closed.get(p)
        try:
            if closed is not None and not fut.done():
                await asyncio.wait([fut, closed], return_when=asyncio.FIRST_COMPLETED)
            if not fut.done():
                # the producer stopped and will never settle it: aiokafka's add_batch appends
                # a batch that waited for its partition's previous one to drain without
                # checking again whether the producer closed meanwhile, and a stop cancels
                # the sender without failing what it still holds.  Never sent: sent again.
                raise ProducerClosed()
            fut.result()
            settle([])
            return
        except asyncio.CancelledError:
            settle(list(range(len(records))), RuntimeError("the orders producer stopped"))
            raise
        except Exception as exc:
            error: Exception = exc
        if not isinstance(error, (*self.REPLACE_ON, ProducerClosed)):
            self.undelivered += len(records)
            log.error("%d orders not delivered (%r)", len(records), error)
            settle(list(range(len(records))), error)
            return
        log.warning("orders producer refused by the broker (%r): a new producer sends %d "
                    "orders again", error, len(records))
        await self._replace(p)
        delay = 0.2
        loop = asyncio.get_running_loop()
        again: list[asyncio.Future[list[int]]] = []
        while not self.stopped and len(again) < len(records):
            try:
                q = await self._started()
                for key, value in records[len(again):]:
                    sent = await q.send(topic, value, key=key, partition=partition)
                    one: asyncio.Future[list[int]] = loop.create_future()
                    self._watch(sent, topic, partition, [(key, value)], q, one)
                    again.append(one)
                    self.resent += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("sending orders again failed (%r); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(2 * delay, 5.0)
        # (stopped before every order was sent again: the rest are given up)
        got = await asyncio.gather(*again, return_exceptions=True)
        given_up = [i for i, r in enumerate(got) if isinstance(r, BaseException) or r]
        given_up += list(range(len(again), len(records)))
        settle(given_up, error)

    async def _replace(self, p: AIOKafkaProducer) -> None:
        """Drop ``p`` (if still the current producer): the next send starts a new one.  Its
        stop (which waits for its batches to settle) gets :data:`STOP_S` here, then goes on
        in the background: never cut, so that every batch it holds is settled, by it or,
        once it has stopped, by :meth:`_delivered`."""
        async with self._lock:
            if self._producer is not p:
                return
            self._producer = None
        task = asyncio.ensure_future(self._stop_replaced(p))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)
        done, _ = await asyncio.wait({task}, timeout=self.STOP_S)
        if not done:
            log.warning("replaced orders producer still stopping after %.0f s: its batches "
                        "are settled when it has stopped", self.STOP_S)

    async def _stop_replaced(self, p: AIOKafkaProducer) -> None:
        try:
            await p.stop()
        except Exception as exc:  # (its batches fail, and are sent again)
            log.warning("replaced orders producer did not stop cleanly (%r)", exc)
        finally:
            closed = self._closed.pop(p, None)
            if closed is not None and not closed.done():
                closed.set_result(None)

    async def _started(self) -> AIOKafkaProducer:
        async with self._lock:
            if self.stopped:
                raise RuntimeError("the orders producer is stopped")
            if self._producer is None:
                # aiokafka's default partitioner is murmur2 on the key, as Kafka's Java
                # clients: an order lands on its host's partition
                p = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all",
                                     enable_idempotence=True, linger_ms=5,
                                     max_batch_size=self.MAX_BATCH_BYTES,
                                     max_request_size=self.max_request_bytes,
                                     request_timeout_ms=round(self.request_timeout_s * 1000))
                try:
                    await p.start()
                except BaseException:
                    await p.stop()
                    raise
                self._producer = p
                self._closed[p] = asyncio.get_running_loop().create_future()
            return self._producer

    async def send(self, topic: str, key: bytes, value: bytes) -> asyncio.Future[list[int]]:
        """Returns once the record is in the producer's batch, with its delivery's outcome
        (:meth:`_watch`; not awaited)."""
        p = self._producer if self._producer is not None else await self._started()
        sent = await p.send(topic, value, key=key)
        outcome: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self._watch(sent, topic, None, [(key, value)], p, outcome)
        return outcome

    def _partition(self, key: bytes, partitions: list[int]) -> int:
        """aiokafka's default partitioner (murmur2 of the key, as Kafka's Java clients),
        remembered per key: a tick orders the same hosts again and again."""
        k = (key, len(partitions))
        p = self._partition_of.get(k)
        if p is None:
            if len(self._partition_of) >= self.MAX_KEYS:
                self._partition_of.clear()
            p = self._partition_of[k] = self._partitioner(key, partitions, partitions)
        return p

    async def send_many(self, topic: str, records: list[tuple[bytes, bytes]]
                        ) -> AsyncIterator[tuple[list[int], Exception | None,
                                                 asyncio.Future[list[int]] | None]]:
        """A tick's orders (key, value) as record batches, one or more per partition, each
        handed to the producer whole (``send_batch``: no per-record future nor partitioner
        call); delivery not awaited.  Yields the indices of each batch once it is in the
        producer (error None) with its delivery's outcome (:meth:`_watch`: the positions
        among these indices of the orders given up at the end, after any sending again),
        or with the error that stopped it; after an error the remaining records are not
        tried and come back with it (a :data:`streams.scheduler.BatchSink`)."""
        try:
            p = self._producer if self._producer is not None else await self._started()
            partitions = sorted(await p.partitions_for(topic))
        except Exception as exc:  # no producer or no metadata: nothing was sent
            yield list(range(len(records))), exc, None
            return
        by_partition: dict[int, list[int]] = {}
        for i, (key, _value) in enumerate(records):
            by_partition.setdefault(self._partition(key, partitions), []).append(i)
        error: Exception | None = None
        for partition, indices in by_partition.items():
            start = 0
            while start < len(indices):
                if error is not None:
                    yield indices[start:], error, None
                    break
                batch = p.create_batch()
                end = start
                while end < len(indices):
                    key, value = records[indices[end]]
                    if batch.append(key=key, value=value, timestamp=None) is None:
                        break
                    end += 1
                if end == start:  # (aiokafka takes any first record of an empty batch;
                    # should one be refused, it fails alone instead of looping here)
                    yield [indices[start]], ValueError(
                        f"order of {len(records[indices[start]][1])} bytes does not fit in "
                        f"a batch of {self.MAX_BATCH_BYTES}"), None
                    start += 1
                    continue
                batch.close()
                try:
                    sent = await p.send_batch(batch, topic, partition=partition)
                except Exception as exc:  # e.g. the producer stopping
                    error = exc
                    yield indices[start:end], exc, None
                else:
                    outcome: asyncio.Future[list[int]] = (
                        asyncio.get_running_loop().create_future())
                    self._watch(sent, topic, partition,
                                [records[i] for i in indices[start:end]], p, outcome)
                    yield indices[start:end], None, outcome
                start = end

    def pending(self) -> int:
        """Batches whose delivery is not settled yet (sent again ones included)."""
        return len(self._watchers)

    async def flush(self) -> None:
        """Wait until every order handed over so far is delivered (or failed)."""
        if self._producer is not None:
            await self._producer.flush()

    async def stop(self) -> None:
        async with self._lock:
            self.stopped = True
            if self._producer is not None:
                await self._producer.stop()  # flushes first
                self._producer = None
        for task in list(self._stopping):  # replaced producers: stop them now
            task.cancel()
        await asyncio.gather(*self._stopping, return_exceptions=True)
        for task in list(self._watchers):  # every delivery is settled by the flush
            task.cancel()


def app_options(settings: Settings) -> dict[str, Any]:
    """The Faust app's settings (besides its id) for ``settings``."""
    return {
        "broker": f"kafka://{settings.kafka_bootstrap}",
        "store": "memory://",
        "autodiscover": False,
        "topic_partitions": settings.partitions,
        "topic_replication_factor": 1,
        "consumer_auto_offset_reset": "earliest",
        "web_enabled": settings.web_enabled,
        "web_host": settings.web_host,
        "web_bind": settings.web_host,
        "web_port": settings.web_port or 6066,
        "datadir": str(settings.data_dir),
        "broker_commit_interval": 2.0,
        "broker_session_timeout": settings.session_timeout_s,
        "broker_heartbeat_interval": settings.session_timeout_s / 4,
        "broker_rebalance_timeout": max(20.0, 2 * settings.session_timeout_s),
        "producer_acks": -1,
        # with the batch consumer a fetch is a batch: at most RECRAWL_BATCH_SIZE records
        # (aiokafka's default, None, returns everything prefetched: thousands of records
        # held at once, and one handler call that long holds the loop)
        "broker_max_poll_records": settings.batch_size if settings.batch_consumer else None,
        "consumer_max_fetch_size": settings.fetch_partition_bytes,
        # what the broker takes (Faust's default, 1,000,000 bytes, is less: an input event
        # the broker took could not be moved to its host's partition)
        "producer_max_request_size": settings.kafka_max_message_bytes,
        # an input topic deleted and created again (the broker creates no topic by itself:
        # infra/kafka.py) is seen at the next metadata refresh: within 10 s, not aiokafka's 5 min
        "consumer_metadata_max_age_ms": 10_000,
    }


def create_app(settings: Settings) -> faust.App:
    from streams.scheduler import Scheduler
    from streams.scheduler.confirm import kafka_order_log
    from streams.store.redis_store import Store
    from streams.telemetry.logs import quiet_library_logs
    from streams.telemetry.metrics import GC_PAUSES, Metrics
    from streams.worker.agents import register_agents
    from streams.worker.web import register_views

    GC_PAUSES.install()
    if settings.gc_freeze:  # (off: the interpreter's default collector)
        _g0, g1, g2 = gc.get_threshold()
        gc.set_threshold(settings.gc_gen0_threshold, g1, g2)

    app = faust.App(settings.app_id, **app_options(settings))
    quiet_library_logs(settings.outage_report_s)  # (faust imported aiokafka's modules)
    if settings.batch_consumer:  # before the consumer exists (created on first use)
        from streams.worker.consumer import BatchConsumer

        app.transport.Consumer = BatchConsumer  # type: ignore[misc]
    store = Store.from_url(settings.redis_url, settings.key_prefix)
    metrics = Metrics()
    # declared with the app's topics (created at start when missing)
    app.topic(settings.topic("orders"), value_serializer="raw", key_serializer="raw")
    pages_topic_name = settings.topic("pages")

    orders_name = settings.topic("orders")

    orders = OrdersProducer(settings.kafka_bootstrap, settings.kafka_max_message_bytes,
                            settings.orders_request_timeout_s)

    async def send_order(key: bytes, value: bytes) -> asyncio.Future[list[int]]:
        # no Faust message object per order: the call returns once the record is in the
        # producer's batch, with its delivery's outcome (not awaited: watched)
        return await orders.send(orders_name, key, value)

    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def _flush_orders(sender: Any, **_kw: Any) -> None:
        scheduler.stopping = True
        await orders.stop()

    def assignment() -> set[int]:
        return {tp.partition for tp in app.consumer.assignment() if tp.topic == pages_topic_name}

    def send_orders(records: list[tuple[bytes, bytes]]
                    ) -> AsyncIterator[tuple[list[int], Exception | None,
                                             asyncio.Future[list[int]] | None]]:
        return orders.send_many(orders_name, records)

    scheduler = Scheduler(settings, store, metrics, send_order, send_orders=send_orders,
                          assignment=assignment, manage_gc=settings.gc_freeze,
                          order_log=kafka_order_log(settings.kafka_bootstrap, orders_name))
    register_agents(app, settings, store=store, metrics=metrics, scheduler=scheduler,
                    batch_consumer=settings.batch_consumer)
    app.recrawl_scheduler = scheduler  # type: ignore[attr-defined]
    app.recrawl_metrics = metrics  # type: ignore[attr-defined]

    @app.task  # type: ignore[untyped-decorator]
    async def run_scheduler(app: Any) -> None:
        log.info("scheduler starting (tick %.3fs)", settings.tick_s)
        await scheduler.run()

    if settings.web_enabled:
        register_views(app, settings, store, scheduler, metrics)
    return app
