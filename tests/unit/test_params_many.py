"""A page's parameters (streams/estimates/params.py): the formulas of the module docstring
on one page, and the stored values read on arrays (``page_params_many``, the rebuild's and
the batches' path) give what one page read at a time (``page_params``) gives.  No service."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from estimator_records import estimator_records

from models.estimators import conservative_change_rate
from streams.estimates.estimation import GROUP_OF
from streams.estimates.params import page_params, page_params_many
from streams.estimates.record import Estimates
from streams.events.records import SOURCES
from streams.settings import Settings
from streams.store.page_record import PageState, estimator_part


@pytest.mark.parametrize("quantile", [0.5, 0.9])
def test_vectorised_parameters_equal_page_params(quantile: float) -> None:
    settings = Settings(estimate_quantile=quantile)
    rng = random.Random(7)
    recs = estimator_records()
    values: list[str | bytes] = []
    ests: list[str | None] = []
    states: list[PageState] = []
    for _ in range(600):
        crawled = rng.random() < 0.7
        st = PageState(
            importance=rng.choice([1.0, 0.5, 3.25, 1e12, 0.0]),
            prior_change_rate_per_s=rng.choice([None, 1e-5, 0.0, 2.5e-3]),
            last_crawl_s=1.7e9 + rng.random() * 1e5 if crawled else 0.0,
            signals=tuple(rng.choice([0, 0, 1, 3]) for _ in SOURCES),
            # 0 to 8 ping fingerprints, with and without prior and counts: values
            # grouped by shape byte and length
            seen=tuple(rng.randrange(1, 1 << 48) for _ in range(rng.choice([0, 0, 1, 2, 8]))),
        )
        # an unreadable tail (not an estimator record) reads as none on both paths
        est = rng.choice([None, None, *recs, "garbage", "1,2,3|xx", ""])
        # as stored (float32 importance and prior), the estimator record after the page
        # record
        values.append(st.encode(est or None))
        states.append(PageState.decode(values[-1]))
        ests.append(est)
    many = page_params_many(values, settings)
    assert many is not None
    for i, (st, est) in enumerate(zip(states, ests, strict=True)):
        one = page_params(st, est, settings)
        got = (many.alpha[i], many.beta[i], many.gamma[i], many.delta[i], many.origin[i],
               many.importance[i])
        want = (one.alpha_per_s, one.beta_s, one.gamma_per_s, one.change_rate_per_s,
                one.origin_s, one.mu)
        for g, w in zip(got, want, strict=True):
            assert g == pytest.approx(w, rel=1e-12, abs=1e-300) or (math.isnan(g)
                                                                    and math.isnan(w))
        assert list(many.src_beta[i]) == pytest.approx(list(one.source_beta_s), rel=1e-12)
        assert bool(many.estimated[i]) == one.estimated
        assert bool(many.crawled[i]) == st.crawled
        assert many.max_value[i] == pytest.approx(one.max_value(), rel=1e-12)


def test_an_unreadable_record_reads_as_none_on_arrays() -> None:
    """A page value whose tail is no readable estimator record (another version byte, a
    wrong length) gives its page record and no estimates, as page_params reads it, and the
    batch stays on arrays."""
    settings = Settings()
    recs = estimator_records()
    values: list[str | bytes] = []
    for i, rec in enumerate(recs[:12]):
        st = PageState(1.0 + i, None, 1.7e9 + i, (i % 2, 0, 1, 0, 0))
        tail = rec if i % 2 else "\x02" + rec[1:] + "xyz"[: i % 4]  # readable, or not
        values.append(st.encode(tail))
    many = page_params_many(values, settings)
    assert many is not None
    for i, v in enumerate(values):
        one = page_params(PageState.decode(v), estimator_part(v), settings)
        assert one.estimated == bool(i % 2) == bool(many.estimated[i])
        assert (many.alpha[i], many.beta[i], many.origin[i], many.importance[i]) == (
            pytest.approx(one.alpha_per_s, rel=1e-12), pytest.approx(one.beta_s, rel=1e-12),
            pytest.approx(one.origin_s, rel=1e-12), pytest.approx(one.mu, rel=1e-12))


def test_a_value_that_is_no_page_record_falls_back() -> None:
    """One value that is no page record (text, an empty value, another first byte, a shape
    byte with a bit over bit 5 set or counting over 8 fingerprints) sends the whole batch
    page by page, where it is counted."""
    good = PageState(2.0, None, 1.7e9, (1, 0, 0, 0, 0)).encode()
    over = good[:1] + bytes([0x29]) + good[2:] + bytes(54)
    high = good[:1] + bytes([good[1] | 0x40]) + good[2:]
    for bad in ["2.0||1700000000.0|1,0,0,0,0", "", b"\xa0" + good[1:], over, high]:
        assert page_params_many([good, bad], Settings()) is None
        with pytest.raises(ValueError, match="no page record"):
            PageState.decode(bad)
    ok = page_params_many([good, good[:6]], Settings())
    assert ok is not None and np.isfinite(ok.max_value).all()
    assert list(ok.importance) == [2.0, 2.0] and list(ok.last_crawl_s) == [1.7e9, 0.0]
    assert page_params_many([], Settings()) is not None


def test_page_params_are_the_formulas_of_paper_004() -> None:
    """One page, prior and estimated, against the formulas written out here (module
    docstring of streams/estimates/params.py; paper 004 Sec. 3 for the merged source)."""
    s = Settings(estimate_quantile=0.5)
    st = PageState(2.0, 1e-4, 1.7e9, (1, 0, 2, 0, 1))
    p = page_params(st, None, s)
    beta = -math.log(1.0 - s.default_source_precision) / 1e-4
    assert (p.alpha_per_s, p.gamma_per_s, p.change_rate_per_s, p.mu) == (1e-4, 0.0, 1e-4, 2.0)
    assert p.beta_s == pytest.approx(beta, rel=1e-12) and not p.estimated
    assert p.origin_s == pytest.approx(1.7e9 - 4 * beta, rel=1e-12)
    assert page_params(PageState(2.0, None, 0.0, (3, 0, 0, 0, 0)), None, s).origin_s == 0.0
    assert page_params(PageState(2.0, None, 5.0), None, s).alpha_per_s == (
        s.default_change_rate_per_s)

    alpha, kappa, gamma = 2e-5, (0.5, 2.0, 1.0), (3e-6, 1e-6, 0.0)
    est = Estimates(alpha, 1e-6, 2.6e-5, 1e-6, gamma, kappa, (0.9,) * 3, (0.0,) * 3,
                    (0.5,) * 3, (0.0,) * 3, 4)
    p = page_params(st, est, s)
    betas = [k / alpha for k in kappa]
    nu = sum(g * math.exp(-alpha * b) for g, b in zip(gamma, betas, strict=True))
    pooled = math.log(sum(gamma) / nu) / alpha
    assert p.estimated and p.alpha_per_s == alpha and p.change_rate_per_s == 2.6e-5
    assert p.gamma_per_s == pytest.approx(sum(gamma), rel=1e-12)
    assert p.beta_s == pytest.approx(pooled, rel=1e-12)
    src = [betas[g] for g in GROUP_OF]
    assert list(p.source_beta_s) == pytest.approx(src, rel=1e-12)
    assert p.origin_s == pytest.approx(
        1.7e9 - sum(b * n for b, n in zip(src, st.signals, strict=True)), rel=1e-12)
    delta = alpha + sum(gamma) * (1.0 - math.exp(-alpha * pooled))
    assert p.max_value() == pytest.approx(2.0 / delta, rel=1e-12)
    # at an upper quantile: alpha from conservative_change_rate (paper 003 Sec. 5.3), kappa
    # kept, so every beta scales by the ratio
    q = page_params(st, est, Settings(estimate_quantile=0.9))
    a9 = float(conservative_change_rate(alpha, 1e-6, 0.9))
    assert q.alpha_per_s == pytest.approx(a9, rel=1e-12) and a9 > alpha
    assert list(q.source_beta_s) == pytest.approx([b * alpha / a9 for b in src], rel=1e-12)


def test_an_upper_quantile_of_a_host_posterior_mean_is_that_posteriors() -> None:
    """Where a page's ``alpha`` is its posterior mean under its host's Gamma prior, an upper
    ``estimate_quantile`` is that posterior's quantile.  A page that never changed in ``U``
    seconds has exactly the posterior ``Gamma(a, b + U)`` under the host's ``Gamma(a, b)``
    (models.estimators.host_prior), so its 0.9 quantile is scipy's; the page's own standard
    error (the spread around its own mode, under no host prior) does not enter.  One page
    and the arrays give the same."""
    from scipy.special import digamma
    from scipy.stats import gamma as gamma_dist

    from models.estimators.host_prior import host_priors
    from streams.estimates.estimation import Estimation, Observation, estimates_of

    n, shape, mean = 40.0, 0.7, 2e-5  # the host: Gamma(0.7, rate 0.7 / 2e-5 s)
    sums = (n, n * mean, n * float(digamma(shape) - math.log(shape / mean)))
    (a,), (b,), _ = host_priors(*(np.array([x]) for x in sums))
    assert a == pytest.approx(shape, rel=1e-9) and b == pytest.approx(shape / mean, rel=1e-9)
    unchanged_s = 3 * 86400.0
    (rec,) = Estimation(host_min_pages=20).observe([Observation(
        None, unchanged_s, (0,) * len(SOURCES), False, 1.7e9, None, sums)])
    est = estimates_of(rec)
    assert est is not None  # the host's prior is in use: alpha is the posterior mean
    assert est.alpha_per_s == pytest.approx(a / (b + unchanged_s), rel=1e-4)
    st = PageState(1.0, None, 1.7e9, (0,) * len(SOURCES))
    q = 0.9
    want = float(gamma_dist.ppf(q, a, scale=1.0 / (b + unchanged_s)))
    one = page_params(st, rec, Settings(estimate_quantile=q))
    many = page_params_many([st.encode(rec)], Settings(estimate_quantile=q))
    assert many is not None
    assert one.alpha_per_s == pytest.approx(want, rel=1e-4)
    assert many.alpha[0] == pytest.approx(want, rel=1e-4)
    # the median setting keeps the posterior mean
    assert page_params(st, rec, Settings(estimate_quantile=0.5)).alpha_per_s == (
        est.alpha_per_s)
