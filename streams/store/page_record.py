"""The page record: how one page is stored in ``P:{host}:pages`` (:mod:`streams.store.redis_store`
has the key layout).

Page record (version 3, little-endian): a fixed head of 14 bytes (``PAGE_HEAD_FORMAT`` =
``<BBfd``), then the optional fields its shape byte announces, ``14 + 4 p + 10 c + 6 n``
bytes in all (14 to 76):
a version byte ``0xA3``; a shape byte (bits 0-3: the count ``n`` of ping fingerprints kept,
0..8; bit 4 (``SHAPE_PRIOR``): a prior is stored (``p`` = 1); bit 5 (``SHAPE_COUNTS``): the
signal counts are stored (``c`` = 1); any other bit set is no page record); ``importance``
float32 (a weight: 7 digits are plenty, and a value beyond float32's range reads as
infinite, i.e. unusable, as before); ``last_crawl`` float64 (0 = never; a Unix time to the
microsecond needs 16 digits); if ``p``, the ``prior`` change rate float32 (absent: none; a
rate is an estimate, 7 digits suffice, smallest normal 1e-38/s); if ``c``, the five
per-source signal counts since the last crawl, uint16 (saturating at 65535; absent: all
zero); then ``n`` ping fingerprints, each a 48-bit unsigned integer (1..2^48-1) in 6 bytes
(digests of the page's last 8 pings that were not duplicates, any source, newest first: ping
dedup without a per-ping set, see ``streams/store/lua/apply_pings.lua``).
Writers store the prior only when there is one and the counts only when one is not zero: a
crawl (``apply_outcome.lua``) zeroes the counts and so drops them, an applied ping
(``apply_pings.lua``) adding a count to a page without them inserts them.
The Lua scripts pack and unpack it with Redis's built-in ``struct`` (a fingerprint is
``I6``: exact in a Lua number, a double); Python with :data:`PAGE_HEAD`, :data:`PRIOR`,
:data:`COUNTS` and :func:`pack_seen` / :func:`unpack_seen` (Python's ``struct`` has no
6-byte integer) and :data:`PAGE_HEAD_DTYPE` (numpy, for the rebuild, which reads one shape
and length at a time).
An estimator record (:mod:`streams.estimates.record`) may follow the page record in the same
value (:func:`page_length` tells where it starts).  A page record without one after it is
stored without its trailing zero bytes after the shape byte (a page never crawled nor
pinged, importance 1: 6 bytes; readers pad it to :func:`page_length`).  A crawled page with
one fingerprint, no prior, no signal since its crawl and no estimator record takes 20
bytes; with a prior, counts and 8 fingerprints, 76.
A value whose first byte is not ``0xA3``, or whose shape byte has a bit over bit 5 set or
counts more than 8 fingerprints, is no page record: Python's :meth:`PageState.decode`
raises ``ValueError`` and the scripts' ``load`` an error naming it.  Values reach Python
through a client decoding with ``surrogateescape`` (:meth:`Store.from_url`), so they stay
``str`` and round-trip byte for byte; :func:`record_bytes` gives the bytes back.

Ping dedup (``streams/store/lua/apply_pings.lua``): a ping whose fingerprint (its identity,
``PingEvent.fingerprint``: its id and source, else its change time, else its receive time)
is among the page record's last 8 is a duplicate.  It catches a ping re-sent or produced
twice (another offset) however late, as long as fewer than 8 other pings of that page came
in between; a redelivered event is caught before, by its offset.  It does not catch a repeat
after 8 or more other pings of the same page, nor the same ping id sent for two different
pages.  Fingerprints are 48 bits: a new ping is taken for a duplicate with probability at
most 8 / (2^48 - 1) = 2.8e-14 (a collision with one of the 8 kept; at 10^4 pings/s, one
lost ping in about 110 years: docs/streaming.md "Ping duplicates: collisions and replays").
"""

from __future__ import annotations

import hashlib
import math
import struct
from dataclasses import dataclass, field, replace

import numpy as np

from streams.events.records import SOURCES

