"""A tick's issue call whose reply never comes (Redis paused past the client's timeout, a
dropped connection): Redis may have run the scripts and marked the pages in flight, but no
order went out.  The marks must be cleared and the pages ordered later, none left waiting
for the order time-out (600 s by default).  Found by the fault campaign
(tests/integration/test_faults.py, Redis paused 30 s)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from test_agents_redis import Harness, js

from streams.scheduler import Scheduler
from streams.store import redis_store


class LosesOneReply:
    """The store's batch runner (``run_commands``, what ``Store.issue`` sends through); once
    armed, the next batch runs on the server, then its reply is lost (a ``TimeoutError``, as
    when the server does not answer)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.armed = False

    async def __call__(self, client: Any, commands: Any) -> list[Any]:
        res: list[Any] = await self.real(client, commands)
        if self.armed:
            self.armed = False
            raise TimeoutError("Timeout reading from socket")
        return res


async def test_an_issue_whose_reply_is_lost_leaves_no_page_in_flight(redis_url: str) -> None:
    h = Harness(redis_url, default_host_crawls_per_s=100.0, host_burst=100.0)
    urls = [f"https://lost.org/{i}" for i in range(3)]
    await h.feed("pages", [js(url=u) for u in urls])
    await h.store.load_scripts()
    sent: list[str] = []

    async def sink(k: bytes, v: bytes) -> None:
        sent.append(json.loads(v)["url"])

    flaky = LosesOneReply(redis_store.run_commands)
    sch = Scheduler(h.settings, h.store, h.metrics, sink)
    shard = sch.new_shard(0)
    shard.ready, shard.share_per_s = True, 100.0
    sch.shards[0] = shard
    for u in urls:
        await sch.on_page(0, "lost.org", u, await h.store.get_page_raw("lost.org", u))
    redis_store.run_commands = flaky  # type: ignore[assignment]
    flaky.armed = True
    try:
        while flaky.armed:
            with contextlib.suppress(Exception):  # as Scheduler.run: log, next tick
                await sch.tick_all([shard])
            await asyncio.sleep(0.02)
    finally:
        redis_store.run_commands = flaky.real
    assert sent == []
    inflight = h.store.key("lost.org", "inflight")
    assert await h.store.redis.hlen(inflight) == 0
    assert h.metrics.tally["orders.unsent"] >= 1
    for _ in range(20):
        await sch.tick_all([shard])
        await asyncio.sleep(0.02)
        if len(sent) == 3:
            break
    assert sorted(sent) == urls
    assert await h.store.redis.hlen(inflight) == 3
