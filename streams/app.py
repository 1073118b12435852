"""The Faust application: built by :func:`create_app` from :class:`~streams.settings.Settings`.

No module-level app: tests build one per test (own topics, consumer group, key prefix).
"""

from __future__ import annotations

import faust

from streams.settings import Settings


def create_app(settings: Settings) -> faust.App:
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
        producer_acks=-1,
    )
    from streams.agents import register_agents

    register_agents(app, settings)
    return app
