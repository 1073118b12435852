"""``recrawl worker``: the Faust worker (agents, scheduler, HTTP views).

Every setting is a flag here (``recrawl worker --help`` lists them with their environment
names and defaults).  Before Faust starts, Kafka and Redis are checked within
``connect_timeout_s``: a worker that cannot reach either exits with one line naming the
address (status 3) instead of starting and retrying; once started, an outage is retried
and reported every ``outage_report_s`` (aiokafka's own error lines too: one per kind per
``outage_report_s``, :mod:`streams.telemetry.logs`).  A stop signal starts a graceful stop
(offsets committed, orders flushed) that may take at most ``stop_timeout_s``: with Kafka
gone, the consumer's stop would wait for it, so after that the process exits with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import os
import threading
from typing import Any

from streams.commands._settings import add_settings_args, settings_from_args

__all__ = ["fix_malloc_thresholds", "register", "run"]

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "worker", help="run a Faust worker against the configured Kafka and Redis",
        description="Run a worker: consume pages, pings, outcomes, hosts and control; issue "
        "orders; serve the dashboard, probes and metrics on the web port.")
    p.add_argument("--loglevel", dest="setting_log_level", default=None, metavar="LEVEL",
                   help="the same as --log-level")
    add_settings_args(p)
    p.set_defaults(func=run)


def fix_malloc_thresholds(mmap_threshold: int) -> bool:
    """glibc's mmap threshold fixed at ``mmap_threshold`` bytes and its trim threshold at
    twice that (``Settings.malloc_mmap_threshold``); False when not done (0, or not glibc)."""
    if mmap_threshold <= 0:
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        log.info("not glibc: malloc thresholds left as they are")
        return False
    # M_MMAP_THRESHOLD (-3), M_TRIM_THRESHOLD (-1): malloc.h; 1 on success
    return bool(mallopt(-3, mmap_threshold)) and bool(mallopt(-1, 2 * mmap_threshold))


def run(args: argparse.Namespace) -> int:
    from streams.reach import check_kafka, check_redis

    settings = settings_from_args(args)
    if settings.web_port == 0:
        settings = settings.model_copy(update={"web_enabled": False})

    async def reachable() -> None:
        # both checks run to their end (each bounded, each closing its client): a check
        # cancelled half-way when the other fails would leave its connection to be
        # collected with an "Unclosed AIOKafkaConnection" warning beside the one line
        results = await asyncio.gather(
            check_kafka(settings.kafka_bootstrap, settings.connect_timeout_s),
            check_redis(settings.redis_url, settings.connect_timeout_s),
            return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result

    asyncio.run(reachable())  # Unreachable: one line, exit 3 (streams.cli)
    import faust  # (after the check: its imports take seconds)

    from streams.worker.app import create_app

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    fix_malloc_thresholds(settings.malloc_mmap_threshold)
    app = create_app(settings)
    worker = _worker_class(faust.Worker)(app, loglevel=settings.log_level,
                                         stop_timeout_s=settings.stop_timeout_s)
    worker.execute_from_commandline()
    return 0


def _give_up(timeout_s: float) -> None:
    """The stop took longer than ``stop_timeout_s``: say so and exit now (a SIGKILL's
    effect, which the worker is built to survive: nothing applied is lost, nothing not
    committed is skipped)."""
    log.error("the worker did not stop within %.0f s of the signal (stop_timeout_s; is Kafka "
              "reachable?): exiting now with status 1; the events not committed are read "
              "again by the worker that takes the partitions", timeout_s)
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):  # exiting anyway
            handler.flush()
    os._exit(1)


def _worker_class(base: type) -> type:
    """``faust.Worker`` whose first stop signal also arms a timer (a thread: it fires even
    if the event loop is stuck) that ends the process after ``stop_timeout_s``."""

    class Worker(base):  # type: ignore[misc]
        def __init__(self, *args: Any, stop_timeout_s: float, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.stop_timeout_s = stop_timeout_s
            self._deadline: threading.Timer | None = None

        def _schedule_shutdown(self, signal: Any) -> None:
            if self._deadline is None:
                self._deadline = threading.Timer(self.stop_timeout_s, _give_up,
                                                 args=(self.stop_timeout_s,))
                self._deadline.daemon = True
                self._deadline.start()
            super()._schedule_shutdown(signal)

    return Worker
