"""The simulated plan (models/plan.py, streams/worker/plan.py's plan): Algorithm 1 on the
worker's engine, in worlds drawn from the estimates' posterior.  Logic only: the inputs are
built here, no service."""

from __future__ import annotations

import numpy as np
import pytest

from models.plan import (
    PageLikelihood,
    fit_prior,
    posterior_world,
    simulate_budget,
)
from models.policies import optimal_thresholds
from streams.worker.plan import PlanInputs, plan

TAU = 10.0  # the observed crawl interval (s)


def observed(true_alpha: np.ndarray, n: int, rng: np.random.Generator
             ) -> tuple[np.ndarray, PageLikelihood]:
    """``n`` crawl intervals of ``TAU`` per page without signals (one source group that
    never signals), changed with probability ``1 - e^{-alpha TAU}``; the point estimate
    counts a fifth of a change in one more interval (after a few crawls it is noisy and,
    like the worker's after a short run, optimistic: slow pages look slower)."""
    m = true_alpha.size
    changed = rng.uniform(size=(m, n)) < -np.expm1(-true_alpha[:, None] * TAU)
    c = changed.sum(axis=1)
    est = -np.log1p(-(c + 0.2) / (n + 1.0)) / TAU
    ring = np.zeros((m, n, 3))
    for i in range(m):
        for j in range(int(c[i])):
            ring[i, j] = (TAU, 0.0, 1.0)
    lin = np.stack([(n - c) * TAU, np.zeros(m)], axis=1)
    totals = np.stack([np.full(m, n * TAU), np.zeros(m)], axis=1)
    theta = np.stack([est, np.full(m, np.log(2.0))], axis=1)
    lik = PageLikelihood(lin, ring, np.zeros((m, 2, 2)), np.zeros((m, 2)), totals, theta,
                         np.zeros((m, 1)), np.ones(m, dtype=bool))
    return est, lik


def inputs_of(mu: np.ndarray, est: np.ndarray, lik: PageLikelihood, budget: float,
              host_rate: float = np.inf) -> PlanInputs:
    m = mu.size
    return PlanInputs(mu, est, np.zeros(m), np.zeros(m), np.zeros(m, dtype=np.int64),
                      np.array([host_rate]), lik, 0.0, m, 0, budget, "settings", False)


