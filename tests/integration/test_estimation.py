"""Per-page estimators in the stream: pure logic (no Redis) and the outcomes agent's
offset-guarded, compare-and-set update against the real Redis."""

from __future__ import annotations

import math
import random
import time

import pytest
from test_agents_redis import Harness, js

from models.estimators import fit_signal_mle
from streams.estimation import (
    GROUP_OF,
    Estimates,
    Estimation,
    EstimatorRecord,
    Observation,
    estimates_of,
    group_counts,
)
from streams.explain import estimates_view
from streams.params import page_params
from streams.records import SOURCES
from streams.settings import Settings
from streams.state import PageState

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
    rec = EstimatorRecord.decode(simulate(est, truth, 200, crawl_every_s=5 * HOUR,
                                          history=history))
    e = rec.estimates
    assert e.n_intervals == 200
    assert abs(math.log(e.change_rate_per_s / truth)) < abs(math.log(prior / truth)) / 4
    # the streaming state tracks the full-data MAP (paper 004 App. E) of the same intervals
    full = fit_signal_mle([t for t, _ in history], None, [c for _, c in history])
    assert e.change_rate_per_s == pytest.approx(full.change_rate_per_s, rel=0.1)
    assert 0 < e.change_rate_se_per_s < 0.2 * e.change_rate_per_s
    # a source that signals most changes and nothing else: precision and recall rise
    e2 = EstimatorRecord.decode(simulate(est, truth, 150, seed=2, signal_recall=0.9,
                                         crawl_every_s=5 * HOUR)).estimates
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
    assert len(back.state.to_bytes()) <= 256
    assert Estimates.decode(record.partition("|")[0]) == back.estimates
    assert est.state_of("garbage|###") == est.estimator.init()
    assert estimates_of("garbage") is None


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
    res = await h.store.queue_outcome(
        h.store.redis, url, host, order_id=None, fetched_at=100.0, new_estimator="x|y",
        topic="t", partition=0, offset=7, expect=(value + "stale", None),
    )
    assert res[0] == "conflict"
    assert await h.store.get_pages(host, [url]) == {url: (value, None, None)}
    assert await h.store.redis.hget(h.store.key(host, "offsets"), "t:0") is None  # not consumed
    res = await h.store.queue_outcome(
        h.store.redis, url, host, order_id=None, fetched_at=100.0, new_estimator="x|y",
        topic="t", partition=0, offset=7, expect=(value, None),
    )
    assert res[0] == "applied"
    assert (await h.store.get_pages(host, [url]))[url][2] == "x|y"
