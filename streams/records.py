"""Validated input events (pydantic) and the rejects payload."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_URL_BYTES = 2048


def host_of(url: str) -> str:
    """The lower-cased host of an http(s) URL (the Kafka key and the Redis hash tag)."""
    return (urlsplit(url).hostname or "").lower()


def check_url(url: str) -> str:
    if len(url.encode()) > MAX_URL_BYTES:
        raise ValueError(f"url longer than {MAX_URL_BYTES} bytes")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"url scheme must be http or https, not {parts.scheme!r}")
    if not parts.hostname:
        raise ValueError("url has no host")
    return url


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=False, allow_inf_nan=False)

    url: str

    _check_url = field_validator("url")(classmethod(lambda cls, v: check_url(v)))

    @property
    def host(self) -> str:
        return host_of(self.url)


class PageEvent(_Event):
    """``recrawl.pages``: add or update a page, or delete it."""

    importance: float = Field(default=1.0, ge=0.0)
    change_rate_per_s: float | None = Field(default=None, ge=0.0)
    deleted: bool = False
    host_field: str | None = Field(default=None, alias="host")

    @model_validator(mode="after")
    def _host_matches(self) -> PageEvent:
        if self.host_field is not None and self.host_field.lower() != self.host:
            raise ValueError(f"host {self.host_field!r} does not match the url's host")
        return self


def reject_payload(
    raw: bytes | str | None, topic: str, partition: int, offset: int, reason: str
) -> dict[str, Any]:
    """What goes to ``recrawl.rejects``: the raw input, where it came from, and why."""
    if isinstance(raw, bytes):
        try:
            raw_text: str | None = raw.decode("utf-8")
            raw_b64 = None
        except UnicodeDecodeError:
            raw_text, raw_b64 = None, base64.b64encode(raw).decode()
    else:
        raw_text, raw_b64 = raw, None
    out: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "reason": reason,
        "raw": raw_text,
    }
    if raw_b64 is not None:
        out["raw_base64"] = raw_b64
    return out
