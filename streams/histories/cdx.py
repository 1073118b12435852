"""CDX and CDXJ capture indexes (Heritrix, pywb, Common Crawl): one capture per line.

Two layouts, told apart line by line:

* **CDXJ** (pywb, Common Crawl): ``urlkey timestamp {json}`` with ``"url"`` and
  ``"digest"`` (optional ``"status"``) in the JSON block::

    org,example)/ 20240101120000 {"url": "https://example.org/", "digest": "AB..", "status": "200"}

* **CDX** (space-separated): fields named by a header line `` CDX N b a m s k ...``
  (the legacy letters: ``N`` massaged URL, ``b`` timestamp, ``a`` original URL, ``s``
  status, ``k`` digest); without a header, the common 11-field order
  ``N b a m s k r M S V g``::

      org,example)/ 20240101120000 https://example.org/ text/html 200 AB.. - - 512 0 a.warc.gz

Timestamps are ``YYYYMMDDhhmmss`` in UTC (shorter ones are padded: ``2024`` is
2024-01-01 00:00:00).  A capture with a status other than 2xx or ``-`` (a revisit) is
skipped and counted.  Captures of one URL must be in time order (CDX files are sorted by
URL, then time).
"""

from __future__ import annotations

import calendar
import json
from collections.abc import Iterator
from typing import IO

from streams.histories.captures import DigestMemory
from streams.histories.records import Capture, ReadReport

__all__ = ["CDX11", "cdx_time_s", "read_cdx"]

#: the usual 11-field CDX order (Heritrix, wayback)
CDX11 = ["N", "b", "a", "m", "s", "k", "r", "M", "S", "V", "g"]


def cdx_time_s(stamp: str) -> float | str:
    """Unix seconds of a ``YYYYMMDDhhmmss`` timestamp (UTC), or why it is bad."""
    if not stamp.isdigit() or not 4 <= len(stamp) <= 14:
        return f"timestamp {stamp!r} is not 4-14 digits YYYYMMDDhhmmss"
    s = stamp.ljust(14, "0")
    y, mo, d = int(s[0:4]), int(s[4:6]) or 1, int(s[6:8]) or 1
    h, mi, se = int(s[8:10]), int(s[10:12]), int(s[12:14])
    if not (1 <= mo <= 12 and 1 <= d <= 31 and h < 24 and mi < 60 and se < 61):
        return f"timestamp {stamp!r} is not a valid date and time"
    return float(calendar.timegm((y, mo, d, h, mi, se, 0, 0, 0)))


def _ok_status(status: str) -> bool:
    return status == "-" or (len(status) == 3 and status.startswith("2") and status.isdigit())


def _fields(line: str, header: list[str] | None) -> tuple[str, str, str, str] | str:
    """``(url, timestamp, status, digest)`` of a CDX or CDXJ line, or why it is bad."""
    parts = line.split(" ", 2)
    if len(parts) == 3 and parts[2].lstrip().startswith("{"):
        try:
            obj = json.loads(parts[2])
        except json.JSONDecodeError as exc:
            return f"CDXJ block is not JSON: {exc.msg}"
        if not isinstance(obj, dict):
            return "CDXJ block is not a JSON object"
        url, digest = obj.get("url"), obj.get("digest")
        if not isinstance(url, str) or not url:
            return "CDXJ block has no 'url'"
        if not isinstance(digest, str) or not digest:
            return "CDXJ block has no 'digest'"
        return url, parts[1], str(obj.get("status", "200")), digest
    names = header or CDX11
    cols = line.split()
    if len(cols) != len(names):
        return f"{len(cols)} fields, the CDX header names {len(names)}"
    row = dict(zip(names, cols, strict=True))
    url = row.get("a") or row.get("N")
    if not url or "b" not in row or "k" not in row:
        return "CDX header lacks the URL (a/N), timestamp (b) or digest (k) field"
    return url, row["b"], row.get("s", "200"), row["k"]


def read_cdx(stream: IO[str], report: ReadReport, *, strict: bool) -> Iterator[Capture]:
    """Captures of a CDX or CDXJ file, line by line; memory: one
    :class:`~streams.histories.captures.DigestMemory` entry per distinct URL."""
    memory = DigestMemory()
    header: list[str] | None = None
    for n, raw in enumerate(stream, 1):
        report.lines = n
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        if line.startswith(" CDX ") or line.startswith("CDX "):
            header = line.split()[1:]
            continue
        got = _fields(line, header)
        if isinstance(got, str):
            report.refuse(n, got, strict=strict)
            continue
        url, stamp, status, digest = got
        t = cdx_time_s(stamp)
        if isinstance(t, str):
            report.refuse(n, t, strict=strict)
            continue
        if not _ok_status(status):
            report.skipped += 1
            continue
        changed = memory.observe(url, t, digest)
        if isinstance(changed, str):
            report.refuse(n, changed, strict=strict)
            continue
        yield Capture(url, t, changed)
