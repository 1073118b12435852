"""What a history file holds: pages, complete change histories, archive captures.

* :class:`Page` - a page is known (with its importance).
* :class:`Change` - one change of a page at a unix time; a change log lists them all,
  so the page's history is complete.
* :class:`Capture` - one archive capture: whether the page changed since the URL's
  previous capture (``None`` for its first), an incompletely observed history.

:class:`ReadReport` counts what a reader read and the lines it refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streams.errors import RecrawlError

__all__ = ["BadLine", "Capture", "Change", "HistoryError", "Page", "ReadReport"]

#: bad lines kept with their reason in a :class:`ReadReport` (the rest are only counted)
FIRST_BAD = 20


@dataclass(frozen=True)
class Page:
    """A page of the history, ``importance`` > 0 (default 1)."""

    url: str
    importance: float = 1.0


@dataclass(frozen=True)
class Change:
    """One change of ``url`` at unix time ``time_s`` (a complete history lists every one)."""

    url: str
    time_s: float


@dataclass(frozen=True)
class Capture:
    """An archive capture of ``url`` at unix time ``time_s``.

    ``changed``: the page differs from the URL's previous capture (``None``: the URL's
    first capture, nothing to compare with).
    """

    url: str
    time_s: float
    changed: bool | None


@dataclass(frozen=True)
class BadLine:
    """A refused line: its 1-based number (record number for WARC) and why."""

    line: int
    reason: str


class HistoryError(RecrawlError):
    """A history file could not be read (``--strict``: its first bad line).

    Fix the line named in the message, or read without ``strict`` to skip and count bad
    lines.
    """

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}")
        self.path, self.line, self.reason = path, line, reason


@dataclass
class ReadReport:
    """Lines read and refused by one :func:`~streams.histories.read_history` call.

    ``lines`` counts the lines (records for WARC) read, ``bad`` those refused, ``skipped``
    those valid but not a page's state (e.g. a CDX capture with a 404 or a redirect);
    ``first_bad`` keeps the first :data:`FIRST_BAD` refused lines with their reason.
    """

    path: str = ""
    lines: int = 0
    bad: int = 0
    skipped: int = 0
    first_bad: list[BadLine] = field(default_factory=list)

    def refuse(self, line: int, reason: str, *, strict: bool) -> None:
        """Count a bad line (``strict``: raise :class:`HistoryError` instead)."""
        if strict:
            raise HistoryError(self.path, line, reason)
        self.bad += 1
        if len(self.first_bad) < FIRST_BAD:
            self.first_bad.append(BadLine(line, reason))

    def summary(self) -> str:
        """One line per refused line kept, after a count (for the end of a command)."""
        head = f"{self.path}: {self.lines} lines read, {self.bad} bad, {self.skipped} skipped"
        more = self.bad - len(self.first_bad)
        tail = [f"  line {b.line}: {b.reason}" for b in self.first_bad]
        if more > 0:
            tail.append(f"  ... and {more} more bad lines")
        return "\n".join([head, *tail])
