"""The scheduler's loop against a real Redis, in process (orders go to a sink instead of
Kafka): does it hold the budget, and what does an order cost?

    .venv/bin/python benchmarks/bench_scheduler.py --redis redis://127.0.0.1:6379/0 \\
        --rates 0.5 40 1000 --seconds 30

For each rate ``R``: ``--pages`` never-crawled pages on ``--hosts`` hosts (1 crawl/s each,
burst 1; the reference set-up is 4000 pages on 200 hosts for R = 40) are written to Redis, one
shard is assigned (the scheduler rebuilds it from Redis), and after a warm-up the real
``Scheduler.run`` loop runs for ``--seconds``.  Reported: the emitted rate from the orders'
``issued_at`` (relative error to R), the worst count of orders in any window of ``L`` in
{0.1, 1, 5} s divided by the bound ``R * (L + tick) + 1``, the loop's busy time per
order, and the same-run reference: the time of one pipelined ``EVALSHA`` round of the same
size against the same Redis (what the Redis side of an order costs at least).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

import numpy as np

from streams.scheduler import Scheduler
from streams.settings import Settings
from streams.store.page_record import PageState
from streams.store.redis_store import Store, page_field
from streams.telemetry.metrics import Metrics


async def one_rate(args: argparse.Namespace, rate: float) -> dict[str, Any]:
    pages = args.pages or (4000 if rate <= 40 else int(rate * (args.seconds + 10) * 1.5))
    hosts = args.hosts or max(200, int(rate * 3))
    st = Settings(redis_url=args.redis, key_prefix=f"bs{uuid.uuid4().hex[:6]}",
                  budget_per_s=rate, tick_s=args.tick, default_host_crawls_per_s=1.0,
                  host_burst=1.0, web_enabled=False)
    store = Store.from_url(st.redis_url, st.key_prefix)
    await store.load_scripts()
    wall0, mono0 = time.time(), time.monotonic()
    issued: list[float] = []

    async def sink(key: bytes, value: bytes) -> None:
        issued.append(json.loads(value)["issued_at"] - wall0 + mono0)

    sch = Scheduler(st, store, Metrics(), sink, assignment=lambda: {0})
    pipe = store.redis.pipeline(transaction=False)
    for i in range(pages):
        host = f"h{i % hosts}.example"
        pipe.hset(store.key(host, "pages"), page_field(host, f"https://{host}/p{i}"),
                  PageState(1.0, 1e-5).encode())
        pipe.sadd(store.shard_key(0), host)
        if i % 10000 == 9999:
            await pipe.execute()
            pipe = store.redis.pipeline(transaction=False)
    await pipe.execute()
    task = asyncio.ensure_future(sch.run())
    t_load = time.monotonic()
    while not (0 in sch.shards and sch.shards[0].ready):
        await asyncio.sleep(0.05)
    load_s = time.monotonic() - t_load
    await asyncio.sleep(args.warmup)
    t0, n0 = time.monotonic(), len(issued)
    busy0, cpu0 = sch.busy_total_s, time.process_time()
    await asyncio.sleep(args.seconds)
    t1, n1 = time.monotonic(), len(issued)
    busy, cpu = sch.busy_total_s - busy0, time.process_time() - cpu0
    sch.stopping = True
    await asyncio.sleep(0.05)
    task.cancel()
    ts = np.asarray([t for t in issued if t0 <= t <= t1])
    worst = 0.0
    for L in (0.1, 1.0, 5.0):
        j = np.searchsorted(ts, ts + L, side="right") - np.arange(ts.size)
        worst = max(worst, float(j.max()) / (rate * (L + args.tick) + 1) if ts.size else 0.0)
    emitted = float(ts.size) / (t1 - t0)
    # the reference: one pipelined round of EVALSHA of a trivial script, same count
    ref_sha = await store.redis.script_load("return redis.call('HGET', KEYS[1], ARGV[1])")
    m = max(1, n1 - n0)
    r0 = time.perf_counter()
    pipe = store.redis.pipeline(transaction=False)
    for i in range(m):
        pipe.evalsha(ref_sha, 1, store.key(f"h{i % hosts}.example", "pages"), "x")
    await pipe.execute()
    ref_us = (time.perf_counter() - r0) / m * 1e6
    await store.close()
    return {
        "rate_per_s": rate, "tick_s": args.tick, "pages": pages, "hosts": hosts,
        "seconds": round(t1 - t0, 3), "orders": int(ts.size), "emitted_per_s": emitted,
        "rel_error": emitted / rate - 1.0, "worst_window_over_bound": worst,
        "loop_busy_fraction": busy / (t1 - t0),
        "cpu_us_per_order": cpu / max(1, ts.size) * 1e6,
        "late_wakeups": sch.loop_stats["late"], "shard_load_s": load_s,
        "reference_evalsha_us": ref_us,
    }


async def main(args: argparse.Namespace) -> None:
    rows = []
    for rate in args.rates:
        row = await one_rate(args, rate)
        rows.append(row)
        print(f"R={row['rate_per_s']:g}/s tick={row['tick_s']}: {row['emitted_per_s']:.4f}/s "
              f"over {row['seconds']:.0f}s ({row['rel_error'] * 100:+.2f}%), worst window/bound "
              f"{row['worst_window_over_bound']:.3f}, process CPU/order "
              f"{row['cpu_us_per_order']:.0f} us, loop busy {row['loop_busy_fraction']:.0%} "
              f"(reference EVALSHA "
              f"{row['reference_evalsha_us']:.0f} us), late wake-ups {row['late_wakeups']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis", required=True)
    ap.add_argument("--rates", type=float, nargs="+", default=[0.5, 40.0, 1000.0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--tick", type=float, default=0.01)
    ap.add_argument("--pages", type=int, default=0, help="default: enough for the run")
    ap.add_argument("--hosts", type=int, default=0, help="default: max(200, 3 R)")
    ap.add_argument("--json")
    asyncio.run(main(ap.parse_args()))
