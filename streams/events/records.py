"""Validated input events (pydantic), the order we emit, and the rejects payload.

Every input topic carries JSON values keyed by host bytes (see ``docs/schemas/``).  The
models are strict about types (``"3"`` is not a number, ``"yes"`` is not a boolean), reject
NaN and infinities, non-http(s) or over-long URLs, a ``host`` that does not match the URL
and timestamps too far in the future (``context={"now_s": ..., "max_future_s": ...}``).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import math
import re
from typing import Annotated, Any, Literal

from aiokafka.partitioner import murmur2
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from streams.events.urls import canonical_host, canonical_url, host_of_canonical, url_host

__all__ = [
    "MAX_BUDGET_PER_S",
    "MAX_DEAD_LETTER_REASON_CHARS",
    "MAX_IMPORTANCE",
    "MAX_IN_FLIGHT",
    "MAX_RATE_PER_S",
    "MAX_REASON_CHARS",
    "MAX_REJECT_KEY_BYTES",
    "MAX_REJECT_RAW_BYTES",
    "MAX_REJECT_RECORD_BYTES",
    "MAX_SECONDS",
    "MIN_CHANGE_RATE_PER_S",
    "SOURCES",
    "ControlEvent",
    "HostEvent",
    "HostSource",
    "Order",
    "OutcomeEvent",
    "PageEvent",
    "PingEvent",
    "Source",
    "Timestamp",
    "check_url",
    "cut_key",
    "dead_letter_payload",
    "finite",
    "host_of",
    "reject_payload",
    "shard_of",
    "validation_reason",
]

#: Ping sources, in the order of the per-source counters kept for each page.
SOURCES: tuple[str, ...] = ("sitemap", "indexnow", "websub", "cdn", "other")
Source = Literal["sitemap", "indexnow", "websub", "cdn", "other"]
#: the most pings of one source a page record counts between two crawls (uint16)
SIGNAL_COUNT_MAX = 65535

_HOST_RE = re.compile(r"^[a-z0-9]([a-z0-9\-_.]*[a-z0-9])?$|^[0-9a-f:.]+$")


@functools.lru_cache(maxsize=1 << 16)
def shard_of(host: str, partitions: int) -> int:
    """The partition a host's events belong on: Kafka's default partitioner (murmur2 of the
    key, as the Java clients and aiokafka; librdkafka needs ``partitioner=murmur2_random``).
    Cached: aiokafka's murmur2 is pure Python, and the agents ask it for every event (6.8%
    of the worker's loop in the pings phase of ``bench_e2e.py throughput``)."""
    return int(murmur2(host.encode()) & 0x7FFFFFFF) % partitions


def host_of(url: str) -> str:
    """The canonical host of an http(s) URL (the Kafka key and the Redis hash tag;
    :mod:`streams.events.urls`); ``""`` if it is not one."""
    try:
        return url_host(url)
    except ValueError:
        return ""


def check_url(url: str) -> str:
    """The canonical form of ``url`` (:func:`streams.events.urls.canonical_url`): every entrance
    stores and compares this; ``ValueError`` with the reason if it is not an absolute
    http(s) URL."""
    return canonical_url(url)


def _check_time(value: float | None, info: ValidationInfo, name: str) -> float | None:
    if value is None:
        return None
    ctx = info.context or {}
    now_s, max_future_s = ctx.get("now_s"), ctx.get("max_future_s")
    if now_s is not None and max_future_s is not None and value > now_s + max_future_s:
        raise ValueError(
            f"{name} is {value - now_s:.0f} s in the future (more than {max_future_s:.0f} s)"
        )
    return value


#: Bounds of the schema's numbers, so that every schema-valid event gives finite crawl
#: values and fits the store (docs/streaming.md "Bounds"):
MAX_IMPORTANCE = 1e12  #: ``mu``; ratios of importance beyond 1e12 mean nothing for a budget
MIN_CHANGE_RATE_PER_S = 1e-12  #: a change per ~31,700 years; 0 is allowed (never changes)
MAX_RATE_PER_S = 1e6  #: change rates, host capacities (1e6/s is far beyond any host)
MAX_IN_FLIGHT = 1_000_000
MAX_BUDGET_PER_S = 1e9
MAX_SECONDS = 1e10  #: durations (t_delay, timeouts, max interval): ~317 years

_CONFIG = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False, populate_by_name=True)
Timestamp = Field(ge=0.0)


