"""A page whose estimate did not change (a ping, a catalogue update) takes its parameters
from the scheduler's table instead of its estimator record: they must equal
:func:`streams.estimates.params.page_params` with that record, origin included, for any
signal counts, last crawl and importance (no Redis, no Kafka)."""

from __future__ import annotations

import asyncio
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.estimates.estimation import Estimation, Observation
from streams.estimates.params import page_params
from streams.scheduler import NOT_IN_FLIGHT, Scheduler
from streams.scheduler.loading import _cached_params
from streams.settings import Settings
from streams.store.page_record import N_SOURCES, PageState
from streams.telemetry.metrics import Metrics

T0 = 1_000_000.0


def _records() -> list[str]:
    """Estimator records of a few simulated pages (30 hourly crawls each, random changes
    and signal counts, seeded)."""
    est = Estimation()
    out = []
    for seed in range(4):
        rng = random.Random(seed)
        record = None
        t = T0
        for _ in range(30):
            t += 3600.0
            signals = tuple(rng.randint(0, 2) for _ in range(N_SOURCES))
            record = est.observe([Observation(record, 3600.0, signals, rng.random() < 0.5,
                                              t)])[0]
        assert record is not None
        out.append(record)
    return out


RECORDS = _records()


def _scheduler() -> Scheduler:
    async def sink(k: bytes, v: bytes) -> None:
        return None

    return Scheduler(Settings(web_enabled=False), store=None,  # type: ignore[arg-type]
                     metrics=Metrics(), send_order=sink, clock=lambda: 2.1e9)


@settings(max_examples=150, deadline=None)
@given(record=st.sampled_from(RECORDS),
       importance=st.floats(0.01, 100.0),
       last_crawl_s=st.one_of(st.just(0.0), st.floats(1.0, 2e9)),
       signals=st.tuples(*[st.integers(0, 65535)] * N_SOURCES))
def test_the_tables_parameters_equal_page_params(
    record: str, importance: float, last_crawl_s: float, signals: tuple[int, ...]
) -> None:
    sch = _scheduler()
    shard = sch.new_shard(0)
    shard.ready = True
    sch.shards[0] = shard
    first = PageState(1.0, 1e-5, T0 + 30 * 3600.0, (0,) * N_SOURCES)
    sch.loader.apply(shard, "h.org", "u", first, record, NOT_IN_FLIGHT)
    t = shard.table
    slot = t.slot["u"]
    assert t.estimated[slot]
    state = PageState(importance, 1e-5, last_crawl_s, signals)
    want = page_params(state, record, sch.settings)
    assert want.estimated
    assert _cached_params(t, slot, state) == want
    # and through the scheduler: a page event without its estimator record
    asyncio.run(sch.on_page(0, "h.org", "u", state))
    slot = t.slot["u"]
    assert float(t.origin[slot]) == want.origin_s
    assert float(t.mu[slot]) == want.mu
