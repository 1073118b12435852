"""The empirical-Bayes host prior (models.estimators.host_prior) and its use in the replay."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from models.estimators import (
    BatchSignalState,
    SignalEstimator,
    batch_init,
    batch_result,
    batch_update,
)
from models.estimators.host_prior import (
    GammaPrior,
    HostPriorState,
    fit_gamma,
    fit_host_prior,
    grid_log_likelihood,
    host_prior_update,
    page_posteriors,
)
from models.sim.trace import OnlineRates

DAY = 86400.0


def _crawl(lam: np.ndarray, n_crawls: int, rng: np.random.Generator,
           n_sources: int = 0) -> tuple[SignalEstimator, BatchSignalState]:
    """Crawl pages of true rates ``lam`` (per s) ``n_crawls`` times at random intervals
    (0.2 to 3 days): the incompletely observed Poisson process."""
    est = SignalEstimator(n_sources)
    st = batch_init(est, lam.size)
    for _ in range(n_crawls):
        tau = rng.uniform(0.2, 3.0, lam.size) * DAY
        changed = rng.uniform(size=lam.size) < -np.expm1(-lam * tau)
        sig = rng.poisson(1.0, (lam.size, n_sources)).astype(float) if n_sources else None
        batch_update(est, st, tau, changed, sig)
    return est, st


@pytest.mark.parametrize("shape", [0.4, 1.5, 6.0])
def test_m_step_recovers_a_gamma_from_its_sufficient_statistics(shape: float) -> None:
    x = np.random.default_rng(0).gamma(shape, 1.0 / DAY, 200_000)
    got = fit_gamma(float(x.mean()), float(np.log(x).mean()))
    assert got.shape == pytest.approx(shape, rel=0.02)
    assert got.mean_per_s == pytest.approx(float(x.mean()), rel=1e-9)


@pytest.mark.parametrize(("shape", "mean_per_day"), [(0.6, 1.0), (3.0, 0.2)])
def test_marginal_likelihood_fit_recovers_the_gamma_of_crawled_pages(
        shape: float, mean_per_day: float) -> None:
    rng = np.random.default_rng(1)
    lam = rng.gamma(shape, mean_per_day / shape / DAY, 3000)
    _, st = _crawl(lam, 12, rng)
    got = fit_host_prior(grid_log_likelihood(st))
    assert got.shape == pytest.approx(shape, rel=0.2)
    assert got.mean_per_s * DAY == pytest.approx(mean_per_day, rel=0.1)


@pytest.mark.parametrize("shape", [0.15, 0.7, 3.0])
def test_a_page_that_never_changed_has_the_conjugate_posterior_mean(shape: float) -> None:
    # no changed interval: the posterior is Gamma(a, b + U) exactly, mean a / (b + U),
    # E[log lambda] = digamma(a) - log(b + U); with a small shape much of it is under the grid
    from scipy.special import digamma

    est = SignalEstimator(0)
    st = batch_init(est, 3)
    u = np.array([0.5, 20.0, 400.0]) * DAY
    batch_update(est, st, u, np.zeros(3, bool))
    prior = GammaPrior(shape, shape * 2.0 * DAY)  # mean 1 per 2 days
    got = page_posteriors(grid_log_likelihood(st), prior)
    np.testing.assert_allclose(got.mean_per_s, shape / (prior.rate_s + u), rtol=0.01)
    np.testing.assert_allclose(got.mean_log, digamma(shape) - np.log(prior.rate_s + u),
                               rtol=0.02)


def test_the_grid_likelihood_is_the_interval_likelihood() -> None:
    rng = np.random.default_rng(2)
    lam = np.array([0.5, 2.0, 0.05]) / DAY
    _, st = _crawl(lam, 6, rng, n_sources=1)  # under the ring: every interval kept exactly
    kappa = np.array([[0.3], [1.2], [0.01]])
    got = grid_log_likelihood(st, kappa=kappa)
    for i in range(3):
        np.testing.assert_allclose(got[i], _recorded_loglik(st, i, kappa[i, 0]), rtol=1e-9,
                                   atol=1e-9)


def _recorded_loglik(st: BatchSignalState, i: int, kappa: float) -> np.ndarray:
    """Page ``i``'s log-likelihood at every grid rate from its unchanged sums and its ring,
    term by term (one source)."""
    from models.estimators.host_prior import _GRID
    u = st.unchanged[i]
    want = -_GRID * u[0] - kappa * u[1]
    for j in range(int(st.ring_len[i])):
        t, n, w = st.ring[i, j]
        want = want + w * np.log(-np.expm1(-(_GRID * t + kappa * n)))
    out: np.ndarray = want
    return out


def test_the_hosts_own_prior_estimates_better_than_one_prior_for_both() -> None:
    # two hosts: one of fast pages (about 2 a day), one of slow ones (about 1 a month);
    # each page crawled 4 times about daily: little data per page
    rng = np.random.default_rng(3)
    n = 1500
    host = np.repeat([0, 1], n)
    lam = np.concatenate([rng.gamma(4.0, 2.0 / 4.0, n), rng.gamma(4.0, (1 / 30) / 4.0, n)]) / DAY
    est, st = _crawl(lam, 4, rng)
    ll = grid_log_likelihood(st)
    pooled = page_posteriors(ll, fit_host_prior(ll)).mean_per_s
    per_host = np.empty_like(pooled)
    for h in (0, 1):
        k = host == h
        per_host[k] = page_posteriors(ll[k], fit_host_prior(ll[k])).mean_per_s
    default = batch_result(est, st).change_rate_per_s

    def err(x: np.ndarray) -> float:
        return float(np.mean(np.log(x / lam) ** 2))

    assert err(per_host) < 0.7 * err(pooled)
    assert err(per_host) < 0.7 * err(default)


def test_online_rates_incremental_em_reaches_the_batch_fit() -> None:
    rng = np.random.default_rng(4)
    m = 400
    lam_day = rng.gamma(0.8, 1.0 / 0.8, m)
    learner = OnlineRates(m, use_pings=False)
    assert learner.host_prior(0) is None  # no page crawled yet
    pages = np.arange(m)
    for _ in range(15):
        tau = rng.uniform(0.2, 2.0, m)
        changed = rng.uniform(size=m) < -np.expm1(-lam_day * tau)
        learner.update(pages, tau, changed, np.zeros(m))
    online = learner.host_prior(0)
    assert online is not None
    batch = fit_host_prior(grid_log_likelihood(learner.state))
    assert online.shape == pytest.approx(batch.shape, rel=0.1)
    assert online.mean_per_s == pytest.approx(batch.mean_per_s, rel=0.1)
    # the rates it ranks with are the posterior means under the host's prior
    rates = learner.params()[0]
    want = page_posteriors(grid_log_likelihood(learner.state), online).mean_per_s * DAY
    np.testing.assert_allclose(rates, want, rtol=1e-9)
    glob = OnlineRates(m, use_pings=False, prior="global")
    glob.state = learner.state
    assert not np.allclose(glob.params()[0], rates)


def test_host_prior_update_replaces_a_pages_contribution() -> None:
    one = page_posteriors(np.zeros((2, 217)), GammaPrior(1.0, DAY))
    st = host_prior_update(HostPriorState(), np.zeros(2), np.zeros(2), np.zeros(2), one,
                           GammaPrior(1.0, DAY))
    assert st.n_pages == 2.0
    again = host_prior_update(st, one.mean_per_s, one.mean_log, np.ones(2), one,
                              GammaPrior(1.0, DAY))
    assert again.n_pages == 2.0  # the same pages again: replaced, not added
    assert again.sum_mean == pytest.approx(st.sum_mean)
    assert math.isclose(again.sum_log, st.sum_log)


def test_bad_priors_are_refused() -> None:
    with pytest.raises(ValueError, match="shape"):
        GammaPrior(0.0, 1.0)
    with pytest.raises(ValueError, match="rate_s"):
        GammaPrior(1.0, math.inf)
    with pytest.raises(ValueError, match="loglik"):
        page_posteriors(np.zeros((2, 5)), GammaPrior(1.0, 1.0))
    with pytest.raises(ValueError, match="prior"):
        OnlineRates(3, use_pings=False, prior="local")


def test_online_rates_forget_at_the_half_life_and_a_bad_one_is_refused() -> None:
    from experiments.trace import trace_rows
    from models.sim.trace import trace_from_arrays

    slow = OnlineRates(2, use_pings=False, prior="global", half_life_days=10.0)
    keep = OnlineRates(2, use_pings=False, prior="global")
    pages = np.arange(2)
    for k in range(40):  # 40 daily crawls: changed for 20 days, then quiet for 20
        for L in (slow, keep):
            L.update(pages, np.ones(2), np.full(2, k < 20), np.zeros(2))
    # forgetting: the quiet last 20 days weigh more, so the estimate is lower
    assert slow.params()[0][0] < 0.8 * keep.params()[0][0]
    tr = trace_from_arrays(np.ones(2), [0, 1], [0.0, DAY])
    with pytest.raises(ValueError, match="half-life"):
        trace_rows(tr, [1.0], half_life_days=0.0)


def test_a_loaded_trace_groups_pages_by_host_and_the_replay_keeps_it(tmp_path: object) -> None:
    from pathlib import Path

    from experiments.trace import _load, _save
    from streams.histories.trace import load_trace

    folder = Path(str(tmp_path))
    log = folder / "changes.jsonl"
    lines = [{"url": "https://a.example/x", "time": 1_700_000_000},
             {"url": "https://B.example/y", "time": 1_700_086_400},
             {"url": "https://a.example/z", "time": 1_700_172_800},
             {"url": "not a url", "time": 1_700_172_900}]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    tr = load_trace(log).trace
    assert tr.host is not None
    assert tr.host.tolist() == [0, 1, 0, 2]  # a.example, b.example, a.example, the URL itself
    back, _ = _load(str(_save(tr, folder, None)))
    assert back.host is not None and back.host.tolist() == [0, 1, 0, 2]
    learner = OnlineRates(4, use_pings=False, host=back.host)
    assert learner.n_hosts == 3


def test_online_rates_fit_one_prior_per_host() -> None:
    rng = np.random.default_rng(5)
    n = 300
    host = np.repeat([0, 1], n)
    lam_day = np.concatenate([rng.gamma(4.0, 0.5, n), rng.gamma(4.0, 0.01, n)])  # 2 vs 1/25
    per_host = OnlineRates(2 * n, use_pings=False, host=host)
    one = OnlineRates(2 * n, use_pings=False)
    pages = np.arange(2 * n)
    for _ in range(4):
        tau = rng.uniform(0.5, 1.5, 2 * n)
        changed = rng.uniform(size=2 * n) < -np.expm1(-lam_day * tau)
        for learner in (per_host, one):
            learner.update(pages, tau, changed, np.zeros(2 * n))
    fast, slow = per_host.host_prior(0), per_host.host_prior(1)
    assert fast is not None and slow is not None
    assert fast.mean_per_s > 10 * slow.mean_per_s

    def err(learner: OnlineRates) -> float:
        return float(np.mean(np.log(learner.params()[0] / lam_day) ** 2))

    assert err(per_host) < 0.7 * err(one)


@pytest.mark.parametrize("shape", [100.0, 1000.0, 1e4])
def test_a_narrow_posterior_is_centred_where_its_density_peaks(shape: float) -> None:
    """Narrower than two grid steps, the posterior mean is the Laplace value of the parabola
    through the mode's three grid points: a page without data under a narrow Gamma gets
    the Gamma's mean and ``E[log lambda]`` (wherever the mean falls between grid points)."""
    from scipy.special import digamma

    from models.estimators.host_prior import GRID_POINTS

    means = np.exp(np.linspace(np.log(1e-6), np.log(1e-2), 23))
    post = page_posteriors(np.zeros((means.size, GRID_POINTS)),
                           (np.full(means.size, shape), shape / means))
    np.testing.assert_allclose(post.mean_per_s, means, rtol=0.01)
    np.testing.assert_allclose(post.mean_log, digamma(shape) - np.log(shape / means),
                               atol=0.01)


