"""The Faust application: built by :func:`create_app` from :class:`~streams.settings.Settings`.

No module-level app: tests build one per test (own topics, consumer group, key prefix).
Pieces: the agents (:mod:`streams.agents`), one scheduler task (:mod:`streams.scheduler`)
and the HTTP views (:mod:`streams.web`), sharing one Redis store and one metrics registry.
"""

from __future__ import annotations

import logging
from typing import Any

import faust

from streams.settings import Settings

__all__ = ["create_app"]

log = logging.getLogger(__name__)


def create_app(settings: Settings) -> faust.App:
    from streams.agents import register_agents
    from streams.metrics import Metrics
    from streams.scheduler import Scheduler
    from streams.state import Store
    from streams.web import register_views

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

    async def send_order(key: bytes, value: bytes) -> None:
        # straight to the producer (no Faust message object per order): the call returns
        # once the record is in the producer's batch, its delivery is not awaited; keys
        # are partitioned by murmur2 as by Kafka's Java clients
        await app.producer.send(orders_name, key, value, None, None, None)

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
