"""The estimator record (``streams/estimates/record.py``): one layout, checked against its
docstring's byte positions independently of the code's tables, on every path that reads or
writes it (decode, arrays, the rebuild's heads, the next update)."""

from __future__ import annotations

import dataclasses
import math
import random
import struct

import numpy as np
import pytest

from models.estimators import CrawlInterval, SignalState, states_to_batch
from models.estimators import _numeric as nm
from streams.estimates import record as rec_mod
from streams.estimates.estimation import (
    STREAM_RING,
    Estimation,
    EstimatorRecord,
    Observation,
    estimates_of,
    group_counts,
)
from streams.estimates.params import page_params, page_params_many
from streams.estimates.record import (
    COUNT_MAX,
    VERSION,
    Estimates,
    fill_batch,
    gamma_from_totals,
    raw_bytes,
    record_heads,
    record_sizes,
    records_from_batch,
    unpack_records,
)
from streams.events.records import SOURCES
from streams.settings import Settings
from streams.store.page_record import PageState, estimator_part

HOUR = 3600.0
D, NQ = 4, 10
#: the full record's offsets (the docstring's table)
(HOST_AT, N_AT, ALPHA_AT, SE_AT, KAPPA_AT, THETA_AT, LIN_AT, TOTALS_AT, QUAD_AT, REP_AT,
 UNKNOWN_AT, RING_AT) = (0, 8, 12, 16, 20, 32, 48, 64, 80, 120, 128, 144)


def full_bytes(rec: EstimatorRecord) -> bytes:
    """The full record of ``rec``, packed field by field from the docstring's table."""
    st, e = rec.state, rec.estimates
    weighted = any(x[-1] != 1.0 for x in st.ring)
    lin = [u - b for u, b in zip(st.unchanged, st.quad_b, strict=True)]
    out = struct.pack("<2fI2f3f4f4f4f10f2f4f", *rec.host, st.n_intervals, e.alpha_per_s,
                      e.alpha_se_per_s, *e.kappa, *st.theta, *lin, *st.totals, *st.quad_a, *st.rep,
                      *st.unknown)
    for x in st.ring:
        out += struct.pack("<f3H", x[0], *(int(n) for n in x[1:-1]))
        if weighted:
            out += struct.pack("<f", x[-1])
    return out


def flags_of(raw: bytes) -> tuple[int, int]:
    """(flags, header bytes) of a record: the layout byte names one of the one-byte layouts,
    or is 0xFF followed by the flags."""
    assert raw[0] == VERSION
    if raw[1] == 0xFF:
        return int.from_bytes(raw[2:4], "little"), 4
    return rec_mod._CODES[raw[1]], 2


def expanded(raw: bytes) -> bytes:
    """A record as its full record, from the docstring (independently of the code's
    tables): the left-out bytes back where they were, ``theta`` from ``alpha``, ``kappa``."""
    flags, head = flags_of(raw)
    ring, quad, rep = flags & 7, bool(flags >> 3 & 1), bool(flags >> 4 & 1)
    kept, narrow, low = flags >> 5 & 7, bool(flags >> 8 & 1), flags >> 9 & 3
    weighted, theta, unknown = bool(flags >> 11 & 1), bool(flags >> 12 & 1), bool(flags >> 13 & 1)
    entry = 14 if weighted else 10
    size = RING_AT + ring * entry
    drop = [False] * size
    upper = [(r, c) for r in range(D) for c in range(r, D)]
    for g in range(3):
        if kept >> g & 1:
            continue
        j = 1 + g
        for base in (LIN_AT, TOTALS_AT):
            drop[base + 4 * j : base + 4 * j + 4] = [True] * 4
        for k, (r, c) in enumerate(upper):
            if j in (r, c):
                drop[QUAD_AT + 4 * k : QUAD_AT + 4 * k + 4] = [True] * 4
        for r in range(ring):
            drop[RING_AT + entry * r + 4 + 2 * g : RING_AT + entry * r + 6 + 2 * g] = [True] * 2
    if not theta:
        drop[THETA_AT : THETA_AT + 16] = [True] * 16
    if not quad:
        drop[QUAD_AT : QUAD_AT + 40] = [True] * 40
    if not rep:
        drop[REP_AT : REP_AT + 8] = [True] * 8
    if not unknown:
        drop[UNKNOWN_AT : UNKNOWN_AT + 16] = [True] * 16
    if narrow:
        drop[N_AT + 2] = drop[N_AT + 3] = True
        for r in range(ring):
            for g in range(3):
                drop[RING_AT + entry * r + 5 + 2 * g] = True
    for g in range(3):
        for b in range(low):
            drop[TOTALS_AT + 4 * (1 + g) + b] = True
    kept_at = [i for i in range(size) if not drop[i]]
    assert len(kept_at) == len(raw) - head
    full = bytearray(size)
    for i, x in zip(kept_at, raw[head:], strict=True):
        full[i] = x
    if not theta:
        full[THETA_AT : THETA_AT + 16] = full[ALPHA_AT : ALPHA_AT + 4] + full[KAPPA_AT:THETA_AT]
    return bytes(full)


