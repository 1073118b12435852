"""``streams.retry``: the delays it waits, when it gives up, what it logs and reports.
No service: the call fails on a script, the sleeps are recorded instead of slept."""

from __future__ import annotations

import asyncio
import logging

import pytest

from streams.reach import OutageReport
from streams.retry import Backoff, retry


class Flaky:
    """Fails with ``errors`` in turn, then returns ``"done"``."""

    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


class Sleeps(list[float]):
    async def __call__(self, s: float) -> None:
        self.append(s)


def test_the_delays_double_up_to_the_cap() -> None:
    sleeps = Sleeps()
    call = Flaky(*[ConnectionError("down")] * 7)
    got = asyncio.run(retry(call, what="w", backoff=Backoff(0.05, 0.5), sleep=sleeps))
    assert got == "done" and call.calls == 8
    assert sleeps == pytest.approx([0.05, 0.1, 0.2, 0.4, 0.5, 0.5, 0.5])


def test_a_success_at_once_sleeps_not() -> None:
    sleeps = Sleeps()
    assert asyncio.run(retry(Flaky(), what="w", backoff=Backoff(1.0, 2.0),
                             sleep=sleeps)) == "done"
    assert sleeps == []


def test_an_error_it_may_not_retry_is_raised_at_once() -> None:
    sleeps = Sleeps()
    call = Flaky(ConnectionError("down"), KeyError("bug"))
    with pytest.raises(KeyError, match="bug"):
        asyncio.run(retry(call, what="w", backoff=Backoff(0.1, 1.0), sleep=sleeps,
                          retryable=lambda e: isinstance(e, ConnectionError)))
    assert call.calls == 2 and sleeps == [0.1]


def test_it_gives_up_when_told_and_raises_the_last_failure() -> None:
    stopping = [False]
    sleeps = Sleeps()

    async def sleep(s: float) -> None:
        sleeps.append(s)
        stopping[0] = len(sleeps) == 3  # the caller starts stopping meanwhile

    call = Flaky(*[ConnectionError(f"down {i}") for i in range(10)])
    with pytest.raises(ConnectionError, match="down 3"):
        asyncio.run(retry(call, what="w", backoff=Backoff(0.1, 1.0), sleep=sleep,
                          retryable=lambda e: not stopping[0]))
    assert call.calls == 4 and sleeps == pytest.approx([0.1, 0.2, 0.4])


def test_a_cancellation_is_never_retried() -> None:
    async def cancelled() -> None:
        raise asyncio.CancelledError

    sleeps = Sleeps()
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(retry(cancelled, what="w", backoff=Backoff(0.1, 1.0), sleep=sleeps))
    assert sleeps == []


def test_each_retry_is_logged_with_what_failed_the_reason_and_the_delay(
        caplog: pytest.LogCaptureFixture) -> None:
    counted: list[Exception] = []
    call = Flaky(TimeoutError("no answer from 127.0.0.1:9092"), OSError("refused"))
    with caplog.at_level(logging.WARNING, logger="t.retry"):
        asyncio.run(retry(call, what="reading the orders of shard 3", backoff=Backoff(0.5, 5.0),
                          sleep=Sleeps(), on_retry=counted.append,
                          logger=logging.getLogger("t.retry")))
    assert [type(e) for e in counted] == [TimeoutError, OSError]
    msgs = [r.getMessage() for r in caplog.records if r.name == "t.retry"]
    assert msgs == [
        "reading the orders of shard 3 failed (TimeoutError('no answer from "
        "127.0.0.1:9092')); retrying in 0.5 s",
        "reading the orders of shard 3 failed (OSError('refused')); retrying in 1 s",
    ]


def test_an_outage_report_gets_the_failures_and_the_recovery(
        caplog: pytest.LogCaptureFixture) -> None:
    """With an :class:`OutageReport` the failures go to it (the service's address, once a
    period), not one warning per retry, and the success after them says so."""
    now = [0.0]
    logger = logging.getLogger("t.outage")
    rep = OutageReport("redis", "127.0.0.1:6390", 10.0, logger, clock=lambda: now[0])

    async def sleep(s: float) -> None:
        now[0] += s

    call = Flaky(*[ConnectionError("refused")] * 5)
    with caplog.at_level(logging.WARNING):
        got = asyncio.run(retry(call, what="applying pings", backoff=Backoff(2.0, 8.0),
                                sleep=sleep, report=rep, logger=logger))
    assert got == "done" and rep.failures == 0 and rep.since is None
    msgs = [r.getMessage() for r in caplog.records if r.name == "t.outage"]
    # failures at t = 0, 2, 6, 14, 22: reported at 0 and 14 (every 10 s); back at 30
    assert len(msgs) == 3, msgs
    assert msgs[0].startswith("redis at 127.0.0.1:6390 unreachable while applying pings "
                              "for 0 s (1 failures")
    assert "for 14 s (4 failures" in msgs[1]
    assert msgs[2] == "redis at 127.0.0.1:6390 reachable again after 30 s (5 failures)"


def test_a_backoff_that_cannot_be_is_refused() -> None:
    for first, cap, factor in [(0.0, 1.0, 2.0), (2.0, 1.0, 2.0), (0.1, 1.0, 0.5)]:
        with pytest.raises(ValueError, match="backoff needs"):
            Backoff(first, cap, factor)
