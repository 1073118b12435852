"""The ping dedup's fingerprint rule: which pings share a fingerprint (``PingEvent.fingerprint``),
its 48-bit digest (``ping_fingerprint``) and how a page record keeps eight of them."""

from __future__ import annotations

import random
import struct

import pytest

from streams.events.records import PingEvent
from streams.store.page_record import (
    FP_BYTES,
    N_SEEN,
    PAGE_HEAD,
    PAGE_HEAD_DTYPE,
    PAGE_VERSION,
    SHAPE_COUNTS,
    SHAPE_PRIOR,
    PageState,
    estimator_part,
    pack_seen,
    page_length,
    ping_fingerprint,
    shape_length,
    unpack_seen,
)

URL = "https://a.org/p"


def ping(**kw: object) -> PingEvent:
    return PingEvent.model_validate({"url": URL, "source": "websub", "received_at": 1000.0, **kw})


def test_pings_with_an_id_share_a_fingerprint_whatever_their_times() -> None:
    a = ping(id="x", received_at=1000.0, changed_at=900.0)
    b = ping(id="x", received_at=2000.0)
    assert a.fingerprint() == b.fingerprint()
    assert ping(id="x").fingerprint() != ping(id="y").fingerprint()
    assert ping(id="x").fingerprint() != ping(id="x", source="cdn").fingerprint()


def test_pings_without_an_id_are_one_change_when_they_name_the_same_change_time() -> None:
    a = ping(changed_at=900.0, received_at=1000.0)
    b = ping(changed_at=900.0, received_at=1500.0)
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != ping(changed_at=901.0).fingerprint()


def test_pings_without_an_id_or_a_change_time_differ_by_their_receive_time() -> None:
    a = ping(received_at=1000.0)
    b = ping(received_at=1000.5)
    assert a.fingerprint() != b.fingerprint()
    # the same ping produced again (same content, whatever its offset) keeps its fingerprint
    assert a.fingerprint() == ping(received_at=1000.0).fingerprint()
    # another page or another source: another ping
    assert a.fingerprint() != ping(received_at=1000.0, source="cdn").fingerprint()
    other = PingEvent.model_validate({"url": "https://a.org/q", "source": "websub",
                                      "received_at": 1000.0})
    assert a.fingerprint() != other.fingerprint()
    # a change time of 0 is a change time, not none
    assert ping(changed_at=0.0, received_at=5.0).fingerprint() != \
        ping(received_at=5.0).fingerprint()


def test_a_fingerprint_is_48_bits_never_0_and_stable() -> None:
    values = [ping_fingerprint(f"i:websub:{k}") for k in range(20_000)]
    assert all(1 <= v < 1 << 48 for v in values)
    assert len(set(values)) == len(values)
    assert ping_fingerprint("i:websub:7") == values[7]
    # the high bits are used: a 16-bit digest would put every value below 2^16
    assert max(values) > 1 << 47 and sum(v >= 1 << 16 for v in values) > 19_900


def test_the_page_record_stores_its_optional_fields_as_its_shape_byte_says() -> None:
    assert FP_BYTES == 6 and N_SEEN == 8
    assert PAGE_HEAD.size == 1 + 1 + 4 + 8 == 14
    assert PAGE_HEAD_DTYPE.itemsize == PAGE_HEAD.size
    rng = random.Random(3)
    rest = b"\x82" + bytes(range(40))
    shapes = set()
    for _ in range(600):
        n = rng.randrange(N_SEEN + 1)
        seen = tuple(rng.choice([1, 256, 1 << 40, (1 << 48) - 1, 1 + rng.randrange((1 << 48) - 1)])
                     for _ in range(n))
        prior = rng.choice([None, 0.0, 0.25])
        signals = rng.choice([(0,) * 5, (1, 2, 3, 4, 65535), (0, 0, 0, 0, 1)])
        page = PageState(rng.choice([2.0, 0.0]), prior, rng.choice([1000.5, 0.0]), signals, seen)
        want = 14 + 4 * (prior is not None) + 10 * any(signals) + 6 * n
        shape = n | SHAPE_PRIOR * (prior is not None) | SHAPE_COUNTS * any(signals)
        shapes.add(shape)
        with_est = page.encode(rest)
        assert len(with_est) == want + len(rest) and with_est[1] == shape
        assert page_length(with_est) == want == shape_length(shape)
        assert estimator_part(with_est) == rest.decode("utf-8", "surrogateescape")
        alone = page.encode()
        assert 2 <= len(alone) <= want and alone[1] == shape and estimator_part(alone) is None
        for raw in (with_est, alone):
            back = PageState.decode(raw)
            assert back == page and back.seen == seen
        assert unpack_seen(pack_seen(seen)) == seen
    assert len(shapes) == 4 * (N_SEEN + 1)
    # the layout: version, shape, importance, last crawl, prior, counts, fingerprints
    raw = PageState(1.0, 0.5, 2.0, (1, 0, 0, 0, 2), (0x060504030201, 7)).encode(b"\x82")
    assert raw == (bytes([PAGE_VERSION, 2 | SHAPE_PRIOR | SHAPE_COUNTS])
                   + struct.pack("<fdf5H", 1.0, 2.0, 0.5, 1, 0, 0, 0, 2)
                   + bytes([1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0]) + b"\x82")
    # no prior, no counts: left out
    raw = PageState(1.0, None, 2.0, (0,) * 5, (7,)).encode(b"\x82")
    assert raw == bytes([PAGE_VERSION, 1]) + struct.pack("<fd", 1.0, 2.0) + bytes(
        [7, 0, 0, 0, 0, 0]) + b"\x82"
    # trailing zero bytes after the shape byte trimmed without an estimator record, padded
    # back by the reader
    assert PageState().encode() == PageState().encode(b"\x82")[:6]
    assert PageState(0.0, 0.0).encode() == bytes([PAGE_VERSION, SHAPE_PRIOR])
    assert PageState.decode(PageState(0.0, 0.0).encode()) == PageState(0.0, 0.0)
    trimmed = PageState(seen=(1 << 8,)).encode()
    assert len(trimmed) == 16 and PageState.decode(trimmed).seen == (1 << 8,)
    for bad in ((1 << 48,), (0,), (1,) * (N_SEEN + 1)):
        with pytest.raises(ValueError):
            pack_seen(bad)
        with pytest.raises(ValueError):
            PageState(seen=bad).encode()
    # a shape byte counting over 8 fingerprints, or with bit 6 or 7 set, is no page record
    for shape in (N_SEEN + 1, 15, 0x40 | 1, 0x80, 0xFF):
        bad = bytearray(PageState(seen=(5,)).encode(b"\x82"))
        bad[1] = shape
        with pytest.raises(ValueError, match="shape byte"):
            PageState.decode(bytes(bad))
        with pytest.raises(ValueError, match="shape byte"):
            shape_length(shape)