def check(record: str | bytes, end_s: float = -math.inf) -> EstimatorRecord:
    """Every reader of ``record`` agrees with the docstring's layout and with each other."""
    raw = raw_bytes(record)
    back = EstimatorRecord.decode(record, end_s)
    assert expanded(raw) == full_bytes(back)  # every byte where the docstring puts it
    assert back.to_bytes() == raw  # written again: the same bytes
    assert estimates_of(record) == back.value_estimates
    assert record_sizes(np.frombuffer(raw[:4], np.uint8)[None, :]).tolist() == [len(raw)]
    heads = record_heads(np.frombuffer(raw, np.uint8)[None, :])
    assert heads["n"][0] == back.state.n_intervals
    assert heads["host"][0].tolist() == list(back.host)
    assert heads["alpha"][0] == np.float32(back.estimates.alpha_per_s)
    assert heads["totals"][0].tolist() == list(back.state.totals)
    assert heads["unknown_s"][0] == back.state.unknown[0]
    est = Estimation(ring_capacity=max(STREAM_RING, len(back.state.ring)))
    arrays = est.states_of([record], np.array([end_s]))
    assert arrays.page_state(0, est.estimator.ring_capacity) == dataclasses.replace(
        back.state, ring_capacity=est.estimator.ring_capacity)
    return back


def crawled(patterns: list[tuple[int, ...]], changes: list[list[bool]]
            ) -> list[tuple[float, list[str]]]:
    """Pages pinged by the sources of ``patterns`` (positions in SOURCES), crawled hourly,
    changed as ``changes`` says; the stream's records after each crawl (arrays and objects:
    the same bytes)."""
    est = Estimation()
    end = 1e6
    recs: list[str | None] = [None] * len(patterns)
    out = []
    for i in range(len(changes[0])):
        end += HOUR
        obs = [Observation(r, HOUR, tuple(1 + (i + s) % 2 if s in p else 0
                                          for s in range(len(SOURCES))), c[i], end)
               for r, p, c in zip(recs, patterns, changes, strict=True)]
        new = est.observe(obs)
        assert new == est.observe_states(obs)
        out.append((end, new))
        recs = list(new)
    return out


