"""Politeness against the real stack: a real worker process, the real fetcher, the test web.

robots.txt: disallowed pages are never fetched, their outcomes carry the reason, the worker
stops ordering them, Crawl-delay lowers the host's capacity, and a changed robots.txt makes
them candidates again (also for a host the worker no longer orders anything from: the
fetcher asks its robots.txt again when the copy expires).  Push-back: 429 with Retry-After
lowers the host's capacity seen at ``GET /hosts/{host}/`` and it recovers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer
from edges_helpers import LOOPBACK, produce

from streams.events.records import host_of
from streams.fetcher.client import FetchLimits
from streams.fetcher.pushback import PushbackPolicy
from streams.fetcher.robots import RobotsPolicy
from streams.fetcher.service import FetcherService
from streams.settings import Settings
from streams.store.redis_conn import connect as connect_redis
from streams.testweb.server import TestWeb
from streams.testweb.world import generate_world

pytestmark = pytest.mark.integration

DEADLINE_S = 60.0


def _worker_settings(settings: Settings) -> Settings:
    from infra.proc import free_port

    return settings.model_copy(update={
        "web_enabled": True, "web_port": free_port(), "budget_per_s": 20.0,
        "default_host_crawls_per_s": 5.0, "t_delay_s": 0.0,
    })  # fmt: skip


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return json.loads(r.read().decode())


async def _until(what: str, cond: Callable[[], Awaitable[bool]], timeout_s: float = DEADLINE_S
                 ) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await cond():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"not within {timeout_s:g}s: {what}")


class Tap:
    """Everything published on a topic since the start (a group-less consumer)."""

    def __init__(self, s: Settings, topic: str) -> None:
        self.consumer = AIOKafkaConsumer(s.topic(topic), bootstrap_servers=s.kafka_bootstrap,
                                         auto_offset_reset="earliest")
        self.items: list[dict[str, Any]] = []
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.consumer.start()

        async def run() -> None:
            while True:
                batch = await self.consumer.getmany(timeout_ms=200)
                self.items.extend(json.loads(r.value) for rs in batch.values() for r in rs)

        self.task = asyncio.create_task(run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.consumer.stop()

    def count(self, urls: set[str]) -> int:
        return sum(1 for v in self.items if v.get("url") in urls)


async def _stack(s: Settings, web: TestWeb, fetcher: FetcherService, urls: list[str]
                 ) -> tuple[asyncio.Task[None], Tap, Tap, Tap]:
    task = asyncio.create_task(fetcher.run())
    await asyncio.wait_for(fetcher.ready.wait(), 30)
    taps = Tap(s, "orders"), Tap(s, "outcomes"), Tap(s, "hosts")
    for t in taps:
        await t.start()
    await produce(s, "pages", [(host_of(u).encode(), {"url": u, "change_rate_per_s": 1.0})
                               for u in urls])
    return task, *taps


async def _stop(fetcher: FetcherService, task: asyncio.Task[None], *taps: Tap) -> None:
    fetcher.stop()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 15)
    for t in taps:
        await t.stop()


def test_robots_txt_disallow_crawl_delay_and_change(settings: Settings, start_worker) -> None:
    s = _worker_settings(settings)
    start_worker(s)
    print(asyncio.run(_robots_scenario(s)))


async def _robots_scenario(s: Settings) -> dict[str, Any]:
    web = TestWeb(generate_world(5, n_hosts=2, pages_per_host=5, time_unit_s=1.0),
                  simulate=False)
    await web.start()
    host_a, host_b = web.world.hosts[:2]
    urls = web.urls()
    pages_a = sorted(u for u in urls if host_of(u) == host_a)
    pages_b = sorted(u for u in urls if host_of(u) == host_b)
    blocked_a = set(pages_a[:2])
    path = {u: u.split(str(web.port), 1)[1] for u in urls}
    # host a: two pages disallowed for our token (a group for everyone else allows all),
    # Crawl-delay 1 s; host b: everything disallowed
    web.robots[host_a] = ("User-agent: *\nAllow: /\n\nUser-agent: recrawl-fetcher\n"
                          + "".join(f"Disallow: {path[u]}$\n" for u in sorted(blocked_a))
                          + "Crawl-delay: 1\n")
    web.robots[host_b] = "User-agent: *\nDisallow: /\n"
    web.robots_max_age_s = 1
    fetcher = FetcherService(s, LOOPBACK, FetchLimits(total_timeout_s=5),
                             robots=RobotsPolicy(min_ttl_s=0.5, error_ttl_s=0.5),
                             politeness_interval_s=0.2)
    r = connect_redis(s.redis_url, decode_responses=True)

    def key(host: str, kind: str) -> str:
        return f"{s.key_prefix}:{{{host}}}:{kind}"

    blocked_all = blocked_a | set(pages_b)
    task, orders, outcomes, hosts = await _stack(s, web, fetcher, urls)
    try:
        async def blocked_in_redis() -> bool:
            a = await r.smembers(key(host_a, "blocked"))
            b = await r.smembers(key(host_b, "blocked"))
            return a == blocked_a and b == set(pages_b)

        await _until("the disallowed pages are blocked in Redis", blocked_in_redis)

        async def crawl_delay_applied() -> bool:
            return (await r.hget(key(host_a, "host"), "rate")) == "1.0"

        await _until("Crawl-delay 1 sets host a's capacity to 1/s", crawl_delay_applied)
        view_a = _get(s.web_port, f"/hosts/{host_a}/")
        # the worker goes on ordering host a's other pages, never the blocked ones
        before = orders.count(blocked_all)
        others = set(pages_a) - blocked_a
        n_others = orders.count(others)

        async def others_ordered() -> bool:
            return orders.count(others) >= n_others + 5

        await _until("5 more orders of host a's allowed pages", others_ordered)
        after = orders.count(blocked_all)
        fetched_while_blocked = {u: web.truth.pages[u].fetches for u in blocked_all}
        refused = [v for v in outcomes.items if v["url"] in blocked_all]
        # robots.txt changes: everything allowed, no Crawl-delay
        web.robots[host_a] = "User-agent: *\nAllow: /\n"
        web.robots[host_b] = "User-agent: *\nAllow: /\n"

        async def fetched_again() -> bool:
            return all(web.truth.pages[u].fetches > 0 for u in blocked_all)

        await _until("the formerly disallowed pages are fetched", fetched_again)
        rate_after = await r.hget(key(host_a, "host"), "rate")
        blocked_after = await r.scard(key(host_a, "blocked")) + await r.scard(
            key(host_b, "blocked"))
        view_a_after = _get(s.web_port, f"/hosts/{host_a}/")
        robots_events = [v for v in hosts.items if v.get("source") == "robots"]
    finally:
        await _stop(fetcher, task, orders, outcomes, hosts)
        await r.aclose()
        await web.stop()
    assert fetched_while_blocked == dict.fromkeys(blocked_all, 0)
    assert refused and all(v["error"] == "robots.txt disallows" and v["disallowed"] is True
                           and v["robots_digest"] and v["status"] is None for v in refused)
    # a page already ordered when its outcome said "disallowed" may have had one more order
    # out (an order in flight); none after the block is applied
    assert after == before, (before, after)
    assert view_a["max_crawls_per_s"] == 1.0 and view_a["limited_by"] == "robots"
    assert view_a["limits"]["robots"] == {"max_crawls_per_s": 1.0, "reason": "Crawl-delay 1"}
    assert view_a["blocked_by_robots"] == 2
    assert rate_after is None and blocked_after == 0  # back to the default 5/s, nothing blocked
    assert view_a_after["blocked_by_robots"] == 0 and view_a_after["limited_by"] is None
    # one announcement per robots.txt per host (two fetchers' races aside: one fetcher here)
    assert sorted((v["host"], repr(v["max_crawls_per_s"])) for v in robots_events) == sorted(
        [(host_a, "1.0"), (host_a, "None"), (host_b, "None"), (host_b, "None")])
    return {"orders_of_blocked_before": before, "after": after, "view": view_a,
            "view_after": view_a_after, "robots_fetches": dict(web.robots_fetches),
            "stats": fetcher.stats}


def test_429_lowers_the_capacity_and_it_recovers(settings: Settings, start_worker) -> None:
    s = _worker_settings(settings)
    start_worker(s)
    print(asyncio.run(_pushback_scenario(s)))


async def _pushback_scenario(s: Settings) -> dict[str, Any]:
    web = TestWeb(generate_world(6, n_hosts=1, pages_per_host=5, time_unit_s=1.0),
                  simulate=False)
    await web.start()
    host = web.world.hosts[0]
    web.pushback[host] = (429, "1", 3)  # the next 3 page requests: 429, Retry-After: 1
    fetcher = FetcherService(s, LOOPBACK, FetchLimits(total_timeout_s=5),
                             pushback=PushbackPolicy(increase_fraction=0.25,
                                                     increase_interval_s=0.5),
                             politeness_interval_s=0.1)
    seen: list[dict[str, Any]] = []
    task, orders, outcomes, hosts = await _stack(s, web, fetcher, web.urls())
    try:
        async def limited() -> bool:
            v = await asyncio.to_thread(_get, s.web_port, f"/hosts/{host}/")
            seen.append(v)
            return v["limited_by"] == "pushback"

        await _until("push-back visible at GET /hosts/{host}/", limited)

        async def recovered() -> bool:
            v = await asyncio.to_thread(_get, s.web_port, f"/hosts/{host}/")
            seen.append(v)
            return "pushback" not in v["limits"]

        await _until("the push-back limit is lifted", recovered)
        events = [v for v in hosts.items if v.get("source") == "pushback"]
        throttled = [v for v in outcomes.items if v["status"] == 429]
    finally:
        await _stop(fetcher, task, orders, outcomes, hosts)
        await web.stop()
    low = next(v for v in seen if v["limited_by"] == "pushback")
    assert low["max_crawls_per_s"] == 1.0  # min(5 x 0.5, 1 / Retry-After 1 s)
    assert low["limits"]["pushback"]["reason"] == "HTTP 429, Retry-After 1s: x0.5"
    assert seen[-1]["max_crawls_per_s"] is None  # the default again
    assert seen[-1]["effective_max_crawls_per_s"] == 5.0
    rates = [v["max_crawls_per_s"] for v in events]
    # a decrease (429s within its hold are not counted again), additive steps of
    # 0.25 x 5 = 1.25/s, then lifted
    assert rates[0] == 1.0 and rates[-1] is None, events
    # a 429 that arrives after the hold (a slow order on a loaded machine) is a new
    # decrease from the current rate: every step is either x0.5 (at most 1/Retry-After)
    # or +1.25/s, and the climb after the last decrease ends lifted
    prev = 5.0
    for r in rates[:-1]:
        assert r == min(prev * 0.5, 1.0) or r == pytest.approx(prev + 1.25), events
        prev = r
    last_low = max(i for i in range(len(rates) - 1)
                   if i == 0 or rates[i] < rates[i - 1])  # type: ignore[operator]
    low_rate = rates[last_low]
    assert low_rate is not None
    climb = [low_rate + 1.25 * k for k in range(int((5.0 - low_rate) / 1.25 + 1e-9) + 1)
             if low_rate + 1.25 * k < 5.0]
    assert rates[last_low:] == [*map(pytest.approx, climb), None], events
    assert len(throttled) >= 1 and fetcher.stats.pushbacks == len(throttled)
    return {"events": events, "low": low, "last": seen[-1]}
