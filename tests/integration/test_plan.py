"""The budget planner (streams/worker/plan.py) against the real Redis: its continuous optimum
(``optimum_accuracy``, ``multiplier``) checked against independent computations (eq. 5 of
paper 004 solved here with plain root finding for pages without signals, a renewal
simulation of the threshold policy for pages with signals), its simulated accuracy against
that optimum."""

from __future__ import annotations

import math
import random
import time
import uuid

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import gammainc

from models.policies import optimal_thresholds
from streams.estimates.estimation import Estimation, Observation
from streams.settings import Settings
from streams.store.page_record import PageState
from streams.store.redis_store import Store
from streams.worker.plan import load_inputs, plan

HOUR = 3600.0


def eq5_by_hand(mu: list[float], delta: list[float], budget: float) -> tuple[float, float]:
    """Accuracy and multiplier of eq. 5 of paper 004 (no signals), written from the paper:
    maximise ``sum G(xi_i)``, ``G(xi) = (mu/Delta) xi (1 - e^{-Delta/xi})``, s.t.
    ``sum xi_i = R``; KKT ``G'(xi) = (mu/Delta)(1 - e^{-x}(1 + x)) = Lambda`` with
    ``x = Delta/xi`` (or ``xi = 0`` when ``mu/Delta <= Lambda``).  Brent's method inside
    and out; accuracy ``sum mu (1 - e^{-x})/x / sum mu``."""

    def xs(lam: float) -> list[float]:
        out = []
        for m, d in zip(mu, delta, strict=True):
            target = lam * d / m
            if target >= 1.0:
                out.append(math.inf)
            else:
                # 1 - e^{-x}(1 + x) = P(Poisson(x) > 1), scipy's regularised gammainc(2, x)
                out.append(brentq(lambda x, t=target: gammainc(2.0, x) - t,
                                  1e-300, 800.0, xtol=1e-300, rtol=1e-15, maxiter=500))
        return out

    def excess(log_lam: float) -> float:
        return sum(d / x for d, x in zip(delta, xs(math.exp(log_lam)), strict=True)) - budget

    hi = math.log(max(m / d for m, d in zip(mu, delta, strict=True)))
    log_lam = brentq(excess, hi - 40.0, hi - 1e-12, xtol=1e-14, rtol=1e-15, maxiter=500)
    x = xs(math.exp(log_lam))
    fresh = [0.0 if math.isinf(v) else -math.expm1(-v) / v for v in x]
    return sum(m * f for m, f in zip(mu, fresh, strict=True)) / sum(mu), math.exp(log_lam)


def settings_for(redis_url: str, **kw: object) -> Settings:
    return Settings(web_enabled=False, key_prefix=f"p{uuid.uuid4().hex[:8]}",
                    redis_url=redis_url, partitions=2, **kw)  # type: ignore[arg-type]


async def put_pages(store: Store, settings: Settings,
                    pages: list[tuple[str, str, PageState, str | None]]) -> None:
    from streams.events.records import shard_of

    r = store.redis
    for host, url, state, est in pages:
        await r.sadd(store.shard_key(shard_of(host, settings.partitions)), host)
        await r.hset(store.key(host, "pages"), url, state.encode(est))


