"""The IndexNow receiver and the WebSub callback under abuse, against the real Kafka, Redis
and HTTP servers on loopback: public keys sent with bogus key locations, made-up keys, one
client filling the room for keys being verified, repeated submissions, oversized bodies."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from edges_helpers import LOOPBACK, read_topic, rss_kib, rss_peak_reset

from streams.edges.indexnow import MAX_BODY_BYTES, IndexNowReceiver, KeyRegistry, start_receiver
from streams.edges.pings import PingProducer
from streams.edges.websub import WebSubSubscriber, start_subscriber
from streams.fetcher.client import FetchLimits, SafeClient
from streams.settings import Settings
from streams.testweb.server import TestWeb

pytestmark = pytest.mark.integration

Post = Callable[..., Awaitable[int]]


async def _receiver(settings: Settings, rclient: aioredis.Redis, **kw: Any
                    ) -> tuple[IndexNowReceiver, int, Callable[[], Awaitable[None]]]:
    producer = PingProducer(settings)
    await producer.start()
    verifier = SafeClient(LOOPBACK, FetchLimits(total_timeout_s=5))
    await verifier.start()
    receiver = IndexNowReceiver(producer, KeyRegistry(rclient, settings.key_prefix),
                                verifier=verifier, **kw)
    runner, port = await start_receiver(receiver)

    async def close() -> None:
        await runner.cleanup()
        await verifier.close()
        await producer.stop()

    return receiver, port, close


def _poster(http: aiohttp.ClientSession, port: int) -> Post:
    async def post(body: dict[str, Any]) -> int:
        async with http.post(f"http://127.0.0.1:{port}/indexnow", json=body) as r:
            return r.status

    return post


async def _settled(receiver: IndexNowReceiver, timeout_s: float = 15.0) -> None:
    """Until no submission waits for its key file."""
    deadline = time.monotonic() + timeout_s
    while receiver.pending_urls and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert receiver.pending_urls == 0


async def test_made_up_keys_do_not_answer_an_owner_due_for_its_recheck_429(
    settings: Settings, rclient: aioredis.Redis, testweb: TestWeb
) -> None:
    """Made-up keys drain the host's "unverified" bucket; the owner's key, due for its
    re-check, still takes the owner's bucket (202, re-checked, then 200)."""
    receiver, port, close = await _receiver(settings, rclient, rate_per_s=0.001, burst=3,
                                            key_recheck_s=3600.0)
    registry = KeyRegistry(rclient, settings.key_prefix)
    host = "h1.test"
    await registry.add(host, testweb.key(host), testweb.base(host) + "/",
                       verified_at=time.time() - 7200.0, location=testweb.key_location(host))
    owner = {"host": host, "key": testweb.key(host), "urlList": [testweb.url(6)]}
    try:
        async with aiohttp.ClientSession() as http:
            post = _poster(http, port)
            made_up = [await post({**owner, "key": f"madeupkey{i:04d}"}) for i in range(5)]
            assert made_up[-1] == 429  # the unverified bucket is empty
            assert await post(owner) == 202  # held while its key file is read again
            await _settled(receiver)
            assert await post(owner) == 200
    finally:
        await close()
    assert receiver.stats["keys_rechecked"] == 1 and receiver.stats["keys_verified"] == 1


