"""Schema-valid extremes and stored data from before the schema's bounds (issue: "no input
stalls a shard"): against the real Redis, through the agents' logic and a scheduler."""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    BusyLoadingError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
)
from test_agents_redis import Harness, js

from streams.events.records import (
    SOURCES,
    HostEvent,
    Order,
    OutcomeEvent,
    PageEvent,
    reject_payload,
)
from streams.scheduler import Scheduler
from streams.settings import Settings
from streams.store.page_record import PageState
from streams.store.redis_store import Store
from streams.telemetry.metrics import Metrics
from streams.worker.agents import Agents, kafka_transient, transient_reply

pytestmark = pytest.mark.integration


def test_out_of_bounds_numbers_fail_validation_with_a_reason() -> None:
    bad = {
        b'{"url": "http://a.org/x", "importance": 1e308}': "less than or equal to 1000000000000",
        b'{"url": "http://a.org/x", "change_rate_per_s": 1e-320}': "must be 0 or at least",
        b'{"url": "http://a.org/x", "change_rate_per_s": 1e300}': "less than or equal",
    }
    for raw, reason in bad.items():
        with pytest.raises(ValueError, match=reason):
            PageEvent.model_validate_json(raw)
    assert PageEvent.model_validate_json(b'{"url": "http://a.org/x", "change_rate_per_s": 0}')
    huge = b'{"host": "a.org", "max_crawls_per_s": 1, "max_in_flight": 1' + b"0" * 310 + b"}"
    with pytest.raises(ValueError, match="less than or equal to 1000000"):
        HostEvent.model_validate_json(huge)
    with pytest.raises(ValueError, match="less than or equal"):
        HostEvent.model_validate_json(b'{"host": "a.org", "max_crawls_per_s": 1e308}')


async def test_a_shard_with_unusable_stored_data_still_loads_and_orders(redis_url: str) -> None:
    """Records written before the bounds (an importance of 1e308, a 310-digit max in flight,
    an unreadable rate) are read within bounds or left out and counted; the other pages of
    the shard are ordered; every order is valid JSON with finite numbers."""
    prefix = f"x{uuid.uuid4().hex[:8]}"
    st = Settings(web_enabled=False, key_prefix=prefix, redis_url=redis_url, partitions=1,
                  budget_per_s=100.0, default_change_rate_per_s=0.5,
                  default_host_crawls_per_s=100.0, host_burst=100.0)
    store = Store.from_url(redis_url, prefix)
    sent: list[dict[str, object]] = []

    async def sink(key: bytes, value: bytes) -> None:
        sent.append(json.loads(value))  # strict JSON: Infinity / NaN would not parse back

    async def no_reject(k: bytes | None, v: bytes) -> None:
        raise AssertionError(v)

    try:
        await store.load_scripts()
        r = store.redis
        good = [f"http://ok.org/{i}" for i in range(3)]
        await r.sadd(store.shard_key(0), "ok.org", "bad.org")
        await r.hset(store.key("ok.org", "pages"), mapping={
            u: PageState(last_crawl_s=time.time() - 100 * (i + 1)).encode()
            for i, u in enumerate(good)})
        await r.hset(store.key("bad.org", "pages"), mapping={
            "http://bad.org/huge": PageState(importance=1e308, last_crawl_s=1.0).encode(),
            "http://bad.org/fine": PageState().encode(),
        })
        await r.hset(store.key("bad.org", "host"), mapping={"mif": "1" + "0" * 310,
                                                             "rate": "not a number"})
        metrics = Metrics()
        sch = Scheduler(st, store, metrics, sink)
        Agents(st, store, metrics, no_reject, scheduler=sch)
        sch.sync_assignment({0})
        for _ in range(100):
            if all(s.ready for s in sch.shards.values()):
                break
            await asyncio.sleep(0.05)
        shard = sch.shards[0]
        assert shard.ready
        assert len(shard.book) == 4 and "http://bad.org/huge" not in shard.book
        assert metrics.tally["pages.unusable"] == 1
        assert shard.hosts.max_in_flight("bad.org") == 1_000_000
        shard.share_per_s = 100.0
        for _ in range(20):
            await sch.tick_all([shard])
            await asyncio.sleep(0.02)
            if len(sent) == 4:
                break
        assert sorted(o["url"] for o in sent) == sorted([*good, "http://bad.org/fine"])
        for o in sent:
            Order.model_validate(o)
            assert all(math.isfinite(v) for v in (o["crawl_value"], o["threshold"]))
        never = [o for o in sent if o["url"] == "http://bad.org/fine"]
        assert never[0]["tau_eff"] is None  # never crawled: no tau_eff (not the epoch time)
        assert all(o["tau_eff"] is not None and o["tau_eff"] >= 100 for o in sent
                   if o["url"] in good)
    finally:
        await store.close()


