"""The worker's Lua ping script (``_APPLY_PINGS`` in :mod:`streams.state`) on a real Redis:
its rule against the one rule of :mod:`models.decision.pings` (every verdict the same), and
a batch against the same pings one call at a time (same verdicts, same state)."""

from __future__ import annotations

import math
import uuid

import numpy as np
import pytest

from models.decision.pings import VERDICTS, ping_verdict
from streams.state import PageState, Store

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
            res = await store.queue_pings(
                store.redis, host, [(i, url, "sitemap", changed, received, f"f{i}")],
                t_delay_s=t_delay, window_s=86400.0, topic="pings", partition=0,
            )
            got.append(res[0])
            v = ping_verdict("live", t_delay, last if last > 0 else -math.inf, received,
                             math.nan if changed is None else changed)
            want.append(VERDICTS[v])
        assert got == want
        # every verdict occurs, so the comparison covers each branch of both rules
        assert set(got) == set(VERDICTS)
    finally:
        await store.close()


async def test_a_batch_decides_as_the_pings_one_at_a_time(redis_url: str) -> None:
    """Duplicates (same fingerprint), the dedup window's trim, unknown pages, redelivered
    offsets and the rule's verdicts: one script call for 400 pings == 400 calls."""
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
        fp = f"fp{int(rng.integers(0, 60))}"  # many repeats: duplicates within the window
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
                res = await store.queue_pings(store.redis, host, part, t_delay_s=30.0,
                                              window_s=100.0, topic="pings", partition=0)
                codes += res[0::2]
            state = await store.redis.hgetall(store.key(host, "pages"))
            seen = await store.redis.zrange(store.key(host, "seen"), 0, -1, withscores=True)
            offset = await store.redis.hget(store.key(host, "offsets"), "pings:0")
            results[mode] = (codes, state, seen, offset)
        finally:
            await store.close()
    assert results["batch"] == results["one"]
    codes = results["batch"][0]
    assert {"applied", "duplicate", "unknown", "dup-offset", "before-crawl",
            "within-delay"} <= set(codes)
    assert codes[:11] == ["dup-offset"] * 11 and results["batch"][3] == str(1000 + n - 1)


async def test_a_flood_of_distinct_pings_keeps_at_most_max_seen_fingerprints(
        redis_url: str) -> None:
    store = Store.from_url(redis_url, f"pf{uuid.uuid4().hex[:8]}")
    host, url = "f.test", "http://f.test/p"
    try:
        await store.load_scripts()
        await store.redis.hset(store.key(host, "pages"), url, PageState().encode())
        for b in range(3):
            res = await store.queue_pings(
                store.redis, host,
                [(b * 100 + i, url, "indexnow", None, 1000.0 + b * 100 + i, f"x{b * 100 + i}")
                 for i in range(100)],
                t_delay_s=0.0, window_s=86400.0, topic="pings", partition=0, max_seen=50)
            assert set(res[0::2]) == {"applied"}
        seen = await store.redis.zrange(store.key(host, "seen"), 0, -1, withscores=True)
        assert len(seen) == 50
        assert min(score for _, score in seen) == 1000.0 + 250  # the newest 50 are kept
    finally:
        await store.close()
