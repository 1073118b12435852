"""The store contract (:class:`streams.store.AdminStore`, which holds
:class:`streams.store.StateStore`): the cases both backends answer to, written once.  Each
backend's test module imports them with its own ``store`` fixture:
the in-memory one under ``tests/unit`` (``test_store_contract_memory.py``, no service),
the Redis one (the Lua scripts, a real Redis) under ``tests/integration``
(``test_store_contract.py``, which also runs random operations on both side by side)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from streams.estimates.estimation import Estimation, Observation, estimates_of
from streams.store import (
    AdminStore,
    ControlOp,
    HostOp,
    IssueBatch,
    OutcomeOp,
    PageOp,
    PingBatch,
)
from streams.store.host_prior import contribution
from streams.store.page_record import PageState, estimator_part

__all__ = [
    "T",
    "page",
    "test_a_host_of_many_pages",
    "test_control_fields_once_per_offset",
    "test_host_prior_sums_are_the_incremental_em_of_the_stored_records",
    "test_host_rate_is_the_operators_lowered_by_the_others",
    "test_issue_tokens_flight_and_expire",
    "test_outcome_codes_and_flight",
    "test_outcome_inputs_are_the_pages_and_their_hosts_prior_sums",
    "test_pages_added_updated_deleted_and_redelivered",
    "test_ping_codes",
]

T = "t.pages"


def page(url: str, off: int, *, host: str = "a.org", imp: float = 1.0,
         prior: float | None = None, deleted: bool = False, partition: int = 0) -> PageOp:
    return PageOp(url, host, imp, prior, deleted, T, partition, off)


async def test_pages_added_updated_deleted_and_redelivered(store: AdminStore) -> None:
    u = "https://a.org/x"
    (r1,) = await store.apply_pages([page(u, 0, imp=3.0, prior=0.01)])
    assert r1[0] == "added" and PageState.decode(r1[1]) == PageState(3.0, pytest.approx(0.01))
    (r2, r3) = await store.apply_pages([page(u, 1, imp=2.0), page(u, 1, imp=9.0)])
    assert r2[0] == "updated" and r3 == ("dup-offset", r2[1])
    got = await store.get_page("a.org", u)
    assert got is not None and got.importance == 2.0  # the prior stays when not given
    assert got.prior_change_rate_per_s == pytest.approx(0.01)
    assert await store.shard_hosts(0) == ["a.org"]
    assert (await store.apply_pages([page(u, 2, deleted=True)]))[0] == ("deleted", "")
    assert await store.get_page("a.org", u) is None


async def test_ping_codes(store: AdminStore) -> None:
    u = "https://a.org/p"
    await store.apply_pages([page(u, 0)])
    await store.apply_outcomes([OutcomeOp(u, "a.org", None, 1000.0, None, "t.out", 0, 0)])

    def ping(off: int, src: str, received: float, fp: str, changed: float | None = None
             ) -> tuple[int, str, str, float | None, float, str]:
        return (off, u if fp != "new" else "https://a.org/new", src, changed, received, fp)

    (res,) = await store.apply_pings([PingBatch("a.org", "t.pings", 0, [
        ping(0, "sitemap", 2000.0, "a", changed=900.0),  # change before the crawl
        ping(1, "indexnow", 1030.0, "b"),  # within T_DELAY
        ping(2, "indexnow", 2000.0, "c"),
        ping(3, "indexnow", 2001.0, "c"),  # same fingerprint
        ping(4, "cdn", 2002.0, "d"),
        ping(5, "other", 2003.0, "new"),
    ])], t_delay_s=60.0)
    assert [c for c, _v in res] == ["before-crawl", "within-delay", "applied", "duplicate",
                                    "applied", "unknown"]
    assert PageState.decode(res[4][1]).signals == (0, 1, 0, 1, 0)  # indexnow, cdn
    # the batch again (a redelivery), and one older ping in a new batch
    (again,) = await store.apply_pings([PingBatch("a.org", "t.pings", 0, [
        ping(4, "cdn", 2002.0, "d"), ping(6, "cdn", 2004.0, "e")])], t_delay_s=60.0)
    assert [c for c, _v in again] == ["dup-offset", "applied"]


async def test_outcome_codes_and_flight(store: AdminStore) -> None:
    u, h = "https://a.org/o", "a.org"
    await store.apply_pages([page(u, 0)])
    (iss,) = await store.issue([IssueBatch(h, [(u, "o1")])], now_s=100.0, default_rate=1.0,
                               default_mif=2, burst=1.0)
    assert iss[0][0] == "ok"
    other = OutcomeOp(u, h, "o2", 101.0, "EST", "t.out", 0, 0)
    (r,) = await store.apply_outcomes([other])
    assert r[0] == "applied" and r[2] == 0  # another order's outcome leaves o1 in flight
    assert estimator_part(r[1]) == "EST"
    (r,) = await store.apply_outcomes([OutcomeOp(u, h, "o1", 50.0, None, "t.out", 0, 1)])
    assert r[0] == "stale" and r[2] == 1 and r[1] == (await store.get_page_raw(h, u))
    (r,) = await store.apply_outcomes([OutcomeOp(u, h, "o1", 50.0, None, "t.out", 0, 1)])
    assert r[0] == "dup-offset"
    (r,) = await store.apply_outcomes([OutcomeOp(u, h, None, 200.0, "X", "t.out", 0, 2,
                                                 expect="stale value")])
    assert r[0] == "conflict"
    cur = await store.get_page_raw(h, u)
    (r,) = await store.apply_outcomes([OutcomeOp(u, h, None, 200.0, "X", "t.out", 0, 2,
                                                 expect=cur)])
    assert r[0] == "applied" and estimator_part(r[1]) == "X"
    (r,) = await store.apply_outcomes([OutcomeOp("https://a.org/none", h, None, 1.0, None,
                                                 "t.out", 0, 3)])
    assert r[0] == "unknown"
    # robots.txt: blocked while the digest is the stored one, else stale-robots
    await store.apply_hosts([HostOp(h, None, None, "t.hosts", 0, 0, source="robots",
                                    robots_digest="r1")])
    (r,) = await store.apply_outcomes([OutcomeOp(u, h, None, 300.0, None, "t.out", 0, 4,
                                                 disallowed=True, robots_digest="r0")])
    assert r[0] == "stale-robots"
    (r,) = await store.apply_outcomes([OutcomeOp(u, h, None, 300.0, None, "t.out", 0, 5,
                                                 disallowed=True, robots_digest="r1")])
    assert r[0] == "blocked" and await store.blocked_among(h, [u, "x"]) == {u}
    (cleared,) = await store.apply_hosts([HostOp(h, None, None, "t.hosts", 0, 1,
                                                 source="robots", robots_digest="r2")])
    assert cleared[2] == 1 and await store.blocked_among(h, [u]) == set()


async def test_host_rate_is_the_operators_lowered_by_the_others(store: AdminStore) -> None:
    h = "r.org"

    def op(off: int, rate: float | None, source: str, mif: int | None = None) -> HostOp:
        return HostOp(h, rate, mif, "t.hosts", 0, off, source=source, reason=f"by {source}",
                      default_rate_per_s=1.0)

    res = await store.apply_hosts([op(0, 5.0, "operator", 3), op(1, 2.0, "robots"),
                                   op(2, None, "robots"), op(3, 0.5, "pushback"),
                                   op(3, 9.0, "pushback"), op(4, None, "operator")])
    assert [(c, r) for c, r, _ in res] == [("applied", "5.0"), ("applied", "2.0"),
                                            ("applied", "5.0"), ("applied", "0.5"),
                                            ("dup-offset", "0.5"), ("applied", "0.5")]
    info = await store.get_host(h)
    assert info.rate_per_s == 0.5 and info.max_in_flight is None
    assert info.limits == {"pushback": (0.5, "by pushback")}
    (last,) = await store.apply_hosts([op(5, None, "pushback")])
    assert last[:2] == ("applied", "")  # the default again
    assert await store.shard_hosts(0) == [h]


async def test_control_fields_once_per_offset(store: AdminStore) -> None:
    res = await store.apply_control([ControlOp({"budget_per_s": "3"}, "t.control", 0, 0),
                                     ControlOp({"budget_per_s": "9"}, "t.control", 0, 0),
                                     ControlOp({"paused": "1"}, "t.control", 0, 1)])
    assert res == ["applied", "dup-offset", "applied"]
    assert await store.get_control() == {"budget_per_s": "3", "paused": "1"}


async def test_issue_tokens_flight_and_expire(store: AdminStore) -> None:
    h = "b.org"
    urls = [f"https://b.org/{i}" for i in range(4)]
    await store.apply_pages([page(u, i, host=h) for i, u in enumerate(urls)])
    await store.apply_hosts([HostOp(h, 2.0, 2, "t.hosts", 0, 0)])
    (r,) = await store.issue([IssueBatch(h, [(urls[0], "x0"), (urls[1], "x1"),
                                              ("https://b.org/gone", "x9")])],
                             now_s=10.0, default_rate=1.0, default_mif=5, burst=2.0)
    assert [c for c, _ in r] == ["ok", "ok", "gone"]
    (r,) = await store.issue([IssueBatch(h, [(urls[0], "y0"), (urls[2], "y2")])],
                             now_s=10.1, default_rate=1.0, default_mif=5, burst=2.0)
    assert r[0] == ("in-flight", "x0|10.0")
    assert r[1][0] == "no-token" and float(r[1][1]) == pytest.approx((1 - 0.2) / 2.0)
    (r,) = await store.issue([IssueBatch(h, [(urls[2], "z2")])], now_s=20.0,
                             default_rate=1.0, default_mif=5, burst=2.0)
    assert r == [("max-in-flight", "")]
    assert await store.expire([(urls[0], h, "other"), (urls[0], h, "x0")]) == [0, 1]
    (r,) = await store.issue([IssueBatch(h, [(urls[2], "z2")])], now_s=20.0,
                             default_rate=1.0, default_mif=5, burst=2.0)
    assert r[0][0] == "ok"
    info = await store.get_host(h)
    assert info.tokens == pytest.approx(1.0) and info.updated_s == 20.0
    (dump,) = await store.dump_hosts([h])
    assert set(dump.in_flight) == {urls[1], urls[2]} and dump.in_flight[urls[2]] == ("z2", 20.0)
    assert set(dump.pages) == set(urls)


async def test_a_host_of_many_pages(store: AdminStore) -> None:
    """1,000 pages of one host (spread over buckets in Redis): every path finds each page."""
    h = "big.org"
    urls = [f"https://big.org/p/{i}" for i in range(1000)]
    for start in range(0, 1000, 100):
        res = await store.apply_pages([page(u, start + i, host=h, imp=1.0 + i)
                                       for i, u in enumerate(urls[start : start + 100])])
        assert {c for c, _ in res} == {"added"}
    gone = urls[::10]
    res = await store.apply_pages([page(u, 1000 + i, host=h, deleted=True)
                                   for i, u in enumerate(gone)])
    assert {c for c, _ in res} == {"deleted"}
    kept = [u for u in urls if u not in set(gone)]
    (pinged,) = await store.apply_pings([PingBatch(h, "t.pings", 0, [
        (i, u, "indexnow", None, 50.0, f"f{i}") for i, u in enumerate(kept)])], t_delay_s=0.0)
    assert {c for c, _ in pinged} == {"applied"}
    (iss,) = await store.issue([IssueBatch(h, [(u, f"o{i}") for i, u in enumerate(urls[:20])])],
                               now_s=100.0, default_rate=100.0, default_mif=0, burst=100.0)
    assert [c for c, _ in iss] == ["gone" if u in gone else "ok" for u in urls[:20]]
    outs = await store.apply_outcomes([OutcomeOp(u, h, f"o{i}", 200.0, "EST", "t.out", 0, i)
                                       for i, u in enumerate(urls[:20])])
    assert [(c, n) for c, _, n in outs] == [("unknown", 0) if u in gone else ("applied", 1)
                                            for u in urls[:20]]
    read = await store.read_pages([(h, u) for u in urls])
    for i, (u, value) in enumerate(zip(urls, read, strict=True)):
        if u in gone:
            assert value is None and await store.get_page(h, u) is None
            continue
        st = PageState.decode(value)
        assert st.importance == 1.0 + i % 100 and st.signals[1] == (0 if i < 20 else 1)
        assert value == await store.get_page_raw(h, u)
    (dump,) = await store.dump_hosts([h])
    assert set(dump.pages) == set(kept)
    assert (await store.host_stats(h))["pages"] == len(kept)
    got = await store.get_pages(h, urls[:20])
    assert [estimator_part(got[u][0]) for u in urls[:20]] == [
        None if u in gone else "EST" for u in urls[:20]]


async def _sums(store: AdminStore, host: str) -> tuple[float, float, float]:
    """The host's prior sums as the outcomes agent reads them."""
    return (await store.read_outcome_inputs([(host, "https://" + host + "/")]))[1][host]


