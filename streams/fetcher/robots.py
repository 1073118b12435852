"""robots.txt (RFC 9309), fetched through the fetcher's own client and cached per origin.

One copy per origin (scheme, host, port: RFC 9309 Sec. 2.3 "the rules MUST be valid only
for the host, protocol and port"), fetched from ``/robots.txt`` through
:class:`~streams.fetcher.client.SafeClient` (the same egress policy, redirects and time-outs
as every fetch; at most 5 redirects, Sec. 2.3.1.2), parsed with protego
(https://github.com/scrapy/protego, the parser Scrapy uses) for the fetcher's product token
(Sec. 2.2.1).  What an answer means:

=====================  =================================================================
2xx                    the rules; the first 500 KiB are parsed (Sec. 2.5)
4xx (but 429)          "unavailable": every URL is allowed (Sec. 2.3.1.3)
5xx, 429, no answer    "unreachable": every URL is disallowed (Sec. 2.3.1.4), or the last
                       good copy is used while there is one (Sec. 2.4); asked again
                       after ``error_ttl_s``.  429 is a request to slow down, not a
                       missing file, so it counts as unreachable (as Google's crawler)
=====================  =================================================================

A copy is kept for ``max-age`` of its ``Cache-Control`` if given, never more than 24 hours
(Sec. 2.4: "crawlers SHOULD NOT use the cached version for more than 24 hours") and never
less than ``min_ttl_s`` (a ``max-age=0`` would cost the host one robots.txt per page).

Each copy has a ``digest`` naming its rules (the body's SHA-256, or the status for an
unavailable one); the fetcher announces a changed digest on ``recrawl.hosts`` so that the
worker orders the pages an older copy disallowed again (:mod:`streams.fetcher.service`).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from protego import Protego

from streams.fetcher.client import SafeClient

__all__ = ["RobotsCache", "RobotsPolicy", "RobotsRules", "origin_of", "product_token", "ttl_of"]

#: RFC 9309 Sec. 2.4
MAX_TTL_S = 24 * 3600.0
#: RFC 9309 Sec. 2.5: a parsing limit of at least 500 kibibytes
MAX_BYTES = 500 * 1024

_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)\"?\s*(?:,|$)", re.IGNORECASE)


def product_token(user_agent: str) -> str:
    """The product token of a User-Agent (``recrawl-fetcher/0.1 (+url)`` ->
    ``recrawl-fetcher``): what robots.txt ``user-agent`` lines match (RFC 9309 Sec. 2.2.1)."""
    return user_agent.split("/", 1)[0].split()[0] if user_agent.strip() else "*"


def origin_of(url: str) -> str:
    """``scheme://host:port`` of a URL (the port always written)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme.lower()}://{host}:{port}"


def ttl_of(headers: Mapping[str, str], min_ttl_s: float, max_ttl_s: float = MAX_TTL_S) -> float:
    """How long to keep a robots.txt: its ``Cache-Control: max-age`` (RFC 9111 Sec.
    5.2.2.1) within ``[min_ttl_s, max_ttl_s]``; ``max_ttl_s`` (24 h, RFC 9309 Sec. 2.4)
    without one."""
    cc = headers.get("Cache-Control") or ""
    m = _MAX_AGE.search(cc)
    if m is None:
        return max_ttl_s
    return max(min_ttl_s, min(max_ttl_s, float(m.group(1))))


@dataclass(frozen=True)
class RobotsPolicy:
    #: a copy is asked again after no less than this (s)
    min_ttl_s: float = 60.0
    max_ttl_s: float = MAX_TTL_S
    #: how long an unreachable robots.txt disallows everything before it is asked again
    error_ttl_s: float = 60.0
    max_bytes: int = MAX_BYTES
    #: origins kept (least recently used go first)
    max_origins: int = 10_000


