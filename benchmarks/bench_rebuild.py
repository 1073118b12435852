"""Shard rebuild from a real Redis: how long a worker takes to load a shard it is assigned,
and how many bytes of Redis each page takes.

    .venv/bin/python benchmarks/bench_rebuild.py --redis redis://127.0.0.1:6399/0 \
        --pages 1000000 --hosts 10000

Writes ``--pages`` crawled and pinged pages on ``--hosts`` hosts into one shard, each with an
estimator record made by the real :class:`streams.estimates.estimation.Estimation` (so every page
takes the estimates path), a signal count and ``--fingerprints`` ping fingerprints (page
record and estimator record in one field, in the page buckets the host's page count gives,
``redis_store.layout_after``) and each host's prior sums (``P:{host}:prior``), then
measures the Redis bytes per page (``INFO memory`` ``used_memory`` delta after
``MEMORY PURGE``) and times ``Scheduler`` rebuilding the shard
(arrays: ``ShardLoader._load_hosts``).  Same-run references: the Redis reads alone
(``Store.dump_hosts`` over every host: the floor any rebuild pays), and with
``--reference-pages`` the page-by-page path (``ShardLoader.apply_or_skip`` per page) over
the first pages.  The keys are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import math
import pstats
import random
import time
import uuid
from typing import Any

from _common import set_listpack_value

from streams.estimates.estimation import Estimation, EstimatorRecord, Observation
from streams.scheduler import NOT_IN_FLIGHT, Scheduler
from streams.settings import Settings
from streams.store.host_prior import PRIOR_FIELDS, contribution
from streams.store.page_record import N_SEEN, PageState, ping_fingerprint, record_bytes
from streams.store.redis_store import Store, bucket_of, layout_after, page_field
from streams.telemetry.metrics import Metrics


def records(history: str = "mixed", sources: str = "two", signal_scale: int = 1
            ) -> list[bytes]:
    """64 distinct estimator records (one to five observed intervals each); ``history``
    ``evicted``: each then crawled changed until a changed interval has left the ring (the
    quadratic summary in use: the largest record a page of the stream's ring keeps).
    ``sources``: the pings' sources, ``two`` (sitemap and push sources: two source groups),
    ``one`` (sitemap only), ``three`` (sitemap, push and cdn); ``signal_scale``: the
    counts of the ``evicted`` history's changed intervals left in the ring times this (a
    count over 255 keeps a record's counts wide; the intervals that left the ring keep
    theirs, so the quadratic summary is not one of certain changes).  Each carries its
    contribution to a host prior (host sums of 100 pages: the ``host`` field in use)."""
    est = Estimation()
    host = (100.0, 100.0 / 86400.0, 100.0 * math.log(1.0 / 86400.0))

    def sig(*raw: int, scale: int = 1) -> tuple[int, ...]:
        counts = tuple(scale * c for c in raw)
        if sources == "one":  # every signal from the sitemap
            return (sum(counts), 0, 0, 0, 0)
        if sources == "three":  # the websub ones from the cdn instead (a third group)
            return (counts[0], counts[1], 0, counts[2], 0)
        return counts

    recs: list[str] = est.observe([
        Observation(None, 3600.0 * (1 + i % 5), sig(1, 0, i % 2, 0, 0), i % 3 != 0, 1e9 + i,
                    host_sums=host)
        for i in range(64)])
    for k in range(1, 5):
        recs[: 64 - 12 * k] = est.observe([
            Observation(r, 3600.0, sig(0, 1, 0, 0, 0), (i + k) % 2 == 0, 1e9 + 3600.0 * k + i,
                        host_sums=host)
            for i, r in enumerate(recs[: 64 - 12 * k])])
    last = 6 + est.estimator.ring_capacity if history == "evicted" else 5
    for k in range(5, last):
        # the intervals left in the ring at the end: their counts times signal_scale
        scale = signal_scale if k >= last - est.estimator.ring_capacity else 1
        recs = est.observe([Observation(r, 3600.0, sig(0, 0, 1, 0, 0, scale=scale), True,
                                        1e9 + 3600.0 * k + i, host_sums=host)
                            for i, r in enumerate(recs)])
    if history == "evicted":
        assert all(any(EstimatorRecord.decode(r).state.quad_a) for r in recs)
    return [record_bytes(r) for r in recs]


def host_sizes(n: int, hosts: int, spread: bool) -> list[int]:
    """Pages per host: ``n // hosts`` each, or (``spread``) drawn uniformly from 1 to twice
    that less one (seeded; the same mean), so the hosts' hashes fall in every allocator size
    class, as a real crawl's hosts of every size do, not all in the one class of a fixed
    size."""
    per = n // hosts
    if not spread:
        return [per] * hosts
    rng = random.Random(13)
    return [rng.randint(1, 2 * per - 1) for _ in range(hosts)]


async def fill(store: Store, sizes: list[int], now: float, recs: list[bytes],
               fingerprints: int) -> None:
    pipe = store.redis.pipeline(transaction=False)
    idx = 0
    for h, per in enumerate(sizes):
        layout = layout_after(per)
        host = f"host{h}.example"
        pages: dict[str, Any] = {}
        for j in range(per):
            k, idx = idx, idx + 1
            u = page_field(host, f"https://{host}/page/{k:08d}")  # the stored field
            st = PageState(1.0 + j % 5, None, now - 10 - k % 86400, (j % 2, 0, 0, 0, 0),
                           seen=tuple(ping_fingerprint(f"ping{k}.{i}")
                                      for i in range(fingerprints)))
            pages[u] = st.encode(recs[k % len(recs)])
        if layout != (0, 0):  # several buckets (apply_page.lua's splits)
            buckets: dict[int, dict[str, Any]] = {}
            for u, v in pages.items():
                buckets.setdefault(bucket_of(u, layout), {})[u] = v
            for bucket, part in buckets.items():
                pipe.hset(store.bucket_key(host, bucket), mapping=part)
            pipe.hset(store.key(host, "buckets"),
                      mapping={"l": layout[0], "p": layout[1], "n": len(pages)})
        else:
            pipe.hset(store.key(host, "pages"), mapping=pages)
        pipe.sadd(store.shard_key(0), host)
        # the host's prior sums as the outcome script writes them (%.17g)
        parts = [contribution(recs[k % len(recs)]) for k in range(idx - per, idx)]
        pipe.hset(store.key(host, "prior"), mapping={
            f: f"{math.fsum(x):.17g}"
            for f, x in zip(PRIOR_FIELDS, zip(*parts, strict=True), strict=True)})
        if h % 50 == 49:
            await pipe.execute()
            pipe = store.redis.pipeline(transaction=False)
    await pipe.execute()


async def used_memory(store: Store) -> int:
    await store.redis.execute_command("MEMORY", "PURGE")
    info: Any = await store.redis.info("memory")
    return int(info["used_memory"])


async def run(args: argparse.Namespace) -> None:
    prefix = f"rb{uuid.uuid4().hex[:6]}"
    s = Settings(redis_url=args.redis, key_prefix=prefix, partitions=1)
    store = Store.from_url(args.redis, prefix)
    now = time.time()

    async def sink(k: bytes, v: bytes) -> None:
        return None

    try:
        recs = records(args.history, args.sources, args.signal_scale)
        sizes = host_sizes(args.pages, args.hosts, args.host_spread)
        n_pages = sum(sizes)
        rec_bytes = sorted({len(record_bytes(r)) for r in recs})
        before = await used_memory(store)
        t0 = time.perf_counter()
        await fill(store, sizes, now, recs, args.fingerprints)
        fill_s = time.perf_counter() - t0
        per_page = (await used_memory(store) - before) / n_pages
        enc: Any = await store.redis.object("encoding", store.key("host0.example", "pages"))
        print(f"filled {n_pages} pages on {args.hosts} hosts "
              f"({'spread' if args.host_spread else 'fixed'} sizes) in {fill_s:.1f}s; "
              f"estimator records {rec_bytes[0]}-{rec_bytes[-1]} B ("
              f"{args.history}, {args.sources} source groups, "
              f"counts x{args.signal_scale}, {args.fingerprints} ping fingerprints); "
              f"redis bytes per page (INFO used_memory delta / pages): {per_page:.1f} "
              f"(pages hash encoding: {enc})")
        hosts = await store.shard_hosts(0)
        t0 = time.perf_counter()
        dumps = []
        for i in range(0, len(hosts), 50):
            dumps.extend(await store.dump_hosts(hosts[i : i + 50]))
        t_read = time.perf_counter() - t0
        print(f"reference: Redis reads alone {t_read:.2f}s")

        sch = Scheduler(s, store, Metrics(), sink)
        prof = cProfile.Profile() if args.profile else None
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        sch.sync_assignment({0})
        while not sch.shards[0].ready:
            await asyncio.sleep(0.005)
        t_bulk = time.perf_counter() - t0
        if prof:
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        print(f"rebuild (arrays): {t_bulk:.2f}s for {len(sch.shards[0].book)} pages = "
              f"{t_bulk / n_pages * 1e6:.1f} us/page ({t_bulk / t_read:.1f}x the reads)")

        if args.reference_pages:
            one = Scheduler(s, store, Metrics(), sink)
            shard = one.new_shard(0)
            done = 0
            t0 = time.perf_counter()
            for d in dumps:
                for url, value in d.pages.items():
                    one.loader.apply_or_skip(shard, d.host, url, PageState.decode(value),
                                       d.estimator(url), NOT_IN_FLIGHT)
                    done += 1
                if done >= args.reference_pages:
                    break
            t_one = time.perf_counter() - t0
            per_one = t_one / done * 1e6
            print(f"reference: page by page {t_one:.2f}s for {done} pages = "
                  f"{per_one:.1f} us/page (x{per_one / (t_bulk / n_pages * 1e6):.1f} the "
                  "arrays' cost per page)")
    finally:
        await store.delete_all()
        await store.close()


async def main(args: argparse.Namespace) -> None:
    await set_listpack_value(args.redis, args.listpack_value)
    await run(args)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--listpack-value", type=int, default=0,
                    help="CONFIG SET hash-max-listpack-value first (0: leave it)")
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--hosts", type=int, default=1_000)
    ap.add_argument("--reference-pages", type=int, default=0)
    ap.add_argument("--history", choices=("mixed", "evicted"), default="mixed",
                    help="the pages' estimator records: one to five observed intervals "
                    "(mixed), or each with a changed interval gone from the ring (evicted)")
    ap.add_argument("--signal-scale", type=int, default=1,
                    help="the counts of the intervals left in the ring times this (with "
                    "--history evicted; e.g. 300: counts over 255, kept wide)")
    ap.add_argument("--sources", choices=("one", "two", "three"), default="two",
                    help="source groups the pages' pings come from (records()'s docstring)")
    ap.add_argument("--host-spread", action="store_true",
                    help="hosts of 1 to 2x-1 pages (mean x = pages/hosts), not x each")
    ap.add_argument("--fingerprints", type=int, default=1, choices=range(N_SEEN + 1),
                    metavar="0..8", help="ping fingerprints each page record keeps (1: a "
                    "page pinged once since its ring was written; 8: the most kept)")
    ap.add_argument("--profile", action="store_true", help="cProfile the rebuild")
    asyncio.run(main(ap.parse_args()))
