"""Streaming worker benchmarks against a real Redis (no Kafka: the agents' and scheduler's
own cost, which bounds what a worker can do; Kafka adds its client's cost on top).

    .venv/bin/python benchmarks/bench_streaming.py --redis redis://127.0.0.1:6379/0 \
        --pages 1000000

Reports: pings applied per second (the pings agent's batch path: validation + one Lua
call per host of a batch, pipelined; pings of random pages), orders per second (scheduler
ticks with an unbounded budget over ``--pages`` pages), and Redis bytes per page
(``INFO memory`` before/after loading).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
import uuid
from typing import Any

from _common import Ev, Msg, set_listpack_value

from streams.scheduler import Scheduler
from streams.settings import Settings
from streams.store.redis_store import Store
from streams.telemetry.metrics import Metrics
from streams.worker.agents import Agents


async def used_memory(store: Store) -> int:
    info: Any = await store.redis.info("memory")
    return int(info["used_memory"])


async def main(args: argparse.Namespace) -> None:
    await set_listpack_value(args.redis, args.listpack_value)
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    s = Settings(redis_url=args.redis, key_prefix=prefix, budget_per_s=1e9, tick_s=0.01,
                 default_host_crawls_per_s=1e9, t_delay_s=0.0, partitions=args.shards)
    store = Store.from_url(s.redis_url, prefix)
    await store.load_scripts()
    metrics = Metrics()

    async def no_reject(k: bytes | None, v: bytes) -> None:
        raise AssertionError(v)

    agents = Agents(s, store, metrics, no_reject)
    n, hosts = args.pages, args.hosts or max(1, args.pages // 1000)
    urls = [(f"host{i % hosts}.example", f"https://host{i % hosts}.example/page/{i:08d}")
            for i in range(n)]

    # -- Redis bytes per page ----------------------------------------------------------
    await store.redis.execute_command("MEMORY", "PURGE")
    before = await used_memory(store)
    t0 = time.perf_counter()
    batch = 2000
    for i in range(0, n, batch):
        evs = [Ev(Msg(json.dumps({"url": u, "importance": 1.0 + j % 5}).encode(), h.encode(),
                      "bench.pages", hash(h) % args.shards, i + j))
               for j, (h, u) in enumerate(urls[i : i + batch])]
        await agents.on_pages(evs)
    load_s = time.perf_counter() - t0
    after = await used_memory(store)
    per_page = (after - before) / n
    print(f"pages loaded: {n} in {load_s:.1f}s ({n / load_s:,.0f}/s through the pages agent)")
    print(f"redis bytes per page: {per_page:.0f} (INFO used_memory delta / pages; "
          f"{hosts} hosts, urls ~{len(urls[0][1])} bytes)")

    # -- pings per second ----------------------------------------------------------------
    m = min(n, args.pings)
    now = time.time()
    # pings of random pages (a batch of 500 touches ~500 hosts when there are many)
    pinged = random.Random(1).sample(urls, m)
    t0 = time.perf_counter()
    for i in range(0, m, 500):
        evs = [Ev(Msg(json.dumps({"url": u, "source": "sitemap", "received_at": now,
                                  "id": f"p{i + j}"}).encode(), h.encode(), "bench.pings",
                      0, i + j))
               for j, (h, u) in enumerate(pinged[i : i + 500])]
        await agents.on_pings(evs)
    ping_s = time.perf_counter() - t0
    print(f"pings applied: {m} in {ping_s:.1f}s = {m / ping_s:,.0f}/s "
          f"(one worker process, batches of 500)")

    # -- orders per second ---------------------------------------------------------------
    async def orders_per_s(label: str) -> None:
        sent = 0

        async def sink(k: bytes, v: bytes) -> None:
            nonlocal sent
            sent += 1

        sch = Scheduler(s, store, metrics, sink)
        t0 = time.perf_counter()
        sch.sync_assignment(set(range(args.shards)))
        while not all(sh.ready for sh in sch.shards.values()):
            await asyncio.sleep(0.05)
        print(f"shards rebuilt from redis: {time.perf_counter() - t0:.1f}s")
        for sh in sch.shards.values():
            sh.share_per_s = args.orders_rate / args.shards
            sh.last_tick = time.monotonic()
        t0 = time.perf_counter()
        shards = list(sch.shards.values())
        while time.perf_counter() - t0 < args.seconds:
            await sch.tick_all(shards)
            await asyncio.sleep(0)
        dt = time.perf_counter() - t0
        print(f"orders issued ({label}): {sent} in {dt:.1f}s = {sent / dt:,.0f}/s over {n} "
              f"pages (ticks as fast as possible, share {args.orders_rate:g}/s)")

    await orders_per_s("pages never crawled")
    if args.crawled:
        # every page crawled once at a different time (distinct values: the CrawlIndex path)
        await store.redis.delete(*[store.key(h, "inflight") for h in {h for h, _ in urls}])
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            evs = [Ev(Msg(json.dumps({"url": u, "fetched_at": now - 10 - (i + j) % 86400,
                                      "changed": None}).encode(), h.encode(), "bench.outcomes",
                          hash(h) % args.shards, i + j))
                   for j, (h, u) in enumerate(urls[i : i + batch])]
            await agents.on_outcomes(evs)
        print(f"outcomes applied: {n} in {time.perf_counter() - t0:.1f}s")
        if args.estimated:
            # a ping and a second outcome (changed or not) per page: every page then has
            # an estimator record (one observed interval with one ping)
            await store.redis.delete(*[store.key(h, "inflight") for h in {h for h, _ in urls}])
            later = time.time()
            for i in range(0, n, batch):
                evs = [Ev(Msg(json.dumps({"url": u, "source": "sitemap",
                                          "received_at": later - 5, "id": f"e{i + j}"}).encode(),
                              h.encode(), "bench.pings", hash(h) % args.shards, n + i + j))
                       for j, (h, u) in enumerate(urls[i : i + batch])]
                await agents.on_pings(evs)
            t0 = time.perf_counter()
            for i in range(0, n, batch):
                evs = [Ev(Msg(json.dumps({"url": u, "fetched_at": later - 1,
                                          "changed": (i + j) % 3 != 0}).encode(), h.encode(),
                              "bench.outcomes", hash(h) % args.shards, n + i + j))
                       for j, (h, u) in enumerate(urls[i : i + batch])]
                await agents.on_outcomes(evs)
            print(f"outcomes with an observed interval applied: {n} in "
                  f"{time.perf_counter() - t0:.1f}s = {n / (time.perf_counter() - t0):,.0f}/s")
            await store.redis.execute_command("MEMORY", "PURGE")
            est = (await used_memory(store) - before) / n
            print(f"redis bytes per page, crawled and pinged, with estimator state: {est:.0f}")
        await orders_per_s("pages crawled once")
    # clean up
    await store.delete_all()
    await store.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--listpack-value", type=int, default=0,
                    help="CONFIG SET hash-max-listpack-value first (0: leave it)")
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--hosts", type=int, default=0, help="default: pages / 1000")
    ap.add_argument("--pings", type=int, default=100_000)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--orders-rate", type=float, default=1e6)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--crawled", action="store_true",
                    help="then crawl every page once and measure orders again")
    ap.add_argument("--estimated", action="store_true",
                    help="with --crawled: then a ping and an observed interval per page "
                         "(estimator state), Redis bytes per page again")
    asyncio.run(main(ap.parse_args()))
