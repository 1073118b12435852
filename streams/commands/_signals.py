"""The run-until-signalled block of the long-running commands (``indexnow serve``,
``websub serve``, ``sitemaps``, ``testweb``, ``fetch``): SIGINT and SIGTERM call a function
on the running event loop instead of raising ``KeyboardInterrupt`` in the middle of it."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable

__all__ = ["on_stop_signals", "stop_event"]


def on_stop_signals(callback: Callable[[], object]) -> None:
    """Call ``callback`` on SIGINT or SIGTERM; call it inside the running loop.  Where the
    loop cannot take signal handlers (``NotImplementedError``), nothing is set."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, callback)


def stop_event() -> asyncio.Event:
    """An event set by SIGINT or SIGTERM (see :func:`on_stop_signals`)."""
    stop = asyncio.Event()
    on_stop_signals(stop.set)
    return stop
