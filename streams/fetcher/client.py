"""One safe HTTP GET: policy-checked hops, limited redirects, timeouts, a body-size cap."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urljoin

import aiohttp
from multidict import CIMultiDict

from streams.errors import RecrawlError
from streams.fetcher.egress import EgressPolicy, GuardedResolver, RefusedTarget

__all__ = ["USER_AGENT", "BodyTooLarge", "FetchLimits", "FetchResult", "SafeClient"]

USER_AGENT = "recrawl-fetcher/0.1 (+https://github.com/recrawl)"


@dataclass(frozen=True)
class FetchLimits:
    total_timeout_s: float = 20.0
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 10.0
    max_redirects: int = 5
    max_body_bytes: int = 5 * 1024 * 1024
    #: Connections in flight to one host (the host's politeness limit).
    per_host_concurrency: int = 1
    #: Fetches in flight overall.
    max_in_flight: int = 64


@dataclass(frozen=True)
class FetchResult:
    url: str
    final_url: str
    fetched_at: float
    status: int | None
    digest: str | None
    error: str | None
    body_bytes: int = 0
    body: bytes | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.status is not None and 200 <= self.status < 300


class BodyTooLarge(RecrawlError):
    pass


class SafeClient:
    """``async with SafeClient(policy) as c: result = await c.get(url)``; never raises for
    a failed fetch: the error is in :attr:`FetchResult.error`."""

    def __init__(
        self,
        policy: EgressPolicy,
        limits: FetchLimits | None = None,
        *,
        keep_body: bool = False,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.policy = policy
        self.limits = limits or FetchLimits()
        self.keep_body = keep_body
        self.user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> SafeClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        lim = self.limits
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(self.policy),
            limit=lim.max_in_flight,
            limit_per_host=0,
            use_dns_cache=False,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(
                total=lim.total_timeout_s,
                sock_connect=lim.connect_timeout_s,
                sock_read=lim.read_timeout_s,
            ),
            headers={"User-Agent": self.user_agent},
            auto_decompress=True,
            trust_env=False,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def get(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        max_body_bytes: int | None = None,
        keep_body: bool | None = None,
        truncate: bool = False,
        check_redirect: Callable[[str], Awaitable[str | None]] | None = None,
    ) -> tuple[FetchResult, Mapping[str, str]]:
        """GET ``url`` following at most ``max_redirects`` redirects.

        Returns the result and the final response's headers (case-insensitive; empty on
        error).  The body is read incrementally and abandoned past ``max_body_bytes``
        (``truncate``: kept up to there, e.g. robots.txt, of which RFC 9309 Sec. 2.5 asks
        for the first 500 KiB); the cap counts decompressed bytes (aiohttp inflates a
        ``Content-Encoding`` body in bounded pieces as it is read).  ``check_redirect``
        is asked about each redirect target before it is followed (e.g. its robots.txt);
        a reason it returns ends the fetch with that error.
        """
        assert self._session is not None, "use 'async with SafeClient(...)'"
        cap = self.limits.max_body_bytes if max_body_bytes is None else max_body_bytes
        keep = self.keep_body if keep_body is None else keep_body
        current = url
        status: int | None = None
        try:
            async with asyncio.timeout(self.limits.total_timeout_s):
                for _hop in range(self.limits.max_redirects + 1):
                    self.policy.check_url(current)
                    async with self._session.get(
                        current, allow_redirects=False, headers=headers
                    ) as resp:
                        status = resp.status
                        if status in (301, 302, 303, 307, 308) and "Location" in resp.headers:
                            current = urljoin(current, resp.headers["Location"])
                            if check_redirect is not None:
                                why = await check_redirect(current)
                                if why is not None:
                                    return self._failed(url, current, status, why), {}
                            continue
                        body = await _read_capped(resp, cap, truncate)
                        digest = hashlib.sha256(body).hexdigest()
                        return (
                            FetchResult(
                                url=url,
                                final_url=current,
                                fetched_at=time.time(),
                                status=status,
                                digest=digest,
                                error=None if 200 <= status < 300 else f"http status {status}",
                                body_bytes=len(body),
                                body=body if keep else None,
                            ),
                            CIMultiDict(resp.headers),
                        )
                return self._failed(url, current, status, "too many redirects"), {}
        except RefusedTarget as exc:
            return self._failed(url, current, None, f"refused: {exc}"), {}
        except BodyTooLarge:
            return self._failed(url, current, status, f"body larger than {cap} bytes"), {}
        except TimeoutError:
            return self._failed(url, current, status, "timeout"), {}
        except aiohttp.ClientConnectorError as exc:
            msg = str(exc.os_error) if exc.os_error else str(exc)
            if "refused:" in msg:
                return self._failed(url, current, None, msg[msg.index("refused:") :]), {}
            return self._failed(url, current, None, f"connect error: {msg}"), {}
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return self._failed(url, current, status, f"{type(exc).__name__}: {exc}"), {}

    @staticmethod
    def _failed(url: str, final: str, status: int | None, error: str) -> FetchResult:
        return FetchResult(url, final, time.time(), status, None, error)


async def _read_capped(resp: aiohttp.ClientResponse, cap: int, truncate: bool = False) -> bytes:
    length = resp.content_length
    if length is not None and length > cap and not truncate:
        raise BodyTooLarge
    chunks: list[bytes] = []
    n = 0
    async for chunk in resp.content.iter_chunked(64 * 1024):
        n += len(chunk)
        if n > cap:
            if not truncate:
                raise BodyTooLarge
            chunks.append(chunk[: len(chunk) - (n - cap)])
            break
        chunks.append(chunk)
    return b"".join(chunks)
