"""An IndexNow receiver (https://www.indexnow.org/documentation), publishing pings.

``GET /indexnow?url=URL&key=KEY[&keyLocation=LOC]`` submits one URL;
``POST /indexnow`` with JSON ``{"host", "key", "keyLocation"?, "urlList"}`` up to 10,000.
Answers as the protocol says:

=====  ==========================================================================
200    submitted: the key is verified for the host, the pings are published
202    received; the key is not known yet and is being verified (key file fetched);
       the pings are published only if the verification succeeds
400    bad format (not JSON, missing or mistyped fields, empty or over 10,000 URLs,
       a URL that is not an absolute http(s) URL)
403    key not valid (not registered and no verification possible, key file missing or
       not containing the key; remembered for ``failed_ttl_s`` for that key location)
413    body larger than ``max_body_bytes`` (4 MiB): refused on its ``Content-Length``
       before reading, or once the streamed read passes the cap
422    URLs that do not belong to the host, or outside the key file's folder, or a key
       not matching the schema (8-128 characters of a-z, A-Z, 0-9, '-')
429    too many requests for this host (token bucket per host, shared by every
       receiver process through Redis: :class:`RedisTokenBucket`), or too many URLs
       already waiting for their key's verification from this client or for this host
       (``max_pending_urls_per_client``, ``max_pending_urls`` in all)
503    Redis unreachable (key registry or rate limit)
=====  ==========================================================================

The rate limit is a token bucket per host in Redis (``<prefix>:indexnow:{<host>}:rate``,
one Lua script per request, Redis's clock), so receivers sharing a Redis and a key prefix
share the limit: N receivers behind a load balancer still let a host submit
``rate_per_s`` requests per second, not N times that.  Requests whose key is not verified
for the host (made up, or being verified) take tokens of a separate bucket of that host
(``...:rate:unverified``), after the key is looked up: nobody can use up a key owner's
limit without the key.

Keys are registered per host in Redis (``recrawl indexnow add-key HOST KEY``), or learnt
by fetching the key file (``keyLocation``, else ``https://HOST/KEY.txt``) through the
fetcher's egress policy.  An unverified key publishes nothing.  A registered key is
re-checked at the location that verified it, never at a submission's ``keyLocation``
(keys are public: anyone may send one with a bogus location), and a failed
verification is remembered per key location, so it cannot lock out the key's real file.

Repeats are merged: a URL published for a host is not published again within
``dedup_window_s`` (``<prefix>:indexnow:{<host>}:seen:<digest of the URL>``, expiring
after the window, shared by the receivers).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web

from streams.edges.pings import Ping, PingProducer, new_ping_id
from streams.edges.ratelimit import RedisTokenBucket
from streams.errors import RecrawlError
from streams.events.records import check_url, host_of
from streams.events.urls import canonical_host, in_scope
from streams.fetcher.client import SafeClient
from streams.store.redis_conn import AsyncRedis

__all__ = [
    "KEY_RE",
    "MAX_BODY_BYTES",
    "MAX_URLS",
    "IndexNowReceiver",
    "KeyRegistry",
    "Rejection",
    "Submission",
    "key_scope",
    "start_receiver",
    "validate_submission",
]

log = logging.getLogger(__name__)

KEY_RE = re.compile(r"^[a-zA-Z0-9-]{8,128}$")
MAX_URLS = 10_000
#: 10,000 URLs of 400 bytes on average, plus JSON; a client with longer URLs sends
#: several smaller lists.  A larger body is refused (413) before it is read or parsed.
MAX_BODY_BYTES = 4 * 1024 * 1024


class KeyRegistry:
    """Verified IndexNow keys per host, in Redis.

    ``<prefix>:indexnow:{<host>}:keys`` is a hash ``key -> scope`` (a URL prefix the key
    may submit, ``""`` for the whole host); ``...:keys:at`` holds, for keys learnt from a
    key file, ``<checked at>|<key file URL>`` (a key added by the operator has none and is
    never re-checked); ``...:failed:<key>:<location digest>`` marks a failed verification
    of the key at one location for a while (another location may still verify it).
    """

    def __init__(self, client: AsyncRedis, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix

    def _keys(self, host: str) -> str:
        return f"{self.prefix}:indexnow:{{{host.lower()}}}:keys"

    def _failed(self, host: str, key: str, location: str = "") -> str:
        where = hashlib.blake2b(location.encode(), digest_size=8).hexdigest()
        return f"{self.prefix}:indexnow:{{{host.lower()}}}:failed:{key}:{where}"

    async def add(self, host: str, key: str, scope: str = "",
                  verified_at: float | None = None, location: str = "") -> None:
        """Register ``key`` for ``host``; ``verified_at``: when its key file (at
        ``location``, '' = the default ones) was read; then it is re-checked once that is
        older than the receiver's ``key_recheck_s``."""
        if not KEY_RE.match(key):
            raise ValueError("an IndexNow key is 8-128 characters of a-z, A-Z, 0-9 and '-'")
        pipe = self.redis.pipeline(transaction=False)  # MULTI: another loop on a cluster
        pipe.hset(self._keys(host), key, scope)
        if verified_at is None:
            pipe.hdel(f"{self._keys(host)}:at", key)
        else:
            pipe.hset(f"{self._keys(host)}:at", key, f"{float(verified_at)!r}|{location}")
        pipe.delete(self._failed(host, key, location))
        await pipe.execute()

    async def remove(self, host: str, key: str) -> bool:
        pipe = self.redis.pipeline(transaction=False)  # MULTI: another loop on a cluster
        pipe.hdel(self._keys(host), key)
        pipe.hdel(f"{self._keys(host)}:at", key)
        return bool((await pipe.execute())[0])

    async def scope(self, host: str, key: str) -> str | None:
        return (await self.lookup(host, key))[0]

    async def lookup(self, host: str, key: str) -> tuple[str | None, float | None, str]:
        """``(scope, verified_at, key file URL)``: scope None if the key is not registered;
        verified_at None for a key the operator added (never re-checked)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.hget(self._keys(host), key)
        pipe.hget(f"{self._keys(host)}:at", key)
        v, at = await pipe.execute()
        if v is None:
            return None, None, ""
        checked, _, location = (at.decode() if isinstance(at, bytes) else str(at or "")
                                ).partition("|")
        return (v.decode() if isinstance(v, bytes) else str(v)), (
            float(checked) if checked else None), location

    async def mark_failed(self, host: str, key: str, ttl_s: float, location: str = "") -> None:
        """The key's file at ``location`` ('' = the default ones) did not hold it."""
        await self.redis.set(self._failed(host, key, location), "1",
                             px=max(1, int(ttl_s * 1000)))

    async def failed(self, host: str, key: str, location: str = "") -> bool:
        return bool(await self.redis.exists(self._failed(host, key, location)))