__all__ = [
    "COUNTS",
    "FP_BYTES",
    "N_SEEN",
    "N_SOURCES",
    "PAGE_HEAD",
    "PAGE_HEAD_DTYPE",
    "PAGE_HEAD_FORMAT",
    "PAGE_VERSION",
    "PRIOR",
    "SHAPE_COUNTS",
    "SHAPE_PRIOR",
    "SHAPE_SEEN",
    "PageState",
    "estimator_part",
    "pack_seen",
    "page_length",
    "ping_fingerprint",
    "record_bytes",
    "shape_length",
    "unpack_seen",
]

N_SOURCES = len(SOURCES)

#: the page record's first byte (module docstring)
PAGE_VERSION = 0xA3
#: ping fingerprints a page record keeps at most (its last distinct pings, any source: the
#: dedup)
N_SEEN = 8
#: bytes of one ping fingerprint (a 48-bit unsigned integer, little-endian)
FP_BYTES = 6
#: the shape byte's bits: the count of fingerprints, a prior stored, the counts stored
SHAPE_SEEN = 0x0F
SHAPE_PRIOR = 0x10
SHAPE_COUNTS = 0x20
#: the fixed head: version, shape, importance, last crawl
PAGE_HEAD_FORMAT = "<BBfd"
PAGE_HEAD = struct.Struct(PAGE_HEAD_FORMAT)
#: the optional prior (float32) and signal counts (uint16 per source)
PRIOR = struct.Struct("<f")
COUNTS = struct.Struct(f"<{N_SOURCES}H")
#: the same head as a numpy structured dtype (a shard's records in one ``frombuffer`` per
#: shape and length)
PAGE_HEAD_DTYPE = np.dtype([("version", "u1"), ("shape", "u1"), ("importance", "<f4"),
                            ("last_crawl", "<f8")])
assert PAGE_HEAD_DTYPE.itemsize == PAGE_HEAD.size
_HEAD = PAGE_HEAD.size
_FP_MAX = (1 << (8 * FP_BYTES)) - 1
_U16 = 0xFFFF


def shape_length(shape: int) -> int:
    """Bytes of a page record with this shape byte, ``14 + 4 p + 10 c + 6 n``;
    ``ValueError`` for a shape byte no page record has."""
    if shape & ~(SHAPE_SEEN | SHAPE_PRIOR | SHAPE_COUNTS) or shape & SHAPE_SEEN > N_SEEN:
        raise ValueError(f"no page record (shape byte {shape:#04x})")
    return _length(shape)


def _length(shape: int) -> int:
    """:func:`shape_length` without its check."""
    return (_HEAD + PRIOR.size * bool(shape & SHAPE_PRIOR)
            + COUNTS.size * bool(shape & SHAPE_COUNTS) + FP_BYTES * (shape & SHAPE_SEEN))


def pack_seen(seen: tuple[int, ...]) -> bytes:
    """A page record's fingerprints: each 1..2^48-1 in 6 bytes, little-endian;
    ``ValueError`` for more than ``N_SEEN`` or one out of range."""
    if len(seen) > N_SEEN:
        raise ValueError(f"{len(seen)} ping fingerprints, a page record keeps {N_SEEN}")
    if any(not 0 < int(f) <= _FP_MAX for f in seen):
        raise ValueError(f"a ping fingerprint out of 1..2^48-1: {seen!r}")
    return b"".join(int(f).to_bytes(FP_BYTES, "little") for f in seen)


def unpack_seen(raw: bytes) -> tuple[int, ...]:
    """The fingerprints of :func:`pack_seen`'s bytes."""
    return tuple(int.from_bytes(raw[k : k + FP_BYTES], "little")
                 for k in range(0, len(raw) - len(raw) % FP_BYTES, FP_BYTES))


def record_bytes(value: str | bytes) -> bytes:
    """A stored value as bytes (a ``str`` read through a ``surrogateescape`` client)."""
    return value if isinstance(value, bytes) else value.encode("utf-8", "surrogateescape")


def page_length(raw: bytes) -> int:
    """Bytes of the page record at the start of a stored value (:func:`shape_length` of its
    shape byte, unchecked: :meth:`PageState.decode` refuses a shape byte no page record
    has); an estimator record starts there when the value is longer, and a shorter value
    was stored without its trailing zero bytes."""
    return _length(raw[1] if len(raw) > 1 else 0)


