"""The producers against the real Kafka and Redis: ``recrawl ping``, IndexNow, sitemaps."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web
from edges_helpers import LOOPBACK, read_topic
from worker_process import settings_env

from models.decision.hosts import admit, refill
from streams.edges.indexnow import IndexNowReceiver, KeyRegistry, start_receiver
from streams.edges.pings import PingProducer
from streams.edges.ratelimit import RedisTokenBucket
from streams.edges.sitemaps import SitemapPoller
from streams.fetcher.client import FetchLimits, SafeClient
from streams.settings import Settings
from streams.store.redis_conn import connect as connect_redis
from streams.testweb.server import TestWeb

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------- recrawl ping
def test_ping_command_single_and_batch(settings: Settings, tmp_path: Path) -> None:
    env = settings_env(settings)
    cmd = [sys.executable, "-m", "streams.cli", "ping"]
    one = subprocess.run(
        [*cmd, "https://a.org/x", "--source", "cdn", "--changed-at", "2024-01-01T00:00:00Z"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert one.returncode == 0, one.stderr
    batch = tmp_path / "pings.txt"
    batch.write_text(
        "# comment\nhttps://b.org/1 1700000000\n\n"
        '{"url": "https://b.org/2", "source": "websub", "changed_at": null}\n'
    )
    two = subprocess.run([*cmd, "--file", str(batch), "--source", "sitemap"], env=env,
                         cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert two.returncode == 0, two.stderr
    assert "sent 2 pings" in two.stdout
    bad = tmp_path / "bad.txt"
    bad.write_text("https://b.org/3\nftp://nope/\n")
    three = subprocess.run([*cmd, "--file", str(bad)], env=env, cwd=REPO,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert three.returncode == 2 and "bad.txt:2" in three.stderr  # nothing published

    got = asyncio.run(read_topic(settings, "pings", 3, settle_s=1.0))
    by_url = {v["url"]: (k, v) for k, v in got}
    assert set(by_url) == {"https://a.org/x", "https://b.org/1", "https://b.org/2"}
    key, a = by_url["https://a.org/x"]
    assert key == b"a.org"
    assert (a["source"], a["changed_at"]) == ("cdn", 1704067200.0)
    assert abs(a["received_at"] - time.time()) < 120
    assert by_url["https://b.org/1"][1]["changed_at"] == 1700000000.0
    assert by_url["https://b.org/1"][1]["source"] == "sitemap"
    assert by_url["https://b.org/2"][1]["source"] == "websub"


# ---------------------------------------------------------------- IndexNow
async def _receiver(settings: Settings, rclient: aioredis.Redis, verify: bool, **kw):  # type: ignore[no-untyped-def]
    producer = PingProducer(settings)
    await producer.start()
    verifier = SafeClient(LOOPBACK, FetchLimits(total_timeout_s=5)) if verify else None
    if verifier is not None:
        await verifier.start()
    receiver = IndexNowReceiver(
        producer, KeyRegistry(rclient, settings.key_prefix), verifier=verifier, **kw
    )
    runner, port = await start_receiver(receiver)

    async def close() -> None:
        await runner.cleanup()
        if verifier is not None:
            await verifier.close()
        await producer.stop()

    return receiver, f"http://127.0.0.1:{port}/indexnow", close


async def test_indexnow_status_codes_and_registered_keys(
    settings: Settings, rclient: aioredis.Redis, testweb: TestWeb
) -> None:
    receiver, endpoint, close = await _receiver(settings, rclient, verify=False, rate_per_s=0.001,
                                                burst=5, dedup_window_s=0.0)  # fmt: skip
    host = "h2.test"
    key = testweb.key(host)
    await KeyRegistry(rclient, settings.key_prefix).add(host, key)
    urls = [testweb.url(i) for i in range(12, 15)]
    assert all(f"//{host}:" in u for u in urls)
    try:
        async with aiohttp.ClientSession() as http:

            async def post(body: object, raw: bytes | None = None) -> int:
                kw = {"data": raw} if raw is not None else {"json": body}
                async with http.post(endpoint, **kw) as r:
                    return r.status

            async def get(**q: str) -> int:
                async with http.get(endpoint, params=q) as r:
                    return r.status

            assert await post({"host": host, "key": key, "urlList": urls}) == 200
            assert await get(url=urls[0], key=key) == 200
            assert await post(None, raw=b"{not json") == 400
            assert await post({"host": host, "key": key}) == 400
            assert await post({"host": host, "key": key, "urlList": "x"}) == 400
            assert await post({"host": host, "key": key, "urlList": [urls[0]] * 10_001}) == 400
            assert await get(url=urls[0]) == 400
            assert await post({"host": host, "key": "nope", "urlList": urls}) == 422
            assert await post({"host": host, "key": key, "urlList": [testweb.url(0)]}) == 422
            other = "0123456789abcdef0123"
            assert await post({"host": host, "key": other, "urlList": urls}) == 403
            assert await get(url=urls[0], key=other) == 403
            # the bucket holds 5 requests of the key's owner; the 2 accepted above used 2
            # (malformed requests are refused before the bucket, and the made-up key's
            # requests take the host's separate "unverified" bucket)
            for _ in range(6):  # more made-up keys than the bucket holds: 403, then 429
                last = await post({"host": host, "key": other, "urlList": urls})
            assert last == 429
            for _ in range(3):
                assert await post({"host": host, "key": key, "urlList": urls}) == 200
            assert await post({"host": host, "key": key, "urlList": urls}) == 429
        got = await read_topic(settings, "pings", 13, settle_s=1.0)
    finally:
        await close()
    # 3 + 1 + 3 x 3 published (the 429s, 400s, 403s and 422s published nothing)
    assert len(got) == 13
    assert {v["url"] for _, v in got} == set(urls)
    assert all(k == host.encode() and v["source"] == "indexnow" for k, v in got)
    assert all(v["changed_at"] is None and v["id"] for _, v in got)
    assert receiver.stats["200"] == 5 and receiver.stats["429"] == 4


async def test_indexnow_holds_a_bounded_number_of_urls_awaiting_verification(
    settings: Settings, rclient: aioredis.Redis, testweb: TestWeb
) -> None:
    """Unauthenticated submissions whose key file is slow to answer: each waits with its
    URL list; beyond ``max_pending_urls`` in all the answer is 429 (memory stays bounded),
    and the room comes back when the verifications end."""
    receiver, endpoint, close = await _receiver(settings, rclient, verify=True,
                                                max_pending_urls=5)
    base = testweb.base("h0.test")

    def body(n: int, k: int) -> dict[str, object]:
        return {"host": "h0.test", "key": f"madeupkey{k}", "keyLocation": f"{base}/slow?s=2",
                "urlList": [f"{base}/x/{k}/{i}" for i in range(n)]}

    try:
        async with aiohttp.ClientSession() as http:

            async def post(b: dict[str, object]) -> int:
                async with http.post(endpoint, json=b) as r:
                    return r.status

            assert await post(body(3, 1)) == 202
            assert receiver.pending_urls == 3
            assert await post(body(3, 2)) == 429  # 6 > 5 URLs would be held
            assert await post(body(2, 3)) == 202
            assert receiver.pending_urls == 5
            for _ in range(100):  # the slow key files answer (not the key): room again
                if receiver.pending_urls == 0:
                    break
                await asyncio.sleep(0.1)
            assert receiver.pending_urls == 0
            assert await post(body(3, 4)) == 202
    finally:
        await close()
    assert receiver.stats["unverified_urls_dropped"] >= 5


async def test_indexnow_key_file_verification(
    settings: Settings, rclient: aioredis.Redis, testweb: TestWeb
) -> None:
    _receiver_obj, endpoint, close = await _receiver(settings, rclient, verify=True,
                                                     dedup_window_s=0.0)
    good, bad = "h1.test", "h3.test"
    good_urls = [testweb.url(6), testweb.url(7)]
    bad_urls = [testweb.url(18)]
    wrong_key = "ffffffffffffffffffffffffffffffff"
    try:
        async with aiohttp.ClientSession() as http:
            body = {"host": good, "key": testweb.key(good),
                    "keyLocation": testweb.key_location(good), "urlList": good_urls}  # fmt: skip
            async with http.post(endpoint, json=body) as r:
                assert r.status == 202
            # a key whose file does not exist on the host: 202, then nothing, then 403
            body_bad = {"host": bad, "key": wrong_key, "urlList": bad_urls,
                        "keyLocation": f"{testweb.base(bad)}/{wrong_key}.txt"}  # fmt: skip
            async with http.post(endpoint, json=body_bad) as r:
                assert r.status == 202
            await asyncio.sleep(1.0)
            async with http.post(endpoint, json=body) as r:
                assert r.status == 200  # verified and remembered
            async with http.post(endpoint, json=body_bad) as r:
                assert r.status == 403
        got = await read_topic(settings, "pings", 4, timeout_s=10, settle_s=1.0)
    finally:
        await close()
    assert sorted(v["url"] for _, v in got) == sorted(good_urls * 2)
    scope = await KeyRegistry(rclient, settings.key_prefix).scope(good, testweb.key(good))
    assert scope == testweb.base(good) + "/"  # the key file at the root: its origin


# ---------------------------------------------------------------- sitemaps
async def test_sitemap_poller_conditional_get_memory_and_gzip_index(
    settings: Settings, rclient: aioredis.Redis, testweb: TestWeb
) -> None:
    plain = testweb.base("h0.test") + "/sitemap.xml"
    index = testweb.base("h1.test") + "/sitemap_index.xml.gz"
    async with PingProducer(settings) as producer, SafeClient(LOOPBACK) as http:
        poller = SitemapPoller(http, rclient, settings.key_prefix, producer)
        first = [await poller.poll(plain), await poller.poll(index)]
        assert [(r.status, r.pings) for r in first] == [("changed", 0), ("changed", 0)]
        assert [(await poller.poll(u)).status for u in (plain, index)] == ["not-modified"] * 2
        # the site announces changes of /p/2 on h0 and /p/4 on h1 (index chunk 0)
        t_change = time.time()
        testweb._announce(testweb.world.pages[2], 2, changed_at=t_change)
        testweb._announce(testweb.world.pages[10], 10, changed_at=t_change + 0.01)
        await asyncio.sleep(0.05)  # a lastmod in the future would be clamped to "now"
        r_plain, r_index = await poller.poll(plain), await poller.poll(index)
        assert (r_plain.status, r_plain.pings) == ("changed", 1)
        assert (r_index.status, r_index.pings) == ("changed", 1)
        # a restarted poller (same Redis) neither re-fetches nor re-pings
        again = SitemapPoller(http, rclient, settings.key_prefix, producer)
        assert [(await again.poll(u)).status for u in (plain, index)] == ["not-modified"] * 2
        await rclient.delete(again._http_key(plain))  # forget the ETag: full GET, no re-ping
        full = await again.poll(plain)
        assert (full.status, full.pings, full.entries) == ("changed", 0, 6)
    got = await read_topic(settings, "pings", 2, settle_s=1.0)
    assert sorted((v["url"], v["changed_at"]) for _, v in got) == [
        (testweb.url(2), pytest.approx(t_change, abs=1e-5)),
        (testweb.url(10), pytest.approx(t_change + 0.01, abs=1e-5)),
    ]
    assert all(v["source"] == "sitemap" for _, v in got)
    assert testweb.stats["sitemap_304"] >= 4


async def test_a_lastmod_in_the_future_does_not_silence_a_url(
    settings: Settings, rclient: aioredis.Redis, testweb: TestWeb
) -> None:
    """A sitemap once says 2099-01-01 for a page, then fixes its dates: its next real change
    still pings (it used to be below the remembered 2099, so never again)."""
    plain = testweb.base("h0.test") + "/sitemap.xml"
    async with PingProducer(settings) as producer, SafeClient(LOOPBACK) as http:
        poller = SitemapPoller(http, rclient, settings.key_prefix, producer)
        await poller.poll(plain)  # remembered, no ping
        testweb._announce(testweb.world.pages[2], 2, changed_at=4_070_908_800.0)  # 2099
        first = await poller.poll(plain)
        assert (first.status, first.pings) == ("changed", 1)
        assert (await poller.poll(plain)).pings == 0  # the same 2099 again: no change
        t_fixed = time.time()
        testweb._lastmod[2] = t_fixed  # the site fixes its dates (the test web only moves up)
        second = await poller.poll(plain)
        assert (second.status, second.pings) == ("changed", 1)
    got = await read_topic(settings, "pings", 2, settle_s=1.0)
    assert [v["url"] for _, v in got] == [testweb.url(2)] * 2
    assert got[0][1]["changed_at"] <= got[0][1]["received_at"]  # 2099 clamped to the poll
    assert got[1][1]["changed_at"] == pytest.approx(t_fixed, abs=1e-3)


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/bad/bomb.xml", "unsafe XML"),
        ("/bad/xxe.xml", "unsafe XML"),
        ("/bad/bomb.xml.gz", "uncompressed size"),
        ("/bad/huge.xml", "body larger than"),
        ("/bad/many.xml", "more than 50000 entries"),
    ],
)
async def test_sitemap_poller_refuses_hostile_files(
    settings: Settings, rclient: aioredis.Redis, testweb: TestWeb, path: str, reason: str
) -> None:
    async with PingProducer(settings) as producer, SafeClient(LOOPBACK) as http:
        poller = SitemapPoller(http, rclient, settings.key_prefix, producer, ping_new=True)
        t = time.monotonic()
        result = await poller.poll(testweb.base("h0.test") + path)
        assert time.monotonic() - t < 20
    assert result.status in ("refused", "error")
    assert reason in (result.error or "")
    assert result.pings == 0
    assert await read_topic(settings, "pings", 1, timeout_s=1.5) == []


# ---------------------------------------------------------------- IndexNow: shared rate limit
async def test_indexnow_rate_limit_is_shared_by_receivers(
    settings: Settings, redis_url: str, testweb: TestWeb
) -> None:
    """Two receivers (own Redis clients, own producers, own HTTP servers) sharing one Redis
    and key prefix: a host's bucket of 4 holds over both together, not 4 per receiver."""
    clients = [connect_redis(redis_url) for _ in range(2)]
    host, other = "h2.test", "h3.test"
    for h in (host, other):
        await KeyRegistry(clients[0], settings.key_prefix).add(h, testweb.key(h))
    receivers = [
        await _receiver(settings, c, verify=False, rate_per_s=0.001, burst=4) for c in clients
    ]
    (ra, a, close_a), (rb, b, close_b) = receivers
    urls = [testweb.url(12)]
    try:
        async with aiohttp.ClientSession() as http:

            async def post(endpoint: str, h: str, u: list[str]) -> int:
                body = {"host": h, "key": testweb.key(h), "urlList": u}
                async with http.post(endpoint, json=body) as r:
                    return r.status

            codes = [await post(ep, host, urls) for ep in (a, b, a, b, a, b)]
            # each receiver alone would have allowed all three of its requests
            assert codes == [200, 200, 200, 200, 429, 429]
            # per host: another host has its own bucket, on either receiver
            assert await post(b, other, [testweb.url(18)]) == 200
            assert await post(a, host, urls) == 429
        got = await read_topic(settings, "pings", 2, settle_s=1.0)
    finally:
        await close_a()
        await close_b()
        for c in clients:
            await c.aclose()
    # the 4 accepted submissions of one URL are one ping: the repeat window is shared too
    assert sorted(v["url"] for _, v in got) == [testweb.url(12), testweb.url(18)]
    assert ra.stats["repeats_merged"] + rb.stats["repeats_merged"] == 3
    assert (ra.stats["200"], ra.stats["429"]) == (2, 2)
    assert (rb.stats["200"], rb.stats["429"]) == (3, 1)
    key = f"{settings.key_prefix}:indexnow:{{{host}}}:rate"
    assert ra.limiter.key(host) == key
    assert await clients[0].exists(key) == 1
    assert 0 < await clients[0].pttl(key) <= 4000 * 1000 + 1000


