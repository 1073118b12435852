"""The reference fetcher against the real Kafka, Redis and the test web."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from edges_helpers import LOOPBACK, produce, read_topic

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
        f"{base}/slow?s=10": "timeout",
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
