"""The reference fetcher against the real Kafka, Redis and the test web."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib

import pytest
from aiohttp import web
from edges_helpers import LOOPBACK, gzip_bomb, produce, read_topic, rss_kib, rss_peak_reset

from streams.fetcher.client import FetchLimits, SafeClient
from streams.fetcher.egress import EgressPolicy
from streams.fetcher.service import FetcherService
from streams.settings import Settings
from streams.testweb.server import TestWeb

pytestmark = pytest.mark.integration


def _order(n: int, url: str) -> tuple[bytes, dict]:
    host = url.split("/")[2].split(":")[0]
    return host.encode(), {
        "order_id": f"o{n}", "url": url, "host": host, "issued_at": 0.0, "crawl_value": 1.0,
        "threshold": 0.5 + n, "tau_eff": 1.0, "policy": "test",
    }  # fmt: skip


async def test_fetcher_outcomes_digests_and_refusals(settings: Settings, testweb: TestWeb) -> None:
    page = testweb.url(0)
    base = testweb.base("h0.test")
    refused = {
        "http://10.0.0.7/x": "refused: 10.0.0.7",
        "http://169.254.169.254/latest/meta-data/": "refused: 169.254.169.254",
        "ftp://h0.test/file": "refused: scheme 'ftp'",
        "http://unknown.example/": "refused: 'unknown.example'",
        f"{base}/redirect/to?url=http://192.168.1.1/admin": "refused: 192.168.1.1",
        f"{base}/redirect/loop": "too many redirects",
        f"{base}/big?bytes=3000000": "body larger than 1000000 bytes",
        f"{base}/slow?s=5": "timeout",  # past the 2 s total timeout
        f"{base}/p/999": "http status 404",
    }
    service = FetcherService(
        settings, LOOPBACK, FetchLimits(total_timeout_s=2.0, max_body_bytes=1_000_000)
    )
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(service.ready.wait(), 30)
        await produce(settings, "orders", [_order(1, page)])
        first = await read_topic(settings, "outcomes", 1)
        await produce(settings, "orders", [_order(2, page)])
        await read_topic(settings, "outcomes", 2)
        testweb.truth.changed(page, 0.0)  # the page changes (its body follows its version)
        await produce(settings, "orders", [_order(3, page)])
        await read_topic(settings, "outcomes", 3)
        bad = [_order(10 + k, u) for k, u in enumerate(refused)]
        await produce(settings, "orders", [*bad, (b"h0.test", {"no": "url"})])
        everything = await read_topic(settings, "outcomes", 3 + len(refused), timeout_s=30)
        # the unreadable order has no outcome and may sit on another partition than the
        # last outcome read: wait (bounded) until the service has consumed it too
        for _ in range(300):
            if service.stats.bad_orders:
                break
            await asyncio.sleep(0.1)
    finally:
        service.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 15)
    by_order = {v["order_id"]: (k, v) for k, v in everything}
    assert first[0][1]["changed"] is None and first[0][1]["status"] == 200  # nothing to compare
    assert by_order["o2"][1]["changed"] is False
    assert by_order["o3"][1]["changed"] is True
    assert by_order["o3"][1]["digest"] != by_order["o2"][1]["digest"]
    assert by_order["o1"][0] == b"h0.test"
    assert all(v["fetched_at"] > 1e9 for _, v in everything)
    for k, url in enumerate(refused):
        _key, out = by_order[f"o{10 + k}"]
        assert out["url"] == url
        assert refused[url] in (out["error"] or ""), out
        assert out["changed"] is None and out["digest"] is None
    assert len(everything) == 3 + len(refused)  # the unreadable order is skipped, counted
    assert service.stats.bad_orders == 1
    # the threshold of the last order handled (partitions are consumed in any order)
    assert service.stats.last_threshold in {0.5 + 10 + k for k in range(len(refused))}
    # the truth saw three fetches of the page, the last one current
    p = testweb.truth.pages[page]
    assert (p.fetches, p.copy_version, p.fresh) == (3, 1, True)


async def test_loopback_needs_explicit_permission(testweb: TestWeb) -> None:
    url = f"http://127.0.0.1:{testweb.port}/truth"
    async with SafeClient(EgressPolicy()) as strict, SafeClient(
        EgressPolicy(allow_loopback=True)
    ) as lenient:
        refused, _ = await strict.get(url)
        allowed, _ = await lenient.get(url)
        # a host name resolving to loopback is refused too (the resolver checks)
        by_name, _ = await strict.get(f"http://localhost:{testweb.port}/truth")
    assert refused.error is not None and "loopback" in refused.error
    assert allowed.ok
    assert by_name.error is not None and "loopback" in by_name.error


async def test_per_host_concurrency_is_one(settings: Settings, testweb: TestWeb) -> None:
    base = testweb.base("h1.test")
    service = FetcherService(settings, LOOPBACK, FetchLimits(total_timeout_s=5))
    task = asyncio.create_task(service.run())
    loop = asyncio.get_running_loop()
    try:
        await asyncio.wait_for(service.ready.wait(), 30)
        started = loop.time()
        # three 0.5 s fetches on one host and one on another host, in one batch
        orders = [_order(k, f"{base}/slow?s=0.5") for k in range(3)]
        orders.append(_order(9, testweb.base("h2.test") + "/slow?s=0.5"))
        await produce(settings, "orders", orders)
        got = await read_topic(settings, "outcomes", 4)
        elapsed = loop.time() - started
    finally:
        service.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 15)
    assert len(got) == 4 and all(v["status"] == 200 for _, v in got)
    times = sorted(v["fetched_at"] for k, v in got if k == b"h1.test")
    assert times[1] - times[0] >= 0.45 and times[2] - times[1] >= 0.45  # one at a time
    assert elapsed < 10


async def test_a_gzip_bomb_stops_at_the_body_cap(testweb: TestWeb) -> None:
    """510 kB of gzip inflating to 512 MiB: refused at the decompressed 5 MiB cap, with
    the reason; the process's peak memory grows by a few MiB, not by the 512."""
    bomb = gzip_bomb(512 << 20)
    app = web.Application()

    async def serve(request: web.Request) -> web.Response:
        return web.Response(body=bomb, headers={"Content-Encoding": "gzip",
                                                "Content-Type": "text/html"})

    app.router.add_get("/bomb", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = int(runner.addresses[0][1])
    try:
        async with SafeClient(LOOPBACK) as client:
            rss_peak_reset()
            before = rss_kib("VmRSS")
            result, _ = await client.get(f"http://bomb.test:{port}/bomb")
            grown_mib = (rss_kib("VmHWM") - before) / 1024
    finally:
        await runner.cleanup()
    print(f"gzip bomb ({len(bomb)} B -> 512 MiB): {result.error}; peak RSS +{grown_mib:.1f} MiB")
    assert result.error == f"body larger than {FetchLimits().max_body_bytes} bytes"
    assert result.digest is None
    assert grown_mib < 64


async def test_redirect_targets_are_checked_against_their_robots_txt(
    settings: Settings, testweb: TestWeb
) -> None:
    """A page that redirects into a path robots.txt disallows is not followed there: to
    another host (its robots.txt), an error; within its own host, a disallowed outcome
    naming the host's copy.  An allowed redirect target is fetched."""
    h0, h1, h2 = "h0.test", "h1.test", "h2.test"
    private = next(u for u in testweb.urls() if f"//{h1}:" in u)
    public = next(u for u in testweb.urls() if f"//{h1}:" in u and u != private)
    own = next(u for u in testweb.urls() if f"//{h2}:" in u)
    path = private.split(str(testweb.port), 1)[1]
    testweb.robots[h1] = f"User-agent: *\nDisallow: {path}$\n"
    testweb.robots[h2] = f"User-agent: *\nDisallow: {own.split(str(testweb.port), 1)[1]}$\n"

    def via(host: str, target: str) -> str:
        return f"{testweb.base(host)}/redirect/to?url={target}"

    service = FetcherService(settings, LOOPBACK, FetchLimits(total_timeout_s=5))
    task = asyncio.create_task(service.run())
    try:
        await asyncio.wait_for(service.ready.wait(), 30)
        await produce(settings, "orders", [_order(1, via(h0, private)), _order(2, via(h0, public)),
                                           _order(3, via(h2, own))])
        got = {v["order_id"]: v for _, v in await read_topic(settings, "outcomes", 3)}
    finally:
        service.stop()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, 15)
    assert got["o1"]["error"] == f"robots.txt disallows the redirect target {private}"
    assert not got["o1"].get("disallowed")  # another host's rules: the page stays a candidate
    assert got["o2"]["status"] == 200 and got["o2"]["error"] is None
    assert got["o3"]["disallowed"] is True
    assert got["o3"]["robots_digest"] == hashlib.sha256(testweb.robots[h2].encode()).hexdigest()
    assert testweb.truth.pages[private].fetches == 0 and testweb.truth.pages[own].fetches == 0
    assert testweb.truth.pages[public].fetches == 1
