"""The first contribution of a page to an empty host's prior (``Estimation.host_contributions``):
the E-step's Gamma while the host has no page counted is centred on the page's own estimate,
so it follows the page's time scale as the scale-free pseudo-intervals do, and the host's
incremental EM starts where its pages are."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streams.estimates.estimation import Estimation, EstimatorRecord, Observation

#: six of ten intervals changed (maximum-likelihood rate ln(10/4) per interval)
PATTERN = (True, False, True, True, False, True, False, True, False, True)


def _first_contribution(interval_s: float, n: int = len(PATTERN)) -> tuple[float, float]:
    """The page's own ``alpha`` and the (unsigned) mean of its contribution to a host whose
    sums hold no page, after ``n`` intervals of ``interval_s`` with :data:`PATTERN`."""
    est = Estimation()
    record: str | None = None
    t = 1.0e9
    for changed in PATTERN[:n]:
        t += interval_s
        (record,) = est.observe([Observation(record, interval_s, (0,) * 5, changed, t,
                                             None, (0.0, 0.0, 0.0))])
    rec = EstimatorRecord.decode(record)
    return rec.estimates.alpha_per_s, abs(rec.host[0])


@pytest.mark.parametrize("interval_s", [35.0, 3600.0, 86400.0, 7 * 86400.0])
def test_an_empty_hosts_first_contribution_is_near_the_pages_own_rate(
        interval_s: float) -> None:
    """Ten intervals, six changed (MLE ``ln(10/4)/interval``): the contribution is within a
    factor 2 of the page's own estimate and of the MLE at every time scale, not pulled to
    the daily-scale start rate (1 per 57.5 h) the estimator has before any interval."""
    own, contrib = _first_contribution(interval_s)
    mle = math.log(10 / 4) / interval_s
    assert 0.5 < contrib / own < 2.0
    assert 0.4 < contrib / mle < 2.5


@pytest.mark.parametrize("n", [1, 3, 10])
def test_the_first_contribution_scales_with_the_crawl_interval(n: int) -> None:
    """The same history at 1 h and at 1 day: the contribution scales by 24 (the grid's
    quadrature and the stored float32 aside), as the page's own estimate does."""
    own_h, c_h = _first_contribution(3600.0, n)
    own_d, c_d = _first_contribution(86400.0, n)
    assert own_h / own_d == pytest.approx(24.0, rel=1e-3)
    assert c_h / c_d == pytest.approx(24.0, rel=0.05)
    assert np.isfinite([c_h, c_d]).all()