async def test_plan_of_prior_only_pages_is_eq5(redis_url: str) -> None:
    """Pages with priors only (no estimator record: gamma = 0) give eq. 5's optimum, and
    Algorithm 1 simulated on them (nothing observed: the world is the priors) gets close to
    it and no more; the control budget in Redis is the marked operating point; pages never
    crawled and crawled ones with signal counts count alike (neither depends on the
    state)."""
    st = settings_for(redis_url, default_change_rate_per_s=1 / 7200)
    store = Store.from_url(redis_url, st.key_prefix)
    rng = random.Random(3)
    now = time.time()
    pages = []
    mu, delta = [], []
    for i in range(40):
        imp = rng.choice([0.5, 1.0, 2.0, 8.0])
        prior = None if i % 5 == 0 else rng.uniform(1 / 86400, 1 / 600)
        state = PageState(importance=imp, prior_change_rate_per_s=prior,
                          last_crawl_s=0.0 if i % 3 else now - 500,
                          signals=(i % 2, 0, 0, 0, 0))
        pages.append((f"h{i % 7}.org", f"https://h{i % 7}.org/{i}", state, None))
        mu.append(imp)
        delta.append(prior if prior is not None else 1 / 7200)
    try:
        await put_pages(store, st, pages)
        await store.redis.hset(store.control_key, "budget_per_s", "0.02")
        inputs = await load_inputs(store, st)
        assert inputs.pages == 40 and inputs.estimated == 0 and inputs.unusable == 0
        out = plan(inputs, [0.002, 0.1, 0.005])
    finally:
        await store.redis.delete(*await store.redis.keys(f"{st.key_prefix}:*"))
        await store.close()
    assert [r["budget_per_s"] for r in out["rows"]] == [0.002, 0.005, 0.02, 0.1]
    assert [r["current"] for r in out["rows"]] == [False, False, True, False]
    assert [r["requested"] for r in out["rows"]] == [True, True, False, True]
    assert out["current"]["budget_per_s"] == 0.02 and out["budget_per_s"] == 0.02
    assert out["budget_source"].startswith("control")
    accs = [r["accuracy"] for r in out["rows"]]
    assert accs == sorted(accs) and 0 < accs[0] < accs[-1] < 1
    for r in out["rows"]:
        acc, lam = eq5_by_hand(mu, delta, r["budget_per_s"])
        assert r["optimum_accuracy"] == pytest.approx(acc, rel=1e-9), r
        assert r["multiplier"] == pytest.approx(lam, rel=1e-7), r
        # 40 pages, six round-robin periods: a few points of Monte Carlo error
        assert acc - 0.08 < r["accuracy"] < acc + 0.03, r
    # a small budget leaves the least valuable pages out of the optimum
    assert out["rows"][0]["pages_crawled"] < 40 == out["rows"][-1]["pages_crawled"]


def simulate_threshold_policy(alpha: float, beta: float, gamma: float, iota: float,
                              cycles: int, rng: random.Random) -> tuple[float, float]:
    """Fresh fraction and crawl rate of one page crawled whenever its effective elapsed time
    ``tau_eff = t + beta * (signals since the crawl)`` reaches ``iota`` (paper 004 Sec. 3):
    unsignalled changes at rate ``alpha``, signals at rate ``gamma`` of which a share
    ``nu/gamma = e^{-alpha beta}`` are false (they do not change the page). A page whose
    threshold is infinite is never crawled: in the long run it is never fresh."""
    if math.isinf(iota):
        return 0.0, 0.0
    p_false = math.exp(-alpha * beta) if gamma > 0 else 1.0
    total_rate = alpha + gamma
    fresh = length = 0.0
    for _ in range(cycles):
        t, n, first_change = 0.0, 0, math.inf
        while True:
            dt = rng.expovariate(total_rate)
            if t + dt + beta * n >= iota:  # reaches the threshold before the next event
                t = iota - beta * n
                break
            t += dt
            if rng.random() < alpha / total_rate:
                first_change = min(first_change, t)
            else:
                n += 1
                if rng.random() >= p_false:
                    first_change = min(first_change, t)
                if beta * n >= iota - t:
                    break
        fresh += min(first_change, t)
        length += t
    return fresh / length, cycles / length


