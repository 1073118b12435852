"""The catalogue mark and the anchor rule of streams/store/logs.py (a lost Redis found
before a batch is applied), and the replay's merge order (streams/worker/recovery.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from streams.store.logs import CATALOGUE_FIELD, CatalogueLost, LogEpochs
from streams.worker.recovery import ReplayMessage, merged


class FakeRedis:
    """The three hash commands LogEpochs uses, on a dict."""

    def __init__(self) -> None:
        self.h: dict[str, dict[str, str]] = {}

    async def hget(self, key: str, field: str) -> str | None:
        return self.h.get(key, {}).get(field)

    async def hsetnx(self, key: str, field: str, value: str) -> int:
        if field in self.h.setdefault(key, {}):
            return 0
        self.h[key][field] = value
        return 1

    async def hmget(self, key: str, fields: list[str]) -> list[str | None]:
        return [self.h.get(key, {}).get(f) for f in fields]

    async def hset(self, key: str, field: str | None = None, value: str | None = None,
                   mapping: dict[str, str] | None = None) -> None:
        h = self.h.setdefault(key, {})
        if field is not None and value is not None:
            h[field] = value
        h.update(mapping or {})


def msg(offset: int, partition: int = 0, topic: str = "t.pages") -> Any:
    return SimpleNamespace(topic=topic, partition=partition, offset=offset, timestamp=1.0)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_a_flushed_redis_is_found_by_the_mark_before_the_next_batch() -> None:
    r = FakeRedis()
    logs = LogEpochs(r, "P", probe=None)
    run(logs.resolve([msg(0)]))
    run(logs.mark([msg(0)]))
    assert r.h["P:{logs}"][CATALOGUE_FIELD] == logs.mark_id
    run(logs.resolve([msg(1)]))  # the same Redis: nothing to say
    r.h.clear()  # FLUSHALL
    with pytest.raises(CatalogueLost, match="mark is missing") as e:
        run(logs.resolve([msg(2)]))
    assert e.value.partitions == {0}


def test_a_peer_that_wrote_a_new_mark_means_the_state_is_gone() -> None:
    r = FakeRedis()
    a, b = LogEpochs(r, "P", probe=None), LogEpochs(r, "P", probe=None)
    run(a.resolve([msg(0)]))
    run(b.resolve([msg(0, partition=1)]))
    r.h.clear()
    with pytest.raises(CatalogueLost):
        run(a.resolve([msg(1)]))
    run(a.renew())  # a rebuilt its partitions and wrote a new mark
    with pytest.raises(CatalogueLost, match="changed"):
        run(b.resolve([msg(1, partition=1)]))


def test_no_anchor_is_epoch_0_only_where_the_log_was_never_read() -> None:
    async def probe(topic: str, partition: int, offset: int) -> Any:
        return "gone" if offset < 100 else 1000  # retention deleted offsets below 100

    r = FakeRedis()
    logs = LogEpochs(r, "P", probe=probe)
    run(logs.resolve([msg(0, partition=0), msg(100, partition=1)]))  # new, or past retention
    assert logs.epoch("t.pages", 0) == 0 and logs.epoch("t.pages", 1) == 0
    fresh = LogEpochs(FakeRedis(), "P", probe=probe)
    with pytest.raises(CatalogueLost, match="offset 12674") as e:
        run(fresh.resolve([msg(12674, partition=3)]))
    assert e.value.partitions == {3}


def test_the_replay_merges_logs_by_timestamp_keeping_each_log_in_order() -> None:
    def m(topic: str, offset: int, ts: float) -> ReplayMessage:
        return ReplayMessage(topic, 0, offset, None, None, ts)

    pages = [m("pages", 0, 1.0), m("pages", 1, 3.0), m("pages", 2, 2.5)]  # one late stamp
    pings = [m("pings", 0, 1.0), m("pings", 1, 2.0)]
    order = merged([pages, pings], {"pages": 0, "pings": 1})
    assert [(x.topic, x.offset) for x in order] == [
        ("pages", 0), ("pings", 0), ("pings", 1), ("pages", 1), ("pages", 2)]