@dataclass(frozen=True)
class RobotsRules:
    """One origin's robots.txt as understood."""

    origin: str
    #: "rules" (2xx), "unavailable" (4xx: allow all), "unreachable" (disallow all)
    kind: str
    status: int | None
    digest: str
    fetched_at_s: float
    expires_at_s: float
    parser: Protego | None = None
    error: str | None = None

    def allows(self, url: str, token: str) -> bool:
        if self.kind == "unavailable":
            return True
        if self.kind == "unreachable" or self.parser is None:
            return False
        return bool(self.parser.can_fetch(url, token))

    def crawl_delay_s(self, token: str) -> float | None:
        """The ``Crawl-delay`` of the group that applies to ``token`` (not in RFC 9309;
        a common extension protego reads), None if none or not positive."""
        if self.parser is None:
            return None
        d = self.parser.crawl_delay(token)
        return float(d) if d is not None and float(d) > 0 else None

    def why_not(self) -> str:
        if self.kind == "unreachable":
            return f"robots.txt unreachable ({self.error}): disallow all"
        return "robots.txt disallows"


class RobotsCache:
    """``rules = await cache.rules_for(url)``: the origin's copy, fetched when missing or
    expired (``refresh``: now), one fetch per origin at a time."""

    def __init__(
        self,
        client: SafeClient,
        policy: RobotsPolicy | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.policy = policy or RobotsPolicy()
        self.clock = clock
        self.token = product_token(client.user_agent)
        self._rules: OrderedDict[str, RobotsRules] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}
        self.fetches = 0

    def cached(self, origin: str) -> RobotsRules | None:
        return self._rules.get(origin)

    async def rules_for(self, url: str, *, refresh: bool = False) -> RobotsRules:
        origin = origin_of(url)
        rules = self._rules.get(origin)
        if rules is not None and not refresh and rules.expires_at_s > self.clock():
            self._rules.move_to_end(origin)
            return rules
        lock = self._locks.setdefault(origin, asyncio.Lock())
        async with lock:
            rules = self._rules.get(origin)  # another task may have fetched it meanwhile
            if rules is None or rules.expires_at_s <= self.clock() or (
                    refresh and not _fresh(rules, self.clock())):
                rules = await self._fetch(origin, rules)
                self._rules[origin] = rules
                self._rules.move_to_end(origin)
                while len(self._rules) > self.policy.max_origins:
                    old, _ = self._rules.popitem(last=False)
                    self._locks.pop(old, None)
        return rules

    async def _fetch(self, origin: str, previous: RobotsRules | None) -> RobotsRules:
        p = self.policy
        self.fetches += 1
        result, headers = await self.client.get(
            f"{origin}/robots.txt", max_body_bytes=p.max_bytes, keep_body=True, truncate=True)
        now = self.clock()
        status = result.status
        if result.error is None and status is not None and 200 <= status < 300:
            body = result.body or b""
            parser = Protego.parse(body.decode("utf-8", "replace"))
            return RobotsRules(origin, "rules", status, hashlib.sha256(body).hexdigest(), now,
                               now + ttl_of(headers, p.min_ttl_s, p.max_ttl_s), parser)
        if status is not None and 400 <= status < 500 and status != 429:
            return RobotsRules(origin, "unavailable", status, f"unavailable-{status}", now,
                               now + ttl_of(headers, p.min_ttl_s, p.max_ttl_s))
        if status is not None and 300 <= status < 400 and result.error == "too many redirects":
            # Sec. 2.3.1.2: past five redirects the crawler MAY take it as unavailable
            return RobotsRules(origin, "unavailable", status, "unavailable-redirects", now,
                               now + p.error_ttl_s)
        error = result.error or f"http status {status}"
        if previous is not None and previous.kind != "unreachable":
            # Sec. 2.4: the cached copy may be used while robots.txt is unreachable
            return RobotsRules(origin, previous.kind, previous.status, previous.digest,
                               previous.fetched_at_s, now + p.error_ttl_s, previous.parser,
                               error)
        return RobotsRules(origin, "unreachable", status, "", now, now + p.error_ttl_s,
                           error=error)


def _fresh(rules: RobotsRules, now_s: float) -> bool:
    """Fetched less than a second ago (a forced refresh by several tasks at once)."""
    return now_s - rules.fetched_at_s < 1.0
