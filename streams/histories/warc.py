"""WARC files (ISO 28500; plain or gzip per record), read with warcio.

Each ``response`` record is a capture of its ``WARC-Target-URI`` at its ``WARC-Date``
with its ``WARC-Payload-Digest`` (computed as SHA-1 of the payload when the record has
none); a ``revisit`` record is a capture whose payload equals an earlier one (its digest
is that payload's).  Responses with an HTTP status other than 2xx are skipped and counted;
other record types (``request``, ``warcinfo``, ``metadata``...) are ignored.  A record
without a target URI or with an unreadable date is bad; "line" numbers are record numbers
(1-based), and the reason gives the record's byte offset.  A stream that is not WARC from
some point on ends the read there with one bad record.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from datetime import datetime
from typing import IO

from streams.histories.captures import DigestMemory
from streams.histories.records import Capture, ReadReport

__all__ = ["read_warc", "warc_time_s"]


def warc_time_s(text: str) -> float | str:
    """Unix seconds of a ``WARC-Date`` (W3C ISO 8601, UTC), or why it is bad."""
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return f"WARC-Date {text!r} is not an ISO 8601 date"
    if dt.tzinfo is None:
        return f"WARC-Date {text!r} has no time zone (WARC dates are UTC, ending in Z)"
    return dt.timestamp()


def read_warc(stream: IO[bytes], report: ReadReport, *, strict: bool) -> Iterator[Capture]:
    """Captures of a WARC file, record by record; memory: one
    :class:`~streams.histories.captures.DigestMemory` entry per distinct URL."""
    from warcio.archiveiterator import ArchiveIterator
    from warcio.exceptions import ArchiveLoadFailed

    memory = DigestMemory()
    it = ArchiveIterator(stream, no_record_parse=False)
    n = 0
    while True:
        try:
            record = next(it)
        except StopIteration:
            return
        except (ArchiveLoadFailed, ValueError, EOFError, OSError) as exc:
            report.lines = n + 1
            report.refuse(n + 1, f"not a WARC record from here on: {exc}", strict=strict)
            return
        n += 1
        report.lines = n
        kind = record.rec_type
        if kind not in ("response", "revisit"):
            continue
        offset = it.get_record_offset()
        url = record.rec_headers.get_header("WARC-Target-URI")
        if not url:
            report.refuse(n, f"{kind} record at byte {offset} has no WARC-Target-URI",
                          strict=strict)
            continue
        t = warc_time_s(record.rec_headers.get_header("WARC-Date") or "")
        if isinstance(t, str):
            report.refuse(n, f"record at byte {offset}: {t}", strict=strict)
            continue
        if kind == "response" and record.http_headers is not None:
            status = record.http_headers.get_statuscode() or ""
            if not status.startswith("2"):
                report.skipped += 1
                continue
        digest = record.rec_headers.get_header("WARC-Payload-Digest")
        if not digest:
            if kind == "revisit":
                report.refuse(n, f"revisit record at byte {offset} has no WARC-Payload-Digest",
                              strict=strict)
                continue
            h = hashlib.sha1()
            body = record.content_stream()
            while chunk := body.read(1 << 16):
                h.update(chunk)
            digest = "sha1:" + base64.b32encode(h.digest()).decode()
        changed = memory.observe(url, t, digest)
        if isinstance(changed, str):
            report.refuse(n, f"record at byte {offset}: {changed}", strict=strict)
            continue
        yield Capture(url, t, changed)
