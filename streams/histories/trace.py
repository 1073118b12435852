"""A history file as a :class:`models.sim.trace.Trace` (``recrawl experiments trace``).

Every page of the file is known (declared, changed or captured); a page's host (its URL's
host name) groups it with the pages the learner's site prior is fitted to.  A change log gives the
changes themselves; a capture file (CDX, WARC, Kolobov) gives each change at the capture
that found it (``changed`` true): the earliest time the archive knew of it, so a capture
trace is a change history at the archive's resolution.  Memory: a dict of URLs and 16
bytes per change (``array`` of times and page numbers), not the file's lines.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from models.sim.trace import Trace, trace_from_arrays
from streams.histories import Capture, Change, Page, ReadReport, read_history

__all__ = ["LoadedTrace", "load_pings", "load_trace"]


@dataclass(frozen=True)
class LoadedTrace:
    """A trace with its URLs (``urls[i]`` is page ``i``) and what reading it found."""

    trace: Trace
    urls: list[str]
    changes_read: int
    report: ReadReport


def _host(url: str) -> str:
    """The URL's host name (lower case; the whole URL if it has none)."""
    try:
        name = urlsplit(url).hostname
    except ValueError:
        name = None
    return name or url


def load_trace(path: str | Path, fmt: str | None = None, *, strict: bool = False) -> LoadedTrace:
    """Read a history file into a :class:`Trace` (see the module docstring)."""
    index: dict[str, int] = {}
    mu = array("d")
    times = array("d")
    pages = array("q")
    report = ReadReport()

    def page_of(url: str) -> int:
        k = index.get(url)
        if k is None:
            k = index[url] = len(mu)
            mu.append(1.0)
        return k

    for rec in read_history(path, fmt, strict=strict, report=report):
        if isinstance(rec, Page):
            mu[page_of(rec.url)] = rec.importance
        elif isinstance(rec, Change):
            pages.append(page_of(rec.url))
            times.append(rec.time_s)
        elif isinstance(rec, Capture):
            k = page_of(rec.url)
            if rec.changed:
                pages.append(k)
                times.append(rec.time_s)
    if not mu:
        raise ValueError(f"{path}: no page in the file ({report.bad} bad lines)")
    hosts: dict[str, int] = {}
    host = np.fromiter((hosts.setdefault(_host(u), len(hosts)) for u in index),
                       dtype=np.int64, count=len(index))
    trace = trace_from_arrays(np.frombuffer(mu, dtype=np.float64).copy(),
                              np.frombuffer(pages, dtype=np.int64),
                              np.frombuffer(times, dtype=np.float64), host=host)
    return LoadedTrace(trace, list(index), len(times), report)


def load_pings(path: str | Path, loaded: LoadedTrace, *, strict: bool = False
               ) -> tuple[np.ndarray, np.ndarray, ReadReport]:
    """Recorded pings, a ping log (:mod:`streams.histories.pings`: one ``{"url", "time",
    "source"}`` line per ping; the replay has one source, so ``source`` is not used), as
    ``(page, day)`` arrays on the trace's clock; pings of unknown URLs are skipped."""
    from streams.histories.pings import read_pings

    index = {u: k for k, u in enumerate(loaded.urls)}
    report = ReadReport()
    pages = array("q")
    days = array("d")
    start = loaded.trace.start_s
    for rec in read_pings(path, report, strict=strict):
        k = index.get(rec.url)
        if k is None:
            report.skipped += 1
            continue
        pages.append(k)
        days.append((rec.time_s - start) / 86400.0)
    return (np.frombuffer(pages, dtype=np.int64).copy(),
            np.frombuffer(days, dtype=np.float64).copy(), report)
