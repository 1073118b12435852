"""The rebuild's vectorised parameters equal the page-by-page ones (streams/estimates/params.py)."""

from __future__ import annotations

import math
import random
from collections import Counter
from urllib.parse import urlsplit

import numpy as np
import pytest

from streams.estimates.estimation import Estimation, Observation
from streams.estimates.params import page_params, page_params_many
from streams.events.records import SOURCES
from streams.settings import Settings
from streams.store.page_record import PageState, estimator_part


def _records() -> list[str]:
    est = Estimation()
    obs = [Observation(None, 600.0 * (1 + i % 7), (i % 3, 0, i % 2, 0, 1 if i % 5 == 0 else 0),
                       i % 3 != 0, 1e9 + i) for i in range(40)]
    recs = est.observe(obs)
    # a second interval for some: other estimates
    recs += est.observe([Observation(r, 1800.0, (0, 1, 0, 0, 0), True, 2e9) for r in recs[:10]])
    return recs


@pytest.mark.parametrize("quantile", [0.5, 0.9])
def test_vectorised_parameters_equal_page_params(quantile: float) -> None:
    settings = Settings(estimate_quantile=quantile)
    rng = random.Random(7)
    recs = _records()
    values: list[str | bytes] = []
    ests: list[str | None] = []
    states: list[PageState] = []
    for _ in range(600):
        crawled = rng.random() < 0.7
        st = PageState(
            importance=rng.choice([1.0, 0.5, 3.25, 1e12, 0.0]),
            prior_change_rate_per_s=rng.choice([None, 1e-5, 0.0, 2.5e-3]),
            last_crawl_s=1.7e9 + rng.random() * 1e5 if crawled else 0.0,
            signals=tuple(rng.choice([0, 0, 1, 3]) for _ in SOURCES),
        )
        # an unreadable tail (not an estimator record) reads as none on both paths
        est = rng.choice([None, None, *recs, "garbage", "1,2,3|xx", ""])
        # as stored (float32 importance and prior), the estimator record after the page
        # record
        values.append(st.encode(est or None))
        states.append(PageState.decode(values[-1]))
        ests.append(est)
    many = page_params_many(values, settings)
    assert many is not None
    for i, (st, est) in enumerate(zip(states, ests, strict=True)):
        one = page_params(st, est, settings)
        got = (many.alpha[i], many.beta[i], many.gamma[i], many.delta[i], many.origin[i],
               many.importance[i])
        want = (one.alpha_per_s, one.beta_s, one.gamma_per_s, one.change_rate_per_s,
                one.origin_s, one.mu)
        for g, w in zip(got, want, strict=True):
            assert g == pytest.approx(w, rel=1e-12, abs=1e-300) or (math.isnan(g)
                                                                    and math.isnan(w))
        assert list(many.src_beta[i]) == pytest.approx(list(one.source_beta_s), rel=1e-12)
        assert bool(many.estimated[i]) == one.estimated
        assert bool(many.crawled[i]) == st.crawled
        assert many.max_value[i] == pytest.approx(one.max_value(), rel=1e-12)


def test_an_unreadable_record_reads_as_none_on_arrays() -> None:
    """A page value whose tail is no readable estimator record (another version byte, a
    wrong length) gives its page record and no estimates, as page_params reads it, and the
    batch stays on arrays."""
    settings = Settings()
    recs = _records()
    values: list[str | bytes] = []
    for i, rec in enumerate(recs[:12]):
        st = PageState(1.0 + i, None, 1.7e9 + i, (i % 2, 0, 1, 0, 0))
        tail = rec if i % 2 else "\x02" + rec[1:] + "xyz"[: i % 4]  # readable, or not
        values.append(st.encode(tail))
    many = page_params_many(values, settings)
    assert many is not None
    for i, v in enumerate(values):
        one = page_params(PageState.decode(v), estimator_part(v), settings)
        assert one.estimated == bool(i % 2) == bool(many.estimated[i])
        assert (many.alpha[i], many.beta[i], many.origin[i], many.importance[i]) == (
            pytest.approx(one.alpha_per_s, rel=1e-12), pytest.approx(one.beta_s, rel=1e-12),
            pytest.approx(one.origin_s, rel=1e-12), pytest.approx(one.mu, rel=1e-12))


def test_a_value_that_is_no_page_record_falls_back() -> None:
    """One value that is no page record (text, an empty value, another
    first byte) sends the whole batch page by page, where it is counted."""
    good = PageState(2.0, None, 1.7e9, (1, 0, 0, 0, 0)).encode()
    for bad in ["2.0||1700000000.0|1,0,0,0,0", "", b"\xa0" + good[1:]]:
        assert page_params_many([good, bad], Settings()) is None
        with pytest.raises(ValueError, match="no page record"):
            PageState.decode(bad)
    ok = page_params_many([good, good[:9]], Settings())
    assert ok is not None and np.isfinite(ok.max_value).all()
    assert list(ok.importance) == [2.0, 2.0] and list(ok.last_crawl_s) == [1.7e9, 0.0]