async def _crawl_round(store: AdminStore, est: Any, host: str, urls: list[str],
                       fetched: float, changed: list[bool], first_offset: int) -> list[Any]:
    """One crawl of each of ``urls`` reported as the outcomes agent reports it: the pages and
    the host's prior sums read, the intervals added (``Estimation.observe``), the records
    written by the offset-guarded outcome step with a compare-and-set; the ops, to
    redeliver."""
    values, by_host = await store.read_outcome_inputs([(host, u) for u in urls])
    sums = by_host[host]
    obs = []
    for v, c in zip(values, changed, strict=True):
        assert v
        st = PageState.decode(v)
        obs.append(Observation(estimator_part(v), fetched - st.last_crawl_s, st.signals, c,
                               fetched, st.prior_change_rate_per_s, sums))
    records = est.observe(obs)
    ops = [OutcomeOp(u, host, None, fetched, r, "t.out", 0, first_offset + i, expect=v)
           for i, (u, r, v) in enumerate(zip(urls, records, values, strict=True))]
    assert [r[0] for r in await store.apply_outcomes(ops)] == ["applied"] * len(urls)
    return ops


async def test_host_prior_sums_are_the_incremental_em_of_the_stored_records(
        store: AdminStore) -> None:
    """A host's pages crawled round after round through the store and the estimation
    service: the stored sums are the incremental EM of models.estimators.host_prior run on
    the same observations (each page's posterior under the host's prior before its round,
    float32 as the records keep it), the sum of the stored records' contributions; a page's
    ``alpha`` is its posterior mean once the host has ``host_min_pages`` pages, its own mode
    before; a redelivered round and a deleted page's record change nothing else."""
    from models.estimators import batch_alpha_kappa, batch_init, batch_update
    from models.estimators.host_prior import (
        add_contributions,
        grid_log_likelihood,
        host_contributions,
        host_priors,
    )

    h, m, rounds = "a.org", 12, 6
    urls = [f"https://a.org/p{i}" for i in range(m)]
    await store.apply_pages([page(u, i) for i, u in enumerate(urls)])
    await store.apply_outcomes([OutcomeOp(u, h, None, 1000.0, None, "t.out", 0, i)
                                for i, u in enumerate(urls)])
    est = Estimation(host_min_pages=m)
    # the reference: the same intervals through models' arrays, float64, nothing stored
    ref = batch_init(est.estimator, m)
    sums = [np.zeros(1), np.zeros(1), np.zeros(1)]
    c_mean, c_log, c_count = np.zeros(m), np.zeros(m), np.zeros(m)
    rng = np.random.default_rng(3)
    rates = np.exp(rng.uniform(np.log(1e-4), np.log(1e-2), m))  # per s
    t, off = 1000.0, m
    for r in range(rounds):
        tau = 600.0 * (1 + r % 3)
        chg = rng.random(m) < -np.expm1(-rates * tau)
        t += tau
        shape, rate, fitted = host_priors(*sums)
        ops = await _crawl_round(store, est, h, urls, t, chg.tolist(), off)
        off += m
        batch_update(est.estimator, ref, np.full(m, tau), chg, np.zeros((m, 3)),
                     end_s=np.full(m, t), prior_rate_per_s=np.full(m, np.nan))
        a, _se, kap = batch_alpha_kappa(est.estimator, ref, np.full(m, np.nan))
        ref.theta[:, 0], ref.theta[:, 1:] = a, kap
        post = host_contributions(grid_log_likelihood(ref), np.repeat(shape, m),
                                  np.repeat(rate, m), np.repeat(fitted, m),
                                  (np.ones(m), 1.0 / a))
        add_contributions(*sums, np.zeros(m, dtype=np.int64), c_count, c_mean, c_log, post)
        c_mean, c_log, c_count = post.mean_per_s, post.mean_log, np.ones(m)
        stored = await _sums(store, h)
        assert stored[0] == m
        assert stored[1] == pytest.approx(float(sums[1][0]), rel=1e-4)
        assert stored[2] == pytest.approx(float(sums[2][0]), rel=1e-5)
        values = await store.read_pages([(h, u) for u in urls])
        parts = [contribution(estimator_part(v)) for v in values]
        assert stored == pytest.approx(tuple(map(math.fsum, zip(*parts, strict=True))),
                                       rel=1e-12)
        # alpha: the host posterior mean from the round the host had m pages before it
        alphas = [estimates_of(estimator_part(v)).alpha_per_s for v in values]  # type: ignore[union-attr]
        if r >= 1:
            assert alphas == pytest.approx(post.mean_per_s.tolist(), rel=1e-4)
        else:
            assert alphas == pytest.approx(a.tolist(), rel=1e-5)
        # the whole round again (a redelivery): nothing changes
        assert {x[0] for x in await store.apply_outcomes(ops)} == {"dup-offset"}
        assert await _sums(store, h) == stored
        assert await store.read_pages([(h, u) for u in urls]) == values
    got = host_priors(*(np.array([x]) for x in stored))
    want = host_priors(*sums)
    assert got[0][0] == pytest.approx(want[0][0], rel=1e-3)
    assert got[1][0] == pytest.approx(want[1][0], rel=1e-3)
    # a deleted page's contribution leaves the sums
    gone = contribution(estimator_part(await store.get_page_raw(h, urls[0])))
    await store.apply_pages([page(urls[0], 10_000, deleted=True)])
    after = await _sums(store, h)
    assert after[0] == m - 1
    assert after[1] == pytest.approx(stored[1] - gone[1], rel=1e-12)
    assert after[2] == pytest.approx(stored[2] - gone[2], rel=1e-12)