class _Event(BaseModel):
    model_config = _CONFIG

    url: str

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        return check_url(v)

    @functools.cached_property
    def host(self) -> str:
        """The url's canonical host (read once per event: the agents read it often), off the
        url, which validation made canonical."""
        return host_of_canonical(self.url)


def _same_host(host: str) -> str:
    try:
        return canonical_host(host)
    except ValueError:
        return host


class PageEvent(_Event):
    """``recrawl.pages``: add or update a page, or delete it."""

    importance: float = Field(default=1.0, ge=0.0, le=MAX_IMPORTANCE)
    change_rate_per_s: float | None = Field(default=None, ge=0.0, le=MAX_RATE_PER_S)
    deleted: bool = False
    host_field: str | None = Field(default=None, alias="host")

    @field_validator("change_rate_per_s")
    @classmethod
    def _rate(cls, v: float | None) -> float | None:
        if v is not None and 0.0 < v < MIN_CHANGE_RATE_PER_S:
            raise ValueError(f"change_rate_per_s must be 0 or at least {MIN_CHANGE_RATE_PER_S:g}"
                             " (one change in ~31,700 years)")
        return v

    @model_validator(mode="after")
    def _host_matches(self) -> PageEvent:
        if self.host_field is not None and _same_host(self.host_field) != self.host:
            raise ValueError(f"host {self.host_field!r} does not match the url's host")
        return self


class PingEvent(_Event):
    """``recrawl.pings``: a change-indicating signal."""

    source: Source
    changed_at: float | None = Field(default=None, ge=0.0)
    received_at: float = Field(ge=0.0)
    id: str | None = Field(default=None, max_length=256)

    @field_validator("changed_at", "received_at")
    @classmethod
    def _not_future(cls, v: float | None, info: ValidationInfo) -> float | None:
        return _check_time(v, info, info.field_name or "time")

    @property
    def source_index(self) -> int:
        return SOURCES.index(self.source)

    def fingerprint(self) -> str:
        """Duplicate pings share this: the id if any, else url + source + change time,
        else (no change time either) url + source + receive time.  The content of the
        event, not its offset: a copy of the same ping produced again (a producer's retry,
        a record re-routed twice from a wrong partition) has another offset and the same
        fingerprint; two pings of a page that say nothing but "it changed" differ by when
        they were received."""
        if self.id:
            return f"i:{self.source}:{self.id}"
        if self.changed_at is not None:
            return f"u:{self.url}|{self.source}|{self.changed_at!r}"
        return f"r:{self.url}|{self.source}|{self.received_at!r}"


class OutcomeEvent(_Event):
    """``recrawl.outcomes``: the result of a fetch."""

    order_id: str | None = Field(default=None, max_length=128)
    fetched_at: float = Field(ge=0.0)
    status: int | None = Field(default=None, ge=0, le=999)
    error: str | None = Field(default=None, max_length=2048)
    changed: bool | None
    digest: str | None = Field(default=None, max_length=256)
    #: the page was not fetched because the host's robots.txt disallows it (RFC 9309): the
    #: worker stops ordering it until the host's robots.txt changes (``HostEvent.robots_digest``)
    disallowed: bool = False
    #: digest of the robots.txt that disallowed it (a late outcome of an older robots.txt
    #: does not block the page again)
    robots_digest: str | None = Field(default=None, max_length=128)
    #: false: the pings during the interval this outcome ends were not recorded (an outcome
    #: from a history, ``recrawl import``): the interval teaches the page's change rate, not
    #: its ping sources' quality (``streams.estimates.estimation.Observation.signals_known``)
    signals_known: bool = True
    #: the pings of each source during the interval this outcome ends, as recorded elsewhere
    #: (a history's ping log, ``recrawl import --ping-log``; a source not listed: none);
    #: absent, the pings the worker received for the page since its last crawl
    signals: dict[Source, Annotated[int, Field(ge=0, le=SIGNAL_COUNT_MAX)]] | None = None

    @field_validator("fetched_at")
    @classmethod
    def _not_future(cls, v: float, info: ValidationInfo) -> float | None:
        return _check_time(v, info, "fetched_at")

    @model_validator(mode="after")
    def _signals_known(self) -> OutcomeEvent:
        if self.signals is not None and not self.signals_known:
            raise ValueError("signals are the interval's recorded pings: they cannot come "
                             "with signals_known false")
        return self

    def interval_signals(self, pending: tuple[int, ...]) -> tuple[int, ...]:
        """The interval's ping counts per source (``SOURCES`` order): ``signals`` when
        given, else ``pending`` (the page's counts since its last crawl)."""
        if self.signals is None:
            return pending
        given: dict[Any, int] = self.signals
        return tuple(given.get(src, 0) for src in SOURCES)


