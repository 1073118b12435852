"""The worker's Lua ping rule (``_APPLY_PING`` in :mod:`streams.state`) against the one rule
of :mod:`models.decision.pings`, on a real Redis: every verdict the same."""

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
            res = await store.queue_ping(
                store.redis, url, host, source="sitemap", changed_at=changed,
                received_at=received, fingerprint=f"f{i}", t_delay_s=t_delay,
                window_s=86400.0, keep=4, topic="pings", partition=0, offset=i,
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
