"""The ping dedup's fingerprint rule: which pings share a fingerprint (``PingEvent.fingerprint``),
its 48-bit digest (``ping_fingerprint``) and how a page record keeps eight of them."""

from __future__ import annotations

import random

import pytest

from streams.events.records import PingEvent
from streams.store.page_record import (
    FP_BYTES,
    N_SEEN,
    PAGE_HEAD,
    PAGE_HEAD_DTYPE,
    PageState,
    estimator_part,
    pack_seen,
    page_length,
    ping_fingerprint,
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


def test_the_page_record_keeps_up_to_eight_48_bit_fingerprints_after_a_count() -> None:
    assert FP_BYTES == 6 and N_SEEN == 8
    assert PAGE_HEAD.size == 1 + 4 + 4 + 8 + 2 * 5 + 1 == 28
    assert PAGE_HEAD_DTYPE.itemsize == PAGE_HEAD.size
    rng = random.Random(3)
    rest = b"\x82" + bytes(range(40))
    for _ in range(300):
        n = rng.randrange(N_SEEN + 1)
        seen = tuple(rng.choice([1, 256, 1 << 40, (1 << 48) - 1, 1 + rng.randrange((1 << 48) - 1)])
                     for _ in range(n))
        page = PageState(2.0, None, 1000.5, (1, 2, 3, 4, 65535), seen)
        with_est = page.encode(rest)
        assert len(with_est) == 28 + 6 * n + len(rest) and with_est[27] == n
        assert page_length(with_est) == 28 + 6 * n
        assert estimator_part(with_est) == rest.decode("utf-8", "surrogateescape")
        alone = page.encode()
        assert len(alone) <= 28 + 6 * n and estimator_part(alone) is None
        for raw in (with_est, alone):
            back = PageState.decode(raw)
            assert back == page and back.seen == seen
        assert unpack_seen(pack_seen(seen)) == seen
    # little-endian 6-byte integers, newest first, after the count byte
    raw = PageState(seen=(0x060504030201, 7)).encode(b"\x82")
    assert raw[27:40] == bytes([2, 1, 2, 3, 4, 5, 6, 7, 0, 0, 0, 0, 0]) and raw[40:] == b"\x82"
    # trailing zero bytes trimmed without an estimator record, padded back by the reader
    assert PageState().encode() == PageState().encode(b"\x82")[:9]
    trimmed = PageState(seen=(1 << 8,)).encode()
    assert len(trimmed) == 30 and PageState.decode(trimmed).seen == (1 << 8,)
    for bad in ((1 << 48,), (0,), (1,) * (N_SEEN + 1)):
        with pytest.raises(ValueError):
            pack_seen(bad)
        with pytest.raises(ValueError):
            PageState(seen=bad).encode()
    # a count byte over 8 is no page record
    over = bytearray(PageState(seen=(5,)).encode(b"\x82"))
    over[27] = N_SEEN + 1
    with pytest.raises(ValueError, match="fingerprints"):
        PageState.decode(bytes(over))