def test_simulation_tracks_the_optimum_and_feels_host_limits() -> None:
    """With the world its own parameters and no host limit, Algorithm 1 on the engine is
    close to the continuous optimum (paper 004 Sec. 6.4); one host limited to a quarter of
    the budget gets what a quarter of the budget gets without the limit."""
    rng = np.random.default_rng(2)
    m = 200
    mu, delta = rng.uniform(0.1, 1.0, m), rng.uniform(0.01, 0.1, m)
    zeros = np.zeros(m)
    host = np.zeros(m, dtype=np.int64)
    free = simulate_budget(mu, delta, zeros, zeros, budget_per_s=5.0, host=host,
                           host_rate_per_s=np.array([np.inf]), cycles=20)
    opt = optimal_thresholds(mu, delta, zeros, zeros, 5.0).accuracy
    assert free.accuracy == pytest.approx(opt, abs=0.02)
    capped = simulate_budget(mu, delta, zeros, zeros, budget_per_s=5.0, host=host,
                             host_rate_per_s=np.array([1.25]), cycles=20)
    quarter = simulate_budget(mu, delta, zeros, zeros, budget_per_s=1.25, host=host,
                              host_rate_per_s=np.array([np.inf]), cycles=5)
    assert capped.accuracy < free.accuracy - 0.2
    # (at most: the host's tokens come back between two of the budget's slots)
    assert quarter.accuracy - 0.05 < capped.accuracy <= quarter.accuracy + 0.01
    # a uniform half of the pages with half the budget: the same accuracy
    half = np.sort(rng.choice(m, m // 2, replace=False))
    sampled = simulate_budget(mu[half], delta[half], zeros[half], zeros[half],
                              budget_per_s=5.0, host=host[half],
                              host_rate_per_s=np.array([np.inf]), share=0.5, cycles=20)
    assert sampled.accuracy == pytest.approx(opt, abs=0.04)


def test_fitted_prior_finds_the_true_rates_behind_noisy_estimates() -> None:
    """Pages of two kinds (rates 0.005 and 0.2 per s) seen 30 times each: the prior fitted
    to their observations puts most of its weight near the two true rates, and a posterior
    world gives most pages their own kind's rate."""
    rng = np.random.default_rng(3)
    true = np.where(rng.uniform(size=200) < 0.5, 0.005, 0.2)
    _, lik = observed(true, 30, rng)
    prior = fit_prior(lik, rng)
    a = prior.atoms[:, 0]
    near = (np.abs(np.log(a / 0.005)) < np.log(2.0)) | (np.abs(np.log(a / 0.2)) < np.log(2.0))
    assert prior.weights[near].sum() > 0.8
    delta, _, _ = posterior_world(lik, prior, (np.zeros(200),) * 3, rng)
    right = np.abs(np.log(delta / true)) < np.log(2.0)
    assert right.mean() > 0.85


def test_plan_from_a_few_crawls_predicts_what_the_estimates_achieve() -> None:
    """After three crawls per page the point estimates are noisy.  Algorithm 1 ranking
    pages by them in the true world (what the worker will achieve) is well below the
    estimates taken as the truth (the continuous optimum on them, and the simulation in a
    world made of them); the plan, simulating worlds drawn from the posterior, predicts it
    (mean error over three catalogues within 3 points; the optimum's above 5)."""
    plan_err, opt_err, point_err = [], [], []
    for seed in (4, 5, 6):
        rng = np.random.default_rng(seed)
        m, budget = 300, 3.0
        mu = rng.uniform(0.0, 1.0, m)
        true = np.exp(rng.uniform(np.log(0.003), np.log(0.3), m))
        est, lik = observed(true, 3, rng)
        zeros = np.zeros(m)
        host = np.zeros(m, dtype=np.int64)
        achieved = np.mean([
            simulate_budget(mu, est, zeros, zeros, budget_per_s=budget, host=host,
                            host_rate_per_s=np.array([np.inf]), world=(true, zeros, zeros),
                            seed=s).accuracy for s in range(3)])
        out = plan(inputs_of(mu, est, lik, budget), [budget])
        assert "posterior" in out["source"]
        row = out["current"]
        point = simulate_budget(mu, est, zeros, zeros, budget_per_s=budget, host=host,
                                host_rate_per_s=np.array([np.inf])).accuracy
        plan_err.append(row["accuracy"] - achieved)
        opt_err.append(row["optimum_accuracy"] - achieved)
        point_err.append(point - achieved)
    assert np.mean(opt_err) > 0.05 and np.mean(point_err) > 0.05
    assert abs(np.mean(plan_err)) < 0.03
    assert max(abs(e) for e in plan_err) < 0.06


def test_intervals_with_signals_unknown_inform_the_change_rate_only() -> None:
    """A page known only from intervals with signals unknown: every atom of one change rate
    ``alpha + gamma*(1 - e^-kappa)`` has one likelihood, whatever the split into signalled
    and unsignalled changes, and it is ``-U*Delta + w log(1 - e^{-T*Delta})``."""
    z = np.zeros((1, 2))
    unknown = np.array([[5000.0, 4000.0, 7.0, 50.0]])  # time, unchanged, (w, T)
    lik = PageLikelihood(z, np.zeros((1, 0, 3)), np.zeros((1, 2, 2)), np.zeros((1, 2)), z, z,
                         np.zeros((1, 1)), np.ones(1, dtype=bool), unknown)
    atoms = []
    for kappa, gamma in ((0.1, 0.002), (2.0, 0.001), (0.5, 0.0)):
        for delta in (0.003, 0.01):
            atoms.append((delta - gamma * -np.expm1(-kappa), kappa, gamma))
    ll = lik.log_likelihood(np.array(atoms))[0]
    # the signals' Poisson term (no signal in the recorded time, at least a second) aside
    ll = ll + np.array([a[2] for a in atoms]) * 1.0
    for k, delta in enumerate((0.003, 0.01) * 3):
        want = -4000.0 * delta + 7.0 * np.log(-np.expm1(-50.0 * delta))
        assert ll[k] == pytest.approx(want, rel=1e-12)
