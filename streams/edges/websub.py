"""A WebSub subscriber (W3C Recommendation, https://www.w3.org/TR/websub/), publishing pings.

The subscriber asks a hub to send it a topic's updates (Sec. 5.1), answers the hub's
verification of intent (Sec. 5.3) and denials (Sec. 5.2), and turns every authenticated
content distribution (Sec. 7, 7.1) into one ping ``source="websub"`` for the topic URL.

Callback: ``GET|POST /websub/<host>/<token>``, one unguessable callback per subscription
(Sec. 5.1.1, 8.2: capability URLs; a new one at every renewal).  The hub identifies a
subscription by topic and callback, and so do we: the Link headers of a distribution are
never used to find the subscription (Sec. 7).

The stateless pieces (the request, signatures, limits, :class:`Subscription`) are in
:mod:`streams.edges.websub_protocol`; every name is importable from here.

=====  ==========================================================================
GET    ``hub.mode=subscribe|unsubscribe``: 200 with ``hub.challenge`` as the body when
       ``hub.topic`` is the topic of a pending intent of that mode for this callback
       (or, for ``subscribe``, of the active subscription: a hub's re-confirmation);
       otherwise 404 (Sec. 5.3.1).  A ``subscribe`` without a positive integer
       ``hub.lease_seconds`` (which the hub MUST send) is refused with 404.
GET    ``hub.mode=denied``: 200 and the subscription is marked denied (Sec. 5.2); 404
       for an unknown callback or another topic; 400 for any other mode.
POST   content distribution: 202, and one ping is published, when the subscription is
       active and (if it has a secret) ``X-Hub-Signature: <method>=<hex HMAC>`` over
       the raw body checks out (Sec. 7.1, methods of Sec. 7.1.1).  A missing, malformed
       or wrong signature is also answered 202 (Sec. 7.1.2: the message is ignored, and
       the same answer gives no oracle to a forger) but publishes nothing; it is logged
       and counted (``rejected.<reason>`` in ``stats`` and ``GET /websub/stats``, as the
       IndexNow receiver counts its refusals).  410 for a subscription that was
       unsubscribed, denied or superseded by its renewal (Sec. 7: "410 to indicate
       that the subscription has been deleted"), 404 for an unknown callback, 413 for
       a body over ``MAX_BODY_BYTES``, 503 when Redis or Kafka is unavailable (the hub
       retries).  The subscription and the ``Content-Length`` are checked before the
       body is read: a 404, 410, 413 or an ignored delivery reads none of it (the
       connection is closed after the answer); a delivery read is cut at
       ``MAX_BODY_BYTES``.
=====  ==========================================================================

State in Redis (``P`` = key prefix, ``{host}`` = the topic's host as hash tag):

- ``P:websub:{host}:sub:<token>`` HASH: ``hub``, ``topic``, ``callback``, ``secret``,
  ``state`` (``pending``, ``active``, ``unsubscribing``, ``unsubscribed``, ``denied``,
  ``failed``, ``superseded``), ``lease_s`` (asked), ``lease_until``, ``created_at``,
  ``reason``, ``renews``/``renewed_by`` (renewal chain); expires a grace period after the
  lease (or after the intent, while pending);
- ``P:websub:{host}:intent:<token>:<mode>`` STRING topic, expiring after ``intent_ttl_s``:
  the pending (un)subscription the hub must verify (written *before* the request is
  sent: a hub may verify before it answers);
- ``P:websub:leases`` ZSET ``<host>/<token>`` -> ``lease_until`` of active subscriptions
  (what :meth:`WebSubSubscriber.renew_due` renews before the lease ends, Sec. 5.3.1:
  "the subscriber MUST re-request the subscription on the hub before hub.lease_seconds
  seconds has elapsed"); a ref whose hash has expired is dropped when the set is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import time
from collections import Counter
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web

from streams.edges.pings import Ping, PingProducer, new_ping_id
from streams.edges.websub_protocol import (
    _LEASE_RE,
    MAX_BODY_BYTES,
    MAX_LEASE_S,
    MAX_SECRET_BYTES,
    MODES,
    SIGNATURE_METHODS,
    TOKEN_RE,
    Subscription,
    WebSubError,
    _s,
    sign,
    signature_problem,
    subscribe,
    unsubscribe,
)
from streams.events.records import check_url, host_of
from streams.store.redis_conn import AsyncRedis

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_LEASE_S",
    "MAX_SECRET_BYTES",
    "MODES",
    "SIGNATURE_METHODS",
    "TOKEN_RE",
    "Subscription",
    "WebSubError",
    "WebSubSubscriber",
    "renew_loop",
    "sign",
    "signature_problem",
    "start_subscriber",
    "subscribe",
    "unsubscribe",
]

log = logging.getLogger(__name__)

# KEYS: subscription hash;  ARGV: time to live ms, then field, value, ...
_SET_WITH_TTL = """
for i = 2, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
"""


class WebSubSubscriber:
    """The subscriber: subscription requests, the callback endpoint (``app()``), renewals.

    ``public_url`` is the base URL under which the hub reaches ``app()`` (callbacks are
    ``<public_url>/websub/<host>/<token>``); :func:`start_subscriber` fills it in when
    left ``None``.  Pings go through ``producer`` (:class:`PingProducer`, as the IndexNow
    receiver's; ``None`` to manage subscriptions only).
    """

    def __init__(
        self,
        producer: PingProducer | None,
        client: AsyncRedis,
        prefix: str,
        public_url: str | None = None,
        *,
        intent_ttl_s: float = 3600.0,
        grace_s: float = 86400.0,
        default_lease_s: int | None = None,
    ) -> None:
        self.producer = producer
        self.redis = client
        self._set_script = client.register_script(_SET_WITH_TTL)
        self.prefix = prefix
        self.public_url = public_url.rstrip("/") if public_url else None
        self.intent_ttl_s = intent_ttl_s
        self.grace_s = grace_s
        self.default_lease_s = default_lease_s
        self.stats: Counter[str] = Counter()

    # -- keys
    def sub_key(self, host: str, token: str) -> str:
        return f"{self.prefix}:websub:{{{host}}}:sub:{token}"

    def intent_key(self, host: str, token: str, mode: str) -> str:
        return f"{self.prefix}:websub:{{{host}}}:intent:{token}:{mode}"

    @property
    def leases_key(self) -> str:
        return f"{self.prefix}:websub:leases"

    def callback_url(self, host: str, token: str) -> str:
        if not self.public_url:
            raise WebSubError("public_url is not set: where does the hub reach the callback?")
        return f"{self.public_url}/websub/{host}/{token}"

    # -- reading
    async def get(self, ref: str) -> Subscription | None:
        host, _, token = ref.partition("/")
        if not host or not TOKEN_RE.match(token):
            return None
        raw = await self.redis.hgetall(self.sub_key(host, token))
        if not raw:
            return None
        d = {_s(k): _s(v) for k, v in raw.items()}
        return Subscription(
            host=host, token=token, hub=d.get("hub", ""), topic=d.get("topic", ""),
            callback=d.get("callback", ""), secret=d.get("secret", ""),
            state=d.get("state", ""),
            lease_s=int(d["lease_s"]) if d.get("lease_s") else None,
            lease_until=float(d["lease_until"]) if d.get("lease_until") else None,
            created_at=float(d.get("created_at") or 0.0), reason=d.get("reason", ""),
            renews=d.get("renews", ""), renewed_by=d.get("renewed_by", ""),
        )  # fmt: skip

    async def active(self) -> list[Subscription]:
        """Subscriptions with a verified lease (soonest to expire first)."""
        out = []
        for ref in await self.redis.zrange(self.leases_key, 0, -1):
            sub = await self.get(_s(ref))
            if sub is not None and sub.state == "active":
                out.append(sub)
            elif sub is None:  # its hash expired (a lease never renewed): forget the ref
                await self.redis.zrem(self.leases_key, _s(ref))
        return out

    async def _set(self, host: str, token: str, ttl_s: float, **fields: Any) -> None:
        """Write fields and the time to live of a subscription at once (one script: a
        ``MULTI`` pipeline of redis-py's asyncio cluster client runs in another thread's
        event loop and leaves its connections there)."""
        args: list[Any] = [max(1000, int(ttl_s * 1000))]
        for k, v in fields.items():
            args += [k, "" if v is None else str(v)]
        await self._set_script(keys=[self.sub_key(host, token)], args=args)

    # -- requests (Sec. 5.1)
    async def subscribe(
        self,
        hub: str,
        topic: str,
        *,
        secret: str | bool | None = True,
        lease_seconds: int | None = None,
        renews: str = "",
        session: aiohttp.ClientSession | None = None,
    ) -> Subscription:
        """Record the intent, then ask ``hub`` for ``topic``'s updates at a new callback.

        ``secret=True`` draws a random secret (Sec. 5.1: "cryptographically random
        unique"; Sec. 8.2: subscribers SHOULD use one), ``False``/``None`` sends none.
        Returns the pending subscription; raises :class:`WebSubError` if the hub does not
        answer 2xx (the intent is then dropped and the subscription marked ``failed``).
        """
        try:
            check_url(topic)
            check_url(hub)
        except ValueError as exc:
            raise WebSubError(f"bad URL: {exc}") from None
        key = secret if not isinstance(secret, bool) else secrets.token_hex(32) if secret else None
        lease = lease_seconds if lease_seconds is not None else self.default_lease_s
        host = host_of(topic)
        token = secrets.token_urlsafe(24)
        callback = self.callback_url(host, token)
        now = time.time()
        await self._set(host, token, self.intent_ttl_s + self.grace_s, hub=hub, topic=topic,
                        callback=callback, secret=key or "", state="pending", lease_s=lease,
                        lease_until=None, created_at=repr(now), renews=renews)  # fmt: skip
        await self.redis.set(self.intent_key(host, token, "subscribe"), topic,
                             px=int(self.intent_ttl_s * 1000))  # fmt: skip
        try:
            status, text = await subscribe(hub, topic, callback, key, lease, session=session)
        except WebSubError as exc:
            status, text = 0, str(exc)
        if not 200 <= status < 300:
            await self.redis.delete(self.intent_key(host, token, "subscribe"))
            await self._set(host, token, self.grace_s, state="failed",
                            reason=f"hub answered {status}: {text[:200]}")  # fmt: skip
            self.stats["subscribe.failed"] += 1
            raise WebSubError(f"hub {hub} answered {status} to subscribe: {text[:200]}")
        self.stats["subscribe.sent"] += 1
        sub = await self.get(f"{host}/{token}")
        assert sub is not None
        return sub

    async def unsubscribe(
        self, ref: str, *, session: aiohttp.ClientSession | None = None
    ) -> Subscription:
        """Ask the hub to end the subscription ``ref`` (same topic and callback, Sec. 5.1);
        it ends when the hub's verification is answered (Sec. 5.3)."""
        sub = await self.get(ref)
        if sub is None:
            raise WebSubError(f"no subscription {ref!r}")
        await self.redis.set(self.intent_key(sub.host, sub.token, "unsubscribe"), sub.topic,
                             px=int(self.intent_ttl_s * 1000))  # fmt: skip
        try:
            status, text = await unsubscribe(sub.hub, sub.topic, sub.callback, session=session)
        except WebSubError as exc:
            status, text = 0, str(exc)
        if not 200 <= status < 300:
            await self.redis.delete(self.intent_key(sub.host, sub.token, "unsubscribe"))
            self.stats["unsubscribe.failed"] += 1
            raise WebSubError(f"hub {sub.hub} answered {status} to unsubscribe: {text[:200]}")
        if sub.state in ("active", "pending"):
            ttl = self._ttl_after(sub.lease_until)
            await self._set(sub.host, sub.token, ttl, state="unsubscribing")
        self.stats["unsubscribe.sent"] += 1
        got = await self.get(ref)
        assert got is not None
        return got

    def _ttl_after(self, lease_until: float | None) -> float:
        now = time.time()
        return max(lease_until - now if lease_until else 0.0, self.intent_ttl_s) + self.grace_s

    async def renew_due(
        self, margin_s: float = 3600.0, *, now: float | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> list[Subscription]:  # fmt: skip
        """Re-subscribe (new callback, new secret if it had one) every active subscription
        whose lease ends within ``min(margin_s, lease/2)``; the old callback keeps working
        until the renewal is verified, then answers 410 (no duplicate pings)."""
        now = time.time() if now is None else now
        out = []
        for sub in await self.active():
            if sub.lease_until is None:
                continue
            margin = min(margin_s, (sub.lease_s or margin_s) / 2)
            if sub.lease_until - now > margin:
                continue
            if sub.renewed_by:
                nxt = await self.get(sub.renewed_by)
                if nxt is not None and nxt.state in ("pending", "active"):
                    continue  # a renewal is on its way
            try:
                new = await self.subscribe(sub.hub, sub.topic, secret=bool(sub.secret),
                                           lease_seconds=sub.lease_s, renews=sub.ref,
                                           session=session)  # fmt: skip
            except WebSubError as exc:
                log.warning("renewal of %s failed: %s", sub.ref, exc)
                continue
            await self.redis.hset(self.sub_key(sub.host, sub.token), "renewed_by", new.ref)
            out.append(new)
        return out

    # -- the callback (Sec. 5.2, 5.3, 7)
    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/websub/stats", self.handle_stats)
        app.router.add_get("/websub/{host}/{token}", self.handle_get)
        app.router.add_post("/websub/{host}/{token}", self.handle_post)
        return app

    async def handle_stats(self, request: web.Request) -> web.Response:
        return web.json_response(dict(self.stats))

    def _answer(self, status: int, text: str = "", *, count: str | None = None) -> web.Response:
        self.stats[str(status)] += 1
        if count:
            self.stats[count] += 1
        return web.Response(status=status, text=text, content_type="text/plain")

    async def handle_get(self, request: web.Request) -> web.Response:
        """Verification of intent (Sec. 5.3) and denial (Sec. 5.2)."""
        host, token = request.match_info["host"], request.match_info["token"]
        q = request.query
        mode, topic = q.get("hub.mode", ""), q.get("hub.topic", "")
        if mode not in (*MODES, "denied") or not topic:
            return self._answer(400, "hub.mode (subscribe, unsubscribe, denied) and hub.topic "
                                     "are required", count="verify.bad-request")  # fmt: skip
        try:
            sub = await self.get(f"{host}/{token}")
            if sub is None or sub.topic != topic:
                return self._answer(404, count=f"{mode}.unknown")
            if mode == "denied":
                return await self._denied(sub, q.get("hub.reason", ""))
            challenge = q.get("hub.challenge", "")
            if not challenge:
                return self._answer(404, count=f"{mode}.no-challenge")
            return await self._verify(sub, mode, challenge, q.get("hub.lease_seconds"))
        except (aioredis.RedisError, OSError) as exc:
            log.exception("websub state unavailable")
            return self._answer(503, f"Redis unavailable: {exc!r}")

    async def _verify(
        self, sub: Subscription, mode: str, challenge: str, lease_raw: str | None
    ) -> web.Response:
        ikey = self.intent_key(sub.host, sub.token, mode)
        pending = await self.redis.get(ikey)
        pending_ok = pending is not None and _s(pending) == sub.topic
        if mode == "unsubscribe":
            # Sec. 5.3.1: only a pending unsubscription we asked for
            if not pending_ok:
                return self._answer(404, count="unsubscribe.not-pending")
            await self.redis.delete(ikey)
            await self.redis.zrem(self.leases_key, sub.ref)
            await self._set(sub.host, sub.token, self.grace_s, state="unsubscribed",
                            lease_until=None)  # fmt: skip
            log.info("websub: unsubscribed from %s (%s)", sub.topic, sub.ref)
            return self._answer(200, challenge, count="unsubscribe.verified")
        # subscribe: a pending subscription, or the hub re-confirming the active one (Sec. 5)
        if not (pending_ok or sub.state == "active"):
            return self._answer(404, count="subscribe.not-pending")
        lease = _positive_int(lease_raw)
        if lease is None:  # Sec. 5.3: hubs MUST supply it; we do not accept a lease we
            return self._answer(404, count="subscribe.no-lease")  # cannot renew in time
        lease = min(lease, MAX_LEASE_S)  # renewing before the hub's lease ends is harmless
        until = time.time() + lease
        await self.redis.delete(ikey)
        await self._set(sub.host, sub.token, lease + self.grace_s, state="active",
                        lease_until=repr(until), reason="")  # fmt: skip
        await self.redis.zadd(self.leases_key, {sub.ref: until})
        if sub.renews:
            await self._supersede(sub.renews, sub.ref)
        log.info("websub: subscribed to %s for %d s (%s)", sub.topic, lease, sub.ref)
        return self._answer(200, challenge, count="subscribe.verified")

    async def _supersede(self, old_ref: str, new_ref: str) -> None:
        old = await self.get(old_ref)
        if old is None or old.state != "active":
            return
        await self.redis.zrem(self.leases_key, old.ref)
        await self._set(old.host, old.token, self._ttl_after(old.lease_until),
                        state="superseded", reason=f"renewed by {new_ref}")  # fmt: skip

    async def _denied(self, sub: Subscription, reason: str) -> web.Response:
        await self.redis.delete(self.intent_key(sub.host, sub.token, "subscribe"))
        await self.redis.zrem(self.leases_key, sub.ref)
        await self._set(sub.host, sub.token, self.grace_s, state="denied",
                        reason=reason[:500] or "denied by the hub")  # fmt: skip
        log.warning("websub: hub denied %s (%s): %s", sub.topic, sub.ref, reason or "-")
        return self._answer(200, count="denied")

    async def handle_post(self, request: web.Request) -> web.Response:
        """Content distribution (Sec. 7), authenticated when the subscription has a secret
        (Sec. 7.1)."""
        host, token = request.match_info["host"], request.match_info["token"]
        # the subscription and the announced length first: a body nobody subscribed to, or
        # too large, is refused before a byte of it is read (the connection is closed)
        length = request.content_length
        if length is not None and length > MAX_BODY_BYTES:
            return self._unread(413, f"body larger than {MAX_BODY_BYTES} bytes")
        try:
            sub = await self.get(f"{host}/{token}")
        except (aioredis.RedisError, OSError) as exc:
            log.exception("websub state unavailable")
            return self._unread(503, f"Redis unavailable: {exc!r}")
        if sub is None:
            return self._unread(404, count="rejected.unknown-callback")
        if sub.state in ("unsubscribed", "denied", "superseded", "failed"):
            self._reject(sub, f"subscription-{sub.state}")
            return self._unread(410)
        if sub.state == "pending" or (sub.lease_until is not None and
                                      sub.lease_until < time.time()):  # fmt: skip
            # not (or no longer) verified: ignore, as for a bad signature
            self._reject(sub, "not-active")
            return self._unread(202)
        try:
            body = await request.read()  # at most client_max_size (MAX_BODY_BYTES)
        except web.HTTPRequestEntityTooLarge:
            return self._unread(413, f"body larger than {MAX_BODY_BYTES} bytes")
        if sub.secret:
            problem = signature_problem(sub.secret, body, request.headers.get("X-Hub-Signature"))
            if problem is not None:
                # Sec. 7.1.2: MUST locally ignore the message; MAY still answer 2xx (the same
                # answer as a valid delivery, so a forger learns nothing)
                self._reject(sub, problem, request)
                return self._answer(202)
        # a delivery's id is its content's digest: a replayed (or re-sent) delivery is the
        # same ping, which the worker's dedup window drops; an empty body (a "light ping")
        # carries nothing to tell two apart, so each one counts
        digest = hashlib.blake2b(sub.ref.encode() + b"\0" + body, digest_size=16)
        ping_id = f"websub:{digest.hexdigest()}" if body else new_ping_id("websub")
        ping = Ping(url=sub.topic, source="websub", received_at=time.time(), id=ping_id)
        try:
            if self.producer is None:
                raise RuntimeError("no ping producer")
            await self.producer.send_many([ping])
        except Exception as exc:  # Kafka unavailable: the hub retries (Sec. 7)
            log.exception("websub: publishing the ping failed")
            return self._answer(503, f"Kafka unavailable: {exc!r}")
        self.stats["pings"] += 1
        return self._answer(202)

    def _unread(self, status: int, text: str = "", *, count: str | None = None) -> web.Response:
        """An answer before (or instead of) reading the body: the connection is closed
        after it, so the rest of the body is never read."""
        resp = self._answer(status, text, count=count)
        resp.force_close()
        return resp

    def _reject(self, sub: Subscription, reason: str, request: web.Request | None = None) -> None:
        self.stats[f"rejected.{reason}"] += 1
        peer = request.remote if request is not None else "-"
        log.warning("websub: ignored a content distribution for %s (%s) from %s: %s",
                    sub.topic, sub.ref, peer, reason)  # fmt: skip


def _positive_int(raw: str | None) -> int | None:
    if raw is None or not _LEASE_RE.match(raw.strip()):
        return None
    v = int(raw.strip())
    return v if v > 0 else None


async def start_subscriber(
    subscriber: WebSubSubscriber, bind: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, int]:
    """Serve ``subscriber.app()`` on ``bind:port``; returns the runner (``cleanup()`` stops
    it) and the bound port.  Sets ``subscriber.public_url`` to ``http://bind:port`` when
    it is not set."""
    runner = web.AppRunner(subscriber.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, bind, port)
    await site.start()
    bound = int(runner.addresses[0][1])
    if subscriber.public_url is None:
        subscriber.public_url = f"http://{bind}:{bound}"
    return runner, bound


async def renew_loop(
    subscriber: WebSubSubscriber, stop: asyncio.Event, every_s: float = 60.0,
    margin_s: float = 3600.0,
) -> None:  # fmt: skip
    """Call :meth:`WebSubSubscriber.renew_due` every ``every_s`` until ``stop`` is set."""
    while not stop.is_set():
        try:
            for new in await subscriber.renew_due(margin_s):
                log.info("websub: renewing %s as %s", new.renews, new.ref)
        except Exception:
            log.exception("websub renewal round failed")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
