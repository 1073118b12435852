"""The worker's side of politeness against the real Redis: per-source host capacities
(operator, robots.txt Crawl-delay, push-back) and pages blocked by robots.txt, every
update offset-guarded (a redelivered event changes nothing)."""

from __future__ import annotations

import time

import pytest
from test_agents_redis import Harness, js

from streams.store import IssueBatch

pytestmark = pytest.mark.integration


async def _host(h: Harness, host: str) -> dict[str, str]:
    return dict(await h.store.redis.hgetall(h.store.key(host, "host")))


async def test_the_capacity_is_the_smallest_of_the_sources(redis_url: str) -> None:
    h = Harness(redis_url, default_host_crawls_per_s=1.0)
    await h.feed("hosts", [js(host="a.org", max_crawls_per_s=2.0)])
    await h.feed("hosts", [js(host="a.org", source="robots", max_crawls_per_s=1.5,
                              reason="Crawl-delay 0.667", robots_digest="d1")])
    assert (await h.store.get_host("a.org")).rate_per_s == 1.5
    await h.feed("hosts", [js(host="a.org", source="pushback", max_crawls_per_s=0.5,
                              reason="HTTP 429")])
    info = await h.store.get_host("a.org")
    assert info.rate_per_s == 0.5
    assert info.limits == {"operator": (2.0, None), "robots": (1.5, "Crawl-delay 0.667"),
                           "pushback": (0.5, "HTTP 429")}
    assert info.robots_digest == "d1"
    # push-back lifted: the robots.txt's limit binds; that event redelivered (its offset)
    # with another value changes nothing
    await h.feed("hosts", [js(host="a.org", source="pushback", max_crawls_per_s=None)])
    assert (await h.store.get_host("a.org")).rate_per_s == 1.5
    stored = await _host(h, "a.org")
    await h.feed("hosts", [js(host="a.org", source="pushback", max_crawls_per_s=0.1)],
                 offset=h.offsets["hosts"] - 1)
    assert await _host(h, "a.org") == stored
    await h.feed("hosts", [js(host="a.org", source="robots", max_crawls_per_s=None,
                              robots_digest="d1")])
    assert (await h.store.get_host("a.org")).rate_per_s == 2.0
    # a Crawl-delay never raises a host above the default when the operator set nothing
    await h.feed("hosts", [js(host="b.org", source="robots", max_crawls_per_s=10.0)])
    assert "rate" not in await _host(h, "b.org")
    await h.feed("hosts", [js(host="b.org", source="pushback", max_crawls_per_s=0.25)])
    assert (await h.store.get_host("b.org")).rate_per_s == 0.25
    # a hash written before sources existed: its rate is the operator's
    await h.store.redis.hset(h.store.key("c.org", "host"), "rate", "3.0")
    await h.feed("hosts", [js(host="c.org", source="robots", max_crawls_per_s=5.0)])
    assert (await _host(h, "c.org"))["rate"] == "3.0"
    assert (await _host(h, "c.org"))["rate_operator"] == "3.0"
    assert h.rejects == []


async def test_host_events_are_validated(redis_url: str) -> None:
    h = Harness(redis_url)
    await h.feed("hosts", [
        js(host="a.org"),  # the operator's needs a rate
        js(host="a.org", source="pushback", max_crawls_per_s=1.0, max_in_flight=2),
        js(host="a.org", source="cdn", max_crawls_per_s=1.0),
        js(host="a.org", source="robots"),  # lifts the robots limit: valid
    ])
    reasons = [r["reason"] for r in h.rejects]
    assert len(reasons) == 3, reasons
    assert "max_crawls_per_s is required" in reasons[0]
    assert "max_in_flight is the operator's" in reasons[1]
    assert "source" in reasons[2]


async def test_disallowed_pages_are_blocked_until_the_robots_txt_changes(
        redis_url: str) -> None:
    h = Harness(redis_url)
    url, other = "https://r.org/private", "https://r.org/public"
    await h.feed("pages", [js(url=url), js(url=other)])
    await h.store.load_scripts()
    blocked = h.store.key("r.org", "blocked")
    await h.feed("hosts", [js(host="r.org", source="robots", robots_digest="d1")])
    now = time.time()
    await h.feed("outcomes", [js(url=url, fetched_at=now, changed=None, disallowed=True,
                                 error="robots.txt disallows", robots_digest="d1")])
    assert await h.store.redis.smembers(blocked) == {url}
    assert not (await h.store.get_page("r.org", url)).crawled  # not fetched: no crawl
    (res,) = await h.store.issue([IssueBatch("r.org", [(url, "o1"), (other, "o2")])],
                                 now_s=now, default_rate=10.0, default_mif=0, burst=5.0)
    assert [res[0][0], res[1][0]] == ["blocked", "ok"]
    # a new robots.txt empties the set; a late outcome of the old one does not block again
    await h.feed("hosts", [js(host="r.org", source="robots", robots_digest="d2")])
    assert await h.store.redis.scard(blocked) == 0
    await h.feed("outcomes", [js(url=url, fetched_at=now, changed=None, disallowed=True,
                                 robots_digest="d1")])
    assert await h.store.redis.scard(blocked) == 0
    assert h.metrics.tally["outcomes.stale-robots"] == 1
    # blocked under d2; the d2 announcement redelivered (its offset) does not unblock it
    await h.feed("outcomes", [js(url=url, fetched_at=now, changed=None, disallowed=True,
                                 robots_digest="d2")])
    await h.feed("hosts", [js(host="r.org", source="robots", robots_digest="d2")],
                 offset=h.offsets["hosts"] - 1)
    assert await h.store.redis.smembers(blocked) == {url}
    assert h.rejects == []


async def test_a_scheduler_loads_the_blocked_pages_and_takes_them_back(redis_url: str) -> None:
    """A (re)started worker's shard leaves the blocked pages out of its book; a robots.txt
    change puts them back (the scheduler reads Redis's set again)."""
    from streams.scheduler import Scheduler
    from streams.telemetry.metrics import Metrics

    h = Harness(redis_url)
    url, other = "https://s.org/private", "https://s.org/public"
    await h.feed("pages", [js(url=url), js(url=other)])
    await h.feed("hosts", [js(host="s.org", source="robots", robots_digest="d1")])
    await h.feed("outcomes", [js(url=url, fetched_at=time.time(), changed=None,
                                 disallowed=True, robots_digest="d1")])

    async def sink(k: bytes, v: bytes) -> None:
        return None

    sch = Scheduler(h.settings, h.store, Metrics(), sink)
    shard = sch.shards[0] = sch.new_shard(0)
    await sch.loader.load(shard)
    assert url not in shard.book and other in shard.book
    assert shard.blocked == {"s.org": {url}}
    # a ping of the blocked page does not bring it back
    await sch.on_page(0, "s.org", url, "1.0||0|0,0,0,1,0")
    assert url not in shard.book
    await h.feed("hosts", [js(host="s.org", source="robots", robots_digest="d2")])
    await sch.on_robots_changed(0, "s.org")
    assert url in shard.book and shard.blocked == {}