def _engine_bucket(steps: list[float], rate_per_s: float, burst: float) -> list[bool]:
    """The answers of one bucket used at ``steps`` by the engine's rule
    (:func:`models.decision.hosts.refill` then :func:`~models.decision.hosts.admit`)."""
    tokens: float | None = None
    ts: float | None = None
    out = []
    for now in steps:
        tokens = refill(tokens, ts, now, rate_per_s, burst)
        ts = now if ts is None or now > ts else ts
        ok = admit(tokens, 0, 0) is None
        tokens -= 1.0 if ok else 0.0
        out.append(ok)
    return out


async def test_redis_token_bucket_is_the_engines_bucket_rule(
    settings: Settings, rclient: aioredis.Redis
) -> None:
    """The Lua bucket answers as the engine's refill/admit rule on the same clock
    (explicit times): a fixed sequence, then generated ones (rates, bursts, steps of
    zero, tiny, large and backwards)."""
    shared = RedisTokenBucket(rclient, settings.key_prefix, rate_per_s=2.0, burst=3.0)
    t0 = 1.7e9
    steps = [0.0, 0.0, 0.0, 0.0, 0.1, 0.5, 0.5, 0.75, 2.0, 2.0, 2.0, 2.0, 2.0, 10.0]
    got = [await shared.allow("a.org", t0 + dt) for dt in steps]
    assert got == _engine_bucket([t0 + dt for dt in steps], 2.0, 3.0)
    assert got == [True, True, True, False, False, True, False, False, True, True, True,
                   False, False, True]  # fmt: skip
    rng = random.Random(7)
    for case in range(60):
        burst = rng.choice([1.0, 1.5, 2.0, 10.0, 1000.0])
        # refilled in 30 s or more: the key (alive until the bucket would be full again,
        # in Redis's own time, plus a second) outlives a stall of the machine
        rate = burst / rng.uniform(30.0, 3000.0)
        bucket = RedisTokenBucket(rclient, settings.key_prefix, rate, burst)
        now, times = t0, []
        for _ in range(rng.randrange(1, 40)):
            now += rng.choice([0.0, 1e-6, rng.expovariate(rate), rng.uniform(0, 5 / rate),
                               -rng.uniform(0, 1 / rate)])
            times.append(now)
        got = [await bucket.allow(f"gen{case}.org", t) for t in times]
        assert got == _engine_bucket(times, rate, burst), (case, rate, burst, times)
    # hosts do not share a bucket, and Redis's own clock is used without a time
    assert await shared.allow("b.org", t0)
    assert await shared.allow("c.org")