def test_the_layout_leaves_out_only_what_it_puts_back() -> None:
    """Stream records of pages pinged by no source, one, two or three groups, changed often
    or never: each is its full record without the bytes the docstring names, on every
    path; ``theta`` is the estimates (the stream's running estimate is the mode)."""
    patterns = [(), (0,), (1, 2), (3,), (0, 2), (0, 1, 4), (1,), ()]
    often = [i % 3 != 1 for i in range(STREAM_RING + 4)]
    changes = [often] * (len(patterns) - 2) + [[False] * len(often), [True] * len(often)]
    seen = set()
    for end, recs in crawled(patterns, changes):
        for r in recs:
            back = check(r, end)
            assert back.state.theta == (back.estimates.alpha_per_s, *back.estimates.kappa)
            flags, head = flags_of(raw_bytes(r))
            assert head == 2  # a stream record of the default configuration: one byte
            seen.add(flags & 0b11111)
    # every ring length; the quadratic summary (a changed interval with signals left the
    # ring) and the representative interval (one without) each kept only when present
    assert {0, 1, 2, 2 | 8, 2 | 16} <= seen


def test_the_summaries_cost_bytes_only_when_present() -> None:
    """``quad_a`` (40 bytes, less the rows of groups without signals) and ``rep`` (8 bytes)
    are stored only when not zero: a page whose evicted changed intervals all had signals
    keeps no representative interval, one whose evicted intervals had none no ``quad_a``."""
    n = STREAM_RING + 3
    (_, last), = crawled([(0, 1, 3), ()], [[True] * n, [True] * n])[-1:]
    signalled, silent = (EstimatorRecord.decode(r) for r in last)
    assert any(signalled.state.quad_a) and signalled.state.rep == (0.0, 0.0)
    assert not any(silent.state.quad_a) and silent.state.rep[0] > 0.0
    # three groups, a ring of 2, narrow counts, the totals' two low bytes zero: the full
    # record (144 + 2 x 10) less theta (16), the rep (8), the unknown block (16), the 8
    # narrow bytes (n_intervals' high two, each ring count's high byte) and the 6 low bytes
    # of the groups' totals: the docstring's 112
    assert len(raw_bytes(last[0])) == 2 + 164 - 16 - 8 - 16 - 8 - 6 == 112
    both = dataclasses.replace(signalled.state, rep=(2.0, HOUR))
    assert len(EstimatorRecord(signalled.estimates, both).to_bytes()) == 120
    # no group: quad_a not stored, the rep kept; each group's lin, totals and ring counts go
    assert len(raw_bytes(last[1])) == 2 + 164 - 16 - 40 - 16 - 3 * (8 + 2 * 2) - 2 == 56
    for r in last:
        check(r)


def test_other_states_take_the_escape_layout_exactly() -> None:
    """A state outside the one-byte layouts is written exactly with its flags after 0xFF:
    ring weights (an estimator half-life), a ``theta`` that is not the estimates, a ring
    longer than the stream's; counts over 255 or 65,535 intervals keep their high bytes."""
    half = Estimation(half_life_s=100 * HOUR)
    rng = random.Random(3)
    r: str | None = None
    for i in range(8):
        (r,) = half.observe([Observation(r, HOUR * (1 + rng.random()), (i % 2, 1, 0, 0, 0),
                                         i % 3 != 0, 1e6 + i * 3 * HOUR)])
    assert r is not None
    back = check(r)
    flags, head = flags_of(raw_bytes(r))
    assert head == 4 and flags >> 11 & 1 and any(x[-1] != 1.0 for x in back.state.ring)
    st, e = back.state, back.estimates
    other = dataclasses.replace(st, theta=(2 * e.alpha_per_s, *e.kappa))
    raw = EstimatorRecord(e, other).to_bytes()
    assert flags_of(raw)[0] >> 12 & 1
    assert EstimatorRecord.decode(raw).state.theta[0] == pytest.approx(2 * e.alpha_per_s)
    check(raw)
    five = Estimation(ring_capacity=5)
    r = None
    for i in range(7):
        (r,) = five.observe([Observation(r, HOUR, (0, 1, 0, 0, 0), True, 1e6 + i * HOUR)])
    assert r is not None and flags_of(raw_bytes(r))[0] & 7 == 5
    assert check(r).state.ring[0][2] == 1.0
    # too long for the stream's estimator: its state starts again from the prior
    assert Estimation().state_of(r) == Estimation().estimator.init()
    assert Estimation().states_of([r]).n_intervals.tolist() == [0]
    # wide counts: the high bytes kept; of the totals' two zero low bytes one left out (a
    # one-byte layout)
    (_, last), = crawled([(0, 1, 3)], [[True] * (STREAM_RING + 3)])[-1:]
    st = EstimatorRecord.decode(last[0]).state
    (e,) = Estimation().results([st])
    for case in (dataclasses.replace(st, ring=((HOUR, 300.0, 0.0, 1.0, 1.0), st.ring[1])),
                 dataclasses.replace(st, n_intervals=70_000)):
        case = dataclasses.replace(case, theta=(e.alpha_per_s, *e.kappa))
        raw = EstimatorRecord(e, case).to_bytes()
        flags, head = flags_of(raw)
        assert head == 2 and not flags >> 8 & 1 and flags >> 9 & 3 == 1
        back = check(raw)
        assert (back.state.n_intervals, back.state.ring) == (case.n_intervals, case.ring)


