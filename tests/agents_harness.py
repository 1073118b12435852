"""The agents through ``agent.test_context()`` (no broker): a harness over any store
(:class:`streams.store.StateStore`) and the cases every backend must pass.

``tests/unit/test_agents_memory.py`` runs :data:`CASES` on the in-memory store,
``tests/integration/test_agents_redis.py`` on the real Redis (and its Redis-only cases).
Each harness gets its own key prefix; rejects are captured by a sink instead of a topic.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import faust
import pytest

from streams.settings import Settings
from streams.store import IssueBatch, StateStore
from streams.store.page_record import PageState
from streams.store.redis_store import Store
from streams.telemetry.metrics import Metrics
from streams.worker.agents import register_agents

__all__ = ["CASES", "Harness", "js"]


Make = Callable[..., "Harness"]


class Harness:
    def __init__(self, backend: str | StateStore, **overrides: Any) -> None:
        """``backend``: a Redis url (the Redis store) or a store (e.g. a MemoryStore)."""
        prefix = backend.prefix if not isinstance(backend, str) else f"u{uuid.uuid4().hex[:8]}"
        self.settings = Settings(
            web_enabled=False, topic_prefix="unit", key_prefix=prefix,
            **({"redis_url": backend} if isinstance(backend, str) else {}), **overrides,
        )
        self.app = faust.App(
            f"unit-{uuid.uuid4().hex[:6]}", broker="kafka://127.0.0.1:9", store="memory://",
            autodiscover=False,
        )
        self.store: Any = (Store.from_url(backend, prefix) if isinstance(backend, str)
                           else backend)
        self.metrics = Metrics()
        self.rejects: list[dict[str, Any]] = []
        self.offsets: dict[str, int] = {}

        async def sink(key: bytes | None, value: bytes) -> None:
            self.rejects.append(json.loads(value))

        self.agents = register_agents(
            self.app, self.settings, store=self.store, reject_sink=sink, metrics=self.metrics,
            reroute=False,  # no broker to send to: every test event sits on partition 0
        )
        self.logic = self.app.recrawl_agents  # type: ignore[attr-defined]
        if self.logic.logs is not None:
            # no broker to ask whether a partition was read before: a partition without an
            # anchor is a new log (streams/store/logs.py, LogEpochs without a probe)
            self.logic.logs.probe = None

    def tally_retries(self) -> int:
        return int(self.metrics.tally["retries.redis"])

    def processed(self, topic: str) -> int:
        t = self.metrics.tally
        return sum(v for k, v in t.items() if k.startswith(f"{topic}."))

    async def feed(
        self, topic: str, values: list[bytes], key: bytes | None = None, offset: int | None = None
    ) -> list[Any]:
        """Put values into the agent (offsets go on from the last feed unless given) and
        wait until all are processed (or rejected)."""
        before = self.processed(topic)
        events = []
        async with self.agents[topic].test_context() as agent:
            agent.sent_offset = self.offsets.get(topic, 0) if offset is None else offset
            for v in values:
                events.append(await agent.put(v, key=key, wait=False))
            deadline = time.monotonic() + 10
            while self.processed(topic) < before + len(values):
                assert time.monotonic() < deadline, self.metrics.tally
                await asyncio.sleep(0.01)
            self.offsets[topic] = max(self.offsets.get(topic, 0), agent.sent_offset)
        return events


def js(**kw: Any) -> bytes:
    return json.dumps(kw).encode()


async def case_page_event_is_applied_once_even_when_redelivered(make: Make) -> None:
    h = make()
    events = await h.feed("pages", [js(url="https://Example.org/x", importance=3)])
    assert h.rejects == []
    state = await h.store.get_page("example.org", "https://example.org/x")  # canonical
    assert state == PageState(importance=3.0)
    # the same message again (same partition and offset): nothing changes
    await h.feed("pages", [js(url="https://Example.org/x", importance=9)], offset=0)
    assert (await h.store.get_page("example.org", "https://example.org/x")).importance == 3.0
    await h.logic.on_pages(events)
    assert h.metrics.tally["pages.dup-offset"] == 2
    assert await h.store.shard_hosts(0) == ["example.org"]


async def case_invalid_events_are_rejected_and_the_stream_goes_on(make: Make) -> None:
    h = make()
    await h.feed("pages", [
        b"\xff\xfe not utf8",
        b'{"url": "https://a.org/", "host": "b.org"}',
        b'{"url": "https://a.org/", "importance": NaN}',
        b'{"url": "https://a.org/", "importance": "3"}',
        b'{"url": "https://a.org/ok"}',
    ])
    reasons = [r["reason"] for r in h.rejects]
    assert len(reasons) == 4, reasons
    assert "does not match" in reasons[1]
    assert "finite" in reasons[2]
    assert "valid number" in reasons[3]
    assert h.rejects[0]["raw_base64"]  # undecodable bytes are kept, base64
    assert [r["offset"] for r in h.rejects] == [0, 1, 2, 3]
    assert await h.store.get_page("a.org", "https://a.org/ok") == PageState()


async def case_ping_rules_t_delay_duplicates_and_discoveries(make: Make) -> None:
    h = make(t_delay_s=60.0)
    url = "https://p.org/a"
    now = time.time()
    crawl = now - 1000
    await h.feed("pages", [js(url=url)])
    await h.feed("outcomes", [js(url=url, fetched_at=crawl, changed=False, status=200)])
    assert (await h.store.get_page("p.org", url)).last_crawl_s == pytest.approx(crawl, abs=1e-3)
    await h.feed("pings", [
        js(url=url, source="sitemap", changed_at=crawl - 5, received_at=now - 10),  # before
        js(url=url, source="indexnow", received_at=crawl + 30),  # within T_DELAY
        js(url=url, source="indexnow", received_at=now - 5, id="a"),  # counts
        js(url=url, source="indexnow", received_at=now - 4, id="a"),  # duplicate id
        js(url=url, source="cdn", changed_at=now - 50, received_at=now - 3),  # counts
        js(url=url, source="cdn", changed_at=now - 50, received_at=now - 2),  # duplicate
        js(url=url, source="websub", received_at=now - 1),  # counts
        js(url="https://p.org/unknown", source="other", received_at=now),  # discovery
    ])
    t = h.metrics.tally
    assert (t["pings.before-crawl"], t["pings.within-delay"], t["pings.duplicate"]) == (1, 1, 2)
    assert (t["pings.applied"], t["pings.unknown"]) == (3, 1)
    state = await h.store.get_page("p.org", url)
    assert state.signals == (0, 1, 1, 1, 0)
    # why a ping was dropped: the worker's ring, not Redis
    assert any("T_DELAY" in d for d in h.logic.decisions.get(url))
    assert any("precedes the last crawl" in d for d in h.logic.decisions.get(url))
    if isinstance(h.store, Store):
        assert not [k async for k in h.store.redis.scan_iter(f"{h.settings.key_prefix}:*why*")]
    assert h.rejects == []


async def case_pings_without_an_id_or_a_change_time_each_count_once(make: Make) -> None:
    """Pings that carry neither an id nor a change time: two of one page both count; the
    same record again (redelivered: same offset) and the same ping produced again (another
    offset) do not."""
    h = make(t_delay_s=0.0)
    url = "https://n.org/a"
    now = time.time()
    await h.feed("pages", [js(url=url)])
    first = js(url=url, source="websub", received_at=now - 20)
    second = js(url=url, source="websub", received_at=now - 10)
    start = h.offsets.get("pings", 0)
    await h.feed("pings", [first, second])
    t = h.metrics.tally
    assert (t["pings.applied"], t["pings.duplicate"]) == (2, 0)
    await h.feed("pings", [first], offset=start)  # redelivered
    await h.feed("pings", [first])  # produced again: the next offset
    assert (t["pings.applied"], t["pings.dup-offset"], t["pings.duplicate"]) == (2, 1, 1)
    state = await h.store.get_page("n.org", url)
    assert state.signals == (0, 0, 2, 0, 0)
    assert h.rejects == []


async def case_outcome_clears_only_its_own_order_and_resets_signals(make: Make) -> None:
    h = make()
    url = "https://o.org/a"
    await h.feed("pages", [js(url=url)])
    await h.store.load_scripts()
    (res,) = await h.store.issue([IssueBatch("o.org", [(url, "ord-1")])], now_s=time.time(),
                                 default_rate=1.0, default_mif=0, burst=1.0)
    assert res[0][0] == "ok"
    now = time.time()
    await h.feed("pings", [js(url=url, source="sitemap", received_at=now)])
    await h.feed("outcomes", [js(url=url, order_id="other", fetched_at=now, changed=True)])
    assert (await h.store.explain_data("o.org", url))["in_flight"][0] == "ord-1"
    assert (await h.store.get_page("o.org", url)).signals == (0,) * 5
    await h.feed("outcomes", [js(url=url, order_id="ord-1", fetched_at=now + 1, changed=None)])
    assert (await h.store.explain_data("o.org", url))["in_flight"] is None


async def case_hosts_and_control_are_validated_and_stored(make: Make) -> None:
    h = make()
    await h.feed("hosts", [
        js(host="Slow.org", max_crawls_per_s=2.5, max_in_flight=3),
        js(host="x.org", max_crawls_per_s=0),
        js(host="not a host", max_crawls_per_s=1),
    ])
    info = await h.store.get_host("slow.org")
    assert (info.rate_per_s, info.max_in_flight) == (2.5, 3)
    await h.feed("control", [js(budget_per_s=12.5, paused=False), js(), js(budget_per_s=-1)])
    assert await h.store.get_control() == {"budget_per_s": "12.5", "paused": "0"}
    assert len(h.rejects) == 4
    assert "greater than 0" in h.rejects[0]["reason"]


async def case_outcomes_keep_the_hosts_prior_sums(make: Make) -> None:
    """Outcomes of one host's pages through the outcomes agent: the host's prior sums are
    the sum of its stored records' contributions; once it has ``host_prior_min_pages``
    pages a page's alpha is its host posterior mean; a redelivered batch changes nothing."""
    from streams.estimates.estimation import estimates_of
    from streams.store.host_prior import contribution
    from streams.store.page_record import estimator_part

    h = make(host_prior_min_pages=4)
    urls = [f"https://hp.org/{i}" for i in range(5)]
    await h.feed("pages", [js(url=u) for u in urls])
    t0 = time.time() - 1000.0
    await h.feed("outcomes", [js(url=u, fetched_at=t0, changed=None) for u in urls])
    assert (await h.store.read_outcome_inputs([("hp.org", urls[0])]))[1] == {
        "hp.org": (0.0, 0.0, 0.0)}

    async def stored() -> tuple[tuple[float, float, float], list[Any]]:
        values = [await h.store.get_page_raw("hp.org", u) for u in urls]
        return (await h.store.read_outcome_inputs([("hp.org", urls[0])]))[1]["hp.org"], values

    await h.feed("outcomes", [js(url=u, fetched_at=t0 + 100.0, changed=i % 2 == 0)
                              for i, u in enumerate(urls)])
    sums, values = await stored()
    parts = [contribution(estimator_part(v)) for v in values]
    assert sums[0] == 5.0 and all(p[0] == 1.0 for p in parts)
    assert sums[1] == pytest.approx(math.fsum(p[1] for p in parts), rel=1e-12)
    assert sums[2] == pytest.approx(math.fsum(p[2] for p in parts), rel=1e-12)
    # not yet the pages' alpha: the host had no page before this batch
    assert all(contribution(estimator_part(v))[1] == -_host_mean(v) for v in values)
    second = [js(url=u, fetched_at=t0 + 300.0, changed=i % 3 == 0) for i, u in enumerate(urls)]
    before = h.offsets["outcomes"]
    await h.feed("outcomes", second)
    sums, values = await stored()
    for v in values:
        est = estimates_of(estimator_part(v))
        assert est is not None and est.alpha_per_s == _host_mean(v) > 0.0
    await h.feed("outcomes", second, offset=before)  # redelivered: nothing changes
    assert await stored() == (sums, values)
    assert h.rejects == []



