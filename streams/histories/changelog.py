"""The change log: JSON Lines, one page declaration or one change per line.

``{"url": U, "page": true}`` declares a page (optional ``"importance"`` > 0, default 1);
``{"url": U, "time": T}`` is one change of ``U`` at unix time ``T`` (seconds, integer or
float).  A change of an undeclared URL declares it (the consumer's rule: the reader
yields what each line says and keeps no per-URL state).  Schema:
``docs/schemas/changes.json``.  Example::

    {"url": "https://example.org/", "page": true, "importance": 2.5}
    {"url": "https://example.org/", "time": 1700000000}
    {"url": "https://example.org/news", "time": 1700003600.5}

Blank lines are skipped; anything else that is not one of the two shapes is a bad line.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import IO, Any

from streams.histories.records import Change, Page, ReadReport

__all__ = ["parse_change_line", "read_changes"]

#: keys a line may carry (anything else is refused: a misspelt key is not silently lost)
_PAGE_KEYS = frozenset({"url", "page", "importance"})
_CHANGE_KEYS = frozenset({"url", "time"})
#: one decoder for every line (``json.loads`` builds its call path on each call)
_decode = json.JSONDecoder().decode


def _number(v: Any) -> bool:
    t = type(v)
    if t is float:  # the common cases first: a JSON number is a float or an int
        return math.isfinite(v)
    if t is int:
        return True
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def url_object(text: str) -> dict[str, Any] | str | None:
    """One JSON Lines line as an object with a non-empty string ``url``, ``None`` for a
    blank line, or the reason it is not one (a change log's and a ping log's lines)."""
    if not text or text.isspace():
        return None
    try:
        obj = _decode(text)  # surrounding whitespace (the newline) is allowed
    except json.JSONDecodeError as exc:
        return f"not JSON: {exc.msg} at column {exc.colno}"
    if not isinstance(obj, dict):
        return f"not a JSON object: {type(obj).__name__}"
    url = obj.get("url")
    if not isinstance(url, str) or not url:
        return "'url' missing or not a non-empty string"
    return obj


def parse_change_line(text: str) -> Page | Change | str | None:
    """The record of one line, ``None`` for a blank line, or the reason it is bad."""
    obj = url_object(text)
    if obj is None or isinstance(obj, str):
        return obj
    url = obj["url"]
    if "time" in obj:
        if not obj.keys() <= _CHANGE_KEYS:
            return f"unknown keys for a change: {sorted(set(obj) - _CHANGE_KEYS)}"
        t = obj["time"]
        if not _number(t):
            return f"'time' must be a finite number of unix seconds, got {t!r}"
        return Change(url, float(t))
    if obj.get("page") is True:
        extra = set(obj) - _PAGE_KEYS
        if extra:
            return f"unknown keys for a page: {sorted(extra)}"
        imp = obj.get("importance", 1.0)
        if not _number(imp) or imp <= 0:
            return f"'importance' must be a finite number > 0, got {imp!r}"
        return Page(url, float(imp))
    return "neither a change ('time') nor a page declaration ('page': true)"


def read_changes(stream: IO[str], report: ReadReport, *, strict: bool) -> Iterator[Page | Change]:
    """Records of a change log, line by line (constant memory)."""
    n = report.lines
    try:
        for n, line in enumerate(stream, 1):
            got = parse_change_line(line)
            if got is None:
                continue
            if type(got) is str:
                report.lines = n
                report.refuse(n, got, strict=strict)
                continue
            yield got  # type: ignore[misc]
    finally:
        report.lines = n
