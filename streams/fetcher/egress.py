"""Where a fetch may go.

Only ``http`` and ``https``, and only globally routable addresses (``is_global``; an
IPv6 address that carries an IPv4 one - mapped, 6to4, NAT64 - is judged by that one):
private (RFC 1918, ULA) and loopback addresses only when the policy allows them;
link-local, multicast, reserved, unspecified, shared (100.64.0.0/10) and site-local
never; the demo and the tests allow loopback *only* (``loopback_only=True``), so nothing
they run can reach a non-loopback address.  Host-name overrides
(``{".test": "127.0.0.1"}``) map a suffix to a fixed address without DNS; the override's
address is checked like any other.

The check runs twice: before each request/redirect hop (IP literals never reach a
resolver) and in the connector's resolver (so a DNS answer cannot swap in a forbidden
address between the check and the connection).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from streams.errors import RecrawlError

__all__ = ["EgressPolicy", "GuardedResolver", "IPAddress", "RefusedTarget", "parse_overrides"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def _effective(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one carries and reaches (IPv4-mapped, 6to4 2002::/16,
    NAT64 64:ff9b::/96), else ``ip``: the policy judges where the packets end up."""
    if isinstance(ip, ipaddress.IPv4Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in net for net in _NAT64):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


class RefusedTarget(RecrawlError):
    """The egress policy refuses this URL or address.

    Operator: allow the class of address explicitly (``--allow-loopback``,
    ``--allow-private``) only if the fetcher is meant to reach it.
    """


@dataclass(frozen=True)
class EgressPolicy:
    allow_loopback: bool = False
    allow_private: bool = False
    #: Refuse everything that is not loopback (demo and tests).
    loopback_only: bool = False
    #: Host suffix (``.test``) or exact host -> IP address, resolved without DNS.
    overrides: dict[str, str] = field(default_factory=dict)

    def check_address(self, addr: IPAddress | str) -> None:
        ip = _effective(ipaddress.ip_address(addr) if isinstance(addr, str) else addr)
        if ip.is_loopback:
            if not (self.allow_loopback or self.loopback_only):
                raise RefusedTarget(f"{ip} is a loopback address")
            return
        if self.loopback_only:
            raise RefusedTarget(f"{ip} is not a loopback address (loopback-only policy)")
        if ip.is_link_local:
            raise RefusedTarget(f"{ip} is a link-local address")
        if ip.is_unspecified or ip.is_multicast or ip.is_reserved:
            raise RefusedTarget(f"{ip} is not a unicast address")
        if ip.is_private:
            if not self.allow_private:
                raise RefusedTarget(f"{ip} is a private address")
            return
        # an allow-list, not a block-list: only globally routable addresses (this refuses
        # e.g. shared 100.64.0.0/10 with cloud metadata at 100.100.100.200, and the
        # deprecated site-local fec0::/10 that Python still counts as global)
        if not ip.is_global or (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local):
            raise RefusedTarget(f"{ip} is not a global address")

    def override_for(self, host: str) -> str | None:
        host = host.lower().rstrip(".")
        for suffix, addr in self.overrides.items():
            s = suffix.lower()
            if host == s.lstrip(".") or (s.startswith(".") and host.endswith(s)):
                return addr
        return None

    def check_url(self, url: str) -> tuple[str, int]:
        """Scheme and IP-literal checks; returns ``(host, port)``."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise RefusedTarget(f"scheme {parts.scheme!r} is not http or https")
        host = parts.hostname
        if not host:
            raise RefusedTarget("url has no host")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise RefusedTarget(f"bad port: {exc}") from None
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            ip = None
        if ip is not None:
            self.check_address(ip)
        return host, port

    async def resolve(self, host: str, port: int = 0) -> list[str]:
        """Addresses for ``host`` that the policy allows; refuses if none is allowed."""
        override = self.override_for(host)
        if override is not None:
            self.check_address(override)
            return [override]
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            ip = None
        if ip is not None:
            self.check_address(ip)
            return [str(ip)]
        if self.loopback_only and host.lower() != "localhost":
            # Do not even ask DNS about names that are not overridden.
            raise RefusedTarget(f"{host!r} is not overridden to loopback (loopback-only policy)")
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        allowed, refusals = [], []
        for info in infos:
            addr = str(info[4][0])
            try:
                self.check_address(addr)
                allowed.append(addr)
            except RefusedTarget as exc:
                refusals.append(str(exc))
        if not allowed:
            raise RefusedTarget(f"{host}: " + ("; ".join(refusals) or "no address"))
        return allowed


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """``[".test=127.0.0.1", "example.org=127.0.0.2"]`` -> dict; the address must parse."""
    out: dict[str, str] = {}
    for item in items or []:
        name, sep, addr = item.partition("=")
        if not sep or not name:
            raise ValueError(f"expected SUFFIX=ADDRESS, got {item!r}")
        ipaddress.ip_address(addr)
        out[name] = addr
    return out


class GuardedResolver(AbstractResolver):
    """aiohttp resolver applying :class:`EgressPolicy` (overrides, refusals)."""

    def __init__(self, policy: EgressPolicy) -> None:
        self.policy = policy
        self._fallback = ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            addrs = await self.policy.resolve(host, port)
        except RefusedTarget as exc:
            # aiohttp turns OSError from a resolver into a connection error.
            raise OSError(f"refused: {exc}") from exc
        out: list[ResolveResult] = []
        for a in addrs:
            fam = socket.AF_INET6 if ":" in a else socket.AF_INET
            out.append(
                {"hostname": host, "host": a, "port": port, "family": fam, "proto": 0, "flags": 0}
            )
        return out

    async def close(self) -> None:
        await self._fallback.close()

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"GuardedResolver({self.policy!r})"
