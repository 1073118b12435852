"""Per-page estimators in the stream: pure logic (no Redis) and the outcomes agent's
offset-guarded, compare-and-set update against the real Redis."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from test_agents_redis import Harness, js

import streams.worker.agents as agents_module
from models.estimators import CrawlInterval, SignalState, fit_signal_mle
from streams.estimates.estimation import (
    GROUP_OF,
    STREAM_RING,
    Estimation,
    EstimatorRecord,
    Observation,
    estimates_of,
    full_estimates,
    group_counts,
    newer_record,
)
from streams.estimates.params import page_params, page_params_many
from streams.events.records import SOURCES
from streams.settings import Settings
from streams.store import OutcomeOp
from streams.store.redis_store import PageState, estimator_part, page_field, record_bytes
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
    est = Estimation(record_version=4)  # versions 3 and 4 (version 5: its own test)
    record = simulate(est, 1.0 / HOUR, 12)
    back = EstimatorRecord.decode(record)
    assert back.encode(4) == record
    # binary: 121 bytes and 10 per interval in the ring (streams/estimates/estimation.py's
    # docstring: version 3, whole counts, every ring weight 1)
    assert record[0] == chr(0xDC00 + 0x80 + STREAM_RING)
    assert len(back.to_bytes(4)) == 121 + 10 * STREAM_RING
    assert estimates_of(record) == back.estimates
    assert est.state_of("garbage|###") == est.estimator.init()
    assert estimates_of("garbage") is None
    assert est.state_of(record[:-3]) == est.estimator.init()  # truncated: from the prior


def _packed_version_2(rec: EstimatorRecord) -> str:
    """``rec`` as version 2 was written (unchanged and quad_b apart, a weight per ring
    entry), packed here field by field from the docstring's layout."""
    st, e = rec.state, rec.estimates
    head = struct.pack("<BI5f4f4f4f4f10f2f", 0x90 + len(st.ring), st.n_intervals,
                       e.alpha_per_s, e.alpha_se_per_s, *e.kappa, *st.theta, *st.unchanged,
                       *st.totals, *st.quad_b, *st.quad_a, *st.rep)
    ring = b"".join(struct.pack("<f3Hf", x[0], *(int(n) for n in x[1:-1]), x[-1])
                    for x in st.ring)
    return (head + ring).decode("utf-8", "surrogateescape")


def _as_version_1(record: str) -> str:
    """A version 2 record written as version 1 was (every ring value float32)."""
    raw = record.encode("utf-8", "surrogateescape")
    n = raw[0] - 0x90
    ring = [struct.unpack_from("<f3Hf", raw, 137 + 14 * j) for j in range(n)]
    v1 = bytes([0xB0 + n]) + raw[1:137] + b"".join(struct.pack("<5f", *e) for e in ring)
    return v1.decode("utf-8", "surrogateescape")


def _model_state(n: int) -> SignalState:
    """``n`` crawl intervals through the model's own scalar update (its quad_b not zero once
    a changed interval has left the ring)."""
    est = Estimation()
    st = est.estimator.init()
    rng = random.Random(7)
    for i in range(n):
        st = est.estimator.update(st, CrawlInterval(
            HOUR * (1 + rng.random()), rng.random() < 0.6,
            (float(i % 2), float(rng.randrange(3)), 0.0), end_s=1e6 + (i + 1) * 2 * HOUR))
    return st


