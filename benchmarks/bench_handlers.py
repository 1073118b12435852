"""The agents' handlers with a scheduler, against a real Redis, without Kafka: what one
batch of pings or outcomes costs the worker's loop (validation, the store's scripts, the
book's update), which bounds the end-to-end rates of ``bench_e2e.py throughput``.

    .venv/bin/python benchmarks/bench_handlers.py --redis redis://127.0.0.1:6399/0 \\
        --pages 100000 --hosts 1000 [--profile]

Pages are loaded and crawled once (outcomes without an observed interval), then
``--pages`` pings of random pages (batches of ``--batch`` records, by default the worker's
``RECRAWL_BATCH_SIZE`` default: the most the batch consumer hands a handler at once)
and one outcome per pinged page (an observed interval: the estimator's update) are timed.
``--profile``: cProfile of the two timed phases (the top functions by own time).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import pstats
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


async def main(args: argparse.Namespace) -> None:
    batch = args.batch
    await set_listpack_value(args.redis, args.listpack_value)
    prefix = f"bh{uuid.uuid4().hex[:6]}"
    s = Settings(redis_url=args.redis, key_prefix=prefix, budget_per_s=1.0, tick_s=1.0,
                 default_host_crawls_per_s=1.0, t_delay_s=0.0, partitions=1)
    store = Store.from_url(s.redis_url, prefix)
    await store.load_scripts()
    metrics = Metrics()

    async def sink(k: bytes, v: bytes) -> None:
        return None

    async def no_reject(k: bytes | None, v: bytes) -> None:
        raise AssertionError(v)

    sch = Scheduler(s, store, metrics, sink)
    sch.sync_assignment({0})
    while not all(sh.ready for sh in sch.shards.values()):
        await asyncio.sleep(0.05)
    agents = Agents(s, store, metrics, no_reject, scheduler=sch)
    n, hosts = args.pages, args.hosts
    urls = [(f"host{i % hosts}.example", f"https://host{i % hosts}.example/page/{i:08d}")
            for i in range(n)]
    now = time.time()
    offset = 0

    def events(topic: str, bodies: list[tuple[str, dict[str, Any]]]) -> list[Ev]:
        nonlocal offset
        out = []
        for host, body in bodies:
            out.append(Ev(Msg(json.dumps(body).encode(), host.encode(), topic, 0, offset)))
            offset += 1
        return out

    t0 = time.perf_counter()
    for i in range(0, n, batch):
        await agents.on_pages(events("pages", [(h, {"url": u}) for h, u in urls[i:i + batch]]))
    print(f"pages: {n / (time.perf_counter() - t0):,.0f}/s")
    for i in range(0, n, batch):
        await agents.on_outcomes(events("outcomes", [
            (h, {"url": u, "fetched_at": now - 1000 - (i + j) % 500, "changed": None})
            for j, (h, u) in enumerate(urls[i:i + batch])]))
    pinged = random.Random(1).sample(urls, n)

    async def redis_cpu() -> tuple[float, int, float]:
        """Redis's CPU seconds so far (``INFO cpu``), its EVALSHA calls and their seconds."""
        cpu = await store.redis.info("cpu")
        ev = (await store.redis.info("commandstats")).get("cmdstat_evalsha", {})
        return (float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
                int(ev.get("calls", 0)), 1e-6 * float(ev.get("usec", 0)))

    async def timed(label: str, batches: list[list[Ev]], handler: Any) -> None:
        prof = cProfile.Profile()
        r0 = await redis_cpu()
        t0, c0 = time.perf_counter(), time.process_time()
        if args.profile:
            prof.enable()
        for b in batches:
            await handler(b)
        if args.profile:
            prof.disable()
        dt, cpu = time.perf_counter() - t0, time.process_time() - c0
        r1 = await redis_cpu()
        calls = r1[1] - r0[1]
        # this process's CPU apart from the wall time: Redis runs on the same 2 cores
        print(f"{label}: {n} in {dt:.2f} s = {n / dt:,.0f}/s, "
              f"this process's CPU {1e6 * cpu / n:.1f} us each"
              + (" (under cProfile)" if args.profile else "")
              + f"; Redis's CPU {1e6 * (r1[0] - r0[0]) / n:.1f} us each, {calls / n:.2f} "
              f"script calls each of {1e6 * (r1[2] - r0[2]) / max(calls, 1):.1f} us")
        if args.profile:
            pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)

    await timed("pings", [events("pings", [
        (h, {"url": u, "source": "sitemap", "received_at": now - 500, "id": f"p{i + j}"})
        for j, (h, u) in enumerate(pinged[i:i + batch])]) for i in range(0, n, batch)],
        agents.on_pings)
    await timed("outcomes with an observed interval", [events("outcomes", [
        (h, {"url": u, "fetched_at": now - 10, "changed": (i + j) % 3 != 0})
        for j, (h, u) in enumerate(pinged[i:i + batch])]) for i in range(0, n, batch)],
        agents.on_outcomes)
    await store.delete_all()
    await store.close()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--listpack-value", type=int, default=256,
                    help="CONFIG SET hash-max-listpack-value first (0: leave it)")
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--hosts", type=int, default=1_000)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--batch", type=int, default=Settings.model_fields["batch_size"].default,
                    help="records per handler call (default: RECRAWL_BATCH_SIZE's default)")
    asyncio.run(main(ap.parse_args()))