def test_counts_saturate_and_bad_records_restart_from_the_prior() -> None:
    """A group's count in one interval saturates at 65,535 (as the page record's per-source
    counts); a count no record holds is refused; a record of another version byte, an
    unknown layout, or a wrong length is unreadable: estimates none, the prior's state on
    both paths."""
    assert group_counts((3, COUNT_MAX, 5, 2, 4)) == (3.0, COUNT_MAX, 6.0)
    est = Estimation()
    obs = [Observation(None, HOUR, (0, COUNT_MAX, COUNT_MAX, 0, 0), True, 1e6)]
    (r,) = est.observe(obs)
    assert r == est.observe_states(obs)[0]
    assert EstimatorRecord.decode(r).state.ring[0][2] == COUNT_MAX
    st = EstimatorRecord.decode(r).state
    for bad_count in (0.5, COUNT_MAX + 1.0, -1.0):
        bad = dataclasses.replace(st, ring=((HOUR, 0.0, bad_count, 0.0, 1.0),))
        with pytest.raises(ValueError, match="ring count"):
            records_from_batch(states_to_batch([bad], STREAM_RING, 3), np.ones(1),
                               np.ones(1), np.ones((1, 3)))
    raw = raw_bytes(r)
    for bad_raw in (bytes((VERSION + 1,)) + raw[1:], raw[:1] + bytes((250,)) + raw[2:],
                    raw[:-1], raw + b"\0", b"1,2|x", raw[:1]):
        text = bad_raw.decode("utf-8", "surrogateescape")
        assert estimates_of(text) is None
        assert est.state_of(text) == est.estimator.init()
        assert est.states_of([text]).n_intervals.tolist() == [0]
        with pytest.raises(ValueError):
            EstimatorRecord.decode(bad_raw)
    # an escape layout byte with flags no layout has (low 3)
    flags, _ = flags_of(raw)
    bad_raw = raw[:1] + b"\xff" + (flags | 3 << 9).to_bytes(2, "little") + raw[2:]
    assert estimates_of(bad_raw) is None


def test_the_rebuild_reads_what_a_page_reads() -> None:
    """``page_params_many`` (the rebuild, on arrays) gives every record's page the
    parameters ``page_params`` gives it, one-byte and escape layouts mixed, and a page whose
    tail is no readable record its prior parameters."""
    recs: list[str] = []
    for _, out in crawled([(), (0,), (1, 2), (0, 1, 4)],
                          [[i % 3 != 1 for i in range(STREAM_RING + 3)]] * 4):
        recs += out
    half = Estimation(half_life_s=50 * HOUR)
    (w,) = half.observe([Observation(None, HOUR, (0, 1, 0, 0, 0), True, 1e6)])
    (w,) = half.observe([Observation(w, HOUR, (0, 1, 0, 0, 0), True, 1e6 + HOUR)])
    recs.append(w)
    values = [PageState(1.0 + i % 3, None, 2e6, (i % 2, 1, 0, 0, 0)).encode(r)
              for i, r in enumerate(recs)]
    values.append(PageState(1.0, None, 2e6).encode(b"\x09garbage"))
    many = page_params_many(values, Settings())
    assert many is not None
    for i, v in enumerate(values):
        one = page_params(PageState.decode(v), estimator_part(v), Settings())
        assert bool(many.estimated[i]) == one.estimated == (i < len(recs))
        assert many.alpha[i] == pytest.approx(one.alpha_per_s, rel=1e-12)
        assert many.gamma[i] == pytest.approx(one.gamma_per_s, rel=1e-12)
        assert many.origin[i] == pytest.approx(one.origin_s, rel=1e-12)