async def test_outcome_inputs_are_the_pages_and_their_hosts_prior_sums(
        store: AdminStore) -> None:
    """One read gives what ``read_pages`` gives (pages spread over a big host's buckets,
    unknown urls as None, items of several hosts interleaved, in order) and each of the
    items' hosts' prior sums exactly as the stored records add up (``(0, 0, 0)``: a host
    with none, or no page at all)."""
    big, small, empty = "big.org", "small.org", "none.org"
    bigs = [f"https://{big}/p{i}" for i in range(300)]
    smalls = [f"https://{small}/q{i}" for i in range(3)]
    await store.apply_pages([page(u, i, host=big) for i, u in enumerate(bigs)]
                            + [page(u, i, host=small) for i, u in enumerate(smalls)])
    await store.apply_outcomes([OutcomeOp(u, h, None, 1000.0, None, "t.out", 0, i)
                                for h, us in ((big, bigs), (small, smalls))
                                for i, u in enumerate(us)])
    est = Estimation(host_min_pages=2)
    crawled = bigs[::7]
    await _crawl_round(store, est, big, crawled, 1600.0,
                       [i % 3 == 0 for i in range(len(crawled))], 1000)
    items = [(big, bigs[5]), (small, smalls[1]), (empty, f"https://{empty}/x"),
             (big, f"https://{big}/unknown"), (big, bigs[14])] + [(big, u) for u in bigs]
    values, sums = await store.read_outcome_inputs(items)
    assert values == await store.read_pages(items)
    assert values[2] is None and values[3] is None
    assert all(v is not None for k, v in enumerate(values) if k not in (2, 3))
    assert set(sums) == {big, small, empty}
    parts = [contribution(estimator_part(v)) for v in await store.read_pages(
        [(big, u) for u in bigs])]
    assert sums[big][0] == len(crawled)
    assert sums[big] == pytest.approx(tuple(map(math.fsum, zip(*parts, strict=True))),
                                      rel=1e-12)
    assert sums[small] == sums[empty] == (0.0, 0.0, 0.0)
