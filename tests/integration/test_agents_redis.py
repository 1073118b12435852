"""The agents through ``agent.test_context()`` (no broker) against the real Redis.

Each test gets its own key prefix; rejects are captured by a sink instead of a topic.
An integration test (it was ``tests/streams/test_agents_unit.py``; issue 17): every agent
writes its state to Redis through ``streams.state.Store``, so without an in-memory store
(the store interface of issue 17, being written elsewhere) it cannot run without Redis.
Its ``Harness`` is shared with ``test_estimation.py`` and others.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import faust
import pytest

from streams.agents import register_agents
from streams.metrics import Metrics
from streams.scheduler import Scheduler
from streams.settings import Settings
from streams.state import PageState, Store

pytestmark = pytest.mark.integration


class Harness:
    def __init__(self, redis_url: str, **overrides: Any) -> None:
        self.settings = Settings(
            web_enabled=False, topic_prefix="unit", key_prefix=f"u{uuid.uuid4().hex[:8]}",
            redis_url=redis_url, **overrides,
        )
        self.app = faust.App(
            f"unit-{uuid.uuid4().hex[:6]}", broker="kafka://127.0.0.1:9", store="memory://",
            autodiscover=False,
        )
        self.store = Store.from_url(redis_url, self.settings.key_prefix)
        self.metrics = Metrics()
        self.rejects: list[dict[str, Any]] = []
        self.offsets: dict[str, int] = {}

        async def sink(key: bytes | None, value: bytes) -> None:
            self.rejects.append(json.loads(value))

        self.agents = register_agents(
            self.app, self.settings, store=self.store, reject_sink=sink, metrics=self.metrics,
            reroute=False,  # no broker to send to: every test event sits on partition 0
        )
        self.logic = self.app.recrawl_agents  # type: ignore[attr-defined]

    def tally_retries(self) -> int:
        return int(self.metrics.tally["retries.redis"])

    def processed(self, topic: str) -> int:
        t = self.metrics.tally
        return sum(v for k, v in t.items() if k.startswith(f"{topic}."))

    async def feed(
        self, topic: str, values: list[bytes], key: bytes | None = None, offset: int | None = None
    ) -> list[Any]:
        """Put values into the agent (offsets go on from the last feed unless given) and
        wait until all are processed (or rejected)."""
        before = self.processed(topic)
        events = []
        async with self.agents[topic].test_context() as agent:
            agent.sent_offset = self.offsets.get(topic, 0) if offset is None else offset
            for v in values:
                events.append(await agent.put(v, key=key, wait=False))
            deadline = time.monotonic() + 10
            while self.processed(topic) < before + len(values):
                assert time.monotonic() < deadline, self.metrics.tally
                await asyncio.sleep(0.01)
            self.offsets[topic] = max(self.offsets.get(topic, 0), agent.sent_offset)
        return events


def js(**kw: Any) -> bytes:
    return json.dumps(kw).encode()


async def test_page_event_is_applied_once_even_when_redelivered(redis_url: str) -> None:
    h = Harness(redis_url)
    events = await h.feed("pages", [js(url="https://Example.org/x", importance=3)])
    assert h.rejects == []
    state = await h.store.get_page("example.org", "https://example.org/x")  # canonical
    assert state == PageState(importance=3.0)
    # the same message again (same partition and offset): nothing changes
    await h.feed("pages", [js(url="https://Example.org/x", importance=9)], offset=0)
    assert (await h.store.get_page("example.org", "https://example.org/x")).importance == 3.0
    await h.logic.on_pages(events)
    assert h.metrics.tally["pages.dup-offset"] == 2
    assert await h.store.shard_hosts(0) == ["example.org"]


async def test_invalid_events_are_rejected_and_the_stream_goes_on(redis_url: str) -> None:
    h = Harness(redis_url)
    await h.feed("pages", [
        b"\xff\xfe not utf8",
        b'{"url": "https://a.org/", "host": "b.org"}',
        b'{"url": "https://a.org/", "importance": NaN}',
        b'{"url": "https://a.org/", "importance": "3"}',
        b'{"url": "https://a.org/ok"}',
    ])
    reasons = [r["reason"] for r in h.rejects]
    assert len(reasons) == 4, reasons
    assert "does not match" in reasons[1]
    assert "finite" in reasons[2]
    assert "valid number" in reasons[3]
    assert h.rejects[0]["raw_base64"]  # undecodable bytes are kept, base64
    assert [r["offset"] for r in h.rejects] == [0, 1, 2, 3]
    assert await h.store.get_page("a.org", "https://a.org/ok") == PageState()


async def test_ping_rules_t_delay_duplicates_and_discoveries(redis_url: str) -> None:
    h = Harness(redis_url, t_delay_s=60.0)
    url = "https://p.org/a"
    now = time.time()
    crawl = now - 1000
    await h.feed("pages", [js(url=url)])
    await h.feed("outcomes", [js(url=url, fetched_at=crawl, changed=False, status=200)])
    assert (await h.store.get_page("p.org", url)).last_crawl_s == pytest.approx(crawl, abs=1e-3)
    await h.feed("pings", [
        js(url=url, source="sitemap", changed_at=crawl - 5, received_at=now - 10),  # before
        js(url=url, source="indexnow", received_at=crawl + 30),  # within T_DELAY
        js(url=url, source="indexnow", received_at=now - 5, id="a"),  # counts
        js(url=url, source="indexnow", received_at=now - 4, id="a"),  # duplicate id
        js(url=url, source="cdn", changed_at=now - 50, received_at=now - 3),  # counts
        js(url=url, source="cdn", changed_at=now - 50, received_at=now - 2),  # duplicate
        js(url=url, source="websub", received_at=now - 1),  # counts
        js(url="https://p.org/unknown", source="other", received_at=now),  # discovery
    ])
    t = h.metrics.tally
    assert (t["pings.before-crawl"], t["pings.within-delay"], t["pings.duplicate"]) == (1, 1, 2)
    assert (t["pings.applied"], t["pings.unknown"]) == (3, 1)
    state = await h.store.get_page("p.org", url)
    assert state.signals == (0, 1, 1, 1, 0)
    # why a ping was dropped: the worker's ring, not Redis
    assert any("T_DELAY" in d for d in h.logic.decisions.get(url))
    assert any("precedes the last crawl" in d for d in h.logic.decisions.get(url))
    assert not [k async for k in h.store.redis.scan_iter(f"{h.settings.key_prefix}:*why*")]
    assert h.rejects == []


async def test_outcome_clears_only_its_own_order_and_resets_signals(redis_url: str) -> None:
    h = Harness(redis_url)
    url = "https://o.org/a"
    await h.feed("pages", [js(url=url)])
    await h.store.load_scripts()
    res = await h.store.queue_issue(h.store.redis, "o.org", [(url, "ord-1")],
                                    now_s=time.time(), default_rate=1.0, default_mif=0,
                                    burst=1.0)
    assert res[0] == "ok"
    now = time.time()
    await h.feed("pings", [js(url=url, source="sitemap", received_at=now)])
    await h.feed("outcomes", [js(url=url, order_id="other", fetched_at=now, changed=True)])
    assert (await h.store.explain_data("o.org", url))["in_flight"][0] == "ord-1"
    assert (await h.store.get_page("o.org", url)).signals == (0,) * 5
    await h.feed("outcomes", [js(url=url, order_id="ord-1", fetched_at=now + 1, changed=None)])
    assert (await h.store.explain_data("o.org", url))["in_flight"] is None


async def test_hosts_and_control_are_validated_and_stored(redis_url: str) -> None:
    h = Harness(redis_url)
    await h.feed("hosts", [
        js(host="Slow.org", max_crawls_per_s=2.5, max_in_flight=3),
        js(host="x.org", max_crawls_per_s=0),
        js(host="not a host", max_crawls_per_s=1),
    ])
    info = await h.store.get_host("slow.org")
    assert (info.rate_per_s, info.max_in_flight) == (2.5, 3)
    await h.feed("control", [js(budget_per_s=12.5, paused=False), js(), js(budget_per_s=-1)])
    assert await h.store.get_control() == {"budget_per_s": "12.5", "paused": "0"}
    assert len(h.rejects) == 4
    assert "greater than 0" in h.rejects[0]["reason"]


async def test_a_ticks_orders_of_one_host_are_issued_in_one_script_call(redis_url: str) -> None:
    h = Harness(redis_url)
    urls = [f"https://b.org/{i}" for i in range(5)]
    await h.feed("pages", [js(url=u) for u in urls[:4]])  # urls[4] is not in the catalogue
    await h.feed("hosts", [js(host="b.org", max_crawls_per_s=1.0, max_in_flight=3)])
    await h.store.load_scripts()
    now = time.time()
    first = await h.store.queue_issue(h.store.redis, "b.org", [(urls[0], "o0")], now_s=now,
                                      default_rate=9.0, default_mif=0, burst=2.0)
    assert first[0] == "ok"
    # burst 2: one token left; in flight 1 of 3
    res = await h.store.queue_issue(
        h.store.redis, "b.org", [(urls[0], "x0"), (urls[4], "x4"), (urls[1], "x1"),
                                 (urls[2], "x2")],
        now_s=now, default_rate=9.0, default_mif=0, burst=2.0)
    codes = [res[i] for i in range(0, len(res), 2)]
    assert codes == ["in-flight", "gone", "ok", "no-token"]
    assert res[1].startswith("o0|")
    assert float(res[7]) == pytest.approx(1.0, abs=1e-6)  # a token per second at rate 1
    flights = await h.store.redis.hgetall(h.store.key("b.org", "inflight"))
    assert sorted(flights) == [urls[0], urls[1]]
    # two seconds later two tokens, but room for only one more order (max in flight 3)
    res = await h.store.queue_issue(
        h.store.redis, "b.org", [(urls[2], "y2"), (urls[3], "y3")], now_s=now + 2.0,
        default_rate=9.0, default_mif=0, burst=2.0)
    assert [res[0], res[2]] == ["ok", "max-in-flight"]
    bucket = await h.store.redis.hgetall(h.store.key("b.org", "host"))
    assert float(bucket["tokens"]) == pytest.approx(1.0) and float(bucket["ts"]) == now + 2.0


async def test_scripts_lost_by_redis_are_loaded_again_and_nothing_is_rejected(
        redis_url: str) -> None:
    """After a Redis restart (or SCRIPT FLUSH) the straight EVALSHA calls get NOSCRIPT: the
    agents load the scripts and run the missing calls again, the scheduler too."""
    h = Harness(redis_url)
    url = "https://n.org/a"
    await h.feed("pages", [js(url=url)])
    await h.store.redis.script_flush()
    await h.feed("pings", [js(url=url, source="sitemap", received_at=time.time())])
    assert h.rejects == [] and h.metrics.tally["pings.applied"] == 1
    await h.store.redis.script_flush()
    sent: list[bytes] = []

    async def sink(k: bytes, v: bytes) -> None:
        sent.append(v)

    sch = Scheduler(h.settings, h.store, h.metrics, sink)
    shard = sch.new_shard(0)
    shard.ready, shard.share_per_s = True, 100.0
    sch.shards[0] = shard
    await sch.on_page(0, "n.org", url, await h.store.get_page_raw("n.org", url))
    for _ in range(20):  # the first tick meets NOSCRIPT, loads, puts the page back
        await sch.tick_all([shard])
        await asyncio.sleep(0.02)
        if sent:
            break
    assert [json.loads(v)["url"] for v in sent] == [url]


async def test_agents_on_a_redis_cluster_reload_scripts_the_masters_lost(
    redis_cluster_url: str,
) -> None:
    """On a cluster the pipelines cannot check the scripts first: a master that lost them
    (restarted) answers NOSCRIPT, the agents load them on every master and run the batch
    again; nothing is rejected and every event is applied once."""
    h = Harness(redis_cluster_url)
    assert await h.store.redis.script_flush()  # every master
    hosts = [f"n{i}.org" for i in range(12)]
    await h.feed("pages", [js(url=f"https://{x}/p", importance=2) for x in hosts])
    assert h.tally_retries() >= 1  # the NOSCRIPT round
    await h.store.redis.script_flush()
    await h.feed("hosts", [js(host=x, max_crawls_per_s=3) for x in hosts])
    await h.store.redis.script_flush()
    await h.feed("control", [js(budget_per_s=7.5)])
    assert h.rejects == []
    for x in hosts:
        assert await h.store.get_page(x, f"https://{x}/p") == PageState(importance=2.0)
        assert (await h.store.get_host(x)).rate_per_s == 3.0
    assert await h.store.get_control() == {"budget_per_s": "7.5"}
    assert h.metrics.tally["pages.added"] == len(hosts)
    assert sorted(await h.store.shard_hosts(0)) == sorted(hosts)
    await h.store.close()
