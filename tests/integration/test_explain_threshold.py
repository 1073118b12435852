"""``explain`` of a page whose largest value ``mu/Delta`` is below its shard's threshold: it
used to say the page "can never reach" it, but the threshold falls once the pages above it
are crawled; it now says where the threshold settles at the current budget (the
continuous optimum's Lambda), against the real Redis."""

from __future__ import annotations

import math
import time

import pytest
from test_plan import eq5_by_hand, put_pages, settings_for

from streams.events.records import shard_of
from streams.store.page_record import PageState
from streams.store.redis_store import Store
from streams.worker.explain import explain
from streams.worker.plan import steady_threshold

HOUR = 3600.0


async def explain_small(redis_url: str, budget_per_s: float, with_steady: bool
                        ) -> tuple[dict[str, object], float]:
    """Two important never-crawled pages (mu/Delta = 360000, the values the worker just
    ordered at) and a small crawled one (mu/Delta = 3600) on another host; the shard's
    threshold is at 1e5, as right after the important pages were ordered."""
    st = settings_for(redis_url)
    store = Store.from_url(redis_url, st.key_prefix)
    now = time.time()
    small = "https://small.org/p"
    pages = [(f"big{i}.org", f"https://big{i}.org/p",
              PageState(importance=100.0, prior_change_rate_per_s=1 / HOUR), None)
             for i in range(2)]
    pages.append(("small.org", small, PageState(importance=1.0, prior_change_rate_per_s=1 / HOUR,
                                                last_crawl_s=now - 600), None))
    try:
        await put_pages(store, st, pages)
        await store.redis.hset(store.control_key, "budget_per_s", repr(budget_per_s))
        await store.put_shards({shard_of("small.org", st.partitions):
                                {"log_threshold": math.log(1e5), "share_per_s": 1.0}})
        out = await explain(store, st, small, now,
                            steady=(lambda: steady_threshold(store, st)) if with_steady
                            else None)
    finally:
        await store.redis.delete(*await store.redis.keys(f"{st.key_prefix}:*"))
        await store.close()
    _, lam = eq5_by_hand([100.0, 100.0, 1.0], [1 / HOUR] * 3, budget_per_s)
    return out, lam


async def test_a_page_below_a_transient_threshold_will_be_crawled(redis_url: str) -> None:
    out, lam = await explain_small(redis_url, 1 / 60, with_steady=True)
    assert out["max_value"] == pytest.approx(3600.0)
    assert out["ordered_when_threshold_below"] == pytest.approx(3600.0)
    # Lambda at a budget of one crawl a minute (eq. 5 by hand): far below 3600
    assert out["steady_threshold"] == pytest.approx(lam, rel=1e-7) and lam < 3600
    status = str(out["status"])
    assert "never" not in status and "so it will be" in status
    assert f"{lam:.4g}" in status


async def test_a_page_not_worth_crawling_at_this_budget_says_so(redis_url: str) -> None:
    out, lam = await explain_small(redis_url, 1 / 36000, with_steady=True)
    assert lam >= 3600 and out["steady_threshold"] == pytest.approx(lam, rel=1e-7)
    assert "not worth a crawl at this budget" in str(out["status"])


async def test_without_the_optimum_it_points_to_recrawl_plan(redis_url: str) -> None:
    out, _ = await explain_small(redis_url, 1 / 60, with_steady=False)
    assert out["steady_threshold"] is None
    status = str(out["status"])
    assert "never" not in status and "recrawl plan" in status and "falls below 3600" in status