async def case_an_empty_hosts_first_contributions_follow_the_pages_time_scale(
        make: Make) -> None:
    """Pages of a new host crawled every 35 s, six intervals of ten changed: each page's
    first contribution to its host's prior (computed while the host had no page counted)
    is near its own estimate (about ln(10/4)/35 s), not at the daily-scale start rate."""
    from streams.estimates.estimation import estimates_of
    from streams.store.page_record import estimator_part

    h = make(host_prior_min_pages=50)
    urls = [f"https://fast.org/{i}" for i in range(3)]
    await h.feed("pages", [js(url=u) for u in urls])
    t0 = time.time() - 1000.0
    await h.feed("outcomes", [js(url=u, fetched_at=t0, changed=None) for u in urls])
    pattern = (True, False, True, True, False, True, False, True, False, True)
    for k, changed in enumerate(pattern, start=1):
        await h.feed("outcomes", [js(url=u, fetched_at=t0 + 35.0 * k, changed=changed)
                                  for u in urls])
    mle = math.log(10 / 4) / 35.0
    for u in urls:
        v = await h.store.get_page_raw("fast.org", u)
        est = estimates_of(estimator_part(v))
        assert est is not None and est.n_intervals == 10
        # the host is not in use (50 pages needed): the mean is stored negated
        contrib = -_host_mean(v)
        assert 0.5 < contrib / est.alpha_per_s < 2.0
        assert 0.4 < contrib / mle < 2.5
    assert h.rejects == []

