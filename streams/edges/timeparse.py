"""W3C datetimes (the sitemaps protocol's ``lastmod``) and HTTP dates."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime, parsedate_to_datetime

__all__ = ["format_w3c_datetime", "http_date", "parse_http_date", "parse_w3c_datetime"]

_W3C = re.compile(
    r"^(?P<y>\d{4})(?:-(?P<m>\d{2})(?:-(?P<d>\d{2})"
    r"(?:[T ](?P<H>\d{2}):(?P<M>\d{2})(?::(?P<S>\d{2})(?P<frac>\.\d{1,9})?)?"
    r"(?P<tz>Z|[+-]\d{2}:?\d{2})?)?)?)?$"
)


def parse_w3c_datetime(text: str) -> float:
    """Epoch seconds of a W3C datetime (``YYYY``, ``YYYY-MM-DD``, ``...Thh:mm:ss.sTZD``).

    A date without a zone is taken as UTC.  Raises ``ValueError`` on anything else.
    """
    m = _W3C.match(text.strip())
    if m is None:
        raise ValueError(f"not a W3C datetime: {text[:64]!r}")
    g = m.groupdict()
    tz: timezone = UTC
    if g["tz"] and g["tz"] != "Z":
        sign = 1 if g["tz"][0] == "+" else -1
        digits = g["tz"][1:].replace(":", "")
        tz = timezone(sign * timedelta(hours=int(digits[:2]), minutes=int(digits[2:])))
    dt = datetime(
        int(g["y"]),
        int(g["m"] or 1),
        int(g["d"] or 1),
        int(g["H"] or 0),
        int(g["M"] or 0),
        int(g["S"] or 0),
        tzinfo=tz,
    )
    frac = float(g["frac"]) if g["frac"] else 0.0
    return dt.timestamp() + frac


def format_w3c_datetime(epoch_s: float) -> str:
    """``2024-05-01T12:00:00.123456Z`` (microsecond precision, UTC)."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def http_date(epoch_s: float) -> str:
    return format_datetime(datetime.fromtimestamp(int(epoch_s), UTC), usegmt=True)


def parse_http_date(text: str) -> float | None:
    try:
        return parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError):
        return None
