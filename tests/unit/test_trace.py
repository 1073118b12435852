"""Trace replay (models/sim/trace.py, experiments/trace.py): conventions, equivalence with
the Poisson simulator, the experiment's outputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from experiments.trace import (
    HEDGE_SHARE,
    POLICIES,
    main,
    permute_pages,
    stderr,
    step_crawls,
    summarise,
    table,
    trace_rows,
)
from models.estimators import CrawlInterval, SignalEstimator
from models.sim import (
    Budget,
    NutchAdaptive,
    RoundRobin,
    StormCrawlerAdaptive,
    accuracy,
    algorithm1,
    run,
    simulate_events,
    synthetic_world,
)
from models.sim.trace import (
    DAY_S,
    Hedge,
    OnlineRates,
    Trace,
    VectorAlgorithm1,
    average_rates,
    complete_history_intervals,
    nutch_replay,
    trace_events,
    trace_from_arrays,
    trace_world,
)
from models.sim.world import World
from streams.histories.trace import load_trace
from streams.histories.write import write_changes

T0_S = 1_600_000_000.0


def test_window_runs_from_first_to_last_change_and_every_page_is_known() -> None:
    tr = trace_from_arrays([1.0, 2.0, 1.0], [0, 1, 0, 1],
                           T0_S + np.array([0, 86400, 43200, 2 * 86400]))
    assert tr.m == 3 and tr.horizon == 2.0 and tr.start_s == T0_S
    # the change at the start is in the initial copy; page 2 never changes
    assert tr.changes_of(0).tolist() == [0.5]
    assert tr.changes_of(1).tolist() == [1.0, 2.0]
    assert tr.changes_of(2).size == 0
    np.testing.assert_allclose(average_rates(tr), [0.5, 1.0, 0.0])
    np.testing.assert_allclose(average_rates(tr, 1.0), [0.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="window"):
        trace_from_arrays([1.0], [0], [T0_S])


def test_synthesised_pings_follow_the_noise_model() -> None:
    rng = np.random.default_rng(0)
    n = 20000
    tr = trace_from_arrays(np.ones(10), rng.integers(0, 10, n),
                           T0_S + rng.uniform(0, 100 * DAY_S, n))
    ev = trace_events(tr, np.random.default_rng(1), recall=0.3, false_per_day=0.5, delay_days=0.6)
    true = ev.ping_true
    assert abs(true.sum() / tr.n_changes - 0.3) < 0.02
    assert abs((~true).sum() / (10 * tr.horizon) - 0.5) < 0.05
    lag = ev.ping_arrival - ev.ping_emitted
    assert abs(lag.mean() - 0.6) < 0.03 and (np.diff(ev.ping_arrival) >= 0).all()
    recorded = trace_events(tr, pings=(np.array([3, 1]), np.array([5.0, 2.0])))
    assert recorded.ping_page.tolist() == [1, 3] and recorded.ping_arrival.tolist() == [2.0, 5.0]


def test_a_complete_history_teaches_the_estimator_its_average_rate() -> None:
    rng = np.random.default_rng(2)
    rate, T = 3.0 / DAY_S, 400.0 * DAY_S  # seconds: the estimator's default prior is in s
    changes = np.sort(rng.uniform(0, T, rng.poisson(rate * T)))
    est = SignalEstimator(0)
    s = est.init()
    for tau, c in complete_history_intervals(changes, 0.0, T, 1.0):
        s = est.update(s, CrawlInterval(tau, c))
    # the prior (two pseudo-intervals) and the stream summary of old intervals cost a few %
    assert est.result(s).change_rate_per_s == pytest.approx(changes.size / T, rel=0.05)


def test_vector_algorithm1_crawls_as_the_index_policy_with_the_same_parameters() -> None:
    rng = np.random.default_rng(4)
    w = synthetic_world(80, rng)
    ev = simulate_events(w, 10.0, rng)
    a, b, g = w.signal_params()
    ref = run(w, ev, algorithm1("greedy-ncis", w.mu, w.delta, w.lam, w.nu), Budget(20.0))
    vec = run(w, ev, VectorAlgorithm1("v", w.mu, a, b, g), Budget(20.0))
    same = np.mean(ref.crawl_page == vec.crawl_page)
    assert same > 0.97, same  # ties and float rounding may swap a few picks
    assert accuracy(w, ev, vec) == pytest.approx(accuracy(w, ev, ref), abs=0.005)


def _poisson_policy(kind: str, w: World, R: float, T: float, g: np.random.Generator):
    m = w.m
    kw = {"initial_interval": m / R, "min_interval": 1.0 / R, "max_interval": T, "rng": g,
          "use_pings": True}
    if kind == "recrawl":  # as experiments.trace builds it, hedge included
        return VectorAlgorithm1(kind, w.mu, learner=OnlineRates(m, use_pings=True),
                                hedge=Hedge(m, max_share=HEDGE_SHARE))
    if kind == "nutch":
        return NutchAdaptive(m, **kw)
    if kind == "stormcrawler":
        return StormCrawlerAdaptive(m, **kw)
    if kind == "uniform":
        return RoundRobin(m, rng=g)
    a, b, gm = w.signal_params()  # hindsight: the true rates (Greedy-NCIS)
    return VectorAlgorithm1(kind, w.mu, a, b, gm)


def test_a_poisson_world_replayed_as_a_trace_gives_the_simulators_accuracy(
        tmp_path: Path) -> None:
    """The same policies on Poisson worlds, run by the simulator and replayed from change
    logs through the file reader: per policy, means agree within two standard errors."""
    m, T, R, reps = 60, 20.0, 15.0, 5
    recall, false = 0.5, 0.1
    sim: dict[str, list[float]] = {k: [] for k in POLICIES}
    rep_acc: dict[str, list[float]] = {k: [] for k in POLICIES}
    for rep in range(reps):
        rng = np.random.default_rng([7, rep])
        w = synthetic_world(m, rng, lam_beta=None, nu_range=None)
        w = World(w.mu, w.delta, np.full(m, recall), np.full(m, false), w.host, w.host_rate,
                  w.top)
        ev = simulate_events(w, T, rng)
        for k in POLICIES:
            res = run(w, ev, _poisson_policy(k, w, R, T, np.random.default_rng([8, rep])),
                      Budget(R, batch=step_crawls(m)))
            sim[k].append(accuracy(w, ev, res))
        path = tmp_path / f"w{rep}.jsonl"
        write_changes(path, {f"https://x/{i}": (T0_S + ev.changes_of(i) * DAY_S).tolist()
                             for i in range(m)},
                      {f"https://x/{i}": float(w.mu[i]) for i in range(m)})
        loaded = load_trace(path)
        assert loaded.trace.m == m
        np.testing.assert_allclose(loaded.trace.mu, w.mu)
        for row in trace_rows(loaded.trace, [R], pings=(recall, false, 0.0), seed=rep):
            rep_acc[row["policy"]].append(row["accuracy"])
    for k in POLICIES:
        a, b = np.asarray(sim[k]), np.asarray(rep_acc[k])
        se = math.sqrt(a.var(ddof=1) / reps + b.var(ddof=1) / reps)
        assert abs(a.mean() - b.mean()) <= 2 * se, (k, a.mean(), b.mean(), se)


def test_the_command_writes_the_agreed_json_table_and_plot(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    changes = {f"https://s/{i}": sorted((T0_S + rng.uniform(0, 30 * DAY_S,
                                                             rng.poisson(3 * (i % 4)))).tolist())
               for i in range(40)}
    path = tmp_path / "c.jsonl"
    write_changes(path, changes)
    with open(path, "a") as f:
        f.write("garbage line\n")
    out = tmp_path / "out"
    assert main(["trace", "--changes", str(path), "--budget", "4", "12", "--learn-days", "10",
                 "--pings", "0.5,0.1,0.2", "--json", str(tmp_path / "t.json"), "--out",
                 str(out), "--no-progress", "--jobs", "1"]) == 0
    got = json.loads((tmp_path / "t.json").read_text())
    assert set(got) == {"pages", "changes", "days", "budgets", "accuracy"}
    assert got["pages"] == 40 and got["budgets"] == [4.0, 12.0]
    assert got["changes"] == sum(len(v) for v in changes.values())
    assert list(got["accuracy"]) == list(POLICIES)
    assert all(len(v) == 2 and all(0 <= x <= 1 for x in v) for v in got["accuracy"].values())
    table = (out / "trace.md").read_text()
    assert "recrawl-cold" in table and "room" in table and "share" in table
    assert (out / "trace.png").stat().st_size > 1000
    with pytest.raises(SystemExit, match="learn-days"):
        main(["trace", "--changes", str(path), "--budget", "4", "--learn-days", "99",
              "--out", str(out), "--no-progress", "--jobs", "1"])


def test_the_table_gives_each_mean_with_its_standard_error_over_repetitions() -> None:
    accs = {"recrawl": [0.50, 0.50], "nutch": [0.40, 0.44], "stormcrawler": [0.30, 0.30],
            "uniform": [0.45, 0.41], "hindsight": [0.60, 0.60]}
    raw = [{"policy": k, "budget": 5.0, "accuracy": a} for k, v in accs.items() for a in v]
    acc, se = summarise(raw, [5]), stderr(raw, [5])
    assert acc["uniform"] == [pytest.approx(0.43)] and acc["nutch"] == [pytest.approx(0.42)]
    # two repetitions 0.04 apart: sample sd 0.04/sqrt(2), over sqrt(2) -> 0.02
    assert se["nutch"] == [pytest.approx(0.02)] and se["recrawl"] == [0.0]
    row = table(acc, [5], se).splitlines()[2]
    assert "| 50.00 |" in row and "42.00 ± 2.00" in row and "43.00 ± 2.00" in row
    assert "uniform 43.00" in row  # the best peer by its mean
    assert "±" not in table(acc, [5]).splitlines()[2]


def _spread_trace() -> Trace:
    """24 pages of one importance with 0.5 to 30 changes on average over 20 days."""
    rng = np.random.default_rng(8)
    m = 24
    p = np.repeat(np.arange(m), rng.poisson(np.linspace(0.5, 30, m)))
    return trace_from_arrays(np.ones(m), p, T0_S + rng.uniform(0, 20 * DAY_S, p.size))


def _accuracies(rows: list, k: str) -> list[float]:
    """The accuracies of policy ``k`` in trace rows, in their order."""
    return [r["accuracy"] for r in rows if r["policy"] == k]


def test_repetitions_rerun_only_what_they_redraw() -> None:
    tr, kinds = _spread_trace(), ["recrawl", "hindsight", "uniform"]
    acc = _accuracies
    # without pings another seed changes the peers' draws, not recrawl or hindsight ...
    a = trace_rows(tr, [6], policies=kinds, seed=0)
    b = trace_rows(tr, [6], policies=kinds, seed=7)
    assert acc(a, "recrawl") == acc(b, "recrawl") and acc(a, "hindsight") == acc(b, "hindsight")
    assert acc(a, "uniform") != acc(b, "uniform")
    # ... so repetitions run them once; with synthesised pings every policy repeats
    counts = [len(acc(trace_rows(tr, [6], policies=kinds, reps=3), k)) for k in kinds]
    assert counts == [1, 1, 3]
    pinged = trace_rows(tr, [6], policies=kinds, reps=3, pings=(0.5, 0.1, 0.1))
    assert [len(acc(pinged, k)) for k in kinds] == [3, 3, 3]


def test_shuffled_pages_repeat_recrawl_and_hindsight_on_other_page_orders() -> None:
    tr, kinds = _spread_trace(), ["recrawl", "hindsight", "uniform"]
    acc = _accuracies
    plain = trace_rows(tr, [20], policies=kinds)
    rows = trace_rows(tr, [20], policies=kinds, reps=4, shuffle_pages=True)
    assert [len(acc(rows, k)) for k in kinds] == [4, 4, 4]
    # the first repetition keeps the file's order; the others crawl in another order
    assert acc(rows, "recrawl")[0] == acc(plain, "recrawl")[0]
    assert acc(rows, "hindsight")[0] == acc(plain, "hindsight")[0]
    assert len(set(acc(rows, "recrawl"))) > 1 and len(set(acc(rows, "hindsight"))) > 1


def test_permuted_pages_keep_their_changes_importances_hosts_and_pings() -> None:
    rng = np.random.default_rng(9)
    m = 12
    p = np.repeat(np.arange(m), rng.poisson(np.linspace(1, 12, m)))
    tr0 = trace_from_arrays(np.arange(1.0, m + 1), p, T0_S + rng.uniform(0, 9 * DAY_S, p.size))
    tr = Trace(tr0.mu, tr0.change_time, tr0.change_start, tr0.horizon, tr0.start_s,
               np.arange(m) % 4)
    order = rng.permutation(m)
    # recorded pings exactly at each change: each must still name a page changing then
    pings = (tr.page_of_change(), tr.change_time.copy())
    out, moved = permute_pages(tr, order, pings)
    assert out.host is not None and moved is not None
    for k in range(m):
        np.testing.assert_array_equal(out.changes_of(k), tr.changes_of(int(order[k])))
    np.testing.assert_array_equal(out.mu, tr.mu[order])
    np.testing.assert_array_equal(out.host, np.arange(m)[order] % 4)
    np.testing.assert_allclose(average_rates(out), average_rates(tr)[order])
    assert all(t in out.changes_of(int(k)) for k, t in zip(*moved, strict=True))
    with pytest.raises(ValueError, match="permutation"):
        permute_pages(tr, np.zeros(m, dtype=np.int64))


def test_warm_start_replaces_the_estimates_at_the_learn_day() -> None:
    rng = np.random.default_rng(6)
    m = 30
    rates = np.where(np.arange(m) < 10, 1.0, 0.01)
    p = np.repeat(np.arange(m), rng.poisson(rates * 40))
    tr = trace_from_arrays(np.ones(m), p, T0_S + rng.uniform(0, 40 * DAY_S, p.size))
    learner = OnlineRates(m, use_pings=False)
    learner.learn_complete(tr, 20.0, 1e-5)
    got = learner.params()[0]
    want = average_rates(tr, 0.0, 20.0)
    assert np.all(got[:10] > 5 * got[10:].max())  # fast pages are told apart at once
    np.testing.assert_allclose(got[:10], want[:10], rtol=0.35)
    w = trace_world(tr)
    ev = trace_events(tr)
    seen: list[float] = []

    def learn(pol: VectorAlgorithm1) -> None:
        seen.append(1.0)
        assert pol.learner is not None
        pol.learner.learn_complete(tr, 20.0, 1e-5)

    class Spy(VectorAlgorithm1):
        def choose(self, t: float, eligible: object) -> int | None:
            got = super().choose(t, None)
            if t >= 20.0 and not swapped:
                swapped.append(self.alpha.copy())
            return got

    swapped: list[np.ndarray] = []
    pol = Spy("recrawl", tr.mu, learner=OnlineRates(m, use_pings=False), warm=(20.0, learn))
    run(w, ev, pol, Budget(3.0))
    assert seen == [1.0]
    # at the first slot after the learn day every page ranks with the imported estimate
    np.testing.assert_allclose(swapped[0], got)


def test_the_hedge_gives_crawls_to_the_floor_only_while_rates_do_not_predict() -> None:
    rng = np.random.default_rng(9)
    n = 4000
    true = np.exp(rng.normal(0.0, 1.5, n))  # rates per day, widely spread
    tau = rng.uniform(0.1, 2.0, n)
    changed = rng.uniform(size=n) < -np.expm1(-true * tau)
    good, bad = Hedge(n, max_share=0.8), Hedge(n, max_share=0.8)
    assert good.share == 0.8  # before the warm-up: all of it
    for k in range(0, n, 100):
        s = slice(k, k + 100)
        pages = np.arange(k, k + 100)  # each page crawled once: no interval has adapted
        good.observe(pages, true[s], tau[s], changed[s])  # the true rates
        bad.observe(pages, true[s][::-1].copy(), tau[s], changed[s])  # rates of other pages
    assert good.skill > 0.1 and good.share == 0.0
    assert bad.skill < 0.0 and bad.share == 0.8
    # the floor's crawls add up to the share, fractions carried over
    assert sum(bad.floor_crawls(1) for _ in range(100)) == 80


def test_hedged_recrawl_crawls_the_longest_unseen_pages_when_it_cannot_predict() -> None:
    m = 50
    tr = trace_from_arrays(np.ones(m), np.arange(m) % m, T0_S + np.linspace(0, 20 * DAY_S, m))
    w, ev = trace_world(tr), trace_events(tr)
    pol = VectorAlgorithm1("recrawl", tr.mu, learner=OnlineRates(m, use_pings=False),
                           hedge=Hedge(m, max_share=1.0, warmup=10**9))
    res = run(w, ev, pol, Budget(5.0))
    # all crawls to the floor: every page once before any page twice (round robin)
    first = res.crawl_page[:m]
    assert np.unique(first).size == m


def test_the_floor_follows_adaptive_intervals_where_they_predict_better_than_one_rate(
        ) -> None:
    """Half the pages change every day, half never: the adaptive intervals (Nutch's rule)
    predict the crawls' findings better than one site-wide rate, so the floor spends its
    crawls by them, not in round robin, and keeps more pages fresh."""
    m, days, R = 40, 60, 10.0
    busy = np.arange(m // 2)
    page = np.repeat(busy, days)
    time_s = T0_S + (np.tile(np.arange(1, days + 1), busy.size) - 0.5) * DAY_S
    tr = trace_from_arrays(np.ones(m), page, time_s, start_s=T0_S, stop_s=T0_S + days * DAY_S)
    w, ev = trace_world(tr), trace_events(tr)

    def floor_only() -> VectorAlgorithm1:  # every crawl to the floor; learned rates unused
        return VectorAlgorithm1("recrawl", tr.mu, learner=OnlineRates(m, use_pings=False),
                                hedge=Hedge(m, max_share=1.0, good_skill=1e9, warmup=50))

    pol = floor_only()
    res = run(w, ev, pol, Budget(R))
    assert pol.hedge is not None and pol.hedge.adaptive
    assert pol.hedge.loss_a < pol.hedge.loss0
    late = res.crawl_page[res.crawl_time > days / 2]
    busy_share = np.isin(late, busy).mean()
    assert busy_share > 0.7, busy_share  # round robin: 0.5
    rr = run(w, ev, RoundRobin(m, rng=np.random.default_rng(0)), Budget(R))
    assert accuracy(w, ev, res) > accuracy(w, ev, rr) + 0.02


def test_the_floor_is_round_robin_where_one_rate_predicts_as_well() -> None:
    """Every page changes as a Poisson process of one rate: the adaptive intervals follow
    noise and predict worse than one rate for all, so the floor crawls the pages crawled
    longest ago (every page crawled as often as any other, give or take a crawl or two:
    on noise the adaptive predictor can briefly look better)."""
    for seed in range(3):
        rng = np.random.default_rng([11, seed])
        m, days, rate = 50, 80.0, 0.3
        n = rng.poisson(rate * days * m)
        tr = trace_from_arrays(np.ones(m), rng.integers(0, m, n),
                               T0_S + rng.uniform(0, days * DAY_S, n),
                               start_s=T0_S, stop_s=T0_S + days * DAY_S)
        w, ev = trace_world(tr), trace_events(tr)
        pol = VectorAlgorithm1("recrawl", tr.mu, learner=OnlineRates(m, use_pings=False),
                               hedge=Hedge(m, max_share=1.0, good_skill=1e9, warmup=50))
        res = run(w, ev, pol, Budget(10.0))
        assert pol.hedge is not None and not pol.hedge.adaptive
        assert pol.hedge.loss_a > pol.hedge.loss0
        counts = np.bincount(res.crawl_page, minlength=m)
        assert counts.max() - counts.min() <= 2, counts


def test_recorded_pings_are_read_onto_the_traces_clock(tmp_path: Path) -> None:
    from streams.histories.trace import load_pings

    changes = {"https://a/": [T0_S + 86400.0, T0_S + 3 * 86400.0], "https://b/": [T0_S]}
    path = tmp_path / "c.jsonl"
    write_changes(path, changes)
    pings = tmp_path / "p.jsonl"
    pings.write_text(f'{{"url": "https://a/", "time": {T0_S + 86400.0 + 60}}}\n'
                     f'{{"url": "https://zzz/", "time": {T0_S}}}\n'
                     f'{{"url": "https://b/", "time": {T0_S + 2 * 86400.0}}}\n')
    loaded = load_trace(path)
    page, day, rep = load_pings(pings, loaded)
    assert page.tolist() == [0, 1] and rep.skipped == 1
    np.testing.assert_allclose(day, [1.0 + 60 / 86400.0, 2.0])
    ev = trace_events(loaded.trace, pings=(page, day))
    assert ev.ping_page.tolist() == [0, 1]
    out = tmp_path / "out"
    assert main(["trace", "--changes", str(path), "--ping-log", str(pings), "--budget", "2",
                 "--json", str(tmp_path / "t.json"), "--out", str(out), "--no-progress",
                 "--jobs", "1"]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["pages"] == 2


def test_the_replays_learner_forgets_a_busy_past_by_default() -> None:
    """A page that changed every day for 400 days and then not for 400: by default the
    learner rates it by its recent quiet more than by its all-window average (0.5/day);
    without forgetting it keeps close to the average."""
    days = 800
    m = 3
    page = np.repeat(np.arange(m), 400)
    time_s = T0_S + np.tile(np.arange(1, 401) - 0.5, m) * DAY_S
    tr = trace_from_arrays(np.ones(m), page, time_s, start_s=T0_S, stop_s=T0_S + days * DAY_S)
    default, never = OnlineRates(m, use_pings=False), OnlineRates(
        m, use_pings=False, half_life_days=math.inf)
    for lr in (default, never):
        lr.learn_complete(tr, float(days), 1.0 / DAY_S)
    avg = 400 / days
    assert never.params()[0] == pytest.approx(np.full(m, avg), rel=0.1)
    assert (default.params()[0] < avg / 4).all(), default.params()[0]


def test_an_import_with_pings_teaches_the_change_rates_and_no_ping_quality() -> None:
    """As ``recrawl import``: a history records no pings, so with pings the learn window's
    intervals are ones whose signals are unknown: the same change rates as without pings,
    no signal counted, every interval's time in the unknown block."""
    tr = _poisson_trace(5, 80, 50.0)
    upto = 30.0
    plain, pinged = OnlineRates(tr.m, use_pings=False), OnlineRates(tr.m, use_pings=True)
    for lr in (plain, pinged):
        lr.learn_complete(tr, upto, 1.0 / DAY_S)
    st = pinged.state
    assert np.all(st.totals[:, 1:] == 0.0)
    np.testing.assert_allclose(st.unknown[:, 0], st.totals[:, 0])
    assert np.all(st.unknown[:, 0] > 0.0)
    alpha, _kappa, gamma = pinged.change_rates()
    assert np.all(gamma == 0.0)  # no time with signals recorded
    np.testing.assert_allclose(alpha, plain.change_rates()[0], rtol=1e-6)


def _poisson_trace(seed: int, m: int, days: float, log_median: float = -1.0) -> Trace:
    rng = np.random.default_rng(seed)
    rates = np.exp(rng.normal(log_median, 1.5, m))  # per day, widely spread
    n = rng.poisson(rates * days)
    page = np.repeat(np.arange(m), n)
    return trace_from_arrays(np.ones(m), page, T0_S + rng.uniform(0, days * DAY_S, page.size),
                             start_s=T0_S, stop_s=T0_S + days * DAY_S)


@pytest.mark.parametrize("half_life_days", [math.inf, 180.0, 10.0])
def test_complete_rates_are_the_rates_an_import_of_the_history_gives(
        half_life_days: float) -> None:
    tr = _poisson_trace(3, 120, 60.0)
    upto = 40.0
    learner = OnlineRates(tr.m, use_pings=False, half_life_days=half_life_days)
    learner.learn_complete(tr, upto, 1.0 / DAY_S)
    pages = np.arange(tr.m)
    got = learner.complete_rates(tr, pages, np.full(tr.m, upto))
    np.testing.assert_allclose(got, learner.params()[0], rtol=0.02)
    # before a page's first change only the time since 0 counts; later changes never do
    early = learner.complete_rates(tr, pages, np.full(tr.m, 1e-3))
    quiet = np.array([tr.changes_of(i).size == 0 or tr.changes_of(i)[0] > 1e-3
                      for i in range(tr.m)])
    assert quiet.any()
    np.testing.assert_allclose(early[quiet], early[quiet][0])


def test_the_hedge_rescores_the_learned_rates_on_the_crawls_it_recorded() -> None:
    rng = np.random.default_rng(4)
    hedge, plain = Hedge(40, record=True, half_life=50.0), Hedge(40, half_life=50.0)
    starts: list[np.ndarray] = []
    batches = []
    for b in range(30):
        pages = rng.choice(40, 5, replace=False)
        tau = rng.uniform(0.5, 3.0, 5)
        changed = rng.uniform(size=5) < 0.4
        end = 10.0 + b
        batches.append((pages, tau, changed, end))
        for h in (hedge, plain):
            h.observe(pages, np.full(5, 0.01), tau, changed, end)
    assert hedge.loss == plain.loss and plain.crawls is None

    def rate_at(pages: np.ndarray, start: np.ndarray) -> np.ndarray:
        starts.append(start)
        return np.full(pages.size, 0.3)

    hedge.rescore(rate_at)
    want = 0.0
    for k, (_, tau, changed, _) in enumerate(batches):
        p = -np.expm1(-0.3 * tau)
        ll = -np.where(changed, np.log(p), np.log1p(-p)).sum()
        want += ll * hedge.keep ** (5 * (len(batches) - 1 - k))
    assert hedge.loss == pytest.approx(want, rel=1e-9)
    np.testing.assert_allclose(starts[0], np.concatenate([e - t for _, t, _, e in batches]))
    assert hedge.crawls is None and hedge.loss0 == plain.loss0 and hedge.loss_a == plain.loss_a
    assert hedge.loss < plain.loss  # 0.3 / day predicts a 40% change share better


def test_an_import_is_judged_by_how_it_would_have_predicted_the_imported_days() -> None:
    """Pages with stable, widely spread rates crawled at a budget too small to learn them
    from the crawls (each page every 50 days): the imported complete history predicts the
    crawls of the imported days better than the cold learner did, so after the import the
    hedge trusts the learned rates more."""
    from experiments.trace import _policy

    tr = _poisson_trace(5, 100, 300.0, log_median=-3.0)
    ev, w = trace_events(tr), trace_world(tr)
    skills: dict[str, tuple[float, float]] = {}
    for kind in ("recrawl", "recrawl-cold"):
        pol = _policy(kind, tr, 2.0, 200.0, ev, np.random.default_rng(0), use_pings=False)
        assert isinstance(pol, VectorAlgorithm1) and pol.hedge is not None
        hedge = pol.hedge

        class Stop(Exception):
            pass

        def observe(*a: object, _o: object = hedge.observe, _h: Hedge = hedge,
                    _k: str = kind) -> None:
            _o(*a)  # type: ignore[operator]
            if a[4] >= 200.0 and _k not in skills:  # type: ignore[operator]
                skills[_k] = (_h.skill, _h.loss)
                raise Stop

        hedge.observe = observe  # type: ignore[method-assign]
        with pytest.raises(Stop):
            run(w, ev, pol, Budget(2.0))
    assert skills["recrawl"][1] < 0.8 * skills["recrawl-cold"][1]
    assert skills["recrawl"][0] > 0.0 > skills["recrawl-cold"][0]


def test_nutch_replay_steps_each_pages_interval_over_the_complete_history() -> None:
    # page 0 changes every half day, page 1 never, page 2 once at day 5
    days = 30.0
    page = np.array([*[0] * 59, 2, 1])
    time_s = T0_S + np.array([*(0.5 * np.arange(1, 60)), 5.0, days]) * DAY_S
    tr = trace_from_arrays(np.ones(3), page, time_s, start_s=T0_S, stop_s=T0_S + days * DAY_S)
    queries = (np.array([0, 0, 1, 2, 2]), np.array([0.1, 2.0, 19.9, 4.0, 9.0]))
    got, then = nutch_replay(tr, 20.0, 2.0, 0.25, 8.0, at=queries)

    def by_hand(changes: list[float], until: float) -> float:
        t, iv = 0.0, 2.0
        while t + iv <= until:
            found = any(t < c <= t + iv for c in changes)
            t, iv = t + iv, min(max(iv * (0.8 if found else 1.4), 0.25), 8.0)
        return iv

    busy = list(0.5 * np.arange(1, 60))
    np.testing.assert_allclose(got, [by_hand(busy, 20.0), by_hand([], 20.0),
                                     by_hand([5.0], 20.0)])
    assert got[0] < 2.0 < got[2] < got[1]  # the busy page shortens, the quiet ones stretch
    np.testing.assert_allclose(then, [2.0, by_hand(busy, 2.0), by_hand([], 19.9),
                                      by_hand([5.0], 4.0), by_hand([5.0], 9.0)])


def test_the_hedge_takes_other_intervals_only_if_they_would_have_predicted_better() -> None:
    rng = np.random.default_rng(2)
    busy = np.arange(40) < 20  # pages 0-19 change at every crawl, 20-39 never
    batches = []
    for b in range(60):
        pages = rng.choice(40, 8, replace=False)
        batches.append((pages, rng.uniform(0.5, 2.0, 8), busy[pages], 5.0 + b))

    def fed(record: bool) -> Hedge:
        h = Hedge(40, record=record, warmup=0)
        for pages, tau, changed, end in batches:
            h.observe(pages, np.full(8, 0.5), tau, changed, end)
        return h

    plain = fed(False)
    right = np.where(busy, 0.01, 100.0)  # short intervals for the busy pages
    for intervals, taken in ((right, True), (right[::-1].copy(), False)):
        h = fed(True)

        def interval_at(p: np.ndarray, s: np.ndarray,
                        _iv: np.ndarray = intervals) -> tuple[np.ndarray, np.ndarray]:
            return _iv, _iv[p]

        assert h.rescore(lambda p, s: np.full(p.size, 0.5), interval_at) is taken
        if taken:
            assert h.loss_a < plain.loss_a
            np.testing.assert_allclose(h.interval, intervals)
        else:
            assert h.loss_a == plain.loss_a
            np.testing.assert_allclose(h.interval, plain.interval)
