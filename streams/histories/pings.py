"""A ping log: the pings a site's pages received, JSON Lines, one ping per line.

``{"url": U, "time": T, "source": S}`` is one ping of ``U`` received at unix time ``T``
(seconds, integer or float) from source ``S``, one of the worker's ping sources
(``sitemap``, ``indexnow``, ``websub``, ``cdn``, ``other``; default ``other``).  Give the
source the live pings of the page come from: the worker learns each source group's quality
per page (``streams.estimates.estimation``, "Source groups"), and what an import teaches of
one group does not apply to another.  Schema: ``docs/schemas/ping-log.json``.  Example::

    {"url": "https://example.org/news", "time": 1700000012.5, "source": "indexnow"}
    {"url": "https://example.org/", "time": 1700000100}

``recrawl import FILE --ping-log PINGS`` sends each interval of the history with its
pings (:mod:`streams.histories.observations`), and ``recrawl experiments trace
--ping-log PINGS`` replays them (the source is not used there: the replay has one).
Blank lines are skipped; anything else that is not a ping is a bad line, reported with
its line number (``--strict``: the first one stops the command).

Memory: :class:`PingIndex` keeps the pings of the URLs asked for, 9 bytes a ping plus one
entry per URL (12 bytes a ping over 10^4 URLs), and 46 bytes a ping at the peak of the read
(``benchmarks/bench_ping_log.py``),
since a history file's URLs come in any order (a CDX index is sorted by URL) and each
interval needs the pings of its URL.
"""

from __future__ import annotations

from array import array
from collections.abc import Container, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from streams.events.records import SOURCES
from streams.histories.changelog import _number, url_object
from streams.histories.records import ReadReport

__all__ = ["Ping", "PingIndex", "parse_ping_line", "read_pings"]

#: a ping whose line gives no source
DEFAULT_SOURCE = "other"
_KEYS = frozenset({"url", "time", "source"})


@dataclass(frozen=True)
class Ping:
    """One ping of ``url`` received at unix time ``time_s`` from ``SOURCES[source]``."""

    url: str
    time_s: float
    source: int


def parse_ping_line(text: str) -> Ping | str | None:
    """The ping of one line, ``None`` for a blank line, or the reason it is bad."""
    obj = url_object(text)
    if obj is None or isinstance(obj, str):
        return obj
    url = obj["url"]
    extra = set(obj) - _KEYS
    if extra:
        return f"unknown keys for a ping: {sorted(extra)}"
    t = obj.get("time")
    if t is None or not _number(t):
        return f"'time' must be a finite number of unix seconds, got {t!r}"
    src = obj.get("source", DEFAULT_SOURCE)
    if src not in SOURCES:
        return f"'source' must be one of {', '.join(SOURCES)}, got {src!r}"
    return Ping(url, float(t), SOURCES.index(src))


def read_pings(path: str | Path, report: ReadReport, *, strict: bool) -> Iterator[Ping]:
    """The pings of a ping log, line by line (constant memory); bad lines are counted in
    ``report`` with their number (``strict``: :class:`HistoryError` at the first)."""
    n = 0
    report.path = report.path or str(path)
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as fh:
            for n, line in enumerate(fh, 1):
                got = parse_ping_line(line)
                if got is None:
                    continue
                if isinstance(got, str):
                    report.lines = n
                    report.refuse(n, got, strict=strict)
                    continue
                yield got
    finally:
        report.lines = n


@dataclass
class PingIndex:
    """The pings of a set of URLs, per URL in time order: :meth:`of` gives a URL's arrival
    times, rounded to the millisecond (an import's resolution,
    :func:`streams.histories.observations.ms`), and sources.  ``skipped``: pings of other
    URLs (not in the history)."""

    _times: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)
    _sources: dict[str, npt.NDArray[np.int8]] = field(default_factory=dict)
    pings: int = 0
    skipped: int = 0

    @classmethod
    def read(cls, path: str | Path, urls: Container[str], report: ReadReport, *,
             strict: bool) -> PingIndex:
        """The pings of ``urls`` in the ping log at ``path``."""
        index: dict[str, int] = {}
        owner = array("l")
        times = array("d")
        sources = array("b")
        out = cls()
        for p in read_pings(path, report, strict=strict):
            if p.url not in urls:
                out.skipped += 1
                continue
            k = index.setdefault(p.url, len(index))
            owner.append(k)
            times.append(p.time_s)
            sources.append(p.source)
        own = np.frombuffer(owner, dtype=np.int_) if owner else np.zeros(0, dtype=np.int_)
        # to the ms as ``observations.ms`` rounds (Python's correctly rounded ``round``)
        t = np.fromiter((round(x, 3) for x in times), np.float64, len(times))
        s = np.frombuffer(sources, dtype=np.int8) if sources else np.zeros(0, dtype=np.int8)
        order = np.lexsort((t, own))
        bounds = np.searchsorted(own[order], np.arange(len(index) + 1))
        for url, k in index.items():
            sel = order[bounds[k]:bounds[k + 1]]
            out._times[url] = t[sel].copy()
            out._sources[url] = s[sel].copy()
        out.pings = int(t.size)
        return out

    def of(self, url: str) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int8]]:
        """``url``'s ping times (ms, ascending) and sources (indices into ``SOURCES``)."""
        t = self._times.get(url)
        if t is None:
            return np.zeros(0), np.zeros(0, dtype=np.int8)
        return t, self._sources[url]
