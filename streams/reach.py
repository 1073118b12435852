"""Reaching Kafka and Redis in bounded time, and saying plainly when they cannot be reached.

- :func:`check_kafka` and :func:`check_redis`: one metadata request to Kafka, one ``PING``
  to Redis (every node's, for a Redis Cluster), each within ``timeout_s``
  (``Settings.connect_timeout_s``); a failure is an :class:`Unreachable` whose message
  is one line naming the address and what was tried.  A port that accepts connections but
  does not answer as the service does fails the same way, in the same time.
- :func:`started_producer`: an aiokafka producer started within the bound, stopped again
  when it cannot start (no "Unclosed AIOKafkaProducer" warning).
- :class:`OutageReport`: a running worker's retries of an outage, logged once every
  ``Settings.outage_report_s`` with the address instead of once per retry.

Errors::

    Unreachable (ConnectionError)  -- Kafka or Redis did not answer in time; the message
                                      names the address, what was tried and the bound
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from streams.errors import RecrawlError

__all__ = [
    "OutageReport",
    "Unreachable",
    "check_kafka",
    "check_redis",
    "redis_address",
    "started_producer",
]


class Unreachable(RecrawlError, ConnectionError):
    """Kafka or Redis could not be reached within the bound; the message says where and
    what was tried.  Start the service (``recrawl infra up``) or give its address
    (``--kafka-bootstrap``, ``--redis-url``, or ``RECRAWL_KAFKA_BOOTSTRAP``,
    ``RECRAWL_REDIS_URL``)."""


def redis_address(url: str) -> str:
    """``url`` without its password (for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(unparsable address)"
    if parts.password is None:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


def _why(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "no answer"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    name = type(exc).__name__
    if text.startswith(name):
        return text
    return f"{name}: {text}" if text else name


async def _bounded(aw: Any, timeout_s: float) -> Any:
    """``await aw`` for at most ``timeout_s`` (``TimeoutError``), without waiting for the
    cancelled call to wind down (``asyncio.wait_for`` does: redis-py's took seconds more)."""
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        task.cancel()
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        raise TimeoutError
    return task.result()


@contextlib.contextmanager
def _quiet(logger: str = "aiokafka"):  # type: ignore[no-untyped-def]
    """aiokafka logs each failed connection at ERROR before raising it: the one line of
    :class:`Unreachable` says it instead."""
    lg = logging.getLogger(logger)
    level = lg.level
    lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        lg.setLevel(level)


async def check_kafka(bootstrap: str, timeout_s: float) -> None:
    """One metadata request to the broker(s) at ``bootstrap`` within ``timeout_s``."""
    from aiokafka.client import AIOKafkaClient

    ms = max(1000, int(timeout_s * 1000))
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=ms,
                            connections_max_idle_ms=max(ms + 1000, 540000))
    try:
        with _quiet():
            await _bounded(client.bootstrap(), timeout_s)
    except Exception as exc:
        raise Unreachable(
            f"cannot reach Kafka at {bootstrap} (tried a metadata request for "
            f"{timeout_s:g} s: {_why(exc)})") from None
    finally:
        with contextlib.suppress(Exception):
            await _bounded(client.close(), 1.0)


async def check_redis(url: str, timeout_s: float) -> None:
    """``PING`` to Redis at ``url`` (each node of a Redis Cluster) within ``timeout_s``."""
    from streams.store.redis_conn import connect

    try:
        client = connect(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    except (ValueError, TypeError) as exc:  # the address itself
        raise Unreachable(f"cannot use the Redis address {redis_address(url)}: {exc}") from None
    try:
        await _bounded(client.ping(), timeout_s)
    except Exception as exc:
        raise Unreachable(
            f"cannot reach Redis at {redis_address(url)} (tried PING for {timeout_s:g} s: "
            f"{_why(exc)})") from None
    finally:
        with contextlib.suppress(Exception):
            await _bounded(client.aclose(), 1.0)


@contextlib.asynccontextmanager
async def started_producer(bootstrap: str, timeout_s: float, **options: Any):  # type: ignore[no-untyped-def]
    """An ``AIOKafkaProducer`` started within ``timeout_s`` (its requests bounded by it too),
    stopped on the way out; :class:`Unreachable` when it cannot start."""
    from aiokafka import AIOKafkaProducer

    ms = max(1000, int(timeout_s * 1000))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=ms,
                                **options)
    try:
        with _quiet():
            await _bounded(producer.start(), timeout_s)
    except Exception as exc:
        with contextlib.suppress(Exception):
            await _bounded(producer.stop(), 1.0)
        raise Unreachable(
            f"cannot reach Kafka at {bootstrap} (tried to start a producer for "
            f"{timeout_s:g} s: {_why(exc)})") from None
    from aiokafka.errors import KafkaError

    try:
        yield producer
    except (KafkaError, TimeoutError) as exc:  # sending failed: the broker went or stalled
        raise Unreachable(
            f"sending to Kafka at {bootstrap} failed ({_why(exc)}; requests wait at most "
            f"{timeout_s:g} s)") from None
    finally:
        with contextlib.suppress(Exception):
            await _bounded(producer.stop(), timeout_s)


class OutageReport:
    """Retries of one service (``"redis"`` or ``"kafka"`` at ``address``), reported once
    every ``every_s`` seconds: the first failure at once, then "still unreachable for N s",
    and "reachable again" when a call succeeds after failures."""

    def __init__(self, service: str, address: str, every_s: float,
                 logger: logging.Logger | None = None,
                 clock: Any = time.monotonic) -> None:
        self.service = service
        self.address = address
        self.every_s = every_s
        self.log = logger or logging.getLogger(__name__)
        self.clock = clock
        self.since: float | None = None
        self.failures = 0
        self._last_report = -float("inf")

    def failed(self, exc: BaseException, what: str = "") -> None:
        now = self.clock()
        if self.since is None:
            self.since = now
        self.failures += 1
        if now - self._last_report >= self.every_s:
            self._last_report = now
            doing = f" while {what}" if what else ""
            self.log.warning(
                "%s at %s unreachable%s for %.0f s (%d failures, last: %s); retrying, "
                "next report in %g s", self.service, self.address, doing, now - self.since,
                self.failures, _why(exc), self.every_s)

    def ok(self) -> None:
        if self.since is not None:
            self.log.warning("%s at %s reachable again after %.0f s (%d failures)",
                             self.service, self.address, self.clock() - self.since,
                             self.failures)
            self.since = None
            self.failures = 0
            self._last_report = -float("inf")
