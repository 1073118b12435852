"""A shard rebuilt from a real Redis on arrays equals one built page by page
(streams/estimates/params.py, streams/scheduler/loading.py)."""

from __future__ import annotations

import random
from collections import Counter
from urllib.parse import urlsplit

import pytest
from estimator_records import estimator_records

from streams.events.records import SOURCES
from streams.settings import Settings
from streams.store.page_record import PageState

pytestmark = pytest.mark.integration


def test_a_bulk_rebuild_equals_a_page_by_page_one(redis_url: str) -> None:
    """A shard rebuilt from a real Redis with arrays (ShardLoader.load) holds the same pages,
    in flight or not, and chooses the same orders as one built page by page (_apply)."""
    import asyncio
    import dataclasses
    import uuid

    from models.decision.core import choose
    from streams.scheduler import NOT_IN_FLIGHT, Scheduler
    from streams.store.redis_store import Store
    from streams.telemetry.metrics import Metrics

    async def go() -> None:
        prefix = f"pm{uuid.uuid4().hex[:8]}"
        settings = Settings(redis_url=redis_url, key_prefix=prefix, partitions=1,
                            estimate_quantile=0.8, max_interval_s=86400.0)
        store = Store.from_url(redis_url, prefix)
        rng = random.Random(3)
        recs = estimator_records()
        now = 1.8e9
        data: dict[str, dict[str, dict[str, str]]] = {}
        for h in range(12):
            host = f"h{h}.example"
            pages, ests, fl = {}, {}, {}
            for j in range(40):
                u = f"https://{host}/{j}"
                crawled = rng.random() < 0.7
                pages[u] = PageState(rng.choice([1.0, 2.0, 0.25]),
                                     rng.choice([None, 1e-4]),
                                     now - rng.random() * 9e4 if crawled else 0.0,
                                     tuple(rng.choice([0, 1, 2]) for _ in SOURCES)).encode()
                r = rng.random()
                if r < 0.4:  # the estimator record after the page record, as written now
                    rec = rng.choice(recs)
                    ests[u] = rec
                    pages[u] = PageState.decode(pages[u]).encode(rec).decode(
                        "utf-8", "surrogateescape")
                if rng.random() < 0.1:
                    fl[u] = f"o{h}-{j}|{now - 5}"
            if h == 3:
                pages[f"https://{host}/bad"] = "not|a|page"  # no page record: left out, counted
            data[host] = {"pages": pages, "est": ests, "inflight": fl}
            pipe = store.redis.pipeline(transaction=False)
            stored = {"pages": pages, "inflight": fl}
            for kind, mapping in stored.items():
                if mapping:
                    pipe.hset(store.key(host, kind), mapping=mapping)
            pipe.sadd(store.shard_key(0), host)
            await pipe.execute()

        async def sink(k: bytes, v: bytes) -> None:
            return None

        bulk = Scheduler(settings, store, Metrics(), sink, clock=lambda: now)
        bulk.control = dataclasses.replace(bulk.control, max_interval_s=86400.0)
        bulk.sync_assignment({0})
        while not bulk.shards[0].ready:
            await asyncio.sleep(0.01)
        one = Scheduler(settings, store, Metrics(), sink, clock=lambda: now)
        one.control = bulk.control
        shard = one.new_shard(0)
        for host, d in data.items():
            for u, v in d["pages"].items():
                try:
                    st = PageState.decode(v)
                except ValueError:
                    continue
                fl = d["inflight"].get(u)
                flight = (fl.split("|")[0], float(fl.split("|")[1])) if fl else NOT_IN_FLIGHT
                one.loader.apply_or_skip(shard, host, u, st, d["est"].get(u), flight)
        b = bulk.shards[0]
        assert len(b.book) == len(shard.book) == 12 * 40
        assert set(b.in_flight) == set(shard.in_flight) and b.in_flight
        assert bulk.metrics.tally["pages.unusable"] == 1
        for t in (now, now + 3600.0, now + 2e5):
            a = [(p.page, p.policy, p.value) for p in choose([b.book], 60, t)]
            c = [(p.page, p.policy, p.value) for p in choose([shard.book], 60, t)]
            # the same picks; pages of exactly equal value (never-crawled pages of the same
            # importance) go in insertion order, which is Redis's hash order in the bulk
            # rebuild, so a host with room for one of two tied pages may take either: per
            # (policy, value) the same hosts as often (the last group, which the 60 may cut
            # across hosts, the same size), every page picked with its value in both books
            assert [(pol, v) for _, pol, v in a] == [(pol, v) for _, pol, v in c]

            def hosts(picks: list, key: tuple) -> Counter:
                return Counter(urlsplit(u).hostname for u, pol, v in picks if (pol, v) == key)

            cut = a[-1][1:]
            for key in {(pol, v) for _, pol, v in a} - {cut}:
                assert hosts(a, key) == hosts(c, key)
            for u, pol, v in a + c:
                if pol == "greedy":
                    assert b.book.value(u, t) == shard.book.value(u, t) == v
        await store.close()

    asyncio.run(go())
