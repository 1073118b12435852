"""Faust agents through ``agent.test_context()`` (no broker); the store is a recording stub."""

from __future__ import annotations

import json

import faust

from streams.agents import register_agents
from streams.records import PageEvent
from streams.settings import Settings


class RecordingStore:
    def __init__(self) -> None:
        self.applied: list[tuple[PageEvent, str, int, int]] = []

    async def apply_page(self, page: PageEvent, topic: str, partition: int, offset: int) -> bool:
        self.applied.append((page, topic, partition, offset))
        return True


def _app(store: RecordingStore, rejects: list[tuple[bytes | None, bytes]]):
    settings = Settings(web_enabled=False, topic_prefix="unit")
    app = faust.App(
        "unit-test", broker="kafka://127.0.0.1:9", store="memory://", autodiscover=False
    )

    async def sink(key: bytes | None, value: bytes) -> None:
        rejects.append((key, value))

    return register_agents(app, settings, store=store, reject_sink=sink)  # type: ignore[arg-type]


async def test_valid_page_event_is_applied_once_with_its_offset() -> None:
    store, rejects = RecordingStore(), []
    agents = _app(store, rejects)
    async with agents["pages"].test_context() as agent:
        await agent.put(json.dumps({"url": "https://Example.org/x", "importance": 3}).encode())
    assert rejects == []
    assert len(store.applied) == 1
    page, topic, _partition, offset = store.applied[0]
    assert page.host == "example.org" and page.importance == 3.0
    assert topic == "unit.pages" and offset == 0


async def test_invalid_events_are_rejected_and_the_stream_goes_on() -> None:
    store, rejects = RecordingStore(), []
    agents = _app(store, rejects)
    async with agents["pages"].test_context() as agent:
        await agent.put(b"\xff\xfe not utf8")
        await agent.put(b'{"url": "https://a.org/", "host": "b.org"}')
        await agent.put(b'{"url": "https://a.org/", "importance": "NaN"}')
        await agent.put(b'{"url": "https://a.org/ok"}')
    reasons = [json.loads(v)["reason"] for _k, v in rejects]
    assert len(reasons) == 3
    assert "does not match" in reasons[1]
    assert "finite" in reasons[2]
    assert json.loads(rejects[0][1])["raw_base64"]  # undecodable bytes are kept, base64
    assert [p.url for p, *_ in store.applied] == ["https://a.org/ok"]