async def test_a_bogus_key_location_neither_revokes_nor_locks_out_the_real_key(
    settings: Settings, rclient: aioredis.Redis, testweb: TestWeb
) -> None:
    """Keys are public (the key file is): someone sends the owner's key with a bogus
    keyLocation in the key's folder.  A registered key due for its re-check is re-checked
    where it was verified (not revoked); a key not yet registered fails at the bogus
    location only, and the owner's own location still verifies it."""
    receiver, port, close = await _receiver(settings, rclient, key_recheck_s=3600.0,
                                            dedup_window_s=0.0)
    registry = KeyRegistry(rclient, settings.key_prefix)
    due, new = "h1.test", "h2.test"
    await registry.add(due, testweb.key(due), testweb.base(due) + "/",
                       verified_at=time.time() - 7200.0, location=testweb.key_location(due))

    def body(host: str, location: str) -> dict[str, Any]:
        urls = [u for u in testweb.urls() if f"//{host}:" in u][:2]
        return {"host": host, "key": testweb.key(host), "keyLocation": location,
                "urlList": urls}

    try:
        async with aiohttp.ClientSession() as http:
            post = _poster(http, port)
            for host in (due, new):
                assert await post(body(host, f"{testweb.base(host)}/bogus-key.txt")) == 202
            await _settled(receiver)
            # the owner of the registered key: still registered, nothing to re-check
            assert await post(body(due, testweb.key_location(due))) == 200
            # the owner of the new key: its location verifies it (202, then 200)
            assert await post(body(new, testweb.key_location(new))) == 202
            await _settled(receiver)
            assert await post(body(new, testweb.key_location(new))) == 200
            # a registered key: a submission's keyLocation is not read, nor recorded
            assert await post(body(new, f"{testweb.base(new)}/bogus-key.txt")) == 200
    finally:
        await close()
    scope, checked, location = await registry.lookup(due, testweb.key(due))
    assert scope is not None and location == testweb.key_location(due)
    assert checked is not None and checked > time.time() - 60.0
    _, _, new_location = await registry.lookup(new, testweb.key(new))
    assert new_location == testweb.key_location(new)  # not replaced by the bogus one
    assert receiver.stats["keys_revoked"] == 0


async def test_one_client_cannot_take_everyone_s_room_for_keys_being_verified(
    settings: Settings, rclient: aioredis.Redis, testweb: TestWeb
) -> None:
    """Submissions waiting for a slow key file: one client (127.0.0.1) fills its share,
    another client (127.0.0.2) naming another host is still held (202); a third client
    naming the first host finds that host's share full (429)."""
    receiver, port, close = await _receiver(settings, rclient, max_pending_urls=100,
                                            max_pending_urls_per_client=10)

    def body(host: str, k: int, n: int) -> dict[str, Any]:
        base = testweb.base(host)
        return {"host": host, "key": f"madeupkey{k:04d}", "keyLocation": f"{base}/slow?s=2",
                "urlList": [f"{base}/x/{k}/{i}" for i in range(n)]}

    a, b, c = (aiohttp.ClientSession(connector=aiohttp.TCPConnector(
        local_addr=(f"127.0.0.{i}", 0))) for i in (1, 2, 3))
    try:
        post_a, post_b, post_c = (_poster(h, port) for h in (a, b, c))
        assert [await post_a(body("h0.test", k, 5)) for k in range(3)] == [202, 202, 429]
        assert await post_b(body("h1.test", 10, 5)) == 202
        assert await post_c(body("h0.test", 20, 5)) == 429  # h0.test's share is full
        assert await post_c(body("h2.test", 21, 5)) == 202
        assert receiver.pending_urls == 20
        await _settled(receiver)
        assert await post_a(body("h0.test", 3, 5)) == 202  # room again
    finally:
        for h in (a, b, c):
            await h.close()
        await close()


async def test_repeated_submissions_within_the_window_are_one_ping_per_url(
    settings: Settings, rclient: aioredis.Redis, testweb: TestWeb
) -> None:
    """The same 2,000 URLs submitted 10 times at once with a verified key: 2,000 pings;
    submitted again after the window: 2,000 more."""
    receiver, port, close = await _receiver(settings, rclient, rate_per_s=100.0, burst=100,
                                            dedup_window_s=2.0)
    host = "h1.test"
    await KeyRegistry(rclient, settings.key_prefix).add(host, testweb.key(host))
    urls = [f"{testweb.base(host)}/p/{i}" for i in range(2000)]
    sub = {"host": host, "key": testweb.key(host), "urlList": urls}
    try:
        async with aiohttp.ClientSession() as http:
            post = _poster(http, port)
            assert await asyncio.gather(*(post(sub) for _ in range(10))) == [200] * 10
            first = await read_topic(settings, "pings", 2000, settle_s=1.0)
            await asyncio.sleep(2.5)
            assert await post(sub) == 200
            both = await read_topic(settings, "pings", 4000, settle_s=1.0)
    finally:
        await close()
    assert sorted(v["url"] for _, v in first) == sorted(urls)
    assert sorted(v["url"] for _, v in both) == sorted(urls * 2)
    assert receiver.stats["repeats_merged"] == 9 * 2000
    seen = [k async for k in rclient.scan_iter(f"{settings.key_prefix}:indexnow:*:seen:*")]
    assert len(seen) <= 2000  # one mark per URL, each expiring with the window
    ttls = [await rclient.pttl(k) for k in seen[:50]]  # -2: expired meanwhile
    assert -1 not in ttls and max(ttls, default=0) <= 2000