# ---------------------------------------------------------------- hardening
async def test_indexnow_answers_400_to_deep_json_and_503_when_kafka_is_gone(
    settings: Settings, rclient: aioredis.Redis, testweb: TestWeb
) -> None:
    receiver, endpoint, close = await _receiver(settings, rclient, verify=False,
                                                dedup_window_s=0.0)  # the same body twice
    host = "h2.test"
    key = testweb.key(host)
    await KeyRegistry(rclient, settings.key_prefix).add(host, key)
    body = {"host": host, "key": key, "urlList": [testweb.url(12)]}
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(endpoint, data=b"[" * 100_000) as r:
                assert r.status == 400 and "nested" in (await r.json())["message"]
            async with http.post(endpoint, json=body) as r:
                assert r.status == 200
            await receiver.producer.stop()  # the producer can no longer reach Kafka
            async with http.post(endpoint, json=body) as r:
                assert r.status == 503 and "Kafka" in (await r.json())["message"]
    finally:
        await close()
    assert "500" not in receiver.stats


async def test_indexnow_rechecks_a_key_file_once_its_check_is_old(
    settings: Settings, rclient: aioredis.Redis, testweb: TestWeb
) -> None:
    """A key learnt from a key file is fetched again once its check is older
    than ``key_recheck_s``: a site that still serves it keeps it, one that no longer does
    (here: the registry holds a key the file never had) loses it."""
    receiver, endpoint, close = await _receiver(settings, rclient, verify=True,
                                                key_recheck_s=3600.0, dedup_window_s=0.0)
    registry = KeyRegistry(rclient, settings.key_prefix)
    good, gone = "h1.test", "h3.test"
    revoked = "0123456789abcdef0123456789abcdef"
    old = time.time() - 7200.0
    await registry.add(good, testweb.key(good), testweb.base(good) + "/", verified_at=old,
                       location=testweb.key_location(good))
    await registry.add(gone, revoked, "", verified_at=old,
                       location=f"{testweb.base(gone)}/{revoked}.txt")
    b_good = {"host": good, "key": testweb.key(good), "urlList": [testweb.url(6)]}
    b_gone = {"host": gone, "key": revoked, "urlList": [testweb.url(18)]}
    try:
        async with aiohttp.ClientSession() as http:

            async def post(b: dict[str, object]) -> int:
                async with http.post(endpoint, json=b) as r:
                    return r.status

            assert await post(b_good) == 202  # held while the file is read again
            assert await post(b_gone) == 202
            for _ in range(100):
                if receiver.stats["keys_verified"] + receiver.stats["keys_failed"] >= 2:
                    break
                await asyncio.sleep(0.1)
            assert await post(b_good) == 200  # re-checked: fresh again
            assert await post(b_gone) == 403  # revoked
        got = await read_topic(settings, "pings", 2, timeout_s=10, settle_s=1.0)
    finally:
        await close()
    assert [v["url"] for _, v in got] == [testweb.url(6)] * 2
    scope, checked, _ = await registry.lookup(good, testweb.key(good))
    assert scope is not None and checked is not None and checked > old + 3600
    assert await registry.scope(gone, revoked) is None
    assert receiver.stats["keys_rechecked"] == 2


