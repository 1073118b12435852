"""The crawl-history files of Kolobov et al. (SIGIR 2019; NeurIPS 2019).

A folder with three tab-separated files (the data set's README):

* ``url_urlid_hostid.txt``: ``URL  URL_ID  Host_ID``;
* ``urlid_imp.txt``: ``URL_ID  importance`` (optional: importance 1 without it);
* ``urlid_offset_history.txt``: ``URL_ID  first_offset_days  [[gap_days, changed], ...]``:
  the URL's first crawl ``first_offset_days`` after the collection started, then each
  further crawl ``gap_days`` after the previous one with ``changed`` 1 when the page
  changed since it.

Read as :class:`~streams.histories.records.Page` (URL and importance) then its
:class:`~streams.histories.records.Capture`\\ s (the first with ``changed=None``), at
``time_s = start_s + offset_days * 86400`` (``start_s`` = 0 by default: the data set does
not give the calendar date).  The three files are joined on ``URL_ID`` while streaming, so
each must list its IDs in ascending order (as the published files do); a line out of
order is a bad line.  Memory is constant.  Line numbers in the report are
``urlid_offset_history.txt``'s, or the other file's named in the reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from streams.histories.records import Capture, Page, ReadReport

__all__ = ["HISTORY", "IMPORTANCE", "URLS", "read_kolobov"]

URLS = "url_urlid_hostid.txt"
IMPORTANCE = "urlid_imp.txt"
HISTORY = "urlid_offset_history.txt"
DAY_S = 86400.0


class _Keyed:
    """A tab-separated file read in ascending ``URL_ID`` order, one row at a time."""

    def __init__(self, stream: IO[str] | None, id_col: int, ncols: int, name: str,
                 report: ReadReport, strict: bool) -> None:
        self._it = iter(stream) if stream is not None else iter(())
        self._id_col, self._ncols, self._name = id_col, ncols, name
        self._report, self._strict = report, strict
        self.line = 0
        self.last = -1
        self.row: tuple[int, list[str]] | None = None
        self._advance()

    def _advance(self) -> None:
        for raw in self._it:
            self.line += 1
            text = raw.rstrip("\r\n")
            if not text.strip():
                continue
            cols = text.split("\t")
            if len(cols) < self._ncols:
                self._bad(f"{len(cols)} tab-separated fields, expected {self._ncols}")
                continue
            try:
                key = int(cols[self._id_col])
            except ValueError:
                self._bad(f"URL_ID {cols[self._id_col]!r} is not an integer")
                continue
            if key <= self.last:
                self._bad(f"URL_ID {key} after {self.last}: IDs must ascend")
                continue
            self.last = key
            self.row = (key, cols)
            return
        self.row = None

    def _bad(self, reason: str) -> None:
        self._report.refuse(self.line, f"{self._name} line {self.line}: {reason}",
                            strict=self._strict)

    def take(self, key: int) -> list[str] | None:
        """The row of ``key`` (rows with smaller IDs are passed over), or None."""
        while self.row is not None and self.row[0] < key:
            self._advance()
        if self.row is not None and self.row[0] == key:
            cols = self.row[1]
            self._advance()
            return cols
        return None


def _history(cols: list[str]) -> tuple[float, list[tuple[float, bool]]] | str:
    try:
        first = float(cols[1])
        pairs = json.loads("\t".join(cols[2:]))
    except (ValueError, json.JSONDecodeError) as exc:
        return f"unreadable offset or history: {exc}"
    if not math.isfinite(first) or first < 0:
        return f"first crawl offset {cols[1]!r} must be a finite number >= 0"
    if not isinstance(pairs, list):
        return "history is not a list of [gap_days, changed] pairs"
    out: list[tuple[float, bool]] = []
    for p in pairs:
        if (not isinstance(p, list) or len(p) != 2
                or not isinstance(p[0], int | float) or isinstance(p[0], bool)
                or not math.isfinite(p[0]) or p[0] < 0 or p[1] not in (0, 1)):
            return f"history item {p!r} is not [gap_days >= 0, 0 or 1]"
        out.append((float(p[0]), bool(p[1])))
    return first, out


def read_kolobov(folder: Path, report: ReadReport, *, strict: bool,
                 start_s: float = 0.0) -> Iterator[Page | Capture]:
    """Pages and captures of a Kolobov et al. folder, joined on ``URL_ID`` (streamed)."""
    imp_path = folder / IMPORTANCE
    with (open(folder / URLS, encoding="utf-8") as urls_f,
          open(folder / HISTORY, encoding="utf-8") as hist_f,
          (open(imp_path, encoding="utf-8") if imp_path.exists() else _null()) as imp_f):
        urls = _Keyed(urls_f, 1, 3, URLS, report, strict)
        imps = _Keyed(imp_f, 0, 2, IMPORTANCE, report, strict)
        hist = _Keyed(hist_f, 0, 3, HISTORY, report, strict)
        while hist.row is not None:
            key, cols = hist.row
            line = hist.line
            hist.take(key)
            report.lines = line
            url_cols = urls.take(key)
            if url_cols is None:
                report.refuse(line, f"URL_ID {key} is not in {URLS}", strict=strict)
                continue
            got = _history(cols)
            if isinstance(got, str):
                report.refuse(line, got, strict=strict)
                continue
            imp_cols = imps.take(key)
            imp = 1.0
            if imp_cols is not None:
                try:
                    imp = float(imp_cols[1])
                except ValueError:
                    imp = math.nan
                if not (math.isfinite(imp) and imp > 0):
                    report.refuse(imps.line, f"{IMPORTANCE}: importance {imp_cols[1]!r} of "
                                  f"URL_ID {key} must be > 0", strict=strict)
                    imp = 1.0
            url = url_cols[0]
            first, pairs = got
            yield Page(url, imp)
            t = first
            yield Capture(url, start_s + t * DAY_S, None)
            for gap, changed in pairs:
                t += gap
                yield Capture(url, start_s + t * DAY_S, changed)


class _null:
    """An empty text stream usable in ``with``."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