def estimator_part(value: str | bytes | None) -> str | None:
    """The estimator record stored after a binary page record's bytes (None: none)."""
    if not value:
        return None
    raw = record_bytes(value)
    if raw[0] != PAGE_VERSION:
        return None
    size = page_length(raw)
    if len(raw) <= size:
        return None
    return raw[size:].decode("utf-8", "surrogateescape")


@dataclass(frozen=True, slots=True)
class PageState:
    """One page as stored in ``P:{host}:pages`` (see the module docstring)."""

    importance: float = 1.0
    prior_change_rate_per_s: float | None = None
    last_crawl_s: float = 0.0
    signals: tuple[int, ...] = (0,) * N_SOURCES
    #: the 48-bit fingerprints of the page's last pings (at most N_SEEN) that were not
    #: duplicates, newest first; bookkeeping of the ping dedup, not part of the page's state
    #: for equality
    seen: tuple[int, ...] = field(default=(), compare=False)

    @property
    def crawled(self) -> bool:
        return self.last_crawl_s > 0.0

    def encode(self, estimator: str | bytes | None = None) -> bytes:
        """The stored value (version 3, module docstring): the page record, then
        ``estimator`` (an estimator record) if given, else without its trailing zero bytes
        after the shape byte; ``ValueError`` for fingerprints :func:`pack_seen` refuses."""
        prior = self.prior_change_rate_per_s
        has_prior = prior is not None and not math.isnan(prior)
        with np.errstate(over="ignore"):
            imp, pri = (float(x) for x in np.array(
                [self.importance, prior if has_prior else 0.0], dtype=np.float32))
        counts = [min(_U16, max(0, int(n))) for n in self.signals]
        has_counts = any(counts)
        seen = pack_seen(self.seen)
        shape = (len(self.seen) | (SHAPE_PRIOR if has_prior else 0)
                 | (SHAPE_COUNTS if has_counts else 0))
        page = (PAGE_HEAD.pack(PAGE_VERSION, shape, imp, self.last_crawl_s)
                + (PRIOR.pack(pri) if has_prior else b"")
                + (COUNTS.pack(*counts) if has_counts else b"") + seen)
        if estimator:
            return page + record_bytes(estimator)
        return page[:2] + page[2:].rstrip(b"\0")

    @classmethod
    def decode(cls, value: str | bytes) -> PageState:
        """A stored page value (module docstring); ``ValueError`` if it is none."""
        raw = record_bytes(value)
        if raw[:1] != bytes((PAGE_VERSION,)):
            raise ValueError(f"no page record (first byte not {PAGE_VERSION:#x}): {raw[:40]!r}")
        try:
            size = shape_length(raw[1] if len(raw) > 1 else 0)
        except ValueError as e:
            raise ValueError(f"{e}: {raw[:40]!r}") from None
        if len(raw) < size:  # stored without its trailing zero bytes
            raw = raw.ljust(size, b"\0")
        _, shape, imp, last = PAGE_HEAD.unpack_from(raw)
        at = _HEAD
        prior: float | None = None
        if shape & SHAPE_PRIOR:
            prior = PRIOR.unpack_from(raw, at)[0]
            at += PRIOR.size
            if prior is not None and math.isnan(prior):
                prior = None
        signals: tuple[int, ...] = (0,) * N_SOURCES
        if shape & SHAPE_COUNTS:
            signals = COUNTS.unpack_from(raw, at)
            at += COUNTS.size
        return cls(imp, prior, last, tuple(signals), unpack_seen(raw[at:size]))

    def after_crawl(self, fetched_at_s: float) -> PageState:
        return replace(self, last_crawl_s=fetched_at_s, signals=(0,) * N_SOURCES)


def ping_fingerprint(fp: str) -> int:
    """A 48-bit digest of a ping's identity, 1..2^48-1 (0 is never one)."""
    return int.from_bytes(hashlib.blake2b(fp.encode(), digest_size=FP_BYTES).digest(),
                          "little") or 1
