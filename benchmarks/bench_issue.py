"""The issue script's cost: one tick's orders, one ``issue.lua`` call per host, against a
real Redis (no scheduler, no Kafka).

    .venv/bin/python benchmarks/bench_issue.py --redis redis://127.0.0.1:6391/0 \\
        --hosts 10000 --pages-per-host 20

Writes ``--pages-per-host`` never-crawled pages on each of ``--hosts`` hosts (stored as the
tree's own store stores them: ``redis_store.page_field`` where the tree has it), then issues
``--pages-per-host`` rounds of one order per host (``Store.issue``: the pipeline of a tick at
10^4 orders/s on 10^4 hosts of 1 crawl/s).  Reports each round's time (median, fastest) and
Redis's own time per script call (``INFO commandstats``, ``cmdstat_evalsha``
``usec_per_call`` over the rounds).  Run it with ``PYTHONPATH`` set to another tree to
compare two versions, alternating the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Callable

from streams.store import IssueBatch, redis_store
from streams.store.page_record import PageState
from streams.store.redis_store import Store

#: how a page is stored (before short fields: under its url)
FIELD: Callable[[str, str], str] = getattr(redis_store, "page_field", lambda _h, u: u)


async def run(args: argparse.Namespace) -> None:
    store = Store.from_url(args.redis, f"bi{uuid.uuid4().hex[:8]}")
    await store.load_scripts()
    hosts = [f"host{h}.example" for h in range(args.hosts)]
    try:
        pipe = store.redis.pipeline(transaction=False)
        for i, host in enumerate(hosts):
            pipe.hset(store.key(host, "pages"), mapping={
                FIELD(host, f"https://{host}/page/{k:08d}"): PageState(1.0).encode()
                for k in range(args.pages_per_host)})
            if i % 500 == 499:
                await pipe.execute()
                pipe = store.redis.pipeline(transaction=False)
        await pipe.execute()
        await store.redis.config_resetstat()
        times = []
        for r in range(args.pages_per_host):
            batches = [IssueBatch(h, [(f"https://{h}/page/{r:08d}", f"o{r}-{h}")])
                       for h in hosts]
            t0 = time.perf_counter()
            res = await store.issue(batches, now_s=1000.0 + 10 * r, default_rate=1.0,
                                    default_mif=0, burst=1.0)
            times.append(time.perf_counter() - t0)
            bad = [c for x in res if not isinstance(x, Exception) for c, _ in x if c != "ok"]
            if bad or any(isinstance(x, Exception) for x in res):
                raise SystemExit(f"round {r}: not every order issued ({bad[:3]})")
        stats = await store.redis.info("commandstats")
        usec = stats["cmdstat_evalsha"]["usec_per_call"]
        print(f"issue of {args.hosts:,} orders on {args.hosts:,} hosts, {len(times)} rounds: "
              f"median {statistics.median(times):.3f} s, fastest {min(times):.3f} s; "
              f"Redis {usec:.2f} us per script call")
    finally:
        await store.delete_all()
        await store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis", default="redis://127.0.0.1:6391/0")
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--pages-per-host", type=int, default=20)
    asyncio.run(run(ap.parse_args()))


if __name__ == "__main__":
    main()
