"""Shard rebuild from a real Redis: how long a worker takes to load a shard it is assigned.

    .venv/bin/python benchmarks/bench_rebuild.py --redis redis://127.0.0.1:6399/0 \
        --pages 1000000 --hosts 10000

Writes ``--pages`` crawled pages on ``--hosts`` hosts into one shard, each with an estimator
record made by the real :class:`streams.estimation.Estimation` (so every page takes the
estimates path) and a signal count, then times ``Scheduler`` rebuilding the shard (arrays:
``Scheduler._load_hosts``).  Same-run references: the Redis reads alone
(``Store.dump_hosts`` over every host: the floor any rebuild pays), and the page-by-page
path (``Scheduler._apply_or_skip`` per page, the rebuild before this wave) over the first
``--reference-pages`` pages, per page.  The keys are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from streams.estimation import Estimation, Observation
from streams.metrics import Metrics
from streams.scheduler import NOT_IN_FLIGHT, Scheduler
from streams.settings import Settings
from streams.state import PageState, Store


async def fill(store: Store, n: int, hosts: int, now: float) -> None:
    est = Estimation()
    records = est.observe([
        Observation(None, 3600.0 * (1 + i % 5), (1, 0, i % 2, 0, 0), i % 3 != 0, 1e9 + i)
        for i in range(64)])
    per = n // hosts
    pipe = store.redis.pipeline(transaction=False)
    for h in range(hosts):
        host = f"host{h}.example"
        pages, ests = {}, {}
        for j in range(per):
            k = h * per + j
            u = f"https://{host}/page/{k:08d}"
            pages[u] = PageState(1.0 + j % 5, None, now - 10 - k % 86400,
                                 (j % 2, 0, 0, 0, 0)).encode()
            ests[u] = records[k % len(records)]
        pipe.hset(store.key(host, "pages"), mapping=pages)
        pipe.hset(store.key(host, "est"), mapping=ests)
        pipe.sadd(store.shard_key(0), host)
        if h % 50 == 49:
            await pipe.execute()
            pipe = store.redis.pipeline(transaction=False)
    await pipe.execute()


async def main(args: argparse.Namespace) -> None:
    prefix = f"rb{uuid.uuid4().hex[:6]}"
    s = Settings(redis_url=args.redis, key_prefix=prefix, partitions=1)
    store = Store.from_url(args.redis, prefix)
    now = time.time()

    async def sink(k: bytes, v: bytes) -> None:
        return None

    try:
        t0 = time.perf_counter()
        await fill(store, args.pages, args.hosts, now)
        print(f"filled {args.pages} pages on {args.hosts} hosts in "
              f"{time.perf_counter() - t0:.1f}s")
        hosts = await store.shard_hosts(0)
        t0 = time.perf_counter()
        dumps = []
        for i in range(0, len(hosts), 50):
            dumps.extend(await store.dump_hosts(hosts[i : i + 50]))
        t_read = time.perf_counter() - t0
        print(f"reference: Redis reads alone {t_read:.2f}s")

        sch = Scheduler(s, store, Metrics(), sink)
        t0 = time.perf_counter()
        sch.sync_assignment({0})
        while not sch.shards[0].ready:
            await asyncio.sleep(0.005)
        t_bulk = time.perf_counter() - t0
        print(f"rebuild (arrays): {t_bulk:.2f}s for {len(sch.shards[0].book)} pages = "
              f"{t_bulk / args.pages * 1e6:.1f} us/page ({t_bulk / t_read:.1f}x the reads)")

        one = Scheduler(s, store, Metrics(), sink)
        shard = one.new_shard(0)
        done = 0
        t0 = time.perf_counter()
        for d in dumps:
            for url, value in d.pages.items():
                one._apply_or_skip(shard, d.host, url, PageState.decode(value),
                                   d.estimators.get(url), NOT_IN_FLIGHT)
                done += 1
            if done >= args.reference_pages:
                break
        t_one = time.perf_counter() - t0
        per_one = t_one / done * 1e6
        print(f"reference: page by page {t_one:.2f}s for {done} pages = {per_one:.1f} us/page "
              f"(x{per_one / (t_bulk / args.pages * 1e6):.1f} the arrays' cost per page)")
    finally:
        await store.delete_all()
        await store.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--hosts", type=int, default=1_000)
    ap.add_argument("--reference-pages", type=int, default=100_000)
    asyncio.run(main(ap.parse_args()))
