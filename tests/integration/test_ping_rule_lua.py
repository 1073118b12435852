"""The worker's Lua ping script (``_APPLY_PINGS`` in :mod:`streams.store.redis_store`) on a real
Redis: its rule against the one rule of :mod:`models.decision.pings` (every verdict the same), a
batch against the same pings one call at a time (same verdicts, same state), and the dedup
kept in the page record (each source's last fingerprint)."""

from __future__ import annotations

import math
import uuid
from dataclasses import replace

import numpy as np
import pytest
from redis.exceptions import ResponseError

from models.decision.pings import VERDICTS, ping_verdict
from streams.events.records import SOURCES
from streams.store import OutcomeOp, PageOp, PingBatch
from streams.store.page_record import (
    COUNTS,
    FP_BYTES,
    N_SEEN,
    PAGE_HEAD,
    SHAPE_COUNTS,
    PageState,
    ping_fingerprint,
    record_bytes,
)
from streams.store.redis_store import Store

pytestmark = pytest.mark.integration


def _cases(n: int, seed: int) -> list[tuple[float, float, float | None, float]]:
    """(last crawl, received, changed or None, t_delay) on a millisecond grid (the store
    keeps the last crawl to the millisecond), many of them on the rule's boundaries."""
    rng = np.random.default_rng(seed)
    out: list[tuple[float, float, float | None, float]] = []
    for _ in range(n):
        last = 0.0 if rng.random() < 0.15 else 1.0e9 + int(rng.integers(0, 10_000)) / 1000
        t_delay = [0.0, 1.0, 2.5][int(rng.integers(0, 3))]
        base = last if last else 1.0e9
        received = base + [-1.0, 0.0, t_delay, t_delay + 0.001, 5.0,
                           int(rng.integers(-3000, 9000)) / 1000][int(rng.integers(0, 6))]
        pick = int(rng.integers(0, 4))
        changed = None if pick == 0 else base + [-0.001, 0.0, 0.5][pick - 1]
        out.append((last, received, changed, t_delay))
    return out


async def test_lua_ping_rule_equals_the_decision_core(redis_url: str) -> None:
    store = Store.from_url(redis_url, f"pr{uuid.uuid4().hex[:8]}")
    try:
        await store.load_scripts()
        cases = _cases(600, seed=11)
        got: list[str] = []
        want: list[str] = []
        for i, (last, received, changed, t_delay) in enumerate(cases):
            host, url = f"h{i}.test", f"http://h{i}.test/p"
            await store.redis.hset(store.key(host, "pages"), url,
                                   PageState(last_crawl_s=last).encode())
            (res,) = await store.apply_pings(
                [PingBatch(host, "pings", 0, [(i, url, "sitemap", changed, received, f"f{i}")])],
                t_delay_s=t_delay)
            got.append(res[0][0])
            v = ping_verdict("live", t_delay, last if last > 0 else -math.inf, received,
                             math.nan if changed is None else changed)
            want.append(VERDICTS[v])
        assert got == want
        # every verdict occurs, so the comparison covers each branch of both rules
        assert set(got) == set(VERDICTS)
    finally:
        await store.close()


async def test_a_batch_decides_as_the_pings_one_at_a_time(redis_url: str) -> None:
    """Duplicates (same fingerprint), unknown pages, redelivered offsets and the rule's
    verdicts: one script call for 400 pings == 400 calls."""
    rng = np.random.default_rng(5)
    host = "b.test"
    urls = [f"http://b.test/{k}" for k in range(6)]  # the last one is not in the catalogue
    lasts = [0.0, 1000.0, 1000.0, 1200.0, 0.0]
    n = 400
    received = np.sort(rng.uniform(900.0, 1600.0, n)).round(3)
    pings = []
    for i in range(n):
        url = urls[int(rng.integers(0, 6))]
        changed = None if rng.random() < 0.5 else float(received[i] - rng.uniform(0, 150))
        fp = f"fp{int(rng.integers(0, 4))}"  # many repeats: duplicates
        pings.append((1000 + i, url, "indexnow", changed, float(received[i]), fp))
    # the batch again from its middle: redelivered offsets are 'dup-offset'
    replay = pings[150:250]
    results = {}
    for mode in ("one", "batch"):
        store = Store.from_url(redis_url, f"pb{uuid.uuid4().hex[:8]}")
        try:
            await store.load_scripts()
            for url, last in zip(urls, lasts, strict=False):
                await store.redis.hset(store.key(host, "pages"), url,
                                       PageState(last_crawl_s=last).encode())
            await store.redis.hset(store.key(host, "offsets"), "pings:0", 1010)  # done
            codes: list[str] = []
            for part in ([pings, replay] if mode == "batch"
                         else [[p] for p in pings + replay]):
                (res,) = await store.apply_pings([PingBatch(host, "pings", 0, part)],
                                                 t_delay_s=30.0)
                codes += [c for c, _v in res]
            state = await store.redis.hgetall(store.key(host, "pages"))
            offset = await store.redis.hget(store.key(host, "offsets"), "pings:0")
            results[mode] = (codes, state, offset)
        finally:
            await store.close()
    assert results["batch"] == results["one"]
    codes = results["batch"][0]
    assert {"applied", "duplicate", "unknown", "dup-offset", "before-crawl",
            "within-delay"} <= set(codes)
    assert codes[:11] == ["dup-offset"] * 11 and results["batch"][2] == str(1000 + n - 1)


