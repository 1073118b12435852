"""The WebSub protocol's pieces that hold no state: the subscription request (Sec. 5.1),
content signatures (Sec. 7.1), the protocol's limits and the :class:`Subscription` record.

W3C Recommendation, https://www.w3.org/TR/websub/.  Split out of
:mod:`streams.edges.websub` (the subscriber, its callback endpoint and its
state in Redis stay there), which re-exports every name.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from streams.errors import RecrawlError
from streams.events.records import check_url

__all__ = [
    "ANSWER_BYTES",
    "MAX_BODY_BYTES",
    "MAX_LEASE_S",
    "MAX_SECRET_BYTES",
    "MODES",
    "SIGNATURE_METHODS",
    "TOKEN_RE",
    "Subscription",
    "WebSubError",
    "sign",
    "signature_problem",
    "subscribe",
    "unsubscribe",
]

#: Sec. 7.1.1, recognized algorithm names -> hash constructors.
SIGNATURE_METHODS: dict[str, Callable[..., Any]] = {
    "sha1": hashlib.sha1,
    "sha256": hashlib.sha256,
    "sha384": hashlib.sha384,
    "sha512": hashlib.sha512,
}
#: Sec. 5.1: ``hub.secret`` "MUST be less than 200 bytes in length".
MAX_SECRET_BYTES = 199
MAX_BODY_BYTES = 10 * 1024 * 1024
#: how much of a hub's answer to a (un)subscription request is read
ANSWER_BYTES = 8192
#: the longest lease recorded (s): a hub's longer lease is kept as this one, so the
#: subscription is renewed in time instead of waiting for a date that overflows the store
MAX_LEASE_S = 366 * 86_400
_LEASE_RE = re.compile(r"^[0-9]{1,18}$")  # ASCII digits only ("²".isdigit() is True)
MODES = ("subscribe", "unsubscribe")
TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{22,128}$")
_HEX_RE = re.compile(r"^[0-9a-fA-F]+$")


class WebSubError(RecrawlError):
    """A subscription request the hub did not accept (or that could not be sent)."""


# ---------------------------------------------------------------- signatures (Sec. 7.1)
def sign(secret: str | bytes, body: bytes, method: str = "sha256") -> str:
    """The ``X-Hub-Signature`` value a hub sends for ``body`` (Sec. 7.1):
    ``method=<hex HMAC(secret, body)>``."""
    key = secret.encode() if isinstance(secret, str) else secret
    return f"{method}={hmac.new(key, body, SIGNATURE_METHODS[method]).hexdigest()}"


def signature_problem(secret: str | bytes, body: bytes, header: str | None) -> str | None:
    """None when ``header`` is a valid ``X-Hub-Signature`` of ``body`` under ``secret``,
    else why not: ``missing-signature``, ``malformed-signature``, ``unknown-method``,
    ``bad-signature``.  The digest is recomputed with the method the hub states (Sec.
    7.1.2, 8.3) and compared in constant time."""
    if header is None or not header.strip():
        return "missing-signature"
    method, sep, given = header.strip().partition("=")
    method = method.strip().lower()
    given = given.strip()
    if not sep or not given or not _HEX_RE.match(given):
        return "malformed-signature"
    ctor = SIGNATURE_METHODS.get(method)
    if ctor is None:
        return "unknown-method"
    key = secret.encode() if isinstance(secret, str) else secret
    want = hmac.new(key, body, ctor).hexdigest()
    if not hmac.compare_digest(want, given.lower()):
        return "bad-signature"
    return None


# ---------------------------------------------------------------- the request (Sec. 5.1)
async def subscribe(
    hub: str,
    topic: str,
    callback: str,
    secret: str | None = None,
    lease_seconds: int | None = None,
    *,
    mode: str = "subscribe",
    session: aiohttp.ClientSession | None = None,
    timeout_s: float = 30.0,
) -> tuple[int, str]:
    """Send a (un)subscription request to ``hub`` (Sec. 5.1): a form-encoded UTF-8 POST
    with ``hub.callback``, ``hub.mode``, ``hub.topic`` and, for ``subscribe``, the optional
    ``hub.lease_seconds`` and ``hub.secret``.  Returns ``(status, body)``; the hub answers
    202 when it will verify the intent (Sec. 5.1.2) and may redirect with 307/308 (which
    is followed).  Raises :class:`WebSubError` for a bad argument or a transport error.
    """
    if mode not in MODES:
        raise WebSubError(f"mode must be subscribe or unsubscribe, not {mode!r}")
    for name, url in (("hub", hub), ("topic", topic), ("callback", callback)):
        try:
            check_url(url)
        except ValueError as exc:
            raise WebSubError(f"bad {name} URL {url[:100]!r}: {exc}") from None
    form = {"hub.callback": callback, "hub.mode": mode, "hub.topic": topic}
    if mode == "subscribe":
        if lease_seconds is not None:
            if lease_seconds <= 0:
                raise WebSubError("hub.lease_seconds must be a positive integer")
            form["hub.lease_seconds"] = str(int(lease_seconds))
        if secret is not None:
            if not 0 < len(secret.encode()) <= MAX_SECRET_BYTES:
                raise WebSubError(f"hub.secret must be 1-{MAX_SECRET_BYTES} bytes")
            form["hub.secret"] = secret
    own = session is None
    http = session or aiohttp.ClientSession()
    try:
        async with http.post(
            hub, data=form, timeout=aiohttp.ClientTimeout(total=timeout_s), max_redirects=5
        ) as r:
            # the first 8 KiB of the hub's answer (kept for the error message): a hub
            # answering a huge body costs no more (the rest is never read)
            head = bytearray()
            async for chunk in r.content.iter_any():
                head += chunk
                if len(head) >= ANSWER_BYTES:
                    break
            return r.status, bytes(head[:ANSWER_BYTES]).decode("utf-8", "replace")[:2000]
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise WebSubError(f"{mode} request to {hub} failed: {exc!r}") from exc
    finally:
        if own:
            await http.close()


async def unsubscribe(
    hub: str, topic: str, callback: str, *, session: aiohttp.ClientSession | None = None
) -> tuple[int, str]:
    """Send an unsubscription request (Sec. 5.1, ``hub.mode=unsubscribe``)."""
    return await subscribe(hub, topic, callback, mode="unsubscribe", session=session)


# ---------------------------------------------------------------- subscriptions in Redis
@dataclass(frozen=True)
class Subscription:
    host: str
    token: str
    hub: str
    topic: str
    callback: str
    secret: str
    state: str
    lease_s: int | None
    lease_until: float | None
    created_at: float
    reason: str = ""
    renews: str = ""
    renewed_by: str = ""

    @property
    def ref(self) -> str:
        """``<host>/<token>``: names the subscription (and ends its callback URL)."""
        return f"{self.host}/{self.token}"

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["ref"] = self.ref
        out["secret"] = "***" if self.secret else ""
        return out


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)
