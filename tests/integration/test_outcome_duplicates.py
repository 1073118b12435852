"""An outcome written twice to its topic (a producer retry across a broker restart, a
fetcher re-sending after a crash) is one crawl: the second copy, at a new offset, must not
add a crawl interval of 0 s to the page's estimator."""

from __future__ import annotations

import time

from test_agents_redis import Harness, js

from streams.estimates.estimation import estimates_of

HOUR = 3600.0


async def test_an_outcome_written_twice_adds_its_interval_once(redis_url: str) -> None:
    h = Harness(redis_url)
    url, host = "https://dup.org/a", "dup.org"
    now = time.time()
    await h.feed("pages", [js(url=url)])
    await h.feed("outcomes", [js(url=url, order_id="o1", fetched_at=now - HOUR, changed=None)])
    second = js(url=url, order_id="o2", fetched_at=round(now - 10, 3), changed=True, status=200)
    await h.feed("outcomes", [second])
    record = (await h.store.get_pages(host, [url]))[url][2]
    e = estimates_of(record)
    assert e is not None and e.n_intervals == 1
    # the same record again at the next offset: a copy, not a second crawl (a fetch time
    # equal to the last crawl's, to the millisecond the page value keeps)
    await h.feed("outcomes", [second])
    assert (await h.store.get_pages(host, [url]))[url][2] == record
    third = js(url=url, order_id="o2", fetched_at=round(now - 10, 3) + 1e-4, changed=True)
    await h.feed("outcomes", [third])
    assert (await h.store.get_pages(host, [url]))[url][2] == record
    assert h.metrics.tally["outcomes.stale"] == 2
    assert h.rejects == []