#: Who sets a host's capacity: the operator (the default, and the only one before sources
#: existed), the host's robots.txt (Crawl-delay) or the host's push-back (429/503 answers).
#: The host's capacity is the smallest of the three that are set.
HostSource = Literal["operator", "robots", "pushback"]


class HostEvent(BaseModel):
    """``recrawl.hosts``: a host's crawl capacity, set by one source.

    An event without ``source`` is the operator's and needs ``max_crawls_per_s`` (as before
    sources existed).  ``robots`` and ``pushback`` events come from the fetcher;
    ``max_crawls_per_s`` null lifts that source's limit (no Crawl-delay, push-back
    recovered).  ``robots_digest``: the host's robots.txt changed (the worker orders its
    disallowed pages again)."""

    model_config = _CONFIG

    host: str = Field(min_length=1, max_length=255)
    max_crawls_per_s: float | None = Field(default=None, gt=0.0, le=MAX_RATE_PER_S)
    max_in_flight: int | None = Field(default=None, ge=0, le=MAX_IN_FLIGHT)
    source: HostSource = "operator"
    #: why (shown by ``GET /hosts/{host}/``): "Crawl-delay 2", "HTTP 429, Retry-After 5"
    reason: str | None = Field(default=None, max_length=256)
    robots_digest: str | None = Field(default=None, max_length=128)

    @model_validator(mode="after")
    def _capacity(self) -> HostEvent:
        if self.source == "operator" and self.max_crawls_per_s is None:
            raise ValueError("max_crawls_per_s is required (source operator)")
        if self.source != "operator" and self.max_in_flight is not None:
            raise ValueError("max_in_flight is the operator's (source operator)")
        return self

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        v = canonical_host(v)
        if not _HOST_RE.match(v):
            raise ValueError(f"not a host name: {v!r}")
        return v


class ControlEvent(BaseModel):
    """``recrawl.control``: the global budget R and operational switches."""

    model_config = _CONFIG

    budget_per_s: float | None = Field(default=None, ge=0.0, le=MAX_BUDGET_PER_S)
    paused: bool | None = None
    t_delay_s: float | None = Field(default=None, ge=0.0, le=MAX_SECONDS)
    order_timeout_s: float | None = Field(default=None, gt=0.0, le=MAX_SECONDS)
    max_interval_s: float | None = Field(default=None, ge=0.0, le=MAX_SECONDS)

    @model_validator(mode="after")
    def _something(self) -> ControlEvent:
        if not self.fields():
            raise ValueError(
                "no setting given (budget_per_s, paused, t_delay_s, order_timeout_s, "
                "max_interval_s)"
            )
        return self

    def fields(self) -> dict[str, str]:
        """The settings this event changes, as Redis hash fields."""
        out: dict[str, str] = {}
        for name in ("budget_per_s", "t_delay_s", "order_timeout_s", "max_interval_s"):
            v = getattr(self, name)
            if v is not None:
                out[name] = repr(float(v))
        if self.paused is not None:
            out["paused"] = "1" if self.paused else "0"
        return out


class Order(BaseModel):
    """``recrawl.orders``: fetch this page now (the output)."""

    order_id: str
    url: str
    host: str
    issued_at: float
    crawl_value: float
    threshold: float
    #: effective time since the last crawl (s); null for a page never crawled (no copy yet)
    #: or one whose pings say it has certainly changed (tau_eff infinite)
    tau_eff: float | None
    policy: str