class Rejection(RecrawlError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Submission:
    host: str
    key: str
    key_location: str | None
    urls: tuple[str, ...]


def key_scope(key_location: str | None) -> str:
    """The URLs a key file at ``key_location`` may submit: those under its folder, with
    the same scheme, host and port (the protocol: a key at ``http://example.com/catalog/
    key.txt`` covers ``http://example.com/catalog/...`` only), as a canonical URL prefix
    ending in ``/``; ``''`` (the whole host) without a key location."""
    if not key_location:
        return ""
    loc = check_url(key_location)
    return loc[: loc.rindex("/") + 1]


def validate_submission(
    host: Any, key: Any, key_location: Any, url_list: Any
) -> Submission:
    """Check the protocol's rules; raises :class:`Rejection` with the status to answer.
    URLs are compared and published in their canonical form (:mod:`streams.events.urls`)."""
    if not isinstance(host, str) or not host.strip():
        raise Rejection(400, "'host' must be a non-empty string")
    if not isinstance(key, str) or not key:
        raise Rejection(400, "'key' must be a non-empty string")
    if key_location is not None and not isinstance(key_location, str):
        raise Rejection(400, "'keyLocation' must be a string")
    if not isinstance(url_list, list) or not url_list:
        raise Rejection(400, "'urlList' must be a non-empty list")
    if len(url_list) > MAX_URLS:
        raise Rejection(400, f"'urlList' has {len(url_list)} URLs; at most {MAX_URLS}")
    if not all(isinstance(u, str) for u in url_list):
        raise Rejection(400, "'urlList' must hold strings")
    urls = []
    for u in url_list:
        try:
            urls.append(check_url(u))
        except ValueError as exc:
            raise Rejection(400, f"bad URL {u[:100]!r}: {exc}") from None
    try:
        host = canonical_host(host)
    except ValueError as exc:
        raise Rejection(400, f"'host': {exc}") from None
    if not KEY_RE.match(key):
        raise Rejection(422, "the key does not match the schema (8-128 of a-z, A-Z, 0-9, '-')")
    foreign = [u for u in urls if host_of(u) != host]
    if foreign:
        raise Rejection(422, f"{len(foreign)} URL(s) do not belong to host {host!r}")
    if key_location:
        try:
            key_location = check_url(key_location)
        except ValueError as exc:
            raise Rejection(422, f"bad keyLocation: {exc}") from None
        if host_of(key_location) != host:
            raise Rejection(422, "keyLocation is not on the host")
        scope = key_scope(key_location)
        outside = [u for u in urls if not in_scope(u, scope)]
        if outside:
            raise Rejection(422, f"{len(outside)} URL(s) are outside the key file's folder "
                                 f"{scope} (same scheme, host, port and folder)")
    return Submission(host, key, key_location or None, tuple(dict.fromkeys(urls)))


#: Marks the URLs of a host published within the dedup window: one ``SET NX PX`` per URL
#: (KEYS, all of one host: one hash slot); returns the 1-based indexes of the URLs not
#: marked before (those to publish).
_FRESH = """
local fresh = {}
for i = 1, #KEYS do
  if redis.call('SET', KEYS[i], '1', 'NX', 'PX', ARGV[1]) then fresh[#fresh + 1] = i end
end
return fresh
"""


class _TooLarge(RecrawlError):
    pass


def _parse_body(raw: bytes) -> Submission:
    """The POST body as a checked submission (run in a worker thread: a 4 MiB body of
    10,000 URLs costs tens of milliseconds of parsing, not spent on the event loop)."""
    try:
        body = json.loads(raw)
    except RecursionError:  # e.g. 100,000 nested '[': the parser gives up
        raise Rejection(400, "body is JSON nested too deeply") from None
    except ValueError:
        raise Rejection(400, "body is not JSON") from None
    if not isinstance(body, dict):
        raise Rejection(400, "body must be a JSON object")
    return validate_submission(
        body.get("host"), body.get("key"), body.get("keyLocation"), body.get("urlList"))


class IndexNowReceiver:
    """The HTTP endpoint; ``app()`` gives the aiohttp application."""

    def __init__(
        self,
        producer: PingProducer,
        registry: KeyRegistry,
        *,
        verifier: SafeClient | None = None,
        rate_per_s: float = 20.0,
        burst: float = 40.0,
        failed_ttl_s: float = 600.0,
        max_pending_urls: int = 100_000,
        max_pending_urls_per_client: int = 20_000,
        key_recheck_s: float = 86_400.0,
        dedup_window_s: float = 60.0,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.producer = producer
        #: a key learnt from a key file is fetched again (at the location that verified
        #: it) once its check is this old (a site that removes the file revokes the key);
        #: until then its submissions are held as for a new key (202)
        self.key_recheck_s = key_recheck_s
        #: URLs held while their key is being verified, over all requests: beyond this a
        #: submission with a key not yet verified is answered 429 (so unauthenticated
        #: requests naming new hosts cannot fill the memory while a key server is slow)
        self.max_pending_urls = max_pending_urls
        #: the same, per client address and per host: one client (or the requests naming
        #: one host) cannot take the room of every other host
        self.max_pending_urls_per_client = max_pending_urls_per_client
        self.pending_urls = 0
        self.pending_by_client: Counter[str] = Counter()
        self.pending_by_host: Counter[str] = Counter()
        #: a URL is published at most once per host and window (0: every submission)
        self.dedup_window_s = dedup_window_s
        self.max_body_bytes = max_body_bytes
        self.registry = registry
        self.verifier = verifier
        #: per-host limit shared through Redis by every receiver with the same prefix
        self.limiter = RedisTokenBucket(registry.redis, registry.prefix, rate_per_s, burst)
        self._fresh = registry.redis.register_script(_FRESH)
        self.failed_ttl_s = failed_ttl_s
        self.stats: Counter[str] = Counter()
        self._verifying: dict[tuple[str, str, str], asyncio.Task[bool]] = {}
        self._background: set[asyncio.Task[None]] = set()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_get("/indexnow", self.handle_get)
        app.router.add_post("/indexnow", self.handle_post)
        app.router.add_get("/indexnow/stats", self.handle_stats)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _cleanup(self, _app: web.Application) -> None:
        for t in list(self._background):
            t.cancel()
        for t in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    async def handle_stats(self, request: web.Request) -> web.Response:
        return web.json_response(dict(self.stats))

    async def handle_get(self, request: web.Request) -> web.Response:
        url = request.query.get("url")
        key = request.query.get("key")
        if not url or not key:
            return self._answer(400, "'url' and 'key' query parameters are required")
        try:
            sub = validate_submission(host_of(url), key, request.query.get("keyLocation"), [url])
        except Rejection as r:
            return self._answer(r.status, r.message)
        return await self._submit(sub, _client_of(request))

    async def handle_post(self, request: web.Request) -> web.Response:
        cap = self.max_body_bytes
        length = request.content_length
        if length is not None and length > cap:  # refused before a byte of it is read
            return self._too_large(length)
        try:
            raw = await _read_capped(request, cap)
        except _TooLarge:
            return self._too_large(None)
        try:
            sub = await asyncio.to_thread(_parse_body, raw)
        except Rejection as r:
            return self._answer(r.status, r.message)
        return await self._submit(sub, _client_of(request))

    def _too_large(self, length: int | None) -> web.Response:
        size = "" if length is None else f" ({length} bytes)"
        resp = self._answer(413, f"body larger than {self.max_body_bytes} bytes{size}")
        resp.force_close()  # the rest of the body is not read: the connection ends
        return resp

    def _answer(self, status: int, message: str) -> web.Response:
        self.stats[str(status)] += 1
        return web.json_response({"status": status, "message": message}, status=status)

    async def _submit(self, sub: Submission, client: str) -> web.Response:
        try:
            scope, checked_at, location = await self.registry.lookup(sub.host, sub.key)
            # a failed verification counts for the location that failed (the submission's,
            # else the default ones): a bogus keyLocation cannot lock out the real file,
            # nor a registered key
            if scope is None and await self.registry.failed(sub.host, sub.key,
                                                            sub.key_location or ""):
                return self._answer(403, "key verification failed recently")
            # a registered key takes the owner's bucket even when its re-check is due, so
            # requests with made-up keys (the "unverified" bucket) cannot answer it 429
            bucket = "" if scope is not None else "unverified"
            if not await self.limiter.allow(sub.host, bucket=bucket):
                return self._answer(429, f"too many requests for {sub.host}")
        except Exception as exc:  # Redis unreachable: tell the client to retry later
            log.exception("key registry or rate limit failed")
            return self._answer(503, f"Redis unavailable: {exc!r}")
        if scope is not None:
            if scope and not all(in_scope(u, scope) for u in sub.urls):
                return self._answer(422, "URLs outside the key's folder")
            due = (checked_at is not None and self.verifier is not None
                   and time.time() - checked_at > self.key_recheck_s)
            if not due:
                try:
                    await self._publish(sub)
                except Exception as exc:  # Kafka unreachable: the client retries later
                    log.exception("publishing IndexNow pings failed")
                    return self._answer(503, f"Kafka unavailable: {type(exc).__name__}")
                return self._answer(200, f"{len(sub.urls)} URL(s) submitted")
            # the key file is read again, where it was verified (never at the submission's
            # keyLocation), before anything is published
            self.stats["keys_rechecked"] += 1
            return self._hold(replace(sub, key_location=location or None), client,
                              recheck=True, asked=sub.key_location)
        if self.verifier is None:
            return self._answer(403, "key not registered for this host")
        return self._hold(sub, client, recheck=False)

    def _hold(self, sub: Submission, client: str, *, recheck: bool,
              asked: str | None = None) -> web.Response:
        """Hold the submission while its key file is read (``asked``: the submission's own
        keyLocation when ``sub`` names the one that verified the key)."""
        n = len(sub.urls)
        per = self.max_pending_urls_per_client
        if (self.pending_urls + n > self.max_pending_urls
                or self.pending_by_client[client] + n > per
                or self.pending_by_host[sub.host] + n > per):
            return self._answer(429, "too many URLs awaiting key verification; retry later")
        self.pending_urls += n
        self.pending_by_client[client] += n
        self.pending_by_host[sub.host] += n
        task = self._background_task(self._verify_then_publish(sub, client, recheck, asked))
        del task
        return self._answer(202, "received; key validation pending")

    def _background_task(self, coro: Any) -> asyncio.Task[None]:
        t: asyncio.Task[None] = asyncio.create_task(coro)
        self._background.add(t)
        t.add_done_callback(self._background.discard)
        return t

    def _seen_key(self, host: str, url: str) -> str:
        digest = hashlib.blake2b(url.encode(), digest_size=12).hexdigest()
        return f"{self.registry.prefix}:indexnow:{{{host}}}:seen:{digest}"

    async def _publish(self, sub: Submission) -> None:
        urls: list[str] = list(sub.urls)
        keys: list[str] = []
        if self.dedup_window_s > 0:
            keys = [self._seen_key(sub.host, u) for u in urls]
            fresh = await self._fresh(keys=keys, args=[max(1, int(self.dedup_window_s * 1000))])
            marked = [keys[int(i) - 1] for i in fresh]
            urls = [urls[int(i) - 1] for i in fresh]
            self.stats["repeats_merged"] += len(sub.urls) - len(urls)
            keys = marked
        now = time.time()
        try:
            for u in urls:
                await self.producer.send(
                    Ping(url=u, source="indexnow", received_at=now, id=new_ping_id("indexnow"))
                )
            await self.producer.flush()
        except BaseException:
            if keys:  # not published: a retry of the client must not be merged away
                with contextlib.suppress(Exception):
                    await self.registry.redis.delete(*keys)
            raise
        self.stats["pings"] += len(urls)

    async def _verify_then_publish(self, sub: Submission, client: str, recheck: bool,
                                   asked: str | None) -> None:
        try:
            await self._verify_then_publish_held(sub, recheck, asked)
        finally:
            n = len(sub.urls)
            self.pending_urls -= n
            for counter, name in ((self.pending_by_client, client),
                                  (self.pending_by_host, sub.host)):
                counter[name] -= n
                if counter[name] <= 0:
                    del counter[name]

    async def _verify_then_publish_held(self, sub: Submission, recheck: bool,
                                        asked: str | None) -> None:
        name = (sub.host, sub.key, sub.key_location or "")
        task = self._verifying.get(name)
        if task is None:
            task = asyncio.create_task(self._verify(sub, recheck, asked))
            self._verifying[name] = task
            task.add_done_callback(lambda _t: self._verifying.pop(name, None))
        try:
            ok = await task
        except Exception:
            log.exception("key verification crashed")
            ok = False
        if ok:
            try:
                await self._publish(sub)
            except Exception:  # Kafka unreachable: the 202 promised nothing more
                log.exception("publishing verified IndexNow pings failed")
                self.stats["publish_failed_urls"] += len(sub.urls)
        else:
            self.stats["unverified_urls_dropped"] += len(sub.urls)

    async def _verify(self, sub: Submission, recheck: bool = False,
                      asked: str | None = None) -> bool:
        """Fetch the key file (``sub.key_location``, else the host's default ones).  A new
        key is registered with the scope of the location that holds it; a re-check
        (``recheck``: the location that verified the key) that fails revokes the key.  A
        failure is remembered for the location read and the one the submission named
        (``asked``)."""
        assert self.verifier is not None
        locations = (
            [sub.key_location]
            if sub.key_location
            else [f"https://{sub.host}/{sub.key}.txt", f"http://{sub.host}/{sub.key}.txt"]
        )
        for loc in locations:
            result, _ = await self.verifier.get(loc, max_body_bytes=4096, keep_body=True)
            if result.ok and result.body is not None:
                first = result.body.decode("utf-8", "replace").strip().splitlines()[:1]
                if first and first[0].strip() == sub.key:
                    scope = key_scope(sub.key_location)
                    if not recheck:
                        registered, _, _ = await self.registry.lookup(sub.host, sub.key)
                        if registered is not None:
                            # registered meanwhile (another location, or the operator):
                            # a new location does not replace the one that verified it
                            return not registered or all(in_scope(u, registered)
                                                         for u in sub.urls)
                    await self.registry.add(sub.host, sub.key, scope, verified_at=time.time(),
                                            location=sub.key_location or "")
                    self.stats["keys_verified"] += 1
                    return True
        if recheck:  # the file that verified the key no longer holds it: revoked
            await self.registry.remove(sub.host, sub.key)
            self.stats["keys_revoked"] += 1
        for where in {sub.key_location or "", (asked if recheck else sub.key_location) or ""}:
            await self.registry.mark_failed(sub.host, sub.key, self.failed_ttl_s, where)
        self.stats["keys_failed"] += 1
        return False


def _client_of(request: web.Request) -> str:
    return request.remote or "-"


async def _read_capped(request: web.Request, cap: int) -> bytes:
    """The body, read as it comes and abandoned past ``cap`` bytes."""
    out = bytearray()
    async for chunk in request.content.iter_any():
        out += chunk
        if len(out) > cap:
            raise _TooLarge
    return bytes(out)


async def start_receiver(
    receiver: IndexNowReceiver, bind: str = "127.0.0.1", port: int = 0
) -> tuple[web.AppRunner, int]:
    """Serve ``receiver`` on ``bind:port``; returns the runner (``cleanup()`` stops it) and
    the bound port."""
    runner = web.AppRunner(receiver.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, bind, port)
    await site.start()
    return runner, int(runner.addresses[0][1])
