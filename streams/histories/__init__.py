"""Change histories people have, read as a stream of pages, changes and captures.

``read_history(path)`` yields :class:`Page`, :class:`Change` and :class:`Capture` records
from one of four formats (``fmt``, guessed from the name when ``None``):

=========  ====================================================================================
changes    change log, JSON Lines (``.jsonl``): :mod:`.changelog`, ``docs/schemas/changes.json``
cdx        CDX / CDXJ capture index (``.cdx``, ``.cdxj``): :mod:`.cdx`
warc       WARC captures (``.warc``, ``.warc.gz``): :mod:`.warc`
kolobov    Kolobov et al. crawl-history folder (holding ``url_urlid_hostid.txt``): :mod:`.kolobov`
=========  ====================================================================================

Every reader streams: memory does not grow with the number of lines (CDX and WARC keep one
compact entry per distinct URL, :mod:`.captures`).  A bad line is counted in the
:class:`ReadReport` passed as ``report`` with its line number and reason, or raises
:class:`HistoryError` with ``strict=True``.  ``.gz`` change logs and CDX files are read
through gzip.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Literal

from streams.histories.cdx import read_cdx
from streams.histories.changelog import read_changes
from streams.histories.kolobov import URLS, read_kolobov
from streams.histories.records import (
    BadLine,
    Capture,
    Change,
    HistoryError,
    Page,
    ReadReport,
)
from streams.histories.warc import read_warc

__all__ = [
    "FORMATS",
    "BadLine",
    "Capture",
    "Change",
    "HistoryError",
    "Page",
    "ReadReport",
    "guess_format",
    "read_history",
]

Format = Literal["changes", "cdx", "warc", "kolobov"]
FORMATS: tuple[Format, ...] = ("changes", "cdx", "warc", "kolobov")


def guess_format(path: str | Path) -> Format:
    """The format of ``path`` from its name (a folder: Kolobov et al.'s files)."""
    p = Path(path)
    if p.is_dir():
        if (p / URLS).exists():
            return "kolobov"
        raise HistoryError(str(p), 0, f"a folder without {URLS}: not a Kolobov et al. "
                           "history; pass a file or fmt=")
    name = p.name.lower().removesuffix(".gz")
    for suffix, fmt in ((".jsonl", "changes"), (".cdxj", "cdx"), (".cdx", "cdx"),
                        (".warc", "warc")):
        if name.endswith(suffix):
            return fmt  # type: ignore[return-value]
    raise HistoryError(str(p), 0, "cannot tell the format from the name (.jsonl, .cdx, "
                       ".cdxj, .warc, .warc.gz or a Kolobov folder); pass fmt=")


def _text(path: Path) -> IO[str]:
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8", errors="surrogateescape")
    return open(path, encoding="utf-8", errors="surrogateescape")


def read_history(path: str | Path, fmt: str | None = None, *, strict: bool = False,
                 report: ReadReport | None = None,
                 start_s: float = 0.0) -> Iterator[Page | Change | Capture]:
    """Records of a history file, streamed (see the module docstring).

    ``report`` (optional) is filled as the records are read: lines, bad lines with their
    number and reason, skipped lines; read it after the iterator is exhausted.
    ``start_s``: the unix time a Kolobov et al. collection started (its files give days
    since then; the other formats carry their own times).
    """
    p = Path(path)
    chosen = guess_format(p) if fmt is None else fmt
    if chosen not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    rep = report if report is not None else ReadReport()
    rep.path = str(p)
    if chosen == "kolobov":
        yield from read_kolobov(p, rep, strict=strict, start_s=start_s)
    elif chosen == "warc":
        with open(p, "rb") as fb:
            yield from read_warc(fb, rep, strict=strict)
    else:
        with _text(p) as ft:
            if chosen == "changes":
                yield from read_changes(ft, rep, strict=strict)
            else:
                yield from read_cdx(ft, rep, strict=strict)
