"""A reject is bounded whatever its input (key and value up to the broker's limit, any
bytes); a dead-letter record is small."""

from __future__ import annotations

import hashlib
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.events.records import (
    MAX_REJECT_KEY_BYTES,
    MAX_REJECT_RECORD_BYTES,
    cut_key,
    dead_letter_payload,
    reject_payload,
)
from streams.settings import KAFKA_MAX_MESSAGE_BYTES

#: the bytes that cost most once JSON-encoded: a control character (6), a lone surrogate
#: half as text is impossible in UTF-8, so non-BMP characters (12 for 4 bytes), invalid bytes
WORST = [b"\x00", b"\x1f", "\U0001f600".encode(), b"\xff", b"\"", b"\\", b"a"]


def _blob(draw: st.DrawFn, size: int) -> bytes:
    unit = draw(st.sampled_from(WORST))
    return (unit * (size // len(unit) + 1))[:size]


@st.composite
def inputs(draw: st.DrawFn) -> tuple[bytes | None, bytes | None, str]:
    size = draw(st.sampled_from([0, 1, 1023, 1024, 1025, 65_536, 65_537, 1_000_000]))
    raw = draw(st.none() | st.just(_blob(draw, size)))
    key = draw(st.none() | st.just(_blob(draw, draw(st.sampled_from([0, 1024, 1025,
                                                                      1_000_000])))))
    reason = draw(st.sampled_from(["", "r", "\x00" * 5000, "\U0001f600" * 5000,
                                   repr(b"k" * 100_000)]))
    return raw, key, reason


@settings(max_examples=60, deadline=None)
@given(inputs())
def test_a_reject_is_bounded_and_keeps_sizes_and_digests(case: tuple[bytes | None,
                                                                     bytes | None, str]) -> None:
    raw, key, reason = case
    out = reject_payload(raw, "t.pages", 1, 2, reason, key=key)
    body = json.dumps(out).encode()
    assert len(body) <= MAX_REJECT_RECORD_BYTES < 1_000_000 < KAFKA_MAX_MESSAGE_BYTES
    k = cut_key(key)
    assert k is None or len(k) <= MAX_REJECT_KEY_BYTES
    if key is not None and len(key) > MAX_REJECT_KEY_BYTES:
        assert out["key_truncated"] is True and out["key_bytes"] == len(key)
        assert out["key_sha256"] == hashlib.sha256(key).hexdigest()
    elif key is not None:
        assert "key_truncated" not in out
        assert out.get("key", "").encode() == key or out.get("key_base64")
    if out.get("raw_truncated"):
        assert raw is not None and out["raw_sha256"] == hashlib.sha256(raw).hexdigest()
    dead = dead_letter_payload(raw, key, "t.pages", 1, 2, reason, ValueError("\x00" * 500))
    assert len(json.dumps(dead)) < 4096
    assert (dead["topic"], dead["partition"], dead["offset"]) == ("t.pages", 1, 2)
