"""The decisions ring: what it keeps, what it drops, and what it costs in memory."""

from __future__ import annotations

import tracemalloc
from collections import OrderedDict, deque

import pytest

from streams.telemetry.decisions import SEP, DecisionRing


def test_keeps_the_last_entries_of_a_page_oldest_first() -> None:
    r = DecisionRing(max_pages=10, per_page=3)
    for k in range(5):
        r.add("u", f"e{k}")
    assert r.get("u") == ["e2", "e3", "e4"]
    assert r.get("other") == []
    one = DecisionRing(per_page=1)
    one.add("u", "a")
    one.add("u", "b")
    assert one.get("u") == ["b"]
    off = DecisionRing(per_page=0)
    off.add("u", "a")
    assert off.get("u") == [] and len(off) == 0


def test_drops_the_least_recently_touched_page() -> None:
    r = DecisionRing(max_pages=2, per_page=2)
    r.add("a", "1")
    r.add("b", "1")
    r.add("a", "2")  # a touched: b is now the oldest
    r.add("c", "1")
    assert (r.get("a"), r.get("b"), r.get("c")) == (["1", "2"], [], ["1"])
    assert len(r) == 2


def test_a_text_with_the_separator_stays_one_entry() -> None:
    r = DecisionRing(per_page=2)
    r.add("u", f"x{SEP}y")
    r.add("u", "z")
    assert r.get("u") == ["x y", "z"]


def test_negative_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        DecisionRing(max_pages=-1)


def _traced(build: object) -> int:
    tracemalloc.start()
    try:
        keep = build()  # type: ignore[operator]
        size = tracemalloc.get_traced_memory()[0]
        del keep
        return size
    finally:
        tracemalloc.stop()


def test_costs_well_under_a_deque_per_page() -> None:
    """The same 20,000 pages of four entries: the ring against the layout it replaced (an
    OrderedDict of ``deque(maxlen=4)`` of ``str``)."""
    urls = [f"https://h{i % 100}.example/p/{i:06d}" for i in range(20_000)]
    texts = [f"1764000000.{k:03d} ordered w-0-{k:x} (greedy): value 0.0123 >= threshold 0.01"
             for k in range(4)]

    def ring() -> DecisionRing:
        r = DecisionRing(per_page=4)
        for u in urls:
            for t in texts:
                r.add(u, t + u[-3:])  # distinct strings, as real decisions are
        return r

    def deques() -> OrderedDict[str, deque[str]]:
        d: OrderedDict[str, deque[str]] = OrderedDict()
        for u in urls:
            q = d[u] = deque(maxlen=4)
            for t in texts:
                q.append(t + u[-3:])
        return d

    new, old = _traced(ring), _traced(deques)
    assert new < 0.6 * old, (new, old)