def validation_reason(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(message)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


#: The most bytes of an input event's value copied into its reject (the producer refuses a
#: record over 1 MB; a JSON escape takes up to 12 bytes per character).  The event itself
#: stays in its topic at the reject's topic/partition/offset: a cut copy loses nothing.
MAX_REJECT_RAW_BYTES = 64 * 1024
#: The most bytes of an input event's key copied into its reject, and the reject's own
#: Kafka key (a host name is at most 253 bytes; the broker takes a key of a megabyte).
MAX_REJECT_KEY_BYTES = 1024
MAX_REASON_CHARS = 2000
#: The longest reason (and reject error) kept in a dead-letter record
#: (:func:`dead_letter_payload`: under 4 kB JSON-encoded).
MAX_DEAD_LETTER_REASON_CHARS = 150
#: The largest reject :func:`reject_payload` can give, JSON-encoded: the cut value and key
#: at 6 bytes per byte (a control character's ``\u00XX``), base64 of either, the reason at
#: 12 bytes per character (a surrogate pair), and the fixed fields.  Below any producer's
#: limit (Faust's 1,000,000 bytes, Kafka's 1,048,588).
MAX_REJECT_RECORD_BYTES = (6 * MAX_REJECT_RAW_BYTES + 6 * MAX_REJECT_KEY_BYTES
                           + 12 * (MAX_REASON_CHARS + 3) + 4096)


def _text_or_base64(head: bytes, cut: bool) -> tuple[str | None, str | None]:
    """``head`` as UTF-8 text, else as base64 (a character split by the cut is dropped)."""
    try:
        return head.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        if cut and exc.start >= len(head) - 3:  # only the cut split a character
            try:
                return head[: exc.start].decode("utf-8"), None
            except UnicodeDecodeError:
                pass
        return None, base64.b64encode(head).decode()


def _as_bytes(x: bytes | str | None) -> bytes | None:
    return x.encode("utf-8", "surrogatepass") if isinstance(x, str) else x


def cut_key(key: bytes | str | None) -> bytes | None:
    """A reject's own Kafka key: the input's key, cut at :data:`MAX_REJECT_KEY_BYTES`."""
    data = _as_bytes(key)
    return data[:MAX_REJECT_KEY_BYTES] if data is not None else None


def reject_payload(
    raw: bytes | str | None, topic: str, partition: int, offset: int, reason: str,
    key: bytes | str | None = None,
) -> dict[str, Any]:
    """What goes to ``recrawl.rejects``: the raw input (its first
    :data:`MAX_REJECT_RAW_BYTES` bytes; ``raw_truncated``, ``raw_bytes`` and ``raw_sha256``
    when cut), its key the same way (``key``/``key_base64``, cut at
    :data:`MAX_REJECT_KEY_BYTES`: ``key_truncated``, ``key_bytes``, ``key_sha256``), where it
    came from, and why.  JSON-encoded it is at most :data:`MAX_REJECT_RECORD_BYTES`."""
    data = _as_bytes(raw)
    cut = data is not None and len(data) > MAX_REJECT_RAW_BYTES
    raw_text: str | None = None
    raw_b64: str | None = None
    if data is not None:
        raw_text, raw_b64 = _text_or_base64(data[:MAX_REJECT_RAW_BYTES], cut)
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[:MAX_REASON_CHARS] + "..."
    out: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "reason": reason,
        "raw": raw_text,
    }
    if raw_b64 is not None:
        out["raw_base64"] = raw_b64
    if cut:
        assert data is not None
        out["raw_truncated"] = True
        out["raw_bytes"] = len(data)
        out["raw_sha256"] = hashlib.sha256(data).hexdigest()
    kdata = _as_bytes(key)
    if kdata is not None:
        kcut = len(kdata) > MAX_REJECT_KEY_BYTES
        key_text, key_b64 = _text_or_base64(kdata[:MAX_REJECT_KEY_BYTES], kcut)
        if key_b64 is not None:
            out["key_base64"] = key_b64
        else:
            out["key"] = key_text
        if kcut:
            out["key_truncated"] = True
            out["key_bytes"] = len(kdata)
            out["key_sha256"] = hashlib.sha256(kdata).hexdigest()
    return out


def dead_letter_payload(
    raw: bytes | str | None, key: bytes | str | None, topic: str, partition: int,
    offset: int, reason: str, error: BaseException,
) -> dict[str, Any]:
    """What goes to ``recrawl.deadletter`` when even a reject could not be written: where
    the input is (topic, partition, offset: it stays there), why it was refused, why the
    reject failed, and the sizes and SHA-256 digests of its key and value; no copy of
    either, so the record is small (under 4 kB) whatever the input was."""
    if len(reason) > MAX_DEAD_LETTER_REASON_CHARS:
        reason = reason[:MAX_DEAD_LETTER_REASON_CHARS] + "..."
    out: dict[str, Any] = {"topic": topic, "partition": partition, "offset": offset,
                           "reason": reason,
                           "reject_error": repr(error)[:MAX_DEAD_LETTER_REASON_CHARS - 50]}
    for name, x in (("raw", _as_bytes(raw)), ("key", _as_bytes(key))):
        if x is not None:
            out[f"{name}_bytes"] = len(x)
            out[f"{name}_sha256"] = hashlib.sha256(x).hexdigest()
    return out


def finite(x: float) -> float:
    """``x`` if finite, else a large sentinel (JSON has no infinity)."""
    return x if math.isfinite(x) else (1e308 if x > 0 else -1e308)