async def test_sitemap_location_rule_and_bounded_memory(
    settings: Settings, rclient: aioredis.Redis
) -> None:
    """A sitemap in ``/~bob/`` on port B lists only ``/~bob/...`` of
    port B (not the host's root, not port A); a sitemap that lists new URLs at every poll
    keeps only the last poll's URLs in Redis."""
    state = {"poll": 0}

    def urlset(locs: list[str]) -> bytes:
        items = "".join(f"<url><loc>{u}</loc><lastmod>2026-01-01</lastmod></url>" for u in locs)
        return (f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/'
                f'sitemap/0.9">{items}</urlset>').encode()

    async def bob(request: web.Request) -> web.Response:
        b = f"http://site.test:{ports[1]}"
        a = f"http://site.test:{ports[0]}"
        return web.Response(body=urlset([f"{b}/~bob/1", f"{b}/~bob/x/../2", f"{b}/",
                                         f"{b}/~alice/1", f"{a}/~bob/3", f"{b}/%7Ebob/4"]),
                            content_type="application/xml")

    async def churn(request: web.Request) -> web.Response:
        state["poll"] += 1
        base = f"http://site.test:{ports[0]}"
        return web.Response(body=urlset([f"{base}/p/{state['poll']}/{i}" for i in range(2000)]),
                            content_type="application/xml")

    app = web.Application()
    app.router.add_get("/~bob/sitemap.xml", bob)
    app.router.add_get("/churn.xml", churn)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    sites = [web.TCPSite(runner, "127.0.0.1", 0), web.TCPSite(runner, "127.0.0.1", 0)]
    for site in sites:
        await site.start()
    ports = [int(a[1]) for a in runner.addresses]
    try:
        async with PingProducer(settings) as producer, SafeClient(LOOPBACK) as http:
            poller = SitemapPoller(http, rclient, settings.key_prefix, producer, ping_new=True)
            bob_url = f"http://site.test:{ports[1]}/~bob/sitemap.xml"
            r = await poller.poll(bob_url)
            assert (r.status, r.pings) == ("changed", 3)
            assert poller.stats["foreign_entries"] == 3
            churn_url = f"http://site.test:{ports[0]}/churn.xml"
            for _ in range(4):
                assert (await poller.poll(churn_url)).pings == 2000
            assert await rclient.hlen(poller._lastmod_key(churn_url)) == 2000
        got = await read_topic(settings, "pings", 3 + 8000, timeout_s=30, settle_s=0.5)
    finally:
        await runner.cleanup()
    b = f"http://site.test:{ports[1]}"
    assert {v["url"] for _, v in got[:3]} == {f"{b}/~bob/1", f"{b}/~bob/2", f"{b}/~bob/4"}


