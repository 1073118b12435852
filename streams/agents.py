"""Faust agents: decode, validate, call ``models``, write Redis state, emit.

Every agent runs with ``concurrency=1`` (faust-streaming issue #606) and catches every
exception: a message that cannot be processed goes to the rejects topic with its reason,
so nothing escapes (an escaped exception would ack the message anyway).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import faust
from pydantic import ValidationError

from streams.records import PageEvent, reject_payload
from streams.settings import Settings
from streams.state import Store

log = logging.getLogger(__name__)


RejectSink = Callable[[bytes | None, bytes], Awaitable[Any]]


def register_agents(
    app: faust.App,
    settings: Settings,
    *,
    store: Store | None = None,
    reject_sink: RejectSink | None = None,
) -> dict[str, faust.types.AgentT[Any]]:
    """Attach the agents to ``app``; ``store`` and ``reject_sink`` default to the real ones."""
    if store is None:
        store = Store.from_url(settings.redis_url, settings.key_prefix)
    app.recrawl_store = store  # type: ignore[attr-defined]
    pages_topic = app.topic(settings.topic("pages"), value_serializer="raw", key_serializer="raw")
    rejects_topic = app.topic(
        settings.topic("rejects"), value_serializer="raw", key_serializer="raw"
    )

    async def send_to_rejects(key: bytes | None, value: bytes) -> None:
        await rejects_topic.send(key=key, value=value)

    sink = reject_sink or send_to_rejects

    async def reject(event: faust.types.EventT[Any], reason: str) -> None:
        msg = event.message
        payload = reject_payload(msg.value, msg.topic, msg.partition, msg.offset, reason)
        await sink(msg.key, json.dumps(payload).encode())

    @app.agent(pages_topic, concurrency=1)
    async def pages(stream: faust.StreamT[Any]) -> None:
        async for event in stream.events():
            msg = event.message
            try:
                page = PageEvent.model_validate_json(msg.value)
            except ValidationError as exc:
                await reject(event, _reason(exc))
                continue
            try:
                await store.apply_page(page, msg.topic, msg.partition, msg.offset)
            except Exception as exc:  # never let it escape: it would ack the message
                log.exception("page event failed")
                await reject(event, f"internal error: {exc!r}")

    return {"pages": pages}


def _reason(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(message)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
