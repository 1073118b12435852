"""The store contract (``streams.store.AdminStore``, which holds ``StateStore``): one suite,
run on both backends, the Redis one (the Lua scripts, a real Redis) and the in-memory one;
and a differential run of random operations on both side by side, reply for reply and
record for record.

The cases both backends answer to are ``tests/store_contract_cases.py``'s: here on Redis,
and on the in-memory backend under ``tests/unit`` (``test_store_contract_memory.py``).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from store_contract_cases import *  # noqa: F403 (the shared cases, collected here)
from store_contract_cases import T, page

from streams.store import (
    AdminStore,
    ControlOp,
    HostOp,
    IssueBatch,
    MemoryStore,
    OutcomeOp,
    PageOp,
    PingBatch,
    StateStore,
)
from streams.store.page_record import PageState, estimator_part, record_bytes
from streams.store.redis_store import Store

pytestmark = pytest.mark.integration


async def _redis_store(redis_url: str) -> Store:
    store = Store.from_url(redis_url, f"c{uuid.uuid4().hex[:8]}")
    await store.load_scripts()
    return store


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[AdminStore]:
    s: AdminStore = await _redis_store(redis_url)
    assert isinstance(s, AdminStore)
    yield s
    await s.delete_all()
    await s.close()


async def test_pages_spread_over_listpack_buckets(redis_url: str) -> None:
    """A host past 120 pages splits into buckets of at most 128 pages (listpack-encoded):
    each page is in the bucket Python's bucket_of gives (the Lua and Python hashes agree);
    a host stored in one hash before the buckets is read whole, then split as pages come.
    Fields are urls without https://<host> (an http url, its own); a page stored under its
    full url before that is found, and moves to its short field at its next write."""
    from streams.store.redis_store import (
        BUCKET_FIRST,
        bucket_of,
        layout_after,
        page_field,
        page_url,
    )

    store = await _redis_store(redis_url)
    r: Any = store.redis
    try:
        h = "big.org"
        urls = [f"https://big.org/{i}" for i in range(1990)] + ["https://big.org/"] + [
            f"http://big.org/{i}" for i in range(9)]
        await store.apply_pages([page(u, i, host=h) for i, u in enumerate(urls[:BUCKET_FIRST])])
        assert not await r.exists(store.key(h, "buckets"))  # up to 120 pages: one hash
        await store.apply_pages([page(u, i, host=h) for i, u in enumerate(urls)])
        lay = await r.hmget(store.key(h, "buckets"), "l", "p")
        layout = (int(lay[0]), int(lay[1]))
        n_buckets = (1 << layout[0]) + layout[1]
        assert layout == layout_after(len(urls))  # what a bulk load writes
        assert int(await r.hget(store.key(h, "buckets"), "n")) == len(urls)
        sizes = [await r.hlen(store.bucket_key(h, b)) for b in range(n_buckets)]
        assert sum(sizes) == len(urls) and max(sizes) <= 128
        assert n_buckets >= len(urls) // 40
        for b in range(n_buckets):
            assert await r.object("encoding", store.bucket_key(h, b)) == "listpack"
        fields = [page_field(h, u) for u in urls]
        assert fields[0] == "/0" and fields[1990] == "/" and fields[-1] == urls[-1]
        assert [page_url(h, f) for f in fields] == urls
        for f in fields:
            assert await r.hexists(store.bucket_key(h, bucket_of(f, layout)), f)
        (dump,) = await store.dump_hosts([h])
        assert set(dump.pages) == set(urls)

        # written before the buckets: 300 pages in the host's one hash
        old = "old.org"
        olds = [f"https://old.org/{i}" for i in range(300)]
        await r.hset(store.key(old, "pages"),
                     mapping={u: PageState(2.0).encode() for u in olds})
        (dump,) = await store.dump_hosts([old])
        assert set(dump.pages) == set(olds)
        assert (await store.get_page(old, olds[-1])) == PageState(2.0)
        more = [f"https://old.org/new{i}" for i in range(200)]
        await store.apply_pages([page(u, i, host=old) for i, u in enumerate(more)])
        (dump,) = await store.dump_hosts([old])
        assert set(dump.pages) == set(olds + more)
        read = await store.read_pages([(old, u) for u in olds + more])
        assert all(v is not None for v in read)
        assert (await store.host_stats(old))["pages"] == 500
        # a write moves an old page to its short field: pinged, then crawled
        (res,) = await store.apply_pings([PingBatch(old, "t.pings", 0, [
            (i, u, "cdn", None, 50.0, f"f{i}") for i, u in enumerate(olds[:150])])],
            t_delay_s=0.0)
        assert {c for c, _ in res} == {"applied"}
        (o,) = await store.apply_outcomes([OutcomeOp(olds[150], old, None, 60.0, "EST",
                                                     "t.out", 0, 0)])
        assert o[0] == "applied"
        lay = await r.hmget(store.key(old, "buckets"), "l", "p")
        layout = (int(lay[0]), int(lay[1]))
        for u in olds[:151]:
            f = page_field(old, u)
            assert await r.hexists(store.bucket_key(old, bucket_of(f, layout)), f)
            assert not await r.hexists(store.bucket_key(old, bucket_of(u, layout)), u)
        (dump,) = await store.dump_hosts([old])
        assert set(dump.pages) == set(olds + more)
        assert [PageState.decode(dump.pages[u]).signals[3] for u in olds[:151]] == (
            [1] * 150 + [0])
        assert PageState.decode(dump.pages[olds[150]]).last_crawl_s == 60.0
        assert estimator_part(dump.pages[olds[150]]) == "EST"
        assert (await store.host_stats(old))["pages"] == 500
    finally:
        await store.delete_all()
        await store.close()


# -- the two backends side by side ----------------------------------------------------------
HOSTS = ("a.org", "b.org", "c.org")
SOURCES = ("sitemap", "indexnow", "websub", "cdn", "other")


def _random_ops(rng: random.Random, n: int) -> list[tuple[str, Any]]:
    """A sequence of batches: offsets mostly rising, some redelivered; urls of three hosts
    (one with 200 more pages first), some never added; fingerprints from a small pool
    (duplicates); orders issued and answered, with their ids, sometimes by another."""
    offs: dict[tuple[str, str], int] = {}
    oids: list[tuple[str, str, str]] = []
    now = 1000.0
    out: list[tuple[str, Any]] = []

    def off(host: str, topic: str) -> int:
        k = (host, topic)
        if rng.random() < 0.1 and k in offs:
            return rng.randint(max(0, offs[k] - 3), offs[k])  # a redelivery
        offs[k] = offs.get(k, -1) + 1
        return offs[k]

    def url(host: str) -> str:
        return f"https://{host}/{rng.randint(0, 6)}"

    # c.org past 120 pages first: in Redis its pages are in several buckets
    out.append(("pages", [PageOp(f"https://c.org/bulk{i}", "c.org", 1.0, None, False, T, 0, i)
                          for i in range(200)]))
    offs[("c.org", T)] = 199
    for _ in range(n):
        now += rng.uniform(0, 3)
        kind = rng.choice(["pages", "pings", "pings", "outcomes", "hosts", "issue", "expire",
                           "control"])
        h = rng.choice(HOSTS)
        if kind == "pages":
            out.append((kind, [PageOp(url(h), h, rng.choice([0.5, 1.0, 3.0]),
                                      rng.choice([None, 1e-3, 0.02]), rng.random() < 0.1,
                                      T, rng.randint(0, 1), off(h, T))
                               for _ in range(rng.randint(1, 4))]))
        elif kind == "pings":
            start = offs.get((h, "t.pings"), -1) + 1
            if rng.random() < 0.15:
                start = max(0, start - 2)
            k = rng.randint(1, 5)
            offs[(h, "t.pings")] = max(offs.get((h, "t.pings"), -1), start + k - 1)
            pings = [(start + i, url(h), rng.choice(SOURCES),
                      rng.choice([None, now - rng.uniform(0, 400)]), now - rng.uniform(0, 50),
                      f"id{rng.randint(0, 12)}") for i in range(k)]
            out.append((kind, (PingBatch(h, "t.pings", 0, pings), rng.choice([0.0, 30.0]))))
        elif kind == "outcomes":
            ops = []
            for _ in range(rng.randint(1, 3)):
                oid = rng.choice(oids)[2] if oids and rng.random() < 0.6 else None
                ops.append(OutcomeOp(url(h), h, oid, now - rng.uniform(0, 200),
                                     rng.choice([None, "", f"est{rng.randint(0, 9)}"]), "t.out",
                                     0, off(h, "t.out"), disallowed=rng.random() < 0.1,
                                     robots_digest=rng.choice([None, "r1", "r2"])))
            out.append((kind, ops))
        elif kind == "hosts":
            out.append((kind, [HostOp(h, rng.choice([None, 0.5, 2.0, 7.0]),
                                      rng.choice([None, 1, 3]), "t.hosts", 0, off(h, "t.hosts"),
                                      source=rng.choice(["operator", "robots", "pushback"]),
                                      reason=rng.choice([None, "why"]),
                                      robots_digest=rng.choice([None, None, "r1", "r2"]),
                                      default_rate_per_s=1.0)]))
        elif kind == "issue":
            orders = []
            for _ in range(rng.randint(1, 4)):
                oid = f"o{len(oids)}"
                u = url(h)
                oids.append((u, h, oid))
                orders.append((u, oid))
            out.append((kind, (IssueBatch(h, orders), now)))
        elif kind == "expire" and oids:
            out.append((kind, rng.sample(oids, min(len(oids), 3))))
        elif kind == "control":
            out.append((kind, [ControlOp({"budget_per_s": str(rng.randint(1, 9))},
                                         "t.control", 0, off("ctl", "t.control"))]))
    return out


async def _apply(store: StateStore, kind: str, arg: Any) -> Any:
    if kind == "pages":
        return await store.apply_pages(arg)
    if kind == "pings":
        batch, t_delay = arg
        return await store.apply_pings([batch], t_delay_s=t_delay)
    if kind == "outcomes":
        # the estimator record is computed from what was read, as the agents do
        reads = await store.read_pages([(o.host, o.url) for o in arg])
        return await store.apply_outcomes([
            OutcomeOp(o.url, o.host, o.order_id, o.fetched_at, o.new_estimator, o.topic,
                      o.partition, o.offset, expect=r if o.new_estimator else None,
                      disallowed=o.disallowed, robots_digest=o.robots_digest)
            for o, r in zip(arg, reads, strict=True)])
    if kind == "hosts":
        return await store.apply_hosts(arg)
    if kind == "issue":
        batch, now = arg
        return await store.issue([batch], now_s=now, default_rate=1.0, default_mif=2,
                                 burst=2.0)
    if kind == "expire":
        return await store.expire(arg)
    return await store.apply_control(arg)


def _norm(x: Any) -> Any:
    if isinstance(x, list | tuple):
        return [_norm(v) for v in x]
    return x


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
async def test_memory_and_redis_give_the_same_replies_and_records(
        redis_url: str, seed: int) -> None:
    rng = random.Random(seed)
    mem, red = MemoryStore(), await _redis_store(redis_url)
    try:
        for step, (kind, arg) in enumerate(_random_ops(rng, 300)):
            a, b = await _apply(mem, kind, arg), await _apply(red, kind, arg)
            assert _norm(a) == _norm(b), (step, kind, arg)
        for partition in (0, 1):
            assert await mem.shard_hosts(partition) == await red.shard_hosts(partition)
        assert await mem.get_control() == await red.get_control()
        dm, dr = await mem.dump_hosts(HOSTS), await red.dump_hosts(HOSTS)
        for x, y in zip(dm, dr, strict=True):
            assert {u: record_bytes(v) for u, v in x.pages.items()} == {
                u: record_bytes(v) for u, v in y.pages.items()}
            assert (x.in_flight, x.info, x.blocked) == (y.in_flight, y.info, y.blocked)
        assert any(x.pages for x in dm)  # the run did something
    finally:
        await red.delete_all()
        await red.close()


async def test_a_hosts_dump_reads_the_same_on_one_node_and_on_a_cluster(
        redis_url: str, redis_cluster_url: str) -> None:
    """``dump_hosts`` reads replies off the connection on one node, through redis-py's
    cluster pipeline on a cluster (RESP2 lists there, dicts here): the same dump either way,
    for a host in several buckets, a page stored under its whole url (before the short
    fields), an http url, pages in flight, one blocked by robots.txt and a host's
    capacity."""
    dumps = []
    for url in (redis_url, redis_cluster_url):
        store = await _redis_store(url)
        try:
            h, small = "big.org", "small.org"
            urls = [f"https://big.org/{i}" for i in range(300)] + ["http://big.org/x"]
            await store.apply_pages([page(u, i, host=h) for i, u in enumerate(urls)])
            await store.apply_pages([page("https://small.org/a", 0, host=small)])
            r: Any = store.redis
            await r.hset(store.key(small, "pages"), "https://small.org/old",
                         PageState(2.0).encode())
            await store.apply_hosts([HostOp(h, 5.0, 3, "t.hosts", 0, 0)])
            (iss,) = await store.issue([IssueBatch(h, [(urls[0], "o0"), (urls[1], "o1")])],
                                       now_s=100.0, default_rate=1.0, default_mif=0,
                                       burst=5.0)
            assert [c for c, _ in iss] == ["ok", "ok"]
            (out,) = await store.apply_outcomes([OutcomeOp(
                urls[1], h, "o1", 101.0, None, "t.out", 0, 0, disallowed=True,
                robots_digest="r1")])
            assert out[0] == "blocked"
            got = await store.dump_hosts([h, small, "none.org"])
            dumps.append([(d.host, {u: record_bytes(v) for u, v in d.pages.items()},
                           d.in_flight, d.info, d.blocked) for d in got])
        finally:
            await store.delete_all()
            await store.close()
    one, cluster = dumps
    assert one == cluster
    big, small_dump, none = one
    assert set(big[1]) == set(urls) and big[2] == {urls[0]: ("o0", 100.0)}
    assert big[4] == {urls[1]} and big[3].rate_per_s == 5.0 and big[3].max_in_flight == 3
    assert set(small_dump[1]) == {"https://small.org/a", "https://small.org/old"}
    assert none[1:3] == ({}, {}) and none[4] == set()
