"""A history file as the crawl observations a worker's estimators learn from.

``recrawl import`` sends each page's history to a running worker as crawl outcomes: one
``(url, time_s, changed)`` :class:`Crawl` per observation, in time order per URL, so the
worker adds the interval since the URL's previous crawl to its estimator exactly as it does
for a live crawl.

* Archive captures (CDX, WARC, Kolobov et al.) are crawls already: each capture is one
  crawl at its time, ``changed`` as the reader found it (``None`` for the URL's first: it
  starts the page's first interval).
* A change log is a complete history.  It becomes the crawls of
  :func:`models.sim.trace.complete_history_intervals` (the ones ``recrawl experiments
  trace --learn-days`` learns from): a crawl at the window's start (the file's earliest
  change time; ``changed`` unknown), for each later change at ``c`` an unchanged crawl at
  ``c - eps`` (when it falls after the URL's previous crawl) and a changed one at ``c``,
  and an unchanged crawl at the window's end (the file's latest change).  A page declared
  without a change is one unchanged interval over the window.

With a ping log (``recrawl import --ping-log``, :mod:`streams.histories.pings`) every
crawl carries the pings of its URL in its interval, per source (:attr:`Crawl.signals`;
without one, ``None``: the interval's pings were not recorded).  Captures stay the crawls
they are.  A change log becomes instead the crawls of
:func:`models.sim.trace.ping_history_crawls`: one at the window's start, one at each of the
URL's pings in the window, one on each point of a grid of the URL's mean gap between
changes (the window over its changes in it plus one), and one at the window's end, each
``changed`` if a change fell since the previous one (the change times' own chop would put
each ping, which arrives after its change, in an interval without a change: the pings would
look false).

Times are rounded to the millisecond, the worker's resolution for a page's last crawl (an
outcome in the same millisecond as the last crawl is that crawl again).  An observation not
after the URL's previous one (a change log listing a URL's changes out of time order, two
captures in one millisecond) cannot be applied in order: it is skipped and counted in
:class:`ImportCounts` with its URL.  A change in the same millisecond as its URL's previous
change is that change (no crawl can tell two apart): it adds no crawl, and it is counted
apart, not as an error (a Poisson process of the test web's rates over 600 s has about one
such pair in 14 000 changes).  Memory: one entry per distinct URL (its last time).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from streams.events.records import SOURCES
from streams.histories.records import Capture, Change, Page

if TYPE_CHECKING:
    from streams.histories.pings import PingIndex

__all__ = ["EPS_S", "SPREAD", "Crawl", "ImportCounts", "Window", "crawls_of", "in_time_order",
           "ms"]

#: a complete history's changed crawl interval (s): ``eps`` of
#: :func:`models.sim.trace.complete_history_intervals`, as ``recrawl experiments trace``
EPS_S = 1.0

#: crawls put in time order together by :func:`in_time_order`
SPREAD = 20_000

#: skipped observations kept with their URL and time (the rest are only counted)
FIRST_SKIPPED = 20


def ms(t: float) -> float:
    """``t`` rounded to the millisecond (the worker keeps a page's last crawl so)."""
    return round(t, 3)


@dataclass(frozen=True)
class Crawl:
    """One observation of ``url``: a crawl at unix time ``time_s`` that found the page
    ``changed`` since the URL's previous crawl (``None``: nothing to compare with)."""

    url: str
    time_s: float
    changed: bool | None
    #: the pings of each source (``streams.events.records.SOURCES`` order) since the URL's
    #: previous crawl; ``None``: not recorded (no ping log)
    signals: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Window:
    """A change log's window: its earliest and latest change time (unix s)."""

    start_s: float
    stop_s: float


@dataclass
class ImportCounts:
    """Observations skipped because they are not after the URL's previous one."""

    out_of_order: int = 0
    first_skipped: list[tuple[str, float, float]] = field(default_factory=list)
    #: changes in the same millisecond as their URL's previous change (one change: not
    #: an error)
    same_instant: int = 0

    def skip(self, url: str, time_s: float, previous_s: float) -> None:
        self.out_of_order += 1
        if len(self.first_skipped) < FIRST_SKIPPED:
            self.first_skipped.append((url, time_s, previous_s))

    def summary(self) -> list[str]:
        """Lines for a command's summary (empty when nothing was skipped or merged)."""
        out = []
        if self.same_instant:
            out.append(f"{self.same_instant} changes in the same millisecond as their URL's "
                       "previous change: one change each")
        if not self.out_of_order:
            return out
        out += [f"{self.out_of_order} observations not after their URL's previous one: "
               "skipped (a URL's changes or captures must come in time order)"]
        out += [f"  {u} at {t:.3f} s (previous {p:.3f} s)" for u, t, p in self.first_skipped]
        more = self.out_of_order - len(self.first_skipped)
        if more > 0:
            out.append(f"  ... and {more} more")
        return out


def crawls_of(records: Iterable[Page | Change | Capture], window: Window | None = None,
              counts: ImportCounts | None = None, eps_s: float = EPS_S, *,
              pings: PingIndex | None = None,
              changes_per_url: Mapping[str, int] | None = None) -> Iterator[Crawl]:
    """The crawls of a history's records (see the module docstring).

    ``window`` is required when the records hold changes (a change log) and unused for
    captures.  ``pings``: the ping log's pings of the history's URLs; with a change log,
    ``changes_per_url`` then gives each URL's changes after the window's start (the grid's
    period).  Deterministic: the same records give the same crawls in the same order.
    """
    if pings is not None:
        yield from _crawls_with_pings(records, window, counts or ImportCounts(), pings,
                                      changes_per_url or {})
        return
    skipped = counts if counts is not None else ImportCounts()
    last: dict[str, float] = {}
    complete = False
    for rec in records:
        if type(rec) is Capture:
            t = ms(rec.time_s)
            prev = last.get(rec.url)
            if prev is not None and t <= prev:
                skipped.skip(rec.url, t, prev)
                continue
            last[rec.url] = t
            yield Crawl(rec.url, t, rec.changed if prev is not None else None)
        elif type(rec) is Change:
            if window is None:
                raise ValueError("a change log's crawls need its window (earliest and latest "
                                 "change time)")
            complete = True
            start = ms(window.start_s)
            prev = last.get(rec.url)
            if prev is None:
                last[rec.url] = prev = start
                yield Crawl(rec.url, start, None)
            c = ms(rec.time_s)
            if c <= start:  # already in the copy the window starts with
                continue
            if c == prev:  # the previous change's millisecond: that change
                skipped.same_instant += 1
                continue
            if c < prev:
                skipped.skip(rec.url, c, prev)
                continue
            before = ms(c - min(eps_s, (c - prev) / 2.0))
            if prev < before < c:
                yield Crawl(rec.url, before, False)
            last[rec.url] = c
            yield Crawl(rec.url, c, True)
        elif type(rec) is Page and window is not None and rec.url not in last:
            # a declared page of a change log: its interval starts with the window
            complete = True
            last[rec.url] = ms(window.start_s)
            yield Crawl(rec.url, last[rec.url], None)
    if complete and window is not None:
        stop = ms(window.stop_s)
        for url, prev in last.items():
            if stop > prev:
                yield Crawl(url, stop, False)


@dataclass
class _Url:
    """A URL's progress through a change log with its pings."""

    last: float  # its last crawl (ms)
    last_change: float  # its last change (ms; the window's start before any)
    times: npt.NDArray[np.float64]  # its pings (ms, ascending)
    sources: npt.NDArray[np.int8]
    counted: int  # its pings up to the last crawl (or the window's start)
    start: float  # the window's start (unrounded)
    period: float  # the grid's
    n_grid: int  # the grid's points
    k: int = 1  # the next grid point
    dirty: bool = False  # a change since the last crawl


def _signals(u: _Url, t: float) -> tuple[int, ...]:
    hi = int(np.searchsorted(u.times, t, side="right"))
    got = np.bincount(u.sources[u.counted:hi], minlength=len(SOURCES))
    u.counted = hi
    return tuple(int(x) for x in got)


def _crawls_before(url: str, u: _Url, limit: float) -> Iterator[Crawl]:
    """The URL's crawls at its pings and grid points after its last crawl, before
    ``limit``."""
    while True:
        while u.k <= u.n_grid and ms(u.start + u.period * u.k) <= u.last:
            u.k += 1
        grid = ms(u.start + u.period * u.k) if u.k <= u.n_grid else np.inf
        ping = float(u.times[u.counted]) if u.counted < u.times.size else np.inf
        t = min(grid, ping)
        if t >= limit:
            return
        yield Crawl(url, t, u.dirty, _signals(u, t))
        u.last, u.dirty = t, False


def _crawls_with_pings(records: Iterable[Page | Change | Capture], window: Window | None,
                       skipped: ImportCounts, pings: PingIndex,
                       changes_per_url: Mapping[str, int]) -> Iterator[Crawl]:
    """:func:`crawls_of` with a ping log (the module docstring)."""
    caps: dict[str, tuple[float, int]] = {}  # captures: the last time, the pings counted
    urls: dict[str, _Url] = {}

    def begin(url: str) -> _Url:
        assert window is not None
        start = ms(window.start_s)
        t, src = pings.of(url)
        n = changes_per_url.get(url, 0)
        u = urls[url] = _Url(start, start, t, src, int(np.searchsorted(t, start, "right")),
                             window.start_s, (window.stop_s - window.start_s) / (n + 1), n)
        return u

    for rec in records:
        if type(rec) is Capture:
            t = ms(rec.time_s)
            seen = caps.get(rec.url)
            times, src = pings.of(rec.url)
            hi = int(np.searchsorted(times, t, side="right"))
            if seen is None:
                caps[rec.url] = (t, hi)
                yield Crawl(rec.url, t, None)
                continue
            prev, lo = seen
            if t <= prev:
                skipped.skip(rec.url, t, prev)
                continue
            caps[rec.url] = (t, hi)
            got = np.bincount(src[lo:hi], minlength=len(SOURCES))
            yield Crawl(rec.url, t, rec.changed, tuple(int(x) for x in got))
        elif type(rec) is Change:
            if window is None:
                raise ValueError("a change log's crawls need its window (earliest and latest "
                                 "change time)")
            u = urls.get(rec.url)
            if u is None:
                u = begin(rec.url)
                yield Crawl(rec.url, u.last, None)
            c = ms(rec.time_s)
            if c <= ms(u.start):  # already in the copy the window starts with
                continue
            if c == u.last_change:
                skipped.same_instant += 1
                continue
            if c < u.last_change:
                skipped.skip(rec.url, c, u.last_change)
                continue
            yield from _crawls_before(rec.url, u, c)
            u.last_change, u.dirty = c, True
        elif type(rec) is Page and window is not None and rec.url not in urls:
            u = begin(rec.url)
            yield Crawl(rec.url, u.last, None)
    if window is not None and urls:
        stop = ms(window.stop_s)
        for url, u in urls.items():
            yield from _crawls_before(url, u, stop)
            if stop > u.last:
                yield Crawl(url, stop, u.dirty, _signals(u, stop))


def in_time_order(crawls: Iterable[Crawl], spread: int = SPREAD) -> Iterator[Crawl]:
    """``crawls`` in time order within consecutive runs of ``spread``: a URL's crawls keep
    their order (each comes after the URL's previous one in time, and the runs follow one
    another), and the URLs interleave.  A worker applies one outcome of a URL per round
    trip to Redis, so a file sorted by URL (a CDX index) sent as it is reads one outcome
    per round trip; in time order a round trip carries many pages.  Deterministic (a
    stable sort), so a resumed import counts the same sequence."""
    run: list[Crawl] = []
    for c in crawls:
        run.append(c)
        if len(run) >= spread:
            run.sort(key=_time)
            yield from run
            run = []
    run.sort(key=_time)
    yield from run


def _time(c: Crawl) -> float:
    return c.time_s
