"""Per-page estimators in the stream: pure logic (no Redis) and the outcomes agent's
offset-guarded, compare-and-set update against the real Redis."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import time
from dataclasses import dataclass

import pytest
from test_agents_redis import Harness, js

import streams.worker.agents as agents_module
from models.estimators import CrawlInterval, fit_signal_mle
from streams.estimates.estimation import (
    GROUP_OF,
    STREAM_RING,
    Estimation,
    EstimatorRecord,
    Observation,
    estimates_of,
    full_estimates,
    group_counts,
)
from streams.estimates.params import page_params
from streams.events.records import SOURCES
from streams.settings import Settings
from streams.store import OutcomeOp
from streams.store.page_record import PageState
from streams.worker.explain import estimates_view

HOUR = 3600.0


def test_sources_fall_into_three_groups() -> None:
    assert len(GROUP_OF) == len(SOURCES)
    assert group_counts((1, 2, 3, 4, 5)) == (1.0, 5.0, 9.0)  # sitemap / push / cdn+other


def simulate(est: Estimation, rate_per_s: float, n: int, seed: int = 1,
             signal_recall: float = 0.0, crawl_every_s: float = HOUR,
             history: list[tuple[float, bool]] | None = None) -> str:
    """Crawl a Poisson-changing page every ``crawl_every_s``; push signals catch
    ``signal_recall`` of the changes (no false ones)."""
    rng = random.Random(seed)
    record: str | None = None
    t = 1_000_000.0
    for _ in range(n):
        t += crawl_every_s
        changes = 0
        clock = 0.0
        while True:
            clock += rng.expovariate(rate_per_s)
            if clock > crawl_every_s:
                break
            changes += 1
        signalled = sum(rng.random() < signal_recall for _ in range(changes))
        (record,) = est.observe([Observation(record, crawl_every_s, (0, signalled, 0, 0, 0),
                                             changes > 0, t)])
        if history is not None:
            history.append((crawl_every_s, changes > 0))
    assert record is not None
    return record


def test_estimates_move_from_the_prior_toward_the_truth() -> None:
    est = Estimation()
    prior = est.results([est.estimator.init()])[0].change_rate_per_s
    truth = 1.0 / (10 * HOUR)  # the Grimes-Ford prior says 1/(57.5 h)
    history: list[tuple[float, bool]] = []
    e = full_estimates(simulate(est, truth, 200, crawl_every_s=5 * HOUR, history=history))
    assert e is not None and e.n_intervals == 200
    assert abs(math.log(e.change_rate_per_s / truth)) < abs(math.log(prior / truth)) / 4
    # the streaming state tracks the full-data MAP (paper 004 App. E) of the same intervals
    full = fit_signal_mle([t for t, _ in history], None, [c for _, c in history])
    assert e.change_rate_per_s == pytest.approx(full.change_rate_per_s, rel=0.1)
    assert 0 < e.change_rate_se_per_s < 0.2 * e.change_rate_per_s
    # a source that signals most changes and nothing else: precision and recall rise
    e2 = full_estimates(simulate(est, truth, 150, seed=2, signal_recall=0.9,
                                 crawl_every_s=5 * HOUR))
    assert e2 is not None
    assert e2.precision[1] > 0.8 and e2.recall[1] > 0.6
    assert e2.precision[1] - 2 * e2.precision_se[1] > 0.5  # clearly away from the prior 0.5
    assert e2.gamma_per_s[0] == e2.gamma_per_s[2] == 0.0


def test_page_parameters_come_from_the_estimates() -> None:
    s = Settings()
    est = Estimation()
    record = simulate(est, 1.0 / HOUR, 40, signal_recall=0.9)
    state = PageState(importance=2.0, last_crawl_s=5000.0, signals=(0, 2, 0, 0, 0))
    prior = page_params(state, None, s)
    p = page_params(state, record, s)
    e = estimates_of(record)
    assert e is not None
    assert (prior.estimated, p.estimated) == (False, True)
    assert p.alpha_per_s == pytest.approx(e.alpha_per_s)
    assert p.gamma_per_s == pytest.approx(sum(e.gamma_per_s)) and p.gamma_per_s > 0
    assert p.change_rate_per_s == e.change_rate_per_s != prior.change_rate_per_s
    # indexnow and websub share the push group's beta; two of them move the origin by 2 beta
    assert p.source_beta_s[1] == p.source_beta_s[2] == pytest.approx(e.kappa[1] / e.alpha_per_s)
    assert p.origin_s == pytest.approx(5000.0 - 2 * p.source_beta_s[1])
    # a higher quantile is a larger (more conservative) alpha with the same kappa
    hi = page_params(state, record, Settings(estimate_quantile=0.9))
    assert hi.alpha_per_s > p.alpha_per_s
    assert hi.alpha_per_s * hi.source_beta_s[1] == pytest.approx(e.kappa[1])
    view = estimates_view(record)
    assert view is not None and view["sources"]["push"]["members"] == ["indexnow", "websub"]
    assert view["change_rate_se_per_s"] > 0


def test_records_round_trip_and_bad_ones_restart_from_the_prior() -> None:
    est = Estimation()
    record = simulate(est, 1.0 / HOUR, 12)
    back = EstimatorRecord.decode(record)
    assert back.encode() == record
    assert estimates_of(record) == back.estimates
    assert est.state_of("garbage|###") == est.estimator.init()
    assert estimates_of("garbage") is None
    assert est.state_of(record[:-3]) == est.estimator.init()  # truncated: from the prior


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("recall", [0.0, 0.9])
def test_the_streams_short_ring_stays_close_to_the_default_capacity(
        seed: int, recall: float) -> None:
    """The stream keeps STREAM_RING changed intervals exactly, the model's default 5 for
    three sources; after 200 crawls of a page changing every 10 h, crawled every 5 h, the
    change rate differs from the default capacity's by -0.8% .. -6.6% (ring 2; ring 1 was
    up to -12.5%, about one standard error: docs/benchmarks.md "Design decisions")."""
    rates = {}
    for cap in (5, STREAM_RING):
        e = estimates_of(simulate(Estimation(ring_capacity=cap), 1.0 / (10 * HOUR), 200,
                                  seed=seed, signal_recall=recall, crawl_every_s=5 * HOUR))
        assert e is not None
        rates[cap] = e.change_rate_per_s
    assert rates[STREAM_RING] == pytest.approx(rates[5], rel=0.08)


def scalar_observe(est: Estimation, observations: list[Observation]) -> list[str]:
    """The service's path before the vectorised update: ``SignalEstimator.update`` per page,
    then the mode as the running estimate (``theta``), as the stream keeps it."""
    states = []
    for o in observations:
        st = est.state_of(o.record, o.fetched_at_s - o.interval_s)
        end = o.fetched_at_s if o.fetched_at_s >= st.end_s else None
        signals = o.signals if o.signals_known else (0,) * len(o.signals)
        states.append(est.estimator.update(st, CrawlInterval(
            max(0.0, o.interval_s), o.changed, group_counts(signals), end_s=end,
            signals_known=o.signals_known)))
    return [EstimatorRecord(e, dataclasses.replace(s, theta=(e.alpha_per_s, *e.kappa))).encode()
            for e, s in zip(est.results(states), states, strict=True)]


def assert_records_close(a: str, b: str) -> None:
    """Same state (float32 parts may round the other way after different summation orders)
    and the same stored estimates (float32)."""
    ra, rb = EstimatorRecord.decode(a), EstimatorRecord.decode(b)
    sa, sb = ra.state, rb.state
    assert (sa.n_intervals, len(sa.ring), sa.end_s) == (sb.n_intervals, len(sb.ring), sb.end_s)
    for name in ("theta", "unchanged", "totals", "quad_b", "quad_a", "unknown"):
        assert getattr(sa, name) == pytest.approx(getattr(sb, name), rel=1e-6), name
    assert [x for e in sa.ring for x in e] == pytest.approx([x for e in sb.ring for x in e],
                                                             rel=1e-6)
    ea, eb = ra.estimates, rb.estimates
    assert ea.n_intervals == eb.n_intervals
    fa = [ea.alpha_per_s, ea.alpha_se_per_s, *ea.kappa, *ea.gamma_per_s]
    fb = [eb.alpha_per_s, eb.alpha_se_per_s, *eb.kappa, *eb.gamma_per_s]
    assert fa == pytest.approx(fb, rel=2e-5)


def test_observe_on_arrays_equals_the_page_by_page_update() -> None:
    """``observe`` (stored records -> arrays -> records, no SignalState per page) gives the
    records of ``observe_states`` (update_many on objects) and of the scalar update page by
    page, over pages with randomised histories: new pages, unreadable records, rings filling
    and evicting, changed or not, 0..5 pings of any source, a fetch before the stored crawl,
    signals unknown (an imported interval: its page's pings are not its own)."""
    rng = random.Random(5)
    est = Estimation(half_life_s=200 * HOUR)
    n_pages = 60
    records: list[str | None] = [None] * n_pages
    clock = [1_000_000.0 + rng.uniform(0, HOUR) for _ in range(n_pages)]
    exact = 0
    for step in range(25):
        observations = []
        for i in range(n_pages):
            tau = 0.0 if rng.random() < 0.05 else rng.expovariate(1 / (5 * HOUR))
            clock[i] += tau
            at = clock[i] - (HOUR if rng.random() < 0.05 else 0.0)  # sometimes before
            record = records[i] if rng.random() > 0.03 else "garbage|%%%"
            signals = tuple(rng.choice([0, 0, 0, 1, 2]) for _ in SOURCES)
            observations.append(Observation(record, tau, signals, rng.random() < 0.5, at,
                                            signals_known=rng.random() > 0.2))
        new = est.observe(observations)
        for a, b, c in zip(new, est.observe_states(observations),
                           scalar_observe(est, observations), strict=True):
            assert_records_close(a, b)
            assert_records_close(a, c)
            exact += a == b
        records = list(new)
        if step == 0:
            assert all(EstimatorRecord.decode(r).state.n_intervals <= 1 for r in records)
    assert exact > 0.5 * 25 * n_pages  # most records are identical to the byte
    rings = [len(EstimatorRecord.decode(r).state.ring) for r in records]
    assert max(rings) == est.estimator.ring_capacity
    assert est.observe([]) == est.observe_states([]) == []


async def outcome(h: Harness, url: str, at: float, changed: bool | None,
                  offset: int | None = None) -> list:
    return await h.feed("outcomes", [js(url=url, fetched_at=at, changed=changed, status=200)],
                        offset=offset)


async def test_an_outcome_updates_the_estimator_once_even_when_redelivered(
    redis_url: str,
) -> None:
    h = Harness(redis_url)
    url, host = "https://e.org/a", "e.org"
    now = time.time()
    await h.feed("pages", [js(url=url)])
    await outcome(h, url, now - 3 * HOUR, False)  # first crawl: no interval yet
    assert (await h.store.get_pages(host, [url]))[url][2] is None
    await outcome(h, url, now - 2 * HOUR, None)  # unknown: no observation, re-anchors
    assert (await h.store.get_pages(host, [url]))[url][2] is None
    await h.feed("pings", [js(url=url, source="websub", received_at=now - 1.5 * HOUR)])
    events = await outcome(h, url, now - HOUR, True)
    record = (await h.store.get_pages(host, [url]))[url][2]
    e = estimates_of(record)
    assert e is not None and e.n_intervals == 1
    st = EstimatorRecord.decode(record).state
    assert st.totals == pytest.approx((HOUR, 0.0, 1.0, 0.0), abs=1e-2)  # 1 h, one push ping
    # redelivery: the same message again through the agent, and the same events replayed
    await outcome(h, url, now - HOUR, True, offset=events[0].message.offset)
    await h.logic.on_outcomes(events)
    assert (await h.store.get_pages(host, [url]))[url][2] == record
    assert h.metrics.tally["outcomes.dup-offset"] == 2
    # the next real outcome adds exactly one more interval
    await outcome(h, url, now, False)
    e2 = estimates_of((await h.store.get_pages(host, [url]))[url][2])
    assert e2 is not None and e2.n_intervals == 2
    assert h.rejects == []


async def test_a_write_that_lost_the_race_is_not_applied(redis_url: str) -> None:
    h = Harness(redis_url)
    url, host = "https://c.org/a", "c.org"
    await h.feed("pages", [js(url=url)])
    value = await h.store.get_page_raw(host, url)
    (res,) = await h.store.apply_outcomes([OutcomeOp(
        url, host, None, 100.0, "x|y", "t", 0, 7, expect=value + "stale")])
    assert res[0] == "conflict"
    assert await h.store.get_pages(host, [url]) == {url: (value, None, None)}
    assert await h.store.redis.hget(h.store.key(host, "offsets"), "t:0") is None  # not consumed
    (res,) = await h.store.apply_outcomes([OutcomeOp(
        url, host, None, 100.0, "x|y", "t", 0, 7, expect=value)])
    assert res[0] == "applied"
    assert (await h.store.get_pages(host, [url]))[url][2] == "x|y"


@dataclass
class _Msg:
    value: bytes
    key: bytes
    topic: str
    partition: int
    offset: int
    timestamp: float = 0.0


@dataclass
class _Ev:
    message: _Msg


async def test_a_chunk_of_several_slices_updates_every_page_once(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The outcomes agent updates a chunk's estimators in slices (the event loop runs in
    between): every page of a chunk of three slices gets exactly its own interval, a url
    repeated in the chunk its two intervals in order."""
    monkeypatch.setattr(agents_module, "OBSERVE_SLICE", 4)
    h = Harness(redis_url)
    urls = [f"https://s{i % 3}.org/p{i}" for i in range(11)]
    now = time.time()
    await h.feed("pages", [js(url=u) for u in urls])
    await h.feed("outcomes", [js(url=u, fetched_at=now - 3 * HOUR, changed=None) for u in urls])
    bodies = [js(url=u, fetched_at=now - (1 + i % 2) * HOUR, changed=i % 3 == 0, status=200)
              for i, u in enumerate(urls)]
    bodies.append(js(url=urls[0], fetched_at=now, changed=False, status=200))
    events = [_Ev(_Msg(b, json.loads(b)["url"].split("/")[2].encode(), "unit.outcomes", 0,
                       10_000 + k)) for k, b in enumerate(bodies)]
    await h.logic.on_outcomes(events)
    assert h.rejects == []
    for i, u in enumerate(urls):
        record = (await h.store.get_pages(u.split("/")[2], [u]))[u][2]
        st = EstimatorRecord.decode(record).state
        interval = (3 - (1 + i % 2)) * HOUR
        if i == 0:  # and then the repeat, an hour later, unchanged
            assert st.n_intervals == 2 and st.totals[0] == pytest.approx(3 * HOUR, abs=0.01)
        else:
            assert st.n_intervals == 1 and st.totals[0] == pytest.approx(interval, abs=0.01)
        assert len(st.ring) == (1 if i % 3 == 0 else 0)