def test_record_versions_3_2_and_1() -> None:
    """Version 3 (unchanged - quad_b as one sum, no ring weights) is written; versions 2 and
    1 (what was written before) read as ever, on every path, and their next update writes
    version 3; a state version 3 cannot hold exactly is written as 2 (a ring weight not 1)
    or 1 (a count a uint16 cannot hold), exactly (written with version 4 the newest:
    version 5 of version 3 has its own test)."""
    est = Estimation(record_version=4)
    st = _model_state(12)
    assert any(b != 0.0 for b in st.quad_b)  # the sum version 3 merges is not trivial
    (e,) = est.results([st])
    v3 = EstimatorRecord(e, st).encode(4)
    v2 = _packed_version_2(EstimatorRecord(e, st))
    v1 = _as_version_1(v2)
    sizes = [len(r.encode("utf-8", "surrogateescape")) for r in (v3, v2, v1)]
    assert sizes == [121 + 10 * STREAM_RING, 137 + 14 * STREAM_RING, 137 + 20 * STREAM_RING]
    assert v3[0] == chr(0xDC00 + 0x80 + STREAM_RING)
    end = st.end_s
    s1, s2, s3 = (EstimatorRecord.decode(r, end).state for r in (v1, v2, v3))
    assert s1 == s2 and s2.quad_b == pytest.approx(st.quad_b, rel=1e-6)
    assert s3.quad_b == (0.0,) * 4
    assert s3.unchanged == pytest.approx([u - b for u, b in zip(st.unchanged, st.quad_b,
                                                                strict=True)], rel=1e-6)
    assert s3.ring == s2.ring and any(entry[2] > 0 for entry in s3.ring)
    # the stored estimates are the same bytes; a full solve of each state agrees to
    # float32's rounding of the merged sum
    assert estimates_of(v1) == estimates_of(v2) == estimates_of(v3)
    f2, f3 = full_estimates(v2), full_estimates(v3)
    assert f2 is not None and f3 is not None
    assert f3.alpha_per_s == pytest.approx(f2.alpha_per_s, rel=1e-5)
    assert f3.kappa == pytest.approx(f2.kappa, rel=1e-5)
    assert f3.alpha_se_per_s == pytest.approx(f2.alpha_se_per_s, rel=1e-5)
    # whatever the bytes after the first (n_intervals 130: 0x82 0x00, which after a UTF-8
    # lead byte would decode as one character), a record read as text is still binary
    for rec in (v3, v2):
        raw = bytearray(rec.encode("utf-8", "surrogateescape"))
        raw[1:5] = struct.pack("<I", 130)
        e130 = estimates_of(raw.decode("utf-8", "surrogateescape"))
        assert e130 is not None and e130.n_intervals == 130
    values = [PageState(2.0, None, end, (0, 1, 0, 0, 0)).encode(v) for v in (v1, v2, v3)]
    many = page_params_many(values, [None, None, None], Settings())
    assert many is not None and many.estimated.all()
    assert many.alpha[0] == many.alpha[1] == many.alpha[2]
    assert many.beta[0] == many.beta[1] == many.beta[2]

    def update(rec: str) -> Observation:  # a changed interval: the ring's oldest leaves it
        return Observation(rec, HOUR, (0, 2, 1, 0, 0), True, end + HOUR)

    (a,), (b,), (c,), (d,) = (est.observe([update(v1)]), est.observe([update(v2)]),
                              est.observe_states([update(v1)]), est.observe([update(v3)]))
    assert a == b == c and a[0] == chr(0xDC00 + 0x80 + STREAM_RING)
    ea, ed = EstimatorRecord.decode(a), EstimatorRecord.decode(d)
    assert ed.estimates.alpha_per_s == pytest.approx(ea.estimates.alpha_per_s, rel=1e-5)
    assert ed.estimates.kappa == pytest.approx(ea.estimates.kappa, rel=1e-5)
    assert ed.state.unchanged == pytest.approx(ea.state.unchanged, rel=1e-5, abs=1e-3)
    assert ed.state.quad_a == pytest.approx(ea.state.quad_a, rel=1e-5)

    # 70,000 push signals in one interval: version 1, the count exact
    big = est.observe([Observation(v3, HOUR, (0, 70_000, 0, 0, 0), True, end + HOUR),
                       Observation(v3, HOUR, (0, 3, 0, 0, 0), True, end + HOUR)])
    assert big == est.observe_states(
        [Observation(v3, HOUR, (0, 70_000, 0, 0, 0), True, end + HOUR),
         Observation(v3, HOUR, (0, 3, 0, 0, 0), True, end + HOUR)])
    assert big[0][0] == chr(0xDC00 + 0xB0 + STREAM_RING) and big[1] == d
    state = EstimatorRecord.decode(big[0], end + HOUR).state
    assert state.ring[-1][1:-1] == (0.0, 70_000.0, 0.0)
    assert EstimatorRecord.decode(big[0]).encode() == big[0]

    # with a half-life the ring's weights decay: version 2, every weight kept
    half = Estimation(half_life_s=100 * HOUR)
    decayed = simulate(half, 1.0 / HOUR, 12, signal_recall=0.7)
    assert decayed[0] == chr(0xDC00 + 0x90 + STREAM_RING)
    back = EstimatorRecord.decode(decayed, 2e6)
    assert back.encode() == decayed and any(0.0 < x[-1] < 1.0 for x in back.state.ring)
    nxt = Observation(decayed, HOUR, (0, 1, 0, 0, 0), True, 1e6 + 13 * HOUR)
    assert half.observe([nxt]) == half.observe_states([nxt])


def _as_version_3(record: str) -> str:
    """A version 4 record as version 3 would hold the same state: the v3 tag, ten zero
    ``quad_a`` floats after the head (module docstring's layouts, packed here)."""
    raw = record.encode("utf-8", "surrogateescape")
    n = raw[0] - 0xA0
    v3 = bytes([0x80 + n]) + raw[1:73] + struct.pack("<12f", *([0.0] * 12)) + raw[73:]
    return v3.decode("utf-8", "surrogateescape")


