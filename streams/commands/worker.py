"""``recrawl worker``: the Faust worker (agents, scheduler, HTTP views)."""

from __future__ import annotations

import argparse
import ctypes
import logging

__all__ = ["fix_malloc_thresholds", "register", "run"]

log = logging.getLogger(__name__)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("worker", help="run a Faust worker against the configured Kafka and Redis")
    p.add_argument("--web-port", type=int, help="HTTP port of the worker (0 = disabled)")
    p.add_argument("--loglevel", default=None)
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
    import faust

    from streams.settings import load_settings
    from streams.worker.app import create_app

    overrides = {}
    if args.web_port is not None:
        overrides = {"web_port": args.web_port, "web_enabled": args.web_port != 0}
    settings = load_settings(**overrides)
    fix_malloc_thresholds(settings.malloc_mmap_threshold)
    app = create_app(settings)
    worker = faust.Worker(app, loglevel=args.loglevel or settings.log_level)
    worker.execute_from_commandline()
    return 0
