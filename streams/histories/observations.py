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

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from streams.histories.records import Capture, Change, Page

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
              counts: ImportCounts | None = None, eps_s: float = EPS_S) -> Iterator[Crawl]:
    """The crawls of a history's records (see the module docstring).

    ``window`` is required when the records hold changes (a change log) and unused for
    captures.  Deterministic: the same records give the same crawls in the same order.
    """
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
