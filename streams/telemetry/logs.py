"""The worker's log during a Kafka outage: one line per kind of library error per
``outage_report_s``, not thousands a second.

While the broker is unreachable, aiokafka's clients log every failed connection and
metadata request, and retry them without a pause (aiokafka issue 496): about 3,000
"Unable connect to node" lines a second, 115,000 of them (230,000 lines in all) in 100 s of
outage under a worker issuing orders (``tests/integration/test_faults.py``, Kafka stopped
under a running worker).
:class:`RepeatFilter` on aiokafka's loggers lets the first line of each kind through, drops
the same kind for ``window_s``, and says how many it dropped on the next line of that
kind: ``... (and 2,871 more like it in the last 10 s)``.  A line's kind is its logger, level
and format string (the node id and error are its arguments), so different failures are
each still said once per window.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

__all__ = ["RepeatFilter", "quiet_library_logs"]

#: the loggers :func:`quiet_library_logs` filters (and every logger below them)
LIBRARIES = ("aiokafka",)


class RepeatFilter(logging.Filter):
    """Pass the first record of each kind (logger, level, format string), then one per
    ``window_s``, the one passed saying how many of its kind were dropped since the last."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        if not window_s > 0:
            raise ValueError(f"window_s must be positive, got {window_s!r}")
        self.window_s = window_s
        self.clock = clock
        #: kind -> (when one of it last passed, how many dropped since)
        self.seen: dict[tuple[str, int, str], tuple[float, int]] = {}
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.name, record.levelno, str(record.msg))
        now = self.clock()
        last = self.seen.get(kind)
        if last is not None and now - last[0] < self.window_s:
            self.seen[kind] = (last[0], last[1] + 1)
            self.dropped += 1
            return False
        if last is not None and last[1]:
            record.msg = (f"{record.getMessage()} (and {last[1]:,} more like it in the "
                          f"last {now - last[0]:.0f} s)")
            record.args = ()
        if len(self.seen) > 10_000:  # format strings are few; bounded all the same
            self.seen.clear()
        self.seen[kind] = (now, 0)
        return True


_FILTER: RepeatFilter | None = None


def quiet_library_logs(window_s: float) -> RepeatFilter:
    """The process's one :class:`RepeatFilter` (its window set to ``window_s``) on the
    loggers of :data:`LIBRARIES` and every one below them that exists now (a filter on a
    logger sees only the records logged to that logger, not those of its children, so each
    module's logger gets it; adding it again is a no-op)."""
    global _FILTER
    if _FILTER is None:
        _FILTER = RepeatFilter(window_s)
    elif not window_s > 0:
        raise ValueError(f"window_s must be positive, got {window_s!r}")
    filt = _FILTER
    filt.window_s = window_s
    names = [n for n in logging.Logger.manager.loggerDict
             if any(n == lib or n.startswith(lib + ".") for lib in LIBRARIES)]
    for name in sorted(set(names) | set(LIBRARIES)):
        logging.getLogger(name).addFilter(filt)
    return filt