async def test_a_sitemap_index_rotating_a_50k_url_sitemap_leaves_no_hash_behind(
    settings: Settings, rclient: aioredis.Redis
) -> None:
    """An index that names its 50,000-URL sitemap anew at every poll (and lists one sitemap
    that always fails): after each poll Redis holds one URL hash, the memory of the
    poller's keys stays that of the first poll, and every key expires."""
    state = {"poll": 0}
    n = 50_000

    async def index(request: web.Request) -> web.Response:
        state["poll"] += 1
        base = f"http://site.test:{port}"
        items = "".join(f"<sitemap><loc>{base}{path}</loc><lastmod>2026-01-0{state['poll']}"
                        f"</lastmod></sitemap>"
                        for path in (f"/maps/{state['poll']}.xml", "/maps/broken.xml"))
        return web.Response(body=(f'<?xml version="1.0"?><sitemapindex xmlns="http://www.'
                                  f'sitemaps.org/schemas/sitemap/0.9">{items}</sitemapindex>'
                                  ).encode(), content_type="application/xml")

    async def child(request: web.Request) -> web.Response:
        k = request.match_info["k"]
        base = f"http://site.test:{port}"
        items = "".join(f"<url><loc>{base}/p/{k}/{i}</loc><lastmod>2026-01-01</lastmod></url>"
                        for i in range(n))
        return web.Response(body=(f'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps'
                                  f'.org/schemas/sitemap/0.9">{items}</urlset>').encode(),
                            content_type="application/xml")

    app = web.Application()
    app.router.add_get("/index.xml", index)
    app.router.add_get("/maps/{k:[0-9]+}.xml", child)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = int(runner.addresses[0][1])
    pattern = f"{settings.key_prefix}:sitemaps:*"

    async def footprint() -> tuple[int, int, list[int]]:
        keys = [k async for k in rclient.scan_iter(pattern)]
        hashes = [k for k in keys if ":lastmod:" in str(k)]
        used = sum([await rclient.memory_usage(k, samples=0) or 0 for k in keys])
        return len(hashes), used, [await rclient.pttl(k) for k in keys]

    seen = []
    try:
        async with PingProducer(settings) as producer, SafeClient(LOOPBACK) as http:
            poller = SitemapPoller(http, rclient, settings.key_prefix, producer)
            for _ in range(4):
                r = await poller.poll(f"http://site.test:{port}/index.xml")
                assert r.status == "changed" and "broken.xml" in (r.error or "")
                seen.append(await footprint())
    finally:
        await runner.cleanup()
    print("lastmod hashes, bytes per poll:", [(h, used) for h, used, _ in seen])
    assert [h for h, _, _ in seen] == [1, 1, 1, 1]
    first = seen[0][1]
    assert all(used < 1.2 * first for _, used, _ in seen)
    assert all(0 < t <= 30 * 86_400_000 for _, _, ttls in seen for t in ttls)
    assert poller.stats["sitemaps_forgotten"] == 3