def test_an_outcome_that_would_set_an_absurd_last_crawl_is_refused_with_a_reason() -> None:
    now = time.time()
    for fetched_at in (1e300, now + 1e6):
        raw = json.dumps({"url": "http://a.org/x", "fetched_at": fetched_at,
                          "changed": True}).encode()
        with pytest.raises(ValueError, match="fetched_at"):
            OutcomeEvent.model_validate_json(raw, context={"now_s": now,
                                                           "max_future_s": 300.0})


async def test_a_stored_page_crawled_in_the_far_future_is_counted_and_logged_not_loaded(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """A page stored with a last crawl of 1e300 (or a day ahead) would never be due: at a
    rebuild, and at an update of the page, it is left out of the book, counted and logged;
    the shard's other pages are ordered."""
    prefix = f"x{uuid.uuid4().hex[:8]}"
    st = Settings(web_enabled=False, key_prefix=prefix, redis_url=redis_url, partitions=1,
                  budget_per_s=100.0, default_change_rate_per_s=0.5,
                  default_host_crawls_per_s=100.0, host_burst=100.0)
    store = Store.from_url(redis_url, prefix)
    sent: list[dict[str, object]] = []

    async def sink(key: bytes, value: bytes) -> None:
        sent.append(json.loads(value))

    future = {"http://late.org/far": 1e300, "http://late.org/day": time.time() + 86400.0}
    try:
        await store.load_scripts()
        r = store.redis
        await r.sadd(store.shard_key(0), "late.org")
        await r.hset(store.key("late.org", "pages"), mapping={
            "http://late.org/ok": PageState(last_crawl_s=time.time() - 500).encode(),
            **{u: PageState(last_crawl_s=x).encode() for u, x in future.items()}})
        metrics = Metrics()
        sch = Scheduler(st, store, metrics, sink)
        with caplog.at_level("WARNING"):
            sch.sync_assignment({0})
            for _ in range(100):
                if all(s.ready for s in sch.shards.values()):
                    break
                await asyncio.sleep(0.05)
        shard = sch.shards[0]
        assert shard.ready
        assert len(shard.book) == 1 and "http://late.org/ok" in shard.book
        assert metrics.tally["pages.unusable"] == 2
        assert metrics.tally["pages.future-crawl"] == 2
        for u in future:
            assert any(u in m and "max_future_s" in m for m in caplog.messages), u
        # a later update of such a page (a catalogue event) leaves it out the same way
        sch.on_pages([(0, "late.org", "http://late.org/far",
                       PageState(last_crawl_s=1e300, importance=2.0).encode(), False, None)])
        assert "http://late.org/far" not in shard.book
        assert metrics.tally["pages.future-crawl"] == 3
        shard.share_per_s = 100.0
        for _ in range(20):
            await sch.tick_all([shard])
            await asyncio.sleep(0.02)
            if sent:
                break
        assert [o["url"] for o in sent] == ["http://late.org/ok"]
    finally:
        await store.close()


def test_a_reject_of_a_huge_value_fits_the_producer_and_keeps_where_it_came_from() -> None:
    raw = json.dumps({"url": "http://a.org/" + "é" * 200_000}, ensure_ascii=False).encode()
    out = reject_payload(raw, "t.pages", 3, 77, "url too long")
    body = json.dumps(out).encode()
    assert len(body) < 1_000_000  # the producer's max.request.size
    assert out["raw_truncated"] is True and out["raw_bytes"] == len(raw)
    assert (out["topic"], out["partition"], out["offset"]) == ("t.pages", 3, 77)
    assert raw.decode().startswith(out["raw"]) and len(out["raw"]) > 30_000  # text, not cut
    small = reject_payload(b'{"x": 1}', "t.pages", 0, 1, "r")
    assert small["raw"] == '{"x": 1}' and "raw_truncated" not in small
    binary = reject_payload(b"\xff" * 100_000, "t.pages", 0, 2, "r")
    assert binary["raw"] is None and len(binary["raw_base64"]) < 100_000


def test_transient_error_replies_are_retried_not_rejected() -> None:
    for exc in (ReadOnlyError("You can't write against a read only replica."),
                OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
                ResponseError("BUSY Redis is busy running a script."),
                BusyLoadingError("Redis is loading the dataset in memory")):
        assert transient_reply(exc), exc
    for exc in (ResponseError("ERR wrong number of arguments"), NoScriptError("x"), "ok"):
        assert not transient_reply(exc), exc


@pytest.fixture(params=["redis_url", "redis_cluster_url"])
def backend_url(request: pytest.FixtureRequest) -> str:
    """The session's Redis and a real three-master Redis Cluster."""
    return str(request.getfixturevalue(request.param))


async def test_a_redis_out_of_memory_holds_the_batch_until_it_can_write(backend_url: str) -> None:
    """maxmemory below what is used: every write is refused with OOM.  The pings wait
    (retried) instead of going to the rejects; once Redis can write they are applied."""
    h = Harness(backend_url)
    url = "https://m.org/a"
    await h.feed("pages", [js(url=url)])
    r = h.store.redis
    # a cluster client sends CONFIG SET to one node unless told: every master here
    every: dict[str, Any] = {"target_nodes": r.PRIMARIES} if isinstance(r, RedisCluster) else {}
    before = (await r.config_get("maxmemory"))["maxmemory"]
    await r.config_set("maxmemory", "1", **every)
    try:
        task = asyncio.create_task(
            h.feed("pings", [js(url=url, source="cdn", received_at=time.time())]))
        await asyncio.sleep(1.5)
        assert not task.done()
        assert h.rejects == [] and h.metrics.tally["pings.applied"] == 0
    finally:
        await r.config_set("maxmemory", before, **every)
    await asyncio.wait_for(task, 20)
    assert h.rejects == [] and h.metrics.tally["pings.applied"] == 1
    assert (await h.store.get_page("m.org", url)).signals[SOURCES.index("cdn")] == 1


def test_kafka_errors_are_told_apart_by_type() -> None:
    from aiokafka.errors import (
        KafkaConnectionError,
        KafkaTimeoutError,
        MessageSizeTooLargeError,
        NotLeaderForPartitionError,
    )

    assert kafka_transient(KafkaConnectionError()) and kafka_transient(KafkaTimeoutError())
    assert kafka_transient(NotLeaderForPartitionError())
    assert not kafka_transient(MessageSizeTooLargeError())  # retrying would never end
    assert not kafka_transient(ValueError("KafkaLooking name, not a Kafka error"))


async def test_an_order_the_producer_refuses_leaves_no_page_in_flight(backend_url: str) -> None:
    """The producer stopping (shutdown) or failing after Redis marked the orders in flight:
    the marks are cleared and the pages ordered on a later tick, none waits for a time-out.
    Also when Redis lost the scripts in between (a cluster master restarting: NOSCRIPT)."""
    h = Harness(backend_url, default_host_crawls_per_s=100.0, host_burst=100.0)
    urls = [f"https://u.org/{i}" for i in range(3)]
    await h.feed("pages", [js(url=u) for u in urls])
    await h.store.load_scripts()
    sent: list[str] = []
    broken = True

    async def sink(k: bytes, v: bytes) -> None:
        if broken:
            await h.store.redis.script_flush()  # on every master of a cluster
            raise RuntimeError("Producer service not yet started")
        sent.append(json.loads(v)["url"])

    sch = Scheduler(h.settings, h.store, h.metrics, sink)
    shard = sch.new_shard(0)
    shard.ready, shard.share_per_s = True, 100.0
    sch.shards[0] = shard
    for u in urls:
        await sch.on_page(0, "u.org", u, await h.store.get_page_raw("u.org", u))
    for _ in range(10):
        await sch.tick_all([shard])
        await asyncio.sleep(0.02)
    assert h.metrics.tally["orders.unsent"] >= 3 and sent == []
    assert await h.store.redis.hlen(h.store.key("u.org", "inflight")) == 0
    assert len(shard.in_flight) == 0
    broken = False
    for _ in range(20):
        await sch.tick_all([shard])
        await asyncio.sleep(0.02)
        if len(sent) == 3:
            break
    assert sorted(sent) == urls
    assert await h.store.redis.hlen(h.store.key("u.org", "inflight")) == 3
