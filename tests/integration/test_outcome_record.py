"""The outcome script's write of a page record (``_APPLY_OUTCOME`` in
:mod:`streams.store.redis_store`) on a real Redis, against the page model: the stored bytes
are ``PageState.after_crawl(...).encode(...)`` of the page read before."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from streams.events.records import SOURCES
from streams.store import OutcomeOp, PingBatch
from streams.store.page_record import (
    N_SEEN,
    SHAPE_COUNTS,
    SHAPE_PRIOR,
    SHAPE_SEEN,
    PageState,
    ping_fingerprint,
    record_bytes,
)
from streams.store.redis_store import Store

pytestmark = pytest.mark.integration


async def test_an_outcome_writes_the_record_the_page_model_gives(redis_url: str) -> None:
    """Random pages (spliced at their fields' offsets by the script): with and without an
    estimator record after the page, a new record in the outcome or none (the old one
    kept), with and without a prior, with and without counts, the fetch newer than the
    last crawl ('applied': the last crawl written, the counts zeroed and no longer stored,
    the fingerprints kept) or not ('stale': nothing written)."""
    rng = np.random.default_rng(31)
    store = Store.from_url(redis_url, f"or{uuid.uuid4().hex[:8]}")
    try:
        await store.load_scripts()
        codes: set[str] = set()
        kinds: set[tuple[bool, bool, str]] = set()  # prior, counts stored before; code
        for i in range(300):
            host, url = f"o{i}.test", f"http://o{i}.test/p"
            last = 0.0 if rng.random() < 0.2 else 1.0e9 + int(rng.integers(0, 10_000)) / 1000
            signals = tuple(int(x) for x in rng.choice([0, 1, 65535], len(SOURCES)))
            if rng.random() < 0.4:
                signals = (0,) * len(SOURCES)
            seen = tuple(int(x) for x in
                         rng.integers(1, 1 << 48, int(rng.choice([0, 1, 4, N_SEEN]))))
            prior = None if rng.random() < 0.5 else float(rng.uniform(1e-6, 1e-2))
            page = PageState(float(rng.uniform(0.1, 10)), prior, last, signals, seen)
            old = None if rng.random() < 0.4 else bytes([0x82]) + rng.bytes(132)
            stored = page.encode(old)
            await store.redis.hset(store.key(host, "pages"), url, stored)
            new = None if rng.random() < 0.5 else bytes([0x82]) + rng.bytes(132)
            fetched = (last or 1.0e9) + [-1.0, 0.0, 0.001, 60.0][int(rng.integers(0, 4))]
            (res,) = await store.apply_outcomes([OutcomeOp(
                url, host, None, fetched, None if new is None else new.decode(
                    "utf-8", "surrogateescape"), "outcomes", 0, i)])
            code = str(res[0])
            codes.add(code)
            kinds.add((prior is not None, any(signals), code))
            raw = record_bytes(await store.get_page_raw(host, url) or "")
            if fetched > last:
                assert code == "applied"
                assert raw == page.after_crawl(round(fetched, 3)).encode(new or old), i
                assert not raw[1] & SHAPE_COUNTS and (raw[1] & SHAPE_SEEN) == len(seen)
            else:
                assert code == "stale"
                assert raw == record_bytes(stored), i
        assert codes == {"applied", "stale"}
        assert kinds == {(p, c, code) for p in (False, True) for c in (False, True)
                         for code in ("applied", "stale")}
    finally:
        await store.delete_all()
        await store.close()


async def test_counts_appear_with_a_ping_and_leave_with_a_crawl(redis_url: str) -> None:
    """A crawled page without a signal stores no counts; an applied ping inserts them (10
    bytes, the shape byte's counts bit); the next crawl zeroes them and leaves them out
    again; the prior and the fingerprints stay."""
    store = Store.from_url(redis_url, f"oc{uuid.uuid4().hex[:8]}")
    host, url = "c.test", "http://c.test/p"
    try:
        await store.load_scripts()
        page = PageState(2.0, 0.5, 1000.0, (0,) * len(SOURCES), (7,))
        await store.redis.hset(store.key(host, "pages"), url, page.encode())
        (res,) = await store.apply_pings([PingBatch(
            host, "pings", 0, [(1, url, "cdn", None, 1100.0, "p1")])], t_delay_s=0.0)
        assert res[0][0] == "applied"
        raw = record_bytes(await store.get_page_raw(host, url) or "")
        fp = ping_fingerprint("p1")
        counts = tuple(int(s == "cdn") for s in SOURCES)
        assert raw[1] == SHAPE_PRIOR | SHAPE_COUNTS | 2
        assert PageState.decode(raw) == PageState(2.0, 0.5, 1000.0, counts)
        assert PageState.decode(raw).seen == (fp, 7)
        (res,) = await store.apply_outcomes([OutcomeOp(url, host, None, 1200.0, None,
                                                       "outcomes", 0, 1)])
        assert res[0] == "applied"
        after = record_bytes(await store.get_page_raw(host, url) or "")
        assert after[1] == SHAPE_PRIOR | 2 and len(after) <= len(raw) - 10
        assert after == PageState(2.0, 0.5, 1200.0, (0,) * len(SOURCES), (fp, 7)).encode()
    finally:
        await store.delete_all()
        await store.close()
