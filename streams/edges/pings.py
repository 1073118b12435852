"""The ping record (``recrawl.pings``) and a producer for it.

A ping says "this URL changed (maybe at ``changed_at``)"; the worker treats it as a noisy
change-indicating signal.  The Kafka key is the URL's host (all topics are keyed by host),
the value is JSON::

    {"url", "source": "sitemap"|"indexnow"|"websub"|"cdn"|"other",
     "changed_at": float|null, "received_at": float, "id": str|null}

Times are float epoch seconds.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer

from streams.events.records import SOURCES, check_url, host_of
from streams.settings import Settings

__all__ = [
    "PING_SOURCES",
    "Ping",
    "PingProducer",
    "new_ping_id",
    "parse_ping_line",
    "parse_time",
    "publish_pings",
]

#: the ping sources the worker knows (one list: :data:`streams.events.records.SOURCES`)
PING_SOURCES = SOURCES


@dataclass(frozen=True, slots=True)
class Ping:
    url: str
    source: str = "other"
    changed_at: float | None = None
    received_at: float = field(default_factory=time.time)
    id: str | None = None

    def __post_init__(self) -> None:
        # the canonical form (streams.events.urls): one page is one key whatever the spelling
        object.__setattr__(self, "url", check_url(self.url))
        if self.source not in PING_SOURCES:
            known = ", ".join(PING_SOURCES)
            raise ValueError(f"source must be one of {known}, not {self.source!r}")
        for name in ("changed_at", "received_at"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, int | float) and v == v and abs(v) < 1e11):
                raise ValueError(f"{name} must be epoch seconds, not {v!r}")

    @property
    def host(self) -> str:
        return host_of(self.url)

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "source": self.source,
            "changed_at": self.changed_at,
            "received_at": self.received_at,
            "id": self.id,
        }

    def encode(self) -> tuple[bytes, bytes]:
        """``(key, value)`` as sent to Kafka."""
        return self.host.encode(), json.dumps(self.to_json(), separators=(",", ":")).encode()


def new_ping_id(source: str) -> str:
    return f"{source}:{uuid.uuid4().hex}"


class PingProducer:
    """Publishes pings to ``<topic_prefix>.pings``; use ``async with PingProducer(settings)``.

    ``sent`` counts the pings handed to Kafka (acknowledged by the broker after ``flush``).
    """

    def __init__(self, settings: Settings, *, linger_ms: int = 5) -> None:
        self.settings = settings
        self.topic = settings.topic("pings")
        self._producer = AIOKafkaProducer(
            bootstrap_servers=settings.kafka_bootstrap, linger_ms=linger_ms, acks="all"
        )
        self.sent = 0
        #: called with every ping handed to Kafka (e.g. to record a run)
        self.on_send: Callable[[Ping], None] | None = None

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def __aenter__(self) -> PingProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def send(self, ping: Ping) -> None:
        """Queue one ping (returns once buffered; :meth:`flush` waits for the broker)."""
        key, value = ping.encode()
        await self._producer.send(self.topic, value, key=key)
        self.sent += 1
        if self.on_send is not None:
            self.on_send(ping)

    async def send_many(self, pings: Iterable[Ping]) -> int:
        n = 0
        for p in pings:
            await self.send(p)
            n += 1
        await self.flush()
        return n

    async def flush(self) -> None:
        await self._producer.flush()


async def publish_pings(settings: Settings, pings: Iterable[Ping]) -> int:
    """Publish ``pings`` and wait until the broker has them; returns how many."""
    async with PingProducer(settings) as producer:
        return await producer.send_many(pings)


def parse_ping_line(
    line: str, *, default_source: str = "other", now_s: float | None = None
) -> Ping:
    """One line of a batch file: a JSON object (ping fields) or ``URL [CHANGED_AT]``."""
    now_s = time.time() if now_s is None else now_s
    text = line.strip()
    if text.startswith("{"):
        try:
            obj = json.loads(text)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("url"), str):
            raise ValueError("a JSON line needs a string 'url'")
        changed = obj.get("changed_at")
        return Ping(
            url=obj["url"],
            source=str(obj.get("source", default_source)),
            changed_at=None if changed is None else float(changed),
            received_at=float(obj.get("received_at", now_s)),
            id=obj.get("id"),
        )
    parts = text.split()
    if not parts or len(parts) > 2:
        raise ValueError("expected 'URL [CHANGED_AT]' or a JSON object")
    return Ping(
        url=parts[0],
        source=default_source,
        changed_at=parse_time(parts[1]) if len(parts) == 2 else None,
        received_at=now_s,
    )


def parse_time(text: str) -> float:
    """Epoch seconds, or an ISO 8601 / W3C datetime (a missing zone means UTC)."""
    try:
        return float(text)
    except ValueError:
        pass
    from streams.edges.timeparse import parse_w3c_datetime

    return parse_w3c_datetime(text)