# ---------------------------------------------------------------- oversized bodies
async def _raw_post(port: int, path: str, length: int | None, send: int,
                    wait_s: float = 10.0) -> tuple[int | None, int]:
    """POST ``path`` announcing ``length`` bytes (None: chunked), sending at most ``send``
    bytes of body in 64 KiB pieces while watching for the answer.  Returns (the answer's
    status or None if none came within ``wait_s`` of the last byte sent, bytes sent)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + (f"Content-Length: {length}\r\n" if length is not None
               else "Transfer-Encoding: chunked\r\n") + "\r\n")
    writer.write(head.encode())
    answer = asyncio.create_task(reader.readline())
    piece = b'{"urlList": [' + b'"http://h0.test/x", ' * 3270  # ~64 KiB of JSON-looking text
    sent = 0
    try:
        while sent < send and not answer.done():
            chunk = piece[: send - sent]
            writer.write(chunk if length is not None
                         else f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            sent += len(chunk)
            try:
                await asyncio.wait_for(writer.drain(), 5.0)
            except (ConnectionError, TimeoutError):
                break
            await asyncio.sleep(0)
        try:
            line = await asyncio.wait_for(answer, wait_s)
        except (TimeoutError, ConnectionError):
            return None, sent
        return (int(line.split()[1]) if line.startswith(b"HTTP/") else None), sent
    finally:
        answer.cancel()
        writer.close()


@pytest.fixture
async def indexnow_port(settings: Settings, rclient: aioredis.Redis) -> AsyncIterator[int]:
    _receiver_obj, port, close = await _receiver(settings, rclient)
    yield port
    await close()


async def test_indexnow_refuses_an_oversized_body_before_reading_it(indexnow_port: int) -> None:
    """A 24 MB body announced by its Content-Length is answered 413 after 64 KiB of it
    (the rest is never sent); four 24 MB chunked bodies at once are each refused once the
    read passes the cap, and the process's peak memory grows by less than half of what
    holding the four would take.  The bound is loose on purpose: the four capped reads
    alone hold 16 MiB, and the client's send buffers live in the same process."""
    status, sent = await _raw_post(indexnow_port, "/indexnow", 24_000_000, 64 * 1024)
    assert (status, sent) == (413, 64 * 1024)
    rss_peak_reset()
    before = rss_kib("VmRSS")
    got = await asyncio.gather(*(_raw_post(indexnow_port, "/indexnow", None, 24_000_000)
                                 for _ in range(4)))
    grown_mib = (rss_kib("VmHWM") - before) / 1024
    print(f"4 x 24 MB chunked: answers {got}, peak RSS +{grown_mib:.1f} MiB")
    assert [s for s, _ in got] == [413] * 4
    assert all(MAX_BODY_BYTES < n < 24_000_000 for _, n in got)
    assert grown_mib < 4 * 24_000_000 / 2**20 / 2


async def test_websub_reads_no_body_for_an_unknown_callback(
    settings: Settings, rclient: aioredis.Redis
) -> None:
    """8 POSTs of 10 MB to unknown callbacks are answered 404 on their headers (64 KiB
    sent); an oversized body announced for a known callback is a 413 on its headers."""
    subscriber = WebSubSubscriber(None, rclient, settings.key_prefix)
    runner, port = await start_subscriber(subscriber)
    try:
        token = "A" * 32
        got = await asyncio.gather(*(
            _raw_post(port, f"/websub/h{i}.test/{token}", 10_000_000, 64 * 1024)
            for i in range(8)))
        assert got == [(404, 64 * 1024)] * 8
        await subscriber._set("h0.test", token, 60.0, hub="http://hub.test/",
                              topic="http://h0.test/feed", state="active",
                              lease_until=repr(time.time() + 60))
        status, _ = await _raw_post(port, f"/websub/h0.test/{token}", 64 * 1024 * 1024,
                                    64 * 1024)
        assert status == 413
    finally:
        await runner.cleanup()
    assert subscriber.stats["rejected.unknown-callback"] == 8