def test_the_grid_likelihood_counts_intervals_with_signals_unknown_in_delta() -> None:
    """Intervals whose signals were not recorded enter at each grid rate through the page's
    whole change rate ``Delta = lambda + gamma*(1 - e^-kappa)`` (``gamma``: signals over the
    recorded time); one length, so their representative is exact."""
    rng = np.random.default_rng(5)
    est = SignalEstimator(1)
    st = batch_init(est, 2)
    hidden: list[list[tuple[float, bool]]] = [[], []]
    for _ in range(30):
        changed = rng.uniform(size=2) < 0.4
        batch_update(est, st, np.full(2, 3600.0), changed, np.zeros((2, 1)),
                     signals_known=np.zeros(2, dtype=bool))
        for i in range(2):
            hidden[i].append((3600.0, bool(changed[i])))
    for _ in range(5):  # recorded: under the ring
        tau = rng.uniform(0.2, 3.0, 2) * DAY
        batch_update(est, st, tau, rng.uniform(size=2) < 0.5, rng.poisson(1.0, (2, 1)) * 1.0)
    kappa = np.array([[0.3], [1.2]])
    got = grid_log_likelihood(st, kappa=kappa)
    from models.estimators.host_prior import _GRID
    for i in range(2):
        want = _recorded_loglik(st, i, kappa[i, 0])
        gamma = st.totals[i, 1] / (st.totals[i, 0] - 30 * 3600.0)
        delta = _GRID + gamma * -np.expm1(-kappa[i, 0])
        for t, ch in hidden[i]:
            want = want + (np.log(-np.expm1(-t * delta)) if ch else -t * delta)
        np.testing.assert_allclose(got[i], want, rtol=1e-9, atol=1e-9)