def test_version_4_until_a_changed_interval_leaves_the_ring() -> None:
    """While no changed interval has left the ring (quad_a zero: a page that never changed,
    or changed at most STREAM_RING times) the record is version 4, 40 bytes shorter, and
    reads as the version 3 record of the same state on every path; the eviction that makes
    quad_a non-zero writes version 3 (version 4 the newest written: version 5 has its own
    test)."""
    est = Estimation(record_version=4)
    end = 1e6
    recs: list[str | None] = [None, None, None]
    sizes: list[list[int]] = [[], [], []]
    # page 0 never changes, page 1 changes at every crawl, page 2 at one crawl in two
    for i in range(STREAM_RING + 2):
        end += HOUR
        obs = [Observation(r, HOUR, (0, i % 2, 0, 1, 0), ch, end)
               for r, ch in zip(recs, (False, True, i % 2 == 1), strict=True)]
        new = est.observe(obs)
        assert new == est.observe_states(obs)  # arrays and objects: the same bytes
        for j, rec in enumerate(new):
            raw = rec.encode("utf-8", "surrogateescape")
            state = EstimatorRecord.decode(rec, end).state
            if any(state.quad_a):  # an interval has left the ring: version 3
                assert raw[0] == 0x80 + len(state.ring) and len(raw) == 121 + 10 * len(state.ring)
            else:
                assert raw[0] == 0xA0 + len(state.ring) and len(raw) == 73 + 10 * len(state.ring)
                v3 = _as_version_3(rec)
                assert EstimatorRecord.decode(v3, end) == EstimatorRecord.decode(rec, end)
                assert est.states_of([v3]).quad_a.tolist() == est.states_of([rec]).quad_a.tolist()
                assert estimates_of(v3) == estimates_of(rec)
                values = [PageState(1.0, None, end).encode(r) for r in (rec, v3)]
                many = page_params_many(values, [None, None], Settings())
                assert many is not None and many.estimated.all()
                assert (many.alpha[0], many.beta[0]) == (many.alpha[1], many.beta[1])
                nxt = Observation(v3, HOUR, (1, 0, 0, 0, 0), True, end + HOUR)
                assert est.observe([nxt]) == est.observe(
                    [Observation(rec, HOUR, (1, 0, 0, 0, 0), True, end + HOUR)])
            sizes[j].append(len(raw))
        recs = list(new)
    assert sizes[0] == [73] * (STREAM_RING + 2)  # never changed: ring empty, no quadratic
    # changed at every crawl: the ring fills, then the first eviction writes version 3
    assert sizes[1] == [73 + 10 * (i + 1) for i in range(STREAM_RING)] + [
        121 + 10 * STREAM_RING] * 2
    assert sizes[2][-1] == 73 + 10 * ((STREAM_RING + 2) // 2)
    # a quad_a that float32 rounds to zero is no quadratic either (version 3 would hold zeros)
    st = EstimatorRecord.decode(recs[0] or "", end).state
    tiny = dataclasses.replace(st, quad_a=(1e-50, *st.quad_a[1:]))
    (e,) = est.results([tiny])
    assert EstimatorRecord(e, tiny).to_bytes(4)[0] == 0xA0


def _left_out(quad: bool, ring: int, groups: int) -> int:
    """Bytes version 5 leaves out of a version 3 (``quad``) or 4 record for ``groups``
    groups without a signal (module docstring: per group its lin and totals floats, its
    uint16 count per ring entry, and of quad_a's 10 floats all but those of the kept rows
    and columns, the upper triangle of a (4 - groups)-square)."""
    kept = 4 - groups
    return groups * (8 + 2 * ring) + (4 * (10 - kept * (kept + 1) // 2) if quad else 0)


def _crawled_alike(ref: Estimation, new: Estimation, patterns: list[tuple[int, ...]],
                   never_changed: int = 0) -> Iterator[tuple[float, list[str], list[str]]]:
    """Pages pinged by the sources of ``patterns`` (positions in SOURCES) through
    STREAM_RING + 3 crawls, changed at two crawls of three (the last ``never_changed`` pages
    never), written by ``ref`` and by ``new``: per crawl, its time and both's records.
    Checked on the way: ``new``'s arrays and objects give the same bytes, and ``new`` meeting
    ``ref``'s records (an upgraded worker) writes its own records again.  After each crawl:
    both's records decode to the same state and estimates, on arrays alike, and the
    rebuild's parameters of both's records are equal."""
    end = 1e6
    recs_ref: list[str | None] = [None] * len(patterns)
    recs_new: list[str | None] = [None] * len(patterns)
    for i in range(STREAM_RING + 3):
        end += HOUR
        sig = [tuple(1 + (i + s) % 2 if s in p else 0 for s in range(len(SOURCES)))
               for p in patterns]
        changed = [i % 3 != 1] * (len(patterns) - never_changed) + [False] * never_changed
        obs_ref = [Observation(r, HOUR, g, c, end)
                   for r, g, c in zip(recs_ref, sig, changed, strict=True)]
        obs_new = [Observation(r, HOUR, g, c, end)
                   for r, g, c in zip(recs_new, sig, changed, strict=True)]
        out_ref, out_new = ref.observe(obs_ref), new.observe(obs_new)
        assert out_new == new.observe_states(obs_new)  # arrays and objects: the same bytes
        assert new.observe(obs_ref) == out_new == new.observe_states(obs_ref)
        for a, b in zip(out_ref, out_new, strict=True):  # the same state and estimates
            assert EstimatorRecord.decode(b, end) == EstimatorRecord.decode(a, end)
            assert estimates_of(b) == estimates_of(a)
        for f in ("theta", "unchanged", "totals", "ring", "quad_a", "quad_b", "n_intervals"):
            assert getattr(new.states_of(out_new), f).tolist() == getattr(
                ref.states_of(out_ref), f).tolist()
        values = [PageState(1.0, None, end, (0, 1, 0, 0, 0)).encode(r)
                  for r in out_ref + out_new]
        many = page_params_many(values, [None] * len(values), Settings())
        assert many is not None and many.estimated.all()
        half = len(out_ref)
        for arr in (many.alpha, many.beta, many.gamma, many.origin):
            assert arr[:half].tolist() == arr[half:].tolist()
        yield end, out_ref, out_new
        recs_ref, recs_new = list(out_ref), list(out_new)


def test_version_5_leaves_out_the_groups_without_a_signal() -> None:
    """Version 5 is version 3 or 4 without the slots of the source groups whose every slot
    is zero (no signal of the group yet): the same state on every path (decode, arrays,
    the rebuild's arrays, the next update), the bytes shorter by exactly those slots; a
    page with every group signalled, or a group slot not zero to the bit, keeps them."""
    v4, v5 = Estimation(record_version=4), Estimation(record_version=5)
    # per page, the sources its pings come from: none; sitemap; push (indexnow, websub);
    # cdn; sitemap and push; all three groups (SOURCES order)
    patterns = [(), (0,), (1, 2), (3,), (0, 2), (0, 1, 4)]
    kept_of = [0, 0b001, 0b010, 0b100, 0b011, 0b111]
    recs4: list[str] = []
    recs5: list[str] = []
    seen_quad = set()
    end = 0.0
    for end, recs4, recs5 in _crawled_alike(v4, v5, patterns):
        for j, (a, b) in enumerate(zip(recs4, recs5, strict=True)):
            raw4, raw5 = record_bytes(a), record_bytes(b)
            quad = raw4[0] < 0xA0  # version 3, else 4
            ring = raw4[0] - (0x80 if quad else 0xA0)
            value = PageState(1.0, None, end, (0, 1, 0, 0, 0)).encode(b)
            many = page_params_many([value], [None], Settings())
            one = page_params(PageState.decode(value), estimator_part(value), Settings())
            assert many is not None and many.alpha[0] == pytest.approx(one.alpha_per_s,
                                                                       rel=1e-12)
            if kept_of[j] == 0b111:
                assert raw5 == raw4
                continue
            seen_quad.add(quad)
            assert raw5[0] == 0xC0 + 21 * quad + 3 * kept_of[j] + ring
            assert len(raw5) == len(raw4) - _left_out(quad, ring, 3 - bin(kept_of[j]).count("1"))
            assert not newer_record(b)
    assert seen_quad == {False, True}  # both kinds: before and after the first eviction
    # a group slot zero as a float but not to the bit (-0.0) keeps its group: no loss
    st = EstimatorRecord.decode(recs4[1] or "", end).state
    neg = dataclasses.replace(st, totals=(*st.totals[:3], -0.0))
    (e,) = v5.results([neg])
    raw = EstimatorRecord(e, neg).to_bytes(5)
    assert raw[0] == 0xC0 + 21 + 3 * 0b101 + STREAM_RING
    back = EstimatorRecord.decode(raw, end).state
    assert math.copysign(1.0, back.totals[3]) == -1.0 and back == neg
    # a version 5 first byte and the bytes after it may read as one UTF-8 character through
    # a surrogateescape client (a lead byte, then n_intervals 130's 0x82): still a binary
    # record of version 5
    st0 = EstimatorRecord.decode(recs5[1] or "", end).state
    (e0,) = v5.results([st0])
    raw = bytearray(EstimatorRecord(e0, st0).to_bytes(5))
    raw[1:5] = struct.pack("<I", 130)
    text = raw.decode("utf-8", "surrogateescape")
    assert not 0xDC80 <= ord(text[0]) <= 0xDCFF  # one character, not a surrogate
    assert len(text[0].encode("utf-8")) == 2
    back_e = estimates_of(text)
    assert back_e is not None and back_e.n_intervals == 130 and not newer_record(text)
    # a version 5 record as long as a version 4 one (73 B: one changed interval, two groups;
    # against no change, three groups): one length group of the rebuild's arrays, each read
    # by its own first byte
    pair = v5.observe([Observation(None, HOUR, (1, 1, 0, 1, 0), False, end),
                       Observation(None, HOUR, (1, 1, 0, 0, 0), True, end)])
    assert [(record_bytes(r)[0], len(record_bytes(r))) for r in pair] == [(0xA0, 73),
                                                                          (0xCA, 73)]
    values = [PageState(1.0 + i, None, end, (0, 0, 1, 0, 0)).encode(r)
              for i, r in enumerate(pair)]
    many = page_params_many(values, [None, None], Settings())
    assert many is not None and many.estimated.all()
    for i, v in enumerate(values):
        one = page_params(PageState.decode(v), estimator_part(v), Settings())
        assert (many.alpha[i], many.beta[i], many.gamma[i]) == (
            pytest.approx(one.alpha_per_s, rel=1e-12), pytest.approx(one.beta_s, rel=1e-12),
            pytest.approx(one.gamma_per_s, rel=1e-12))
    assert many.gamma[0] > 0.0 and many.alpha[0] != many.alpha[1]


def test_old_text_records_are_still_read() -> None:
    """State written before record version 1: the text estimator record (default ring)
    reads as it was and its next update writes the binary record."""
    binary = simulate(Estimation(ring_capacity=5), 1.0 / HOUR, 12)
    full = full_estimates(binary)
    assert full is not None
    text = EstimatorRecord(full, EstimatorRecord.decode(binary, 1e6 + 12 * HOUR, 5).state
                           ).encode_text()
    assert text[0].isdigit()  # text, not the binary record
    rec = EstimatorRecord.decode(text)
    assert estimates_of(text) == rec.estimates and len(rec.state.ring) > STREAM_RING
    assert rec.estimates.change_rate_per_s == pytest.approx(full.change_rate_per_s, rel=1e-5)
    est = Estimation()
    (new,) = est.observe([Observation(text, HOUR, (0, 0, 0, 0, 0), True, rec.state.end_s + HOUR)])
    after = estimates_of(new)
    assert after is not None and after.n_intervals == 13
    # binary now; the old record's longer ring is kept (the model evicts one interval per
    # update, never folds several at once)
    assert new[0] == "\udc85" and len(EstimatorRecord.decode(new).to_bytes()) == 121 + 10 * 5
    # that binary record with its ring of 5, in a chunk with a page of the stream's own ring:
    # its history is kept (not restarted from the prior by the array path), the other page
    # updated as by itself
    end = rec.state.end_s + HOUR
    small = simulate(Estimation(), 1.0 / HOUR, 3)
    both = est.observe([Observation(new, HOUR, (0, 0, 0, 0, 0), False, end + HOUR),
                        Observation(small, HOUR, (1, 0, 0, 0, 0), True, 2e6)])
    again = estimates_of(both[0])
    assert again is not None and again.n_intervals == 14
    alone = est.observe([Observation(small, HOUR, (1, 0, 0, 0, 0), True, 2e6)])
    assert estimates_of(both[1]) == estimates_of(alone[0])


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


def _layout_6(quad: bool, ring: int, kept: int, narrow: bool, low: int) -> int:
    """A version 6 layout byte, from the module docstring's bit layout."""
    shape = 3 if quad else ring
    return shape | kept << 2 | int(narrow) << 5 | low << 6


def test_version_6_leaves_out_theta_and_the_zero_bytes() -> None:
    """Version 6 is version 3 or 4 without its first byte, ``theta`` (the stream keeps the
    mode as its running estimate: ``alpha`` and ``kappa``, the same bytes), the groups
    without a signal (as version 5), the high bytes of ``n_intervals`` and the ring counts
    when zero, and the zero low bytes of the group totals, after a tag and a layout byte:
    the same state on every path (decode, arrays, the rebuild's arrays, the next update),
    the bytes shorter by exactly those; a record it cannot hold is written as version 5."""
    v4, v6 = Estimation(record_version=4), Estimation()
    # as the version 5 test, and a page pinged by push sources that never changes
    patterns = [(), (0,), (1, 2), (3,), (0, 2), (0, 1, 4), (1,)]
    kept_of = [0, 0b001, 0b010, 0b100, 0b011, 0b111, 0b010]
    recs6: list[str] = []
    seen = set()
    end = 0.0
    for end, recs4, recs6 in _crawled_alike(v4, v6, patterns, never_changed=1):
        for j, (a, b) in enumerate(zip(recs4, recs6, strict=True)):
            raw4, raw6 = record_bytes(a), record_bytes(b)
            quad = raw4[0] < 0xA0  # version 3, else 4
            ring = raw4[0] - (0x80 if quad else 0xA0)
            # the stream's running estimate is the mode: theta is alpha and kappa
            st6 = EstimatorRecord.decode(b, end)
            assert st6.state.theta == (st6.estimates.alpha_per_s, *st6.estimates.kappa)
            k = bin(kept_of[j]).count("1")
            assert raw6[:2] == bytes((0xEA, _layout_6(quad, ring, kept_of[j], True, 2)))
            assert len(raw6) == (len(raw4) + 1 - 16 - _left_out(quad, ring, 3 - k)
                                 - (2 + ring * k) - 2 * k)
            assert _expanded_6(raw6) == raw4  # the version 4 record's bytes, every one
            assert not newer_record(b)
            seen.add((quad, ring))
    assert {(False, 0), (False, 1), (False, 2), (True, STREAM_RING)} <= seen

    # each narrowing only where its bytes are zero: a ring count over 255 or n_intervals
    # over 65,535 keeps the wide counts; group totals keep the low bytes that are not zero
    # (301 as float32: its lowest byte zero, the next not; 70,001: neither; -0.0 keeps its
    # group and its sign; the bytes go lowest first, so a zero second byte alone is not
    # enough)
    st = EstimatorRecord.decode(recs6[5] or "", end).state
    assert len(st.ring) == STREAM_RING and any(st.quad_a)
    cases = [
        (dataclasses.replace(st, ring=((HOUR, 300.0, 0.0, 1.0, 1.0), st.ring[1])), False, 2),
        (dataclasses.replace(st, n_intervals=70_000), False, 2),
        (dataclasses.replace(st, totals=(st.totals[0], 301.0, 2.0, 4.0)), True, 1),
        (dataclasses.replace(st, totals=(st.totals[0], 301.0, 70_001.0, 4.0)), True, 0),
        (dataclasses.replace(st, totals=(st.totals[0], 2.0, -0.0, 4.0)), True, 2),
        # float32 0x3F800001: the lowest byte not zero, the next zero: no low byte left out
        (dataclasses.replace(st, totals=(st.totals[0], 2.0, 1.0 + 2.0 ** -23, 4.0)), True, 0),
    ]
    for case, narrow, low in cases:
        (e,) = v6.results([case])
        case = dataclasses.replace(case, theta=(e.alpha_per_s, *e.kappa))
        raw = EstimatorRecord(e, case).to_bytes()
        assert raw[:2] == bytes((0xEA, _layout_6(True, STREAM_RING, 0b111, narrow, low)))
        back = EstimatorRecord.decode(raw, case.end_s)
        assert back == EstimatorRecord.decode(EstimatorRecord(e, case).to_bytes(4), case.end_s)
        assert (back.state.n_intervals, back.state.totals[1:], back.state.ring[0][1]) == (
            case.n_intervals, case.totals[1:], case.ring[0][1])
        assert back.estimates == estimates_of(raw)
        assert [math.copysign(1.0, x) for x in back.state.totals] == [
            math.copysign(1.0, x) for x in case.totals]
        assert EstimatorRecord(e, case).to_bytes(4) == _expanded_6(raw)
        value = PageState(1.0, None, end, (0, 1, 0, 0, 0)).encode(
            raw.decode("utf-8", "surrogateescape"))
        many = page_params_many([value], [None], Settings())
        one = page_params(PageState.decode(value), estimator_part(value), Settings())
        assert many is not None and many.alpha[0] == pytest.approx(one.alpha_per_s, rel=1e-12)
    # the tag, the layout byte and n_intervals' low byte may read as one UTF-8 character
    # through a surrogateescape client (0xEA 0xBF 0x82): still a binary record of version 6
    case = dataclasses.replace(st, n_intervals=130)
    (e,) = v6.results([case])
    raw = EstimatorRecord(e, dataclasses.replace(case, theta=(e.alpha_per_s, *e.kappa))
                          ).to_bytes()
    assert raw[:3] == bytes((0xEA, 0xBF, 0x82))
    text = raw.decode("utf-8", "surrogateescape")
    assert len(text[0].encode("utf-8")) == 3  # one character, not a surrogate
    back_e = estimates_of(text)
    assert back_e is not None and back_e.n_intervals == 130 and not newer_record(text)
    # a theta that is not the estimates (a state not from the stream): version 5, exactly
    (e,) = v6.results([st])
    other = dataclasses.replace(st, theta=(e.alpha_per_s * 2, *e.kappa))
    raw = EstimatorRecord(e, other).to_bytes()
    assert raw == EstimatorRecord(e, other).to_bytes(5) and raw[0] != 0xEA
    assert EstimatorRecord.decode(raw, st.end_s) == EstimatorRecord.decode(
        EstimatorRecord(e, other).to_bytes(4), st.end_s)
    assert EstimatorRecord.decode(raw).state.theta[0] == pytest.approx(2 * e.alpha_per_s,
                                                                       rel=1e-7)
    # a layout byte no version 6 record has (low 3) is an unreadable record, not a later
    # version's: the page's estimator starts again from the prior
    good = EstimatorRecord(e, dataclasses.replace(st, theta=(e.alpha_per_s, *e.kappa))
                           ).to_bytes()
    bad = bytes((0xEA, good[1] | 0xC0)) + good[2:]
    assert estimates_of(bad.decode("utf-8", "surrogateescape")) is None
    assert v6.state_of(bad.decode("utf-8", "surrogateescape")) == v6.estimator.init()
    assert not newer_record(bad)
    assert v6.states_of([bad]).n_intervals.tolist() == [0]


def _expanded_6(raw: bytes) -> bytes:
    """A version 6 record as the version 3 or 4 record it was, from the module docstring
    (independently of the code's tables): the left-out bytes back where they were."""
    layout = raw[1]
    quad = layout & 3 == 3
    ring = STREAM_RING if quad else layout & 3
    kept, narrow, low = layout >> 2 & 7, bool(layout >> 5 & 1), layout >> 6
    d, nq = 4, 10
    size = 1 + 4 + 4 * (2 + 3) + 4 * 3 * d + (4 * nq + 8 if quad else 0) + ring * (4 + 2 * 3)
    drop = [False] * size
    lin, totals = 1 + 4 + 20 + 16, 1 + 4 + 20 + 32
    qa = totals + 16
    ring0 = qa + (4 * nq + 8 if quad else 0)  # quad_a, then the representative interval
    upper = [(r, c) for r in range(d) for c in range(r, d)]
    for g in range(3):
        if kept >> g & 1:
            continue
        j = 1 + g
        for base in (lin, totals):
            for b in range(4):
                drop[base + 4 * j + b] = True
        if quad:
            for e, (r, c) in enumerate(upper):
                if j in (r, c):
                    for b in range(4):
                        drop[qa + 4 * e + b] = True
        for r in range(ring):
            for b in range(2):
                drop[ring0 + 10 * r + 4 + 2 * g + b] = True
    drop[0] = True
    for b in range(16):
        drop[1 + 4 + 20 + b] = True  # theta
    if narrow:
        drop[3] = drop[4] = True
        for r in range(ring):
            for g in range(3):
                drop[ring0 + 10 * r + 4 + 2 * g + 1] = True
    for g in range(3):
        for b in range(low):
            drop[totals + 4 * (1 + g) + b] = True
    full = bytearray(size)
    kept_at = [i for i in range(size) if not drop[i]]
    assert len(kept_at) == len(raw) - 2
    for i, x in zip(kept_at, raw[2:], strict=True):
        full[i] = x
    full[0] = (0x80 if quad else 0xA0) + ring
    full[1 + 4 + 20 : 1 + 4 + 20 + 16] = full[5:9] + full[13:25]  # theta = alpha, kappa
    return bytes(full)


def scalar_observe(est: Estimation, observations: list[Observation]) -> list[str]:
    """The service's path before the vectorised update: ``SignalEstimator.update`` per page,
    then the mode as the running estimate (``theta``), as the stream keeps it."""
    states = []
    for o in observations:
        st = est.state_of(o.record, o.fetched_at_s - o.interval_s)
        end = o.fetched_at_s if o.fetched_at_s >= st.end_s else None
        states.append(est.estimator.update(st, CrawlInterval(
            max(0.0, o.interval_s), o.changed, group_counts(o.signals), end_s=end)))
    return [EstimatorRecord(e, dataclasses.replace(s, theta=(e.alpha_per_s, *e.kappa))).encode()
            for e, s in zip(est.results(states), states, strict=True)]


def assert_records_close(a: str, b: str) -> None:
    """Same state (float32 parts may round the other way after different summation orders)
    and the same stored estimates (float32)."""
    ra, rb = EstimatorRecord.decode(a), EstimatorRecord.decode(b)
    sa, sb = ra.state, rb.state
    assert (sa.n_intervals, len(sa.ring), sa.end_s) == (sb.n_intervals, len(sb.ring), sb.end_s)
    for name in ("theta", "unchanged", "totals", "quad_b", "quad_a"):
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
    and evicting, changed or not, 0..5 pings of any source, a fetch before the stored crawl."""
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
            observations.append(Observation(record, tau, signals, rng.random() < 0.5, at))
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


async def test_a_rolling_upgrade_writes_version_3_when_told(redis_url: str) -> None:
    """``RECRAWL_ESTIMATOR_RECORD_VERSION=3``, ``4`` or ``5`` (a rolling upgrade from workers
    that read no later version): the outcomes agent writes the version 3, 4 or 5 record of
    the same state, the bytes a worker of that version wrote; the default writes version
    6."""
    url, host = "https://v.org/a", "v.org"
    now = time.time()
    stored = []
    for overrides in ({}, {"estimator_record_version": 5}, {"estimator_record_version": 4},
                      {"estimator_record_version": 3}):
        h = Harness(redis_url, **overrides)
        await h.feed("pages", [js(url=url)])
        await outcome(h, url, now - 2 * HOUR, False)
        await outcome(h, url, now - HOUR, True)
        record = (await h.store.get_pages(host, [url]))[url][2]
        assert record is not None and h.rejects == []
        stored.append(record)
    six, five, new, old = stored
    # no signal in either interval: version 5 keeps none of the three groups' slots;
    # version 6 neither, nor theta, n_intervals' high bytes (layout byte: ring 1, kept 0,
    # narrow, the two low bytes of the (absent) group totals)
    assert record_bytes(five)[0] == 0xC0 + 1 and len(record_bytes(five)) == 83 - 24 - 6
    assert record_bytes(six)[:2] == bytes((0xEA, 1 | 1 << 5 | 2 << 6))
    assert len(record_bytes(six)) == 83 + 1 - 16 - 24 - 6 - 2
    assert EstimatorRecord.decode(six) == EstimatorRecord.decode(five)
    assert new[0] == chr(0xDC00 + 0xA0 + 1) and old[0] == chr(0xDC00 + 0x80 + 1)
    assert old == _as_version_3(new)
    assert EstimatorRecord.decode(old) == EstimatorRecord.decode(new) == EstimatorRecord.decode(
        five)
    # the same on the object path, and nothing but 3, 4, 5 or 6 is taken
    obs = [Observation(None, HOUR, (0, 0, 0, 0, 0), True, now)]
    assert Estimation(record_version=3).observe_states(obs) == Estimation(
        record_version=3).observe(obs) == [_as_version_3(Estimation(
            record_version=4).observe(obs)[0])]
    with pytest.raises(ValueError, match="record_version"):
        Estimation(record_version=7)
    for bad in (2, 7):
        with pytest.raises(ValueError, match="estimator_record_version"):
            Settings(estimator_record_version=bad)


async def test_a_record_of_a_later_version_is_kept_as_it_is(redis_url: str) -> None:
    """A worker meeting an estimator record of a version it does not know (a later worker's,
    first byte 0xEB-0xFF) keeps it byte for byte and counts it, instead of starting that
    page's estimator again from the prior; the outcome still moves the page's last crawl."""
    h = Harness(redis_url)
    url, host = "https://n.org/a", "n.org"
    now = time.time()
    await h.feed("pages", [js(url=url)])
    await outcome(h, url, now - 3 * HOUR, False)
    await outcome(h, url, now - 2 * HOUR, True)
    # bytes, not the client's surrogate-escaped str: a float's bytes next to each other may
    # decode as one character, so str lengths and slices do not follow the bytes
    key, field = h.store.key(host, "pages"), page_field(host, url)
    value = record_bytes(await h.store.redis.hget(key, field))
    record = record_bytes((await h.store.get_pages(host, [url]))[url][2] or "")
    assert record and value.endswith(record)
    later = b"\xf0" + record[1:]  # the same bytes under a tag no version here has
    assert newer_record(later) and not newer_record(record) and not newer_record("1,2|x")
    await h.store.redis.hset(key, field, value[: -len(record)] + later)
    await outcome(h, url, now - HOUR, True)
    after = record_bytes(await h.store.redis.hget(key, field))
    assert after.endswith(later) and len(after) == len(value)
    assert PageState.decode(after).last_crawl_s == pytest.approx(now - HOUR, abs=1e-3)
    assert h.metrics.tally["estimators.newer"] == 1 and h.rejects == []
    # Estimation gives such a record back unchanged, on both paths, beside normal ones
    est = Estimation()
    later_s, record_s = (r.decode("utf-8", "surrogateescape") for r in (later, record))
    obs = [Observation(later_s, HOUR, (0, 1, 0, 0, 0), True, now),
           Observation(record_s, HOUR, (0, 1, 0, 0, 0), True, now)]
    for path in (est.observe, est.observe_states):
        out = path(obs)
        assert out[0] == later_s and out[1] == path(obs[1:])[0] != record_s


async def test_a_write_that_lost_the_race_is_not_applied(redis_url: str) -> None:
    h = Harness(redis_url)
    url, host = "https://c.org/a", "c.org"
    await h.feed("pages", [js(url=url)])
    value = await h.store.get_page_raw(host, url)
    (res,) = await h.store.apply_outcomes([OutcomeOp(
        url, host, None, 100.0, "x|y", "t", 0, 7, expect=(value + "stale", None))])
    assert res[0] == "conflict"
    assert await h.store.get_pages(host, [url]) == {url: (value, None, None)}
    assert await h.store.redis.hget(h.store.key(host, "offsets"), "t:0") is None  # not consumed
    (res,) = await h.store.apply_outcomes([OutcomeOp(
        url, host, None, 100.0, "x|y", "t", 0, 7, expect=(value, None))])
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