async def test_dedup_lives_in_the_page_record(redis_url: str) -> None:
    """A re-sent ping (same fingerprint, another offset) is a duplicate however late, while
    fewer than N_SEEN other pings of the page came in between; nothing per ping is kept
    (only the page's hash: no growing set)."""
    store = Store.from_url(redis_url, f"pf{uuid.uuid4().hex[:8]}")
    host, url = "f.test", "http://f.test/p"
    offset = 0
    try:
        await store.load_scripts()
        await store.redis.hset(store.key(host, "pages"), url, PageState().encode())

        async def ping(source: str, ident: str, at: float) -> str:
            nonlocal offset
            offset += 1
            fp = f"i:{source}:{ident}"  # as PingEvent.fingerprint
            (res,) = await store.apply_pings(
                [PingBatch(host, "pings", 0, [(offset, url, source, None, at, fp)])], t_delay_s=0.0)
            return str(res[0][0])

        assert await ping("indexnow", "a", 1000.0) == "applied"
        assert await ping("indexnow", "a", 1000.0 + 30 * 86400) == "duplicate"  # however late
        assert await ping("websub", "a", 1001.0) == "applied"  # another source: another ping
        assert await ping("indexnow", "b", 1002.0) == "applied"
        assert await ping("indexnow", "a", 1003.0) == "duplicate"  # A, B, A
        for k in range(N_SEEN - 3):
            assert await ping("cdn", f"c{k}", 1004.0 + k) == "applied"
        assert await ping("indexnow", "a", 2000.0) == "duplicate"  # N_SEEN - 1 pings since
        assert await ping("cdn", "d", 2001.0) == "applied"
        assert await ping("indexnow", "a", 2002.0) == "applied"  # N_SEEN since: forgotten
        # a flood of distinct pings: still one record of at most 14 + 10 + 8 x 6 bytes (no
        # prior), no other key
        for b in range(3):
            (res,) = await store.apply_pings([PingBatch(host, "pings", 0, [
                (100 + b * 100 + i, url, "sitemap", None, 3000.0 + b * 100 + i, f"x{b}.{i}")
                for i in range(100)])], t_delay_s=0.0)
            assert {c for c, _v in res} <= {"applied", "duplicate"}
        state = await store.get_page(host, url)
        assert state is not None and state.signals[SOURCES.index("websub")] == 1
        raw = record_bytes(await store.get_page_raw(host, url) or "")
        assert raw[1] == N_SEEN | SHAPE_COUNTS
        assert len(raw) <= PAGE_HEAD.size + COUNTS.size + N_SEEN * FP_BYTES
        assert len(state.seen) == N_SEEN and state.encode() == raw
        keys = sorted(await store.redis.keys(f"{store.prefix}:*"))
        assert keys == sorted([store.key(host, "pages"), store.key(host, "offsets")])
    finally:
        await store.delete_all()
        await store.close()


async def test_a_value_that_is_no_page_record_is_refused_by_every_script(
        redis_url: str) -> None:
    """A stored value whose first byte is not the page record's version (text such as
    ``imp|prior|last|counts``, another version byte), or whose shape byte has bit 6 or 7
    set or counts over 8 fingerprints, is no page: the ping, outcome and page scripts give
    an error naming it and leave it as it is, and Python's ``PageState.decode`` raises
    ``ValueError``."""
    store = Store.from_url(redis_url, f"pt{uuid.uuid4().hex[:8]}")
    host = "t.test"
    good = PageState(2.5, 1e-4, 1000.25, (1, 0, 2, 0, 0)).encode()
    try:
        await store.load_scripts()
        shaped = [good[:1] + bytes([s]) + good[2:] for s in (
            good[1] | 0x40, good[1] | 0x80, (good[1] & 0xF0) | (N_SEEN + 1), 0x0F)]
        for i, bad in enumerate([b"2.5|0.0001|1000.25|1,0,2,0,0", b"\xa0" + good[1:],
                                 *shaped]):
            url = f"http://t.test/p{i}"
            await store.redis.hset(store.key(host, "pages"), url, bad)
            calls = [
                store.apply_pings([PingBatch(host, "pings", 0, [
                    (10 * i + 1, url, "sitemap", None, 2000.0, "s1")])], t_delay_s=0.0),
                store.apply_outcomes([OutcomeOp(url, host, None, 2000.0, None, "outcomes",
                                                0, 10 * i + 2)]),
                store.apply_pages([PageOp(url, host, 1.0, None, False, "pages", 0,
                                          10 * i + 3)]),
            ]
            for call in calls:  # each op's error is its result (the others' go on)
                (res,) = await call
                assert isinstance(res, ResponseError) and "no page record" in str(res), res
            assert record_bytes(await store.get_page_raw(host, url) or "") == bad
            with pytest.raises(ValueError, match="no page record"):
                PageState.decode(bad)
    finally:
        await store.delete_all()
        await store.close()