def test_a_record_holds_the_model_state_of_any_history() -> None:
    """The model's own scalar update (its quad_b not zero once a changed interval with
    signals has left the ring), the mode as theta: read back as ``unchanged - quad_b`` in one
    sum, the same estimates on the next update."""
    est = Estimation()
    st: SignalState = est.estimator.init()
    rng = random.Random(7)
    for i in range(9):
        st = est.estimator.update(st, CrawlInterval(
            HOUR * (1 + rng.random()), rng.random() < 0.6,
            (float(i % 2), float(rng.randrange(3)), 0.0), end_s=1e6 + (i + 1) * 2 * HOUR))
    assert any(st.quad_b)
    (e,) = est.results([st])
    st = dataclasses.replace(st, theta=(e.alpha_per_s, *e.kappa))
    back = check(EstimatorRecord(e, st).to_bytes(), st.end_s)
    assert back.state.quad_b == (0.0,) * D
    assert back.state.unchanged == pytest.approx(
        [u - b for u, b in zip(st.unchanged, st.quad_b, strict=True)], rel=1e-6)
    (again,) = est.results([back.state])
    assert again.alpha_per_s == pytest.approx(e.alpha_per_s, rel=1e-4)


def test_the_host_mean_is_alpha_once_the_host_prior_is_in_use() -> None:
    """A record's ``host`` mean is the crawl-value ``alpha`` where stored positive (its
    host had ``host_min_pages`` pages; the page has no prior rate of its own), the page's own
    mode otherwise; ``page_params`` and the rebuild's ``page_params_many`` read the same."""
    est = Estimation(host_min_pages=20)
    big = (20.0, 20 / 86400.0, 20 * (math.log(1 / 86400.0) - 0.5))
    small = (19.0, 19 / 86400.0, 19 * (math.log(1 / 86400.0) - 0.5))
    obs = [Observation(None, HOUR, (0, 1, 0, 0, 0), True, 1e6, None, big),
           Observation(None, HOUR, (0, 1, 0, 0, 0), True, 1e6, None, small),
           Observation(None, HOUR, (0, 1, 0, 0, 0), True, 1e6, 1e-4, big),
           Observation(None, HOUR, (0, 1, 0, 0, 0), True, 1e6, None, None)]
    recs = est.observe(obs)
    decoded = [EstimatorRecord.decode(r) for r in recs]
    mean0 = decoded[0].host[0]
    assert mean0 > 0.0 and decoded[1].host[0] < 0.0 and decoded[2].host[0] < 0.0
    assert decoded[3].host == (0.0, 0.0)
    # one changed hour moves the page above its host's mean (1/day), not to its own mode
    assert 1.0 / 86400.0 < mean0 != decoded[0].estimates.alpha_per_s
    values = [PageState(1.0, o.prior_rate_per_s, 2e6, (0, 1, 0, 0, 0)).encode(r)
              for o, r in zip(obs, recs, strict=True)]
    many = page_params_many(values, Settings())
    assert many is not None
    for i, (v, d) in enumerate(zip(values, decoded, strict=True)):
        one = page_params(PageState.decode(v), estimator_part(v), Settings())
        want = mean0 if i == 0 else d.estimates.alpha_per_s
        assert one.alpha_per_s == want and many.alpha[i] == want
        assert many.delta[i] == pytest.approx(one.change_rate_per_s, rel=1e-12)
        assert many.beta[i] == pytest.approx(one.beta_s, rel=1e-12)


