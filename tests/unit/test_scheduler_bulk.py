"""A batch's pages into the book at once (``Scheduler.on_pages``, what the agents call) and
one at a time (``Scheduler.on_page``): the same book.  No Redis, no Kafka: the stored
values are built as the scripts write them (``PageState.encode`` with the estimator record
after the page record), time is passed in."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from models.decision.core import choose
from streams.estimates.estimation import Estimation, Observation
from streams.events.records import SOURCES
from streams.scheduler import Scheduler, Shard
from streams.settings import Settings
from streams.store.page_record import PageState
from streams.telemetry.metrics import Metrics

NOW = 1.8e9


def _records() -> list[str]:
    est = Estimation()
    obs = [Observation(None, 600.0 * (1 + i % 7), (i % 3, 0, i % 2, 0, 1 if i % 5 == 0 else 0),
                       i % 3 != 0, 1e9 + i) for i in range(30)]
    return est.observe(obs)


def _scheduler(max_interval_s: float, clock: list[float] | None = None) -> Scheduler:
    st = Settings(web_enabled=False, estimate_quantile=0.8, partitions=2)

    async def sink(k: bytes, v: bytes) -> None:
        return None

    sch = Scheduler(st, store=None, metrics=Metrics(), send_order=sink,  # type: ignore[arg-type]
                    clock=lambda: NOW if clock is None else clock[0])
    sch.control = dataclasses.replace(sch.control, max_interval_s=max_interval_s)
    for p in (0, 1):
        shard: Shard = sch.new_shard(p)
        shard.ready = p == 0  # shard 1 is loading: its pages are only marked dirty
        sch.shards[p] = shard
    return sch


def _updates(rng: random.Random, n_batches: int) -> list[list[tuple]]:
    """Batches of (partition, host, url, value, order ended, estimator) as the agents make
    them: outcomes (a new record, stored after the page record), page values without a
    record (a page deleted and added again), pings and outcomes without an observed
    interval (the stored record kept, no estimator given), deletions, pages of a loading
    shard, repeats within a batch."""
    recs = _records()
    urls = [(f"h{i % 9}.example", f"https://h{i % 9}.example/{i}") for i in range(120)]
    stored: dict[str, str | None] = {}  # each page's record in its value (None: none)
    batches = []
    for _ in range(n_batches):
        batch = []
        for _ in range(rng.randint(1, 60)):
            host, url = rng.choice(urls[:110])  # the last 10 never updated
            crawled = rng.random() < 0.75
            st = PageState(rng.choice([1.0, 2.0, 0.25]), rng.choice([None, 1e-4]),
                           NOW - rng.random() * 9e4 if crawled else 0.0,
                           tuple(rng.choice([0, 0, 1, 2]) for _ in SOURCES))
            r = rng.random()
            est: str | None = None
            if r < 0.3:  # an outcome with an observed interval: its record in the value
                est = stored[url] = rng.choice(recs)
                value: str | None = st.encode(est).decode("utf-8", "surrogateescape")
            elif r < 0.36:  # a page value without an estimator record
                stored[url] = None
                value = st.encode().decode("utf-8", "surrogateescape")
            elif r < 0.39:
                value = None  # deleted
                stored.pop(url, None)
            else:  # a ping, or an outcome without an observed interval: the record kept
                value = st.encode(stored.get(url)).decode("utf-8", "surrogateescape")
            partition = 1 if host == "h8.example" else 0  # a host's pages: one partition
            batch.append((partition, host, url, value, rng.random() < 0.2, est))
        batches.append(batch)
    return batches


def _book_state(sch: Scheduler) -> dict[str, tuple]:
    shard = sch.shards[0]
    t, book = shard.table, shard.book
    out = {}
    for url in list(t.slot):
        s = t.get(url)
        out[url] = (t.host_of(url), bool(t.crawled[s]), bool(t.estimated[s]),
                    *(float(a[s]) for a in (t.origin, t.alpha, t.beta, t.gamma, t.mu,
                                            t.max_value, t.last_crawl, t.delta,
                                            t.first_seen)),
                    tuple(float(x) for x in t.src_beta[s]),
                    url in book.index, book.fresh.value(url), url in book.in_flight,
                    book.floor.due_of(url))
    return out


def _picks(picks: list) -> list:
    """``(policy, value)`` of each pick: of pages with exactly equal values (the same
    history) either may be picked first (the book states are compared above)."""
    return [(p.policy, p.value) for p in picks]


def _flat(row: tuple) -> list:
    out: list = []
    for x in row:
        out += _flat(x) if isinstance(x, tuple) else [x]
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("max_interval_s", [0.0, 86400.0])
async def test_a_batch_into_the_book_at_once_equals_one_page_at_a_time(
        seed: int, max_interval_s: float) -> None:
    rng = random.Random(seed)
    clock = [NOW]  # the worker's clock: new pages' first sight, the floor of those never crawled
    one, bulk = _scheduler(max_interval_s, clock), _scheduler(max_interval_s, clock)
    batches = _updates(rng, 40)
    for k, batch in enumerate(batches):
        clock[0] += 600.0
        if k == 5:  # orders in flight (their outcomes end them), a host blocked
            for sch in (one, bulk):
                shard = sch.shards[0]
                for url in sorted(shard.table.slot)[::4]:
                    shard.book.start_flight(url, (f"o-{url}", NOW - 5))
                shard.blocked["h3.example"] = {f"https://h3.example/{i}"
                                               for i in range(3, 110, 9)}
        if k == 20:  # the longest interval changed (recrawl budget control): pages updated
            # from now on get their floor from the new setting, or none
            for sch in (one, bulk):
                sch.control = dataclasses.replace(sch.control,
                                                  max_interval_s=86400.0 - max_interval_s)
        for p, host, url, value, cleared, est in batch:
            await one.on_page(p, host, url, value, in_flight_cleared=cleared, estimator=est)
        bulk.on_pages(batch)
        a, b = _book_state(one), _book_state(bulk)
        assert a.keys() == b.keys()
        for url in a:
            xa, xb = _flat(a[url]), _flat(b[url])
            num = [i for i, x in enumerate(xa) if type(x) is float]
            assert [x for i, x in enumerate(xa) if i not in num] == [
                x for i, x in enumerate(xb) if i not in num], url
            assert [xa[i] for i in num] == pytest.approx([xb[i] for i in num], rel=1e-12,
                                                          nan_ok=True), url
        assert one.shards[1].dirty == bulk.shards[1].dirty
        assert set(one.shards[0].book.in_flight) == set(bulk.shards[0].book.in_flight)
        for t in (NOW, NOW + 3600.0, NOW + 2e5):
            pa = _picks(choose([one.shards[0].book], 25, t))
            pb = _picks(choose([bulk.shards[0].book], 25, t))
            assert pa == pb
    assert len(bulk.shards[0].book) > 50
    assert bulk.shards[1].dirty


async def test_a_value_that_does_not_parse_leaves_the_page_out_counted() -> None:
    sch = _scheduler(0.0)
    good = PageState(1.0, None, NOW - 100.0, (0,) * len(SOURCES)).encode().decode(
        "utf-8", "surrogateescape")
    sch.on_pages([(0, "a.example", "https://a.example/1", good, False, None),
                  (0, "a.example", "https://a.example/2", good, False, None)])
    sch.on_pages([(0, "a.example", "https://a.example/1", "not|a|page", False, None),
                  (0, "a.example", "https://a.example/3", good, False, None)])
    t = sch.shards[0].table
    assert set(t.slot) == {"https://a.example/2", "https://a.example/3"}
    assert sch.metrics.tally["pages.unusable"] == 1
    assert math.isfinite(float(np.max(t.max_value[: len(t.ids)])))
