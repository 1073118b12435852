"""The Faust application: built by :func:`create_app` from :class:`~streams.settings.Settings`.

No module-level app: tests build one per test (own topics, consumer group, key prefix).
Pieces: the agents (:mod:`streams.worker.agents`), one scheduler task (:mod:`streams.scheduler`)
and the HTTP views (:mod:`streams.worker.web`), sharing one Redis store and one metrics registry.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import faust
from aiokafka import AIOKafkaProducer

from streams.settings import Settings

__all__ = ["OrdersProducer", "create_app"]

log = logging.getLogger(__name__)


class OrdersProducer:
    """The orders' own Kafka producer, idempotent: a send that aiokafka retries across a
    broker restart is written once (Faust's producer is not idempotent, and an order
    written twice reached the fetcher twice: two fetches, two outcomes for one order, seen
    by ``tests/integration/test_faults.py`` on a broker restart).  Started at the first
    order; :meth:`stop` flushes what is buffered (the worker's shutdown)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._producer: AIOKafkaProducer | None = None
        self._lock = asyncio.Lock()
        self.stopped = False

    async def _started(self) -> AIOKafkaProducer:
        async with self._lock:
            if self.stopped:
                raise RuntimeError("the orders producer is stopped")
            if self._producer is None:
                # aiokafka's default partitioner is murmur2 on the key, as Kafka's Java
                # clients: an order lands on its host's partition
                p = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all",
                                     enable_idempotence=True, linger_ms=5)
                try:
                    await p.start()
                except BaseException:
                    await p.stop()
                    raise
                self._producer = p
            return self._producer

    async def send(self, topic: str, key: bytes, value: bytes) -> None:
        """Returns once the record is in the producer's batch (delivery not awaited)."""
        p = self._producer if self._producer is not None else await self._started()
        await p.send(topic, value, key=key)

    async def stop(self) -> None:
        async with self._lock:
            self.stopped = True
            if self._producer is not None:
                await self._producer.stop()  # flushes first
                self._producer = None


def create_app(settings: Settings) -> faust.App:
    from streams.scheduler import Scheduler
    from streams.store.redis_store import Store
    from streams.worker.agents import register_agents
    from streams.worker.metrics import Metrics
    from streams.worker.web import register_views

    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.kafka_bootstrap}",
        store="memory://",
        autodiscover=False,
        topic_partitions=settings.partitions,
        topic_replication_factor=1,
        consumer_auto_offset_reset="earliest",
        web_enabled=settings.web_enabled,
        web_host=settings.web_host,
        web_bind=settings.web_host,
        web_port=settings.web_port or 6066,
        datadir=str(settings.data_dir),
        broker_commit_interval=2.0,
        broker_session_timeout=settings.session_timeout_s,
        broker_heartbeat_interval=settings.session_timeout_s / 4,
        broker_rebalance_timeout=max(20.0, 2 * settings.session_timeout_s),
        producer_acks=-1,
    )
    store = Store.from_url(settings.redis_url, settings.key_prefix)
    metrics = Metrics()
    # declared with the app's topics (created at start when missing)
    app.topic(settings.topic("orders"), value_serializer="raw", key_serializer="raw")
    pages_topic_name = settings.topic("pages")

    orders_name = settings.topic("orders")

    orders = OrdersProducer(settings.kafka_bootstrap)

    async def send_order(key: bytes, value: bytes) -> None:
        # no Faust message object per order: the call returns once the record is in the
        # producer's batch, its delivery is not awaited
        await orders.send(orders_name, key, value)

    @app.on_before_shutdown.connect  # type: ignore[arg-type]
    async def _flush_orders(sender: Any, **_kw: Any) -> None:
        scheduler.stopping = True
        await orders.stop()

    def assignment() -> set[int]:
        return {tp.partition for tp in app.consumer.assignment() if tp.topic == pages_topic_name}

    scheduler = Scheduler(settings, store, metrics, send_order, assignment=assignment)
    register_agents(app, settings, store=store, metrics=metrics, scheduler=scheduler)
    app.recrawl_scheduler = scheduler  # type: ignore[attr-defined]
    app.recrawl_metrics = metrics  # type: ignore[attr-defined]

    @app.task  # type: ignore[untyped-decorator]
    async def run_scheduler(app: Any) -> None:
        log.info("scheduler starting (tick %.3fs)", settings.tick_s)
        await scheduler.run()

    if settings.web_enabled:
        register_views(app, settings, store, scheduler, metrics)
    return app