def model_state(unknown: list[tuple[float, bool]], live: list[tuple[float, bool, tuple[float, ...]]]
                ) -> tuple[SignalState, Estimates]:
    """The model's own state after intervals with signals unknown (an imported history:
    ``(tau, changed)``), then live ones (``(tau, changed, group counts)``), its mode as
    ``theta`` (as the stream keeps it), and its estimates."""
    est = Estimation()
    st: SignalState = est.estimator.init()
    end = 1e6
    for tau, changed in unknown:
        end += tau
        st = est.estimator.update(st, CrawlInterval(tau, changed, (0.0,) * 3, end_s=end,
                                                    signals_known=False))
    for tau, changed, counts in live:
        end += tau
        st = est.estimator.update(st, CrawlInterval(tau, changed, counts, end_s=end))
    (e,) = est.results([st])
    return dataclasses.replace(st, theta=(e.alpha_per_s, *e.kappa)), e


def f32(xs: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(float(np.float32(x)) for x in xs)


HISTORY = [(HOUR * (1 + 0.3 * (i % 4)), i % 3 == 0) for i in range(12)]


def test_an_imported_history_is_kept_on_every_path() -> None:
    """The ``unknown`` block (time, unchanged time, representative changed interval of the
    intervals with signals unknown) round-trips through the one-record codec, the array
    codec (``records_from_batch`` / ``unpack_records`` / ``fill_batch``), the rebuild's
    heads and the next update: an imported page alone, then with live crawls and pings
    (one-byte layouts), then with a summary (the escape layout)."""
    cases = [
        model_state(HISTORY, []),
        model_state(HISTORY, [(HOUR, True, (1.0, 0.0, 2.0)), (HOUR, False, (0.0, 0.0, 1.0))]),
        model_state(HISTORY, [(HOUR, True, (1.0, 0.0, 2.0))] * (STREAM_RING + 2)),
    ]
    states = [st for st, _ in cases]
    for st in states:
        assert st.unknown[0] > st.unknown[1] > 0.0 and st.unknown[2] > 0.0 < st.unknown[3]
    raws = [EstimatorRecord(e, st).to_bytes() for st, e in cases]
    heads = []
    for (st, _), raw in zip(cases, raws, strict=True):
        back = check(raw, st.end_s)
        assert back.state.unknown == f32(st.unknown)
        flags, head = flags_of(raw)
        heads.append(head)
        assert flags >> 13 & 1
    # an imported page and its first live crawls: one layout byte; with a summary: escape
    assert heads == [2, 2, 4]
    assert any(states[2].quad_a)
    # the array codec writes the same bytes and reads the block back into the arrays
    batch = states_to_batch(states, STREAM_RING, 3)
    e_arr = [e for _, e in cases]
    recs = records_from_batch(batch, np.array([e.alpha_per_s for e in e_arr]),
                              np.array([e.alpha_se_per_s for e in e_arr]),
                              np.array([e.kappa for e in e_arr]))
    assert recs == raws
    fresh = states_to_batch([Estimation().estimator.init()] * 3, STREAM_RING, 3)
    for rows, ring_len, arr in unpack_records(recs):
        fill_batch(fresh, rows, ring_len, arr, None)
    assert fresh.unknown.tolist() == [list(f32(st.unknown)) for st in states]
    # the next update sees the block: the same estimates as from the model's own state
    est = Estimation()
    for (st, _), raw in zip(cases, raws, strict=True):
        nxt = CrawlInterval(HOUR, True, (0.0, 1.0, 0.0), end_s=st.end_s + HOUR)
        (want,) = est.results([est.estimator.update(st, nxt)])
        (got,) = est.results([est.estimator.update(est.state_of(raw, st.end_s), nxt)])
        assert got.alpha_per_s == pytest.approx(want.alpha_per_s, rel=1e-4)
        assert got.change_rate_per_s == pytest.approx(want.change_rate_per_s, rel=1e-4)


def test_a_live_page_stores_no_unknown_block() -> None:
    """A page only a live crawler has seen keeps no ``unknown`` block (its record the size
    it had without one); the block costs 16 bytes where present, 2 more where its layout
    is not one of the one-byte layouts."""
    n = STREAM_RING + 3
    for _, recs in crawled([(0, 1, 3), (), (2,)], [[True] * n, [i % 2 == 0 for i in range(n)],
                                                   [False] * n]):
        for r in recs:
            back = check(r)
            flags, head = flags_of(raw_bytes(r))
            assert back.state.unknown == (0.0,) * 4 and not flags >> 13 & 1
            with_block = dataclasses.replace(back.state, unknown=(2 * HOUR, HOUR, 1.0, HOUR))
            raw = EstimatorRecord(back.estimates, with_block).to_bytes()
            more = 16 + flags_of(raw)[1] - head
            assert len(raw) == len(raw_bytes(r)) + more
            assert more == (16 if (flags & 0b11000, flags >> 9 & 3) == (0, 2) else 18)
            check(raw)


def test_signal_rates_use_the_known_time() -> None:
    """``gamma`` is a group's signals over the observed time whose signals are known (the
    observed time less the unknown block's), 0 where none is known, on every reader: the
    decoded estimates, the value estimates, ``estimates_of``, the rebuild's arrays
    (``page_params_many`` as ``page_params``) and ``gamma_from_totals`` as the model's
    ``gamma_rates``."""
    (_, last), = crawled([(0, 1, 3)], [[True] * (STREAM_RING + 4)])[-1:]
    live = EstimatorRecord.decode(last[0])
    t = live.state.totals[0]
    counts = live.state.totals[1:]
    assert t > 4 * HOUR and any(counts)
    values = []
    for u, host in ((3 * HOUR, (0.0, 0.0)), (t - 1.5 * HOUR, (2e-5, -11.0)), (t, (0.0, 0.0)),
                    (t + HOUR, (0.0, 0.0))):
        st = dataclasses.replace(live.state, unknown=(u, 0.5 * u, 1.0, HOUR))
        raw = EstimatorRecord(live.estimates, st, host).to_bytes()
        back = EstimatorRecord.decode(raw)
        known = max(float(np.float32(t)) - float(np.float32(u)), 0.0)
        want = tuple(c / max(known, 1.0) if known > 0.0 else 0.0 for c in counts)
        assert back.estimates.gamma_per_s == pytest.approx(want, rel=1e-12)
        assert back.value_estimates.gamma_per_s == back.estimates.gamma_per_s
        assert estimates_of(raw) == back.value_estimates
        if known > 0.0:
            assert back.estimates.gamma_per_s != live.estimates.gamma_per_s
        values.append(PageState(1.0, None, 2e6, (0, 1, 0, 0, 0)).encode(raw))
        totals = np.array([back.state.totals], dtype=np.float64)
        unknown = np.array([back.state.unknown], dtype=np.float64)
        assert gamma_from_totals(totals, unknown[:, 0]).tolist() == [list(want)]
        assert gamma_from_totals(totals, unknown[:, 0]).tolist() == nm.gamma_rates(
            totals, unknown).tolist()
    many = page_params_many(values, Settings())
    assert many is not None
    for i, v in enumerate(values):
        one = page_params(PageState.decode(v), estimator_part(v), Settings())
        assert many.gamma[i] == pytest.approx(one.gamma_per_s, rel=1e-12)
        assert many.delta[i] == pytest.approx(one.change_rate_per_s, rel=1e-12)