async def test_a_ping_writes_the_record_the_page_model_gives(redis_url: str) -> None:
    """The script splices a binary record's fields in place: the stored bytes are what
    ``PageState.encode`` makes of the page after the ping (its counts, its fingerprints, the
    estimator record after it kept), for random records: with and without an estimator
    record (then stored without trailing zero bytes), counts at the uint16 cap, a prior or
    none, the ping's fingerprint already kept (a duplicate), its six bytes only across two
    kept fingerprints (not one), or a kept fingerprint equal to it in all but its highest
    byte (a narrower digest's duplicate: not one); a record keeping 0, some or all 8
    fingerprints (a new one evicts the oldest), its shape byte updated; a record without
    counts (all zero) gets them inserted by an applied ping, and keeps none otherwise."""
    rng = np.random.default_rng(23)
    store = Store.from_url(redis_url, f"ps{uuid.uuid4().hex[:8]}")
    try:
        await store.load_scripts()
        codes: set[str] = set()
        kept: set[int] = set()  # fingerprints kept before a ping that was no duplicate
        shapes: set[tuple[bool, bool, str]] = set()  # prior, counts stored before; code
        for i, (last, received, changed, t_delay) in enumerate(_cases(400, seed=29)):
            host, url = f"s{i}.test", f"http://s{i}.test/p"
            source = SOURCES[int(rng.integers(0, len(SOURCES)))]
            fp = ping_fingerprint(f"f{i}")
            pick = i % 4
            n = int(rng.choice([0, 1, 2, 5, N_SEEN - 1, N_SEEN, N_SEEN]))
            n = max(n, (1, 2, 1, 0)[pick])
            seen = [int(x) for x in rng.integers(1, 1 << 48, n)]
            if pick == 0:  # a duplicate
                seen[int(rng.integers(0, n))] = fp
            elif pick == 1:  # fp's bytes straddle two kept fingerprints: not a duplicate
                k, j = int(rng.integers(0, n - 1)), int(rng.integers(1, FP_BYTES))
                fb = fp.to_bytes(FP_BYTES, "little")
                seen[k] = int.from_bytes(rng.bytes(FP_BYTES - j) + fb[:j], "little") or 1
                seen[k + 1] = int.from_bytes(fb[j:] + rng.bytes(j), "little") or 1
            elif pick == 2:  # equal in the low 40 bits only: not a duplicate
                seen[int(rng.integers(0, n))] = (fp ^ int(rng.integers(1, 256)) << 40) or 1
            signals = tuple(int(x) for x in rng.choice([0, 1, 7, 65534, 65535], len(SOURCES)))
            if rng.random() < 0.5:  # no signal since the crawl: no counts stored
                signals = (0,) * len(SOURCES)
            prior = None if rng.random() < 0.5 else float(rng.uniform(1e-6, 1e-2))
            page = PageState(float(rng.uniform(0.1, 10)), prior, last, signals, tuple(seen))
            rest = None if rng.random() < 0.4 else bytes([0x82]) + rng.bytes(132)
            await store.redis.hset(store.key(host, "pages"), url, page.encode(rest))
            (res,) = await store.apply_pings([PingBatch(
                host, "pings", 0, [(1, url, source, changed, received, f"f{i}")])],
                t_delay_s=t_delay)
            code = str(res[0][0])
            codes.add(code)
            shapes.add((prior is not None, any(signals), code))
            if fp in seen:
                assert code == "duplicate"
                want = page.encode(rest)
            else:
                v = ping_verdict("live", t_delay, last if last > 0 else -math.inf, received,
                                 math.nan if changed is None else changed)
                assert code == VERDICTS[v]
                counts = list(signals)
                if code == "applied":
                    n = SOURCES.index(source)
                    counts[n] = min(counts[n] + 1, 65535)
                kept.add(len(seen))
                want = replace(page, signals=tuple(counts),
                               seen=(fp, *seen[: N_SEEN - 1])).encode(rest)
            assert record_bytes(await store.get_page_raw(host, url) or "") == want, i
        assert codes == {"duplicate", "applied", "before-crawl", "within-delay"}
        assert {0, 1, N_SEEN} <= kept
        assert {(p, c, code) for p in (False, True) for c in (False, True)
                for code in ("applied", "within-delay", "duplicate")} <= shapes
    finally:
        await store.delete_all()
        await store.close()