async def test_plan_with_estimated_signal_parameters_matches_a_simulation(
    redis_url: str,
) -> None:
    """Pages whose estimator records (written by the worker's own Estimation) give them
    signals: the planner's accuracy at a budget equals, within Monte Carlo error, the
    freshness of the threshold policy simulated event by event, and the simulated crawl
    rates add up to the budget."""
    st = settings_for(redis_url)
    store = Store.from_url(redis_url, st.key_prefix)
    rng = random.Random(11)
    est = Estimation()
    pages = []
    for i, (rate, recall, imp) in enumerate([(1 / 1800, 0.8, 1.0), (1 / 7200, 0.5, 3.0),
                                             (1 / 900, 0.9, 0.5), (1 / 3600, 0.3, 2.0)]):
        record: str | None = None
        t = 1_000_000.0
        for _ in range(60):
            t += HOUR
            changes = 0
            clock = rng.expovariate(rate)
            while clock < HOUR:
                changes += 1
                clock += rng.expovariate(rate)
            signalled = sum(rng.random() < recall for _ in range(changes))
            false = int(rng.random() < 0.2)
            (record,) = est.observe([Observation(record, HOUR, (0, signalled + false, 0, 0, 0),
                                                 changes > 0, t)])
        pages.append((f"s{i}.org", f"https://s{i}.org/x", PageState(importance=imp,
                      last_crawl_s=t), record))
    budget = 4 / 3600
    try:
        await put_pages(store, st, pages)
        inputs = await load_inputs(store, st)
        out = plan(inputs, [budget])
    finally:
        await store.redis.delete(*await store.redis.keys(f"{st.key_prefix}:*"))
        await store.close()
    assert inputs.estimated == 4 and (inputs.gamma_per_s > 0).all()
    row = next(r for r in out["rows"] if r["budget_per_s"] == budget)
    # the thresholds of that optimum, simulated (not the w/psi formulas)
    sol = optimal_thresholds(inputs.mu, inputs.alpha_per_s, inputs.beta_s, inputs.gamma_per_s,
                             budget)
    sim_rng = random.Random(5)
    fresh, rates = [], []
    for a, b, g, iota in zip(inputs.alpha_per_s, inputs.beta_s, inputs.gamma_per_s,
                             sol.thresholds, strict=True):
        f, r = simulate_threshold_policy(float(a), float(b), float(g), float(iota), 20_000,
                                         sim_rng)
        fresh.append(f)
        rates.append(r)
    simulated = float(np.dot(inputs.mu, fresh) / inputs.mu.sum())
    # 20k cycles per page: the standard error of each fresh fraction is below 0.004
    assert row["optimum_accuracy"] == pytest.approx(simulated, abs=0.01)
    assert sum(rates) == pytest.approx(budget, rel=0.02)
    # the optimum may leave a page out (an infinite threshold); at least three are crawled
    crawled = int(np.isfinite(sol.thresholds).sum())
    assert crawled >= 3 and row["pages_crawled"] >= 3
    assert row["multiplier"] == pytest.approx(sol.multiplier)
    # 60 intervals per page: the posterior worlds keep the pages near their own estimates,
    # so Algorithm 1 simulated gets close to the optimum
    assert row["accuracy"] == pytest.approx(row["optimum_accuracy"], abs=0.08)


async def test_empty_catalogue_and_bad_budget(redis_url: str) -> None:
    st = settings_for(redis_url)
    store = Store.from_url(redis_url, st.key_prefix)
    try:
        inputs = await load_inputs(store, st)
    finally:
        await store.close()
    out = plan(inputs, [1.0])
    assert out["pages"] == 0 and out["rows"][0]["accuracy"] is None
    assert out["current"]["budget_per_s"] == st.budget_per_s
    assert out["budget_source"].startswith("settings")
    with pytest.raises(ValueError, match="budget"):
        plan(inputs, [0.0])


async def test_t_delay_is_the_workers_after_they_stopped_and_the_controls_first(
        redis_url: str) -> None:
    """The ping rule's t_delay the plan simulates: settings without any worker entry; the
    newest shard entry's (a stopped worker's too: its entry stays) over the settings; the
    control's over both."""
    st = settings_for(redis_url, t_delay_s=60.0)
    store = Store.from_url(redis_url, st.key_prefix)
    try:
        assert (await load_inputs(store, st)).t_delay_s == 60.0
        now = await store.server_time()
        await store.put_shards({0: {"ts": now - 600, "t_delay_s": 7.0, "ready": True},
                                1: {"ts": now - 300, "t_delay_s": 2.0, "ready": True}})
        assert (await load_inputs(store, st)).t_delay_s == 2.0
        await store.redis.hset(store.control_key, "t_delay_s", "30")
        inputs = await load_inputs(store, st)
        assert inputs.t_delay_s == 30.0 and plan(inputs, [1.0])["t_delay_s"] == 30.0
    finally:
        await store.redis.delete(*await store.redis.keys(f"{st.key_prefix}:*"))
        await store.close()
