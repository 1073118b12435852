"""The WebSub subscriber against the real Kafka and Redis, with a small real hub.

The hub below is an aiohttp server on 127.0.0.1 that does what the W3C recommendation asks
of a hub: it answers a subscription request 202 and then verifies the intent with a GET to
the callback (Sec. 5.1.2, 5.3), or denies it (Sec. 5.2), and distributes content with a
POST signed with the subscriber's ``hub.secret`` (Sec. 7, 7.1).  Pings are read back from
the test's own pings topic with aiokafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import secrets
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import redis.asyncio as aioredis
from aiohttp import web
from edges_helpers import read_topic, rss_kib, rss_peak_reset
from worker_process import settings_env

from streams.edges.pings import PingProducer
from streams.edges.websub import (
    MAX_LEASE_S,
    WebSubError,
    WebSubSubscriber,
    sign,
    signature_problem,
    start_subscriber,
    subscribe,
)
from streams.settings import Settings

pytestmark = pytest.mark.integration

TOPIC = "https://blog.example/feed.xml"
TOPIC_HOST = "blog.example"
BODY = b'<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><entry/></feed>'


# ---------------------------------------------------------------- signatures, no services
def test_sign_known_answers_rfc4231_and_rfc2202() -> None:
    """HMAC test case 2 of RFC 2202 (SHA-1) and RFC 4231 (SHA-2): key "Jefe"."""
    data = b"what do ya want for nothing?"
    assert sign("Jefe", data, "sha1") == "sha1=effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
    assert sign(b"Jefe", data, "sha256") == (
        "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )
    assert sign("Jefe", data, "sha384").startswith("sha384=af45d2e376484031617f78d2b58a6b1b")
    assert sign("Jefe", data, "sha512").startswith("sha512=164b7a7bfcf819e2e395fbe73b56e0a3")


def test_signature_problem_reasons() -> None:
    good = sign("s3cret", BODY, "sha256")
    assert signature_problem("s3cret", BODY, good) is None
    assert signature_problem("s3cret", BODY, good.upper().replace("SHA256", "sha256")) is None
    for m in ("sha1", "sha384", "sha512"):
        assert signature_problem("s3cret", BODY, sign("s3cret", BODY, m)) is None
    assert signature_problem("s3cret", BODY, None) == "missing-signature"
    assert signature_problem("s3cret", BODY, "  ") == "missing-signature"
    assert signature_problem("s3cret", BODY, "sha256") == "malformed-signature"
    assert signature_problem("s3cret", BODY, "sha256=zz") == "malformed-signature"
    md5 = hmac.new(b"s3cret", BODY, hashlib.md5).hexdigest()
    assert signature_problem("s3cret", BODY, f"md5={md5}") == "unknown-method"
    assert signature_problem("wrong", BODY, sign("s3cret", BODY)) == "bad-signature"
    assert signature_problem("s3cret", BODY + b" ", good) == "bad-signature"
    # the method stated by the hub is used: a sha256 digest labelled sha512 fails
    assert signature_problem("s3cret", BODY, "sha512=" + good.split("=")[1]) == "bad-signature"


# ---------------------------------------------------------------- a real test hub
@dataclass
class Verification:
    mode: str
    topic: str
    callback: str
    status: int
    echoed: bool


@dataclass
class Hub:
    """A WebSub hub on 127.0.0.1 (the parts a subscriber talks to)."""

    lease_s: int | None = 600
    deny: set[str] = field(default_factory=set)
    auto_verify: bool = True
    answer: int = 202
    requests: list[dict[str, str]] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)
    verifications: list[Verification] = field(default_factory=list)
    #: (topic, callback) -> secret ("" = none) of the verified subscriptions
    subscribers: dict[tuple[str, str], str] = field(default_factory=dict)
    url: str = ""

    def __post_init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._changed = asyncio.Event()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hub", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/hub"
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))

    async def stop(self) -> None:
        for t in list(self._tasks):
            await t
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.Response:
        self.content_types.append(request.content_type)
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.requests.append(form)
        if self.answer != 202:
            return web.Response(status=self.answer, text="hub says no")
        if self.auto_verify:  # Sec. 5.1.2: verification begins after the 202
            t = asyncio.create_task(self._verify_or_deny(form))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)
        return web.Response(status=202)

    async def _verify_or_deny(self, form: dict[str, str]) -> None:
        await asyncio.sleep(0.05)
        mode, topic, cb = form["hub.mode"], form["hub.topic"], form["hub.callback"]
        if mode == "subscribe" and topic in self.deny:
            await self.send_denied(cb, topic, "not on this hub")
            return
        v = await self.verify(cb, mode, topic, self.lease_s)
        if v.status == 200 and v.echoed:
            if mode == "subscribe":
                self.subscribers[(topic, cb)] = form.get("hub.secret", "")
            else:
                self.subscribers.pop((topic, cb), None)

    async def verify(
        self, callback: str, mode: str, topic: str, lease_s: int | None = 600,
        challenge: str | None = None,
    ) -> Verification:  # fmt: skip
        """Sec. 5.3: GET callback?hub.mode&hub.topic&hub.challenge[&hub.lease_seconds]."""
        assert self._http is not None
        challenge = challenge or secrets.token_urlsafe(16)
        q = {"hub.mode": mode, "hub.topic": topic, "hub.challenge": challenge}
        if lease_s is not None and mode == "subscribe":
            q["hub.lease_seconds"] = str(lease_s)
        async with self._http.get(callback, params=q) as r:
            v = Verification(mode, topic, callback, r.status, (await r.text()) == challenge)
        self.verifications.append(v)
        self._changed.set()
        return v

    async def send_denied(self, callback: str, topic: str, reason: str) -> int:
        assert self._http is not None
        q = {"hub.mode": "denied", "hub.topic": topic, "hub.reason": reason}
        async with self._http.get(callback, params=q) as r:
            self.verifications.append(Verification("denied", topic, callback, r.status, False))
        self._changed.set()
        return r.status

    async def wait(self, n: int, timeout_s: float = 10.0) -> list[Verification]:
        """Wait until ``n`` verifications (or denials) have been answered."""
        deadline = time.monotonic() + timeout_s
        while len(self.verifications) < n:
            self._changed.clear()
            left = deadline - time.monotonic()
            assert left > 0, f"only {len(self.verifications)} of {n} verifications"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)
        return self.verifications

    async def deliver(
        self, callback: str, body: bytes = BODY, *, secret: str | None = None,
        method: str = "sha256", signature: str | None = None, sign_it: bool = True,
    ) -> int:  # fmt: skip
        """Sec. 7: POST the topic's content (with Link rel=hub and rel=self), signed with
        ``secret`` (Sec. 7.1) unless ``signature`` is given or ``sign_it`` is False."""
        assert self._http is not None
        headers = {
            "Content-Type": "application/atom+xml",
            "Link": f'<{self.url}>; rel="hub", <https://elsewhere.example/other>; rel="self"',
        }
        if signature is not None:
            headers["X-Hub-Signature"] = signature
        elif sign_it and secret:
            headers["X-Hub-Signature"] = sign(secret, body, method)
        async with self._http.post(callback, data=body, headers=headers) as r:
            return r.status

    async def publish(self, topic: str, body: bytes = BODY, **kw: Any) -> list[int]:
        """Deliver to every verified subscriber of ``topic`` with its secret."""
        return [await self.deliver(cb, body, secret=sec, **kw)
                for (t, cb), sec in list(self.subscribers.items()) if t == topic]  # fmt: skip


@dataclass
class Stack:
    hub: Hub
    subscriber: WebSubSubscriber
    settings: Settings
    redis: aioredis.Redis


@pytest.fixture
async def stack(settings: Settings, rclient: aioredis.Redis) -> AsyncIterator[Stack]:
    hub = Hub()
    await hub.start()
    async with PingProducer(settings) as producer:
        subscriber = WebSubSubscriber(producer, rclient, settings.key_prefix)
        runner, _port = await start_subscriber(subscriber)
        try:
            yield Stack(hub, subscriber, settings, rclient)
        finally:
            await hub.stop()
            await runner.cleanup()


async def pings(s: Settings, n: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    got = await read_topic(s, "pings", n, timeout_s=timeout_s, settle_s=1.5)
    assert all(k == TOPIC_HOST.encode() for k, _ in got)
    return [v for _, v in got]


# ---------------------------------------------------------------- the flows
async def test_subscribe_request_verification_and_signed_distribution(stack: Stack) -> None:
    hub, sub = stack.hub, stack.subscriber
    pending = await sub.subscribe(hub.url, TOPIC, lease_seconds=900)
    # Sec. 5.1: a form-encoded POST with callback, mode, topic, lease and secret
    assert hub.content_types == ["application/x-www-form-urlencoded"]
    form = hub.requests[0]
    assert form["hub.mode"] == "subscribe" and form["hub.topic"] == TOPIC
    assert form["hub.callback"] == pending.callback
    assert pending.callback.startswith(f"{sub.public_url}/websub/{TOPIC_HOST}/")
    assert form["hub.lease_seconds"] == "900"
    assert len(form["hub.secret"]) == 64 and form["hub.secret"] == pending.secret
    # Sec. 5.3: the hub's GET is answered 200 with the challenge as the body
    (v,) = await hub.wait(1)
    assert (v.mode, v.status, v.echoed) == ("subscribe", 200, True)
    active = await sub.get(pending.ref)
    assert active is not None and active.state == "active"
    assert active.lease_until == pytest.approx(time.time() + 600, abs=10)  # the hub's lease
    assert [a.ref for a in await sub.active()] == [pending.ref]
    assert await stack.redis.exists(sub.intent_key(pending.host, pending.token, "subscribe")) == 0
    # Sec. 7, 7.1.1: signed with each recognized method -> one ping per delivery
    bodies = [BODY.replace(b"<entry/>", f"<entry>{m}</entry>".encode())
              for m in ("sha256", "sha1", "sha384", "sha512")]
    for method, body in zip(("sha256", "sha1", "sha384", "sha512"), bodies, strict=True):
        assert await hub.publish(TOPIC, body, method=method) == [202]
    # a replayed delivery (same content, validly signed) is the same ping: same id, which
    # the worker's dedup window drops
    assert await hub.publish(TOPIC, bodies[0], method="sha256") == [202]
    got = await pings(stack.settings, 5)
    assert len(got) == 5
    assert got[4]["id"] == got[0]["id"]
    got = got[:4]
    # the subscription's topic, not the Link rel=self of the delivery (Sec. 7)
    assert {p["url"] for p in got} == {TOPIC}
    assert all(p["source"] == "websub" and p["changed_at"] is None for p in got)
    assert len({p["id"] for p in got}) == 4 and all(p["id"].startswith("websub:") for p in got)
    assert abs(got[0]["received_at"] - time.time()) < 60
    assert sub.stats["pings"] == 5 and sub.stats["subscribe.verified"] == 1


async def test_verification_refused_unless_we_asked(stack: Stack) -> None:
    """Sec. 5.3.1: 404 for a topic or callback we have no pending (un)subscription for."""
    hub, sub = stack.hub, stack.subscriber
    hub.auto_verify = False
    pending = await sub.subscribe(hub.url, TOPIC, lease_seconds=600)
    cb = pending.callback
    other_cb = cb[: -len(pending.token)] + "A" * len(pending.token)
    assert (await hub.verify(cb, "subscribe", "https://blog.example/other.xml")).status == 404
    assert (await hub.verify(other_cb, "subscribe", TOPIC)).status == 404
    assert (await hub.verify(cb, "unsubscribe", TOPIC)).status == 404  # we asked to subscribe
    assert (await hub.verify(cb, "subscribe", TOPIC, lease_s=None)).status == 404  # no lease
    state = await sub.get(pending.ref)
    assert state is not None and state.state == "pending"
    async with aiohttp.ClientSession() as http:
        async with http.get(cb, params={"hub.mode": "publish", "hub.topic": TOPIC}) as r:
            assert r.status == 400
        # content for a subscription that is not verified yet: ignored (2xx), no ping
        async with http.post(cb, data=BODY, headers={
                "X-Hub-Signature": sign(pending.secret, BODY)}) as r:  # fmt: skip
            assert r.status == 202
    ok = await hub.verify(cb, "subscribe", TOPIC, lease_s=120, challenge="c-1234")
    assert (ok.status, ok.echoed) == (200, True)
    state = await sub.get(pending.ref)
    assert state is not None and state.state == "active"
    # a hub re-confirming the active subscription is answered too (we still want it)
    assert (await hub.verify(cb, "subscribe", TOPIC, lease_s=60)).echoed
    # an intent expires: a subscriber whose intents live 0.3 s
    short = WebSubSubscriber(sub.producer, stack.redis, stack.settings.key_prefix,
                             sub.public_url, intent_ttl_s=0.3)  # fmt: skip
    late = await short.subscribe(hub.url, "https://blog.example/late.xml", lease_seconds=60)
    await asyncio.sleep(0.6)
    v = await hub.verify(late.callback, "subscribe", "https://blog.example/late.xml")
    assert v.status == 404
    assert sub.stats["rejected.not-active"] == 1
    assert sub.stats["subscribe.verified"] == 2
    assert await pings(stack.settings, 1, timeout_s=2.0) == []


async def test_bad_signatures_publish_nothing_and_are_recorded(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    hub, sub = stack.hub, stack.subscriber
    s = await sub.subscribe(hub.url, TOPIC, lease_seconds=600)
    await hub.wait(1)
    secret = hub.subscribers[(TOPIC, s.callback)]
    md5 = hmac.new(secret.encode(), BODY, hashlib.md5).hexdigest()
    caplog.set_level(logging.WARNING, logger="streams.edges.websub")
    # Sec. 7.1.2: every one answered 2xx, none published
    assert await hub.deliver(s.callback, secret="not-the-secret") == 202
    assert await hub.deliver(s.callback, secret=secret, sign_it=False) == 202
    assert await hub.deliver(s.callback, signature=f"md5={md5}") == 202
    assert await hub.deliver(s.callback, signature="sha256=") == 202
    good = sign(secret, BODY)
    assert await hub.deliver(s.callback, BODY + b"<!-- tampered -->", signature=good) == 202
    assert await pings(stack.settings, 1, timeout_s=2.0) == []
    assert {k: v for k, v in sub.stats.items() if k.startswith("rejected.")} == {
        "rejected.bad-signature": 2,
        "rejected.missing-signature": 1,
        "rejected.unknown-method": 1,
        "rejected.malformed-signature": 1,
    }
    warned = [r.getMessage() for r in caplog.records if "ignored a content" in r.getMessage()]
    assert len(warned) == 5 and all(TOPIC in w and "127.0.0.1" in w for w in warned)
    async with aiohttp.ClientSession() as http, http.get(
        f"{sub.public_url}/websub/stats"
    ) as r:
        assert (await r.json())["rejected.bad-signature"] == 2
    # the genuine delivery still goes through
    assert await hub.deliver(s.callback, secret=secret) == 202
    assert [p["url"] for p in await pings(stack.settings, 1)] == [TOPIC]


async def test_unsubscribe_flow(stack: Stack) -> None:
    hub, sub = stack.hub, stack.subscriber
    s = await sub.subscribe(hub.url, TOPIC, secret=False, lease_seconds=600)
    await hub.wait(1)
    assert "hub.secret" not in hub.requests[0]
    assert await hub.publish(TOPIC) == [202]  # no secret: unsigned content is accepted
    going = await sub.unsubscribe(s.ref)
    assert going.state == "unsubscribing"
    form = hub.requests[1]
    assert (form["hub.mode"], form["hub.topic"], form["hub.callback"]) == (
        "unsubscribe", TOPIC, s.callback)  # fmt: skip
    assert "hub.lease_seconds" not in form and "hub.secret" not in form
    v = (await hub.wait(2))[1]
    assert (v.mode, v.status, v.echoed) == ("unsubscribe", 200, True)
    assert hub.subscribers == {}
    gone = await sub.get(s.ref)
    assert gone is not None and gone.state == "unsubscribed"
    assert await sub.active() == []
    # a late delivery: 410 (Sec. 7), nothing published; a replayed verification: 404
    assert await hub.deliver(s.callback) == 410
    assert (await hub.verify(s.callback, "unsubscribe", TOPIC)).status == 404
    assert (await hub.verify(s.callback, "subscribe", TOPIC)).status == 404
    got = await pings(stack.settings, 2, timeout_s=3.0)
    assert len(got) == 1  # only the delivery before the unsubscription


async def test_denied_and_refused_requests(stack: Stack) -> None:
    hub, sub = stack.hub, stack.subscriber
    hub.deny = {TOPIC}
    s = await sub.subscribe(hub.url, TOPIC, lease_seconds=600)
    (d,) = await hub.wait(1)
    assert (d.mode, d.status) == ("denied", 200)  # Sec. 5.2
    denied = await sub.get(s.ref)
    assert denied is not None and (denied.state, denied.reason) == ("denied", "not on this hub")
    assert (await hub.verify(s.callback, "subscribe", TOPIC)).status == 404
    assert await hub.deliver(s.callback, secret=s.secret) == 410
    assert await hub.send_denied(s.callback, "https://blog.example/x", "?") == 404
    # a hub that refuses the request: WebSubError, the intent dropped, marked failed
    hub.answer = 400
    with pytest.raises(WebSubError, match="answered 400"):
        await sub.subscribe(hub.url, TOPIC)
    failed = [k async for k in stack.redis.scan_iter(f"{stack.settings.key_prefix}:websub:*")]
    assert not any(b":intent:" in k for k in failed)
    assert sub.stats["subscribe.failed"] == 1
    assert await pings(stack.settings, 1, timeout_s=2.0) == []


async def test_renewal_supersedes_the_old_callback(stack: Stack) -> None:
    hub, sub = stack.hub, stack.subscriber
    hub.lease_s = 40
    old = await sub.subscribe(hub.url, TOPIC, lease_seconds=40)
    await hub.wait(1)
    assert await sub.renew_due(3600) == []  # 40 s left > half the lease
    hub.auto_verify = False
    (new,) = await sub.renew_due(3600, now=time.time() + 25)
    assert new.renews == old.ref and new.callback != old.callback
    assert new.secret and new.secret != old.secret
    assert hub.requests[1]["hub.callback"] == new.callback
    # the renewal is pending: not requested twice; the old callback still publishes
    assert await sub.renew_due(3600, now=time.time() + 25) == []
    assert await hub.publish(TOPIC) == [202]
    v = await hub.verify(new.callback, "subscribe", TOPIC, lease_s=40)
    assert (v.status, v.echoed) == (200, True)
    hub.subscribers[(TOPIC, new.callback)] = new.secret
    assert await sub.renew_due(3600) == []  # the new lease is fresh
    prev = await sub.get(old.ref)
    assert prev is not None and prev.state == "superseded"
    assert [a.ref for a in await sub.active()] == [new.ref]
    # the hub still knows both callbacks; only the new one publishes
    statuses = sorted(await hub.publish(TOPIC))
    assert statuses == [202, 410]
    assert len(await pings(stack.settings, 3, timeout_s=3.0)) == 2


async def test_websub_command_records_the_intent_for_the_serving_process(stack: Stack) -> None:
    """``recrawl websub subscribe`` (another process) records the intent in Redis; the
    callback served here verifies it."""
    hub, sub = stack.hub, stack.subscriber
    env = settings_env(stack.settings)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streams.cli", "websub", "subscribe", hub.url, TOPIC,
        "--public-url", str(sub.public_url), "--lease", "300", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert b'"secret": "***"' in out  # the secret is not printed
    (v,) = await hub.wait(1)
    assert (v.status, v.echoed) == (200, True)
    (active,) = await sub.active()
    assert active.topic == TOPIC and active.callback == hub.requests[0]["hub.callback"]
    assert await hub.publish(TOPIC) == [202]
    assert [p["source"] for p in await pings(stack.settings, 1)] == ["websub"]


async def test_odd_and_huge_leases(stack: Stack) -> None:
    """A lease of "²" (a Unicode digit: ``str.isdigit`` says yes, ``int``
    says no) is refused with 404 like any missing lease, not a 500; a lease of 10^12 s is
    recorded as at most MAX_LEASE_S, so the subscription is renewed in time."""
    hub, sub = stack.hub, stack.subscriber
    s = await sub.subscribe(hub.url, TOPIC, lease_seconds=600)
    await hub.wait(1)  # the hub's own verification (lease 600)
    for odd in ("²", "1e3", "-5", "0", "9" * 40):
        assert (await hub.verify(s.callback, "subscribe", TOPIC, lease_s=odd)).status == 404  # type: ignore[arg-type]
    v = await hub.verify(s.callback, "subscribe", TOPIC, lease_s=10**12)
    assert (v.status, v.echoed) == (200, True)
    got = await sub.get(s.ref)
    assert got is not None and got.state == "active" and got.lease_until is not None
    assert got.lease_until == pytest.approx(time.time() + MAX_LEASE_S, abs=60)
    assert sub.stats["subscribe.no-lease"] == 5


async def test_a_hub_s_huge_answer_is_not_read_and_expired_leases_are_forgotten(
    stack: Stack
) -> None:
    """A hub answering a subscription request with 200 MB: the first 8 KiB are read (the
    test process's peak memory grows by far less than the answer).  A lease whose
    subscription hash expired leaves the leases set when it is read."""
    async def huge(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=202)
        resp.content_length = 200 << 20
        await resp.prepare(request)
        piece = b"x" * (1 << 20)
        with contextlib.suppress(ConnectionError):
            for _ in range(200):
                await resp.write(piece)
        return resp

    app = web.Application()
    app.router.add_post("/hub", huge)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    hub = f"http://127.0.0.1:{runner.addresses[0][1]}/hub"
    try:
        rss_peak_reset()
        before = rss_kib("VmRSS")
        status, text = await subscribe(hub, TOPIC, "http://127.0.0.1:1/cb", None, 60)
        grown_mib = (rss_kib("VmHWM") - before) / 1024
    finally:
        await runner.cleanup()
    print(f"a hub's 200 MB answer: peak RSS +{grown_mib:.1f} MiB")
    assert status == 202 and text == "x" * 2000
    assert grown_mib < 64
    sub = stack.subscriber
    await stack.redis.zadd(sub.leases_key, {"gone.test/" + "A" * 32: time.time() + 60})
    assert await sub.active() == []
    assert await stack.redis.zcard(sub.leases_key) == 0
