"""Retrying a call with exponential backoff: the one loop the worker and the scheduler use
to wait out an outage (Redis, Kafka) or a failed read they cannot go on without.

:func:`retry` awaits ``call()`` until it returns.  A failure that ``retryable`` accepts
waits the next delay of a :class:`Backoff` (``first_s``, then doubled each time, at most
``cap_s``) and tries again; any other exception, and a cancellation, is raised as it is:
``retryable`` is also how a caller gives up (e.g. once it is stopping).  Each retried
failure is said once: to an :class:`streams.reach.OutageReport` when one is given (which
logs the service's address and the reason once every ``outage_report_s``, and "reachable
again" after the call succeeds), else as a warning naming what failed, the reason and the
next delay.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from streams.reach import OutageReport

__all__ = ["Backoff", "retry"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Delays between attempts: ``first_s``, then ``factor`` times the last, at most
    ``cap_s``."""

    first_s: float
    cap_s: float
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not (0.0 < self.first_s <= self.cap_s) or self.factor < 1.0:
            raise ValueError(f"backoff needs 0 < first_s <= cap_s and factor >= 1: {self}")

    def delays(self) -> Iterator[float]:
        d = self.first_s
        while True:
            yield d
            d = min(d * self.factor, self.cap_s)


def _every(exc: Exception) -> bool:
    return True


async def retry(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    backoff: Backoff,
    retryable: Callable[[Exception], bool] = _every,
    report: OutageReport | None = None,
    on_retry: Callable[[Exception], None] | None = None,
    logger: logging.Logger | None = None,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """``await call()`` until it returns (module docstring).  ``what``: what the call does,
    for the log; ``on_retry``: called with each retried failure (a counter)."""
    delays = backoff.delays()
    while True:
        try:
            result = await call()
        except Exception as exc:
            if not retryable(exc):
                raise
            delay = next(delays)
            if on_retry is not None:
                on_retry(exc)
            if report is not None:
                report.failed(exc, what)
            else:
                (logger or log).warning("%s failed (%r); retrying in %.2g s", what, exc, delay)
            await sleep(delay)
            continue
        if report is not None:
            report.ok()
        return result