async def case_an_outcome_with_signals_unknown_teaches_no_ping_quality(make: Make) -> None:
    """Two pages pinged alike, each then crawled changed: the outcome with ``signals_known``
    false (an imported one) adds its interval to the page's unknown block and none of the
    page's pings to its signal totals; the other counts its ping.  A ``signals_known`` that
    is not a boolean is a malformed event (rejected, the page unchanged)."""
    from streams.estimates.record import EstimatorRecord
    from streams.store.page_record import estimator_part

    h = make()
    a, b = "https://sk.org/a", "https://sk.org/b"
    await h.feed("pages", [js(url=a), js(url=b)])
    t0 = float(int(time.time()) - 1000)  # whole seconds: the page record keeps milliseconds

    async def state(url: str) -> Any:
        part = estimator_part(await h.store.get_page_raw("sk.org", url))
        assert part is not None
        return EstimatorRecord.decode(part).state

    await h.feed("outcomes", [js(url=u, fetched_at=t0, changed=None) for u in (a, b)])
    await h.feed("pings", [js(url=u, source="indexnow", received_at=t0 + 80.0) for u in (a, b)])
    await h.feed("outcomes", [
        js(url=a, fetched_at=t0 + 100.0, changed=True, signals_known=False),
        js(url=b, fetched_at=t0 + 100.0, changed=True),
    ])
    sa, sb = await state(a), await state(b)
    assert sb.totals[1:] == (0.0, 1.0, 0.0) and sb.unknown == (0.0,) * 4  # push: indexnow
    assert sa.totals[1:] == (0.0, 0.0, 0.0)
    assert sa.totals[0] == pytest.approx(100.0, rel=1e-6) == sa.unknown[0]
    assert sa.unknown[1] == 0.0  # changed: nothing unchanged
    assert (await h.store.get_page("sk.org", a)).signals == (0,) * 5
    await h.feed("pings", [js(url=a, source="sitemap", received_at=t0 + 170.0)])
    await h.feed("outcomes", [
        js(url=a, fetched_at=t0 + 200.0, changed=False, signals_known="false"),
        js(url=a, fetched_at=t0 + 200.0, changed=False, signals_known=None),
    ])
    assert len(h.rejects) == 2 and all("signals_known" in r["reason"] for r in h.rejects)
    assert (await h.store.get_page("sk.org", a)).last_crawl_s == pytest.approx(t0 + 100.0,
                                                                               abs=1e-3)
    await h.feed("outcomes", [js(url=a, fetched_at=t0 + 200.0, changed=False,
                                 signals_known=False)])
    sa = await state(a)
    assert sa.n_intervals == 2 and sa.totals[1:] == (0.0, 0.0, 0.0)
    assert sa.unknown[:2] == pytest.approx((200.0, 100.0), rel=1e-6)
    assert sa.totals[0] == pytest.approx(200.0, rel=1e-6)
    assert len(h.rejects) == 2


def _host_mean(value: str) -> float:
    """The stored (signed) host mean of a page value's estimator record."""
    from streams.estimates.record import EstimatorRecord
    from streams.store.page_record import estimator_part

    part = estimator_part(value)
    assert part is not None
    return EstimatorRecord.decode(part).host[0]


CASES: list[Callable[[Make], Awaitable[None]]] = [
    case_page_event_is_applied_once_even_when_redelivered,
    case_invalid_events_are_rejected_and_the_stream_goes_on,
    case_ping_rules_t_delay_duplicates_and_discoveries,
    case_pings_without_an_id_or_a_change_time_each_count_once,
    case_outcome_clears_only_its_own_order_and_resets_signals,
    case_hosts_and_control_are_validated_and_stored,
    case_an_outcome_with_signals_unknown_teaches_no_ping_quality,
    case_outcomes_keep_the_hosts_prior_sums,
    case_an_empty_hosts_first_contributions_follow_the_pages_time_scale,
]
