"""The outcome script's write of a page record (``_APPLY_OUTCOME`` in
:mod:`streams.store.redis_store`) on a real Redis, against the page model: the stored bytes
are ``PageState.after_crawl(...).encode(...)`` of the page read before."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from streams.events.records import SOURCES
from streams.store import OutcomeOp
from streams.store.page_record import N_SEEN, PageState, record_bytes
from streams.store.redis_store import Store

pytestmark = pytest.mark.integration


async def test_an_outcome_writes_the_record_the_page_model_gives(redis_url: str) -> None:
    """Random pages (spliced at their fields' offsets by the script): with and without an
    estimator record after the page, a new record in the outcome or none (the old one
    kept), the fetch newer than the last crawl ('applied': the last crawl written, the
    counts zeroed, the fingerprints kept) or not ('stale': nothing written)."""
    rng = np.random.default_rng(31)
    store = Store.from_url(redis_url, f"or{uuid.uuid4().hex[:8]}")
    try:
        await store.load_scripts()
        codes: set[str] = set()
        for i in range(300):
            host, url = f"o{i}.test", f"http://o{i}.test/p"
            last = 0.0 if rng.random() < 0.2 else 1.0e9 + int(rng.integers(0, 10_000)) / 1000
            signals = tuple(int(x) for x in rng.choice([0, 1, 65535], len(SOURCES)))
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
            raw = record_bytes(await store.get_page_raw(host, url) or "")
            if fetched > last:
                assert code == "applied"
                assert raw == page.after_crawl(round(fetched, 3)).encode(new or old), i
            else:
                assert code == "stale"
                assert raw == record_bytes(stored), i
        assert codes == {"applied", "stale"}
    finally:
        await store.delete_all()
        await store.close()
