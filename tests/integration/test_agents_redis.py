"""The agents through ``agent.test_context()`` (no broker) against the real Redis: the
cases every store passes (``tests/agents_harness.py``, also run on the in-memory store by
``tests/unit/test_agents_memory.py``) and the Redis-only ones (one script call per host,
scripts lost by Redis, a cluster).  Its ``Harness`` is shared with ``test_estimation.py``
and others.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agents_harness import CASES, Harness, js
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError

from streams.scheduler import Scheduler
from streams.store import IssueBatch
from streams.store.page_record import PageState

pytestmark = pytest.mark.integration

__all__ = ["Harness", "js"]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
async def test_agents_on_redis(case: Callable[[Any], Awaitable[None]], redis_url: str) -> None:
    await case(lambda **kw: Harness(redis_url, **kw))


async def test_a_ticks_orders_of_one_host_are_issued_in_one_script_call(redis_url: str) -> None:
    h = Harness(redis_url)
    urls = [f"https://b.org/{i}" for i in range(5)]
    await h.feed("pages", [js(url=u) for u in urls[:4]])  # urls[4] is not in the catalogue
    await h.feed("hosts", [js(host="b.org", max_crawls_per_s=1.0, max_in_flight=3)])
    await h.store.load_scripts()
    now = time.time()
    issue = h.store.issue

    async def order(pairs: list[tuple[str, str]], at: float) -> list[tuple[str, str]]:
        (res,) = await issue([IssueBatch("b.org", pairs)], now_s=at, default_rate=9.0,
                             default_mif=0, burst=2.0)
        return list(res)

    first = await order([(urls[0], "o0")], now)
    assert first[0][0] == "ok"
    # burst 2: one token left; in flight 1 of 3
    res = await order([(urls[0], "x0"), (urls[4], "x4"), (urls[1], "x1"), (urls[2], "x2")], now)
    assert [c for c, _ in res] == ["in-flight", "gone", "ok", "no-token"]
    assert res[0][1].startswith("o0|")
    assert float(res[3][1]) == pytest.approx(1.0, abs=1e-6)  # a token per second at rate 1
    flights = await h.store.redis.hgetall(h.store.key("b.org", "inflight"))
    assert sorted(flights) == [urls[0], urls[1]]
    # two seconds later two tokens, but room for only one more order (max in flight 3)
    res = await order([(urls[2], "y2"), (urls[3], "y3")], now + 2.0)
    assert [res[0][0], res[1][0]] == ["ok", "max-in-flight"]
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


async def test_a_log_probe_the_broker_cannot_answer_is_retried_and_nothing_is_rejected(
        redis_url: str) -> None:
    """The probe that tells whether a partition's log is new (streams/store/logs.py) asks the
    broker; while it cannot (the broker away), the batch waits: the probe is run again, each
    failure counted as a Kafka retry, and the batch is applied once it answers, nothing
    rejected.  Both probes: a partition without an anchor, and an anchor outside the batch."""
    h = Harness(redis_url)
    logs = h.logic.logs
    calls: list[int] = []
    answer: list[int | str] = ["gone"]

    async def probe(topic: str, partition: int, offset: int) -> int | str:
        calls.append(offset)
        if len(calls) % 4:  # three failures, then the answer
            raise (KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9)]")
                   if len(calls) % 2 else KafkaTimeoutError())
        return answer[0]

    logs.probe = probe
    a, b = "https://k.org/a", "https://k.org/b"
    # no anchor and a batch past offset 0: was offset 39 read before? ("gone": no, new log)
    await h.feed("pages", [js(url=a)], offset=40)
    assert h.rejects == [] and calls == [39] * 4
    assert h.metrics.tally["retries.kafka"] == 3
    assert await h.store.get_page("k.org", a) == PageState()
    # after a rebalance, a batch below the anchor (offset 40): the record at 40 is the
    # anchor's (its timestamp): the same log, the batch a redelivery
    (anchor,) = [v for k, v in (await h.store.redis.hgetall(logs.key)).items()
                 if k != "catalogue"]
    answer[0] = int(anchor.split("|")[2])
    logs.forget()
    await h.feed("pages", [js(url=b)], offset=30)
    assert h.rejects == [] and calls == [39] * 4 + [40] * 4
    assert h.metrics.tally["retries.kafka"] == 6
    assert h.metrics.tally["pages.dup-offset"] == 1
    assert await h.store.get_page("k.org", b) is None


async def test_agents_on_a_redis_cluster_reload_scripts_the_masters_lost(
    redis_cluster_url: str,
) -> None:
    """On a cluster the pipelines cannot check the scripts first: a master that lost them
    (restarted) answers NOSCRIPT, the store loads them on every master and runs those calls
    again; nothing is rejected and every event is applied once."""
    h = Harness(redis_cluster_url)
    assert await h.store.redis.script_flush()  # every master
    hosts = [f"n{i}.org" for i in range(12)]
    loads = h.store.script_loads
    await h.feed("pages", [js(url=f"https://{x}/p", importance=2) for x in hosts])
    assert h.store.script_loads > loads  # the NOSCRIPT round: loaded, the calls run again
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