def test_a_bulk_rebuild_equals_a_page_by_page_one(redis_url: str) -> None:
    """A shard rebuilt from a real Redis with arrays (Scheduler._load) holds the same pages,
    in flight or not, and chooses the same orders as one built page by page (_apply)."""
    import asyncio
    import dataclasses
    import uuid

    from models.decision.core import choose
    from streams.scheduler import NOT_IN_FLIGHT, Scheduler
    from streams.store.redis_store import Store
    from streams.telemetry.metrics import Metrics

    async def go() -> None:
        prefix = f"pm{uuid.uuid4().hex[:8]}"
        settings = Settings(redis_url=redis_url, key_prefix=prefix, partitions=1,
                            estimate_quantile=0.8, max_interval_s=86400.0)
        store = Store.from_url(redis_url, prefix)
        rng = random.Random(3)
        recs = _records()
        now = 1.8e9
        data: dict[str, dict[str, dict[str, str]]] = {}
        for h in range(12):
            host = f"h{h}.example"
            pages, ests, fl = {}, {}, {}
            for j in range(40):
                u = f"https://{host}/{j}"
                crawled = rng.random() < 0.7
                pages[u] = PageState(rng.choice([1.0, 2.0, 0.25]),
                                     rng.choice([None, 1e-4]),
                                     now - rng.random() * 9e4 if crawled else 0.0,
                                     tuple(rng.choice([0, 1, 2]) for _ in SOURCES)).encode()
                r = rng.random()
                if r < 0.4:  # the estimator record after the page record, as written now
                    rec = rng.choice(recs)
                    ests[u] = rec
                    pages[u] = PageState.decode(pages[u]).encode(rec).decode(
                        "utf-8", "surrogateescape")
                if rng.random() < 0.1:
                    fl[u] = f"o{h}-{j}|{now - 5}"
            if h == 3:
                pages[f"https://{host}/bad"] = "not|a|page"  # no page record: left out, counted
            data[host] = {"pages": pages, "est": ests, "inflight": fl}
            pipe = store.redis.pipeline(transaction=False)
            stored = {"pages": pages, "inflight": fl}
            for kind, mapping in stored.items():
                if mapping:
                    pipe.hset(store.key(host, kind), mapping=mapping)
            pipe.sadd(store.shard_key(0), host)
            await pipe.execute()

        async def sink(k: bytes, v: bytes) -> None:
            return None

        bulk = Scheduler(settings, store, Metrics(), sink, clock=lambda: now)
        bulk.control = dataclasses.replace(bulk.control, max_interval_s=86400.0)
        bulk.sync_assignment({0})
        while not bulk.shards[0].ready:
            await asyncio.sleep(0.01)
        one = Scheduler(settings, store, Metrics(), sink, clock=lambda: now)
        one.control = bulk.control
        shard = one.new_shard(0)
        for host, d in data.items():
            for u, v in d["pages"].items():
                try:
                    st = PageState.decode(v)
                except ValueError:
                    continue
                fl = d["inflight"].get(u)
                flight = (fl.split("|")[0], float(fl.split("|")[1])) if fl else NOT_IN_FLIGHT
                one._apply_or_skip(shard, host, u, st, d["est"].get(u), flight)
        b = bulk.shards[0]
        assert len(b.book) == len(shard.book) == 12 * 40
        assert set(b.in_flight) == set(shard.in_flight) and b.in_flight
        assert bulk.metrics.tally["pages.unusable"] == 1
        for t in (now, now + 3600.0, now + 2e5):
            a = [(p.page, p.policy, p.value) for p in choose([b.book], 60, t)]
            c = [(p.page, p.policy, p.value) for p in choose([shard.book], 60, t)]
            # the same picks; pages of exactly equal value (never-crawled pages of the same
            # importance) go in insertion order, which is Redis's hash order in the bulk
            # rebuild, so a host with room for one of two tied pages may take either: per
            # (policy, value) the same hosts as often (the last group, which the 60 may cut
            # across hosts, the same size), every page picked with its value in both books
            assert [(pol, v) for _, pol, v in a] == [(pol, v) for _, pol, v in c]

            def hosts(picks: list, key: tuple) -> Counter:
                return Counter(urlsplit(u).hostname for u, pol, v in picks if (pol, v) == key)

            cut = a[-1][1:]
            for key in {(pol, v) for _, pol, v in a} - {cut}:
                assert hosts(a, key) == hosts(c, key)
            for u, pol, v in a + c:
                if pol == "greedy":
                    assert b.book.value(u, t) == shard.book.value(u, t) == v
        await store.close()

    asyncio.run(go())
