"""The stream's change-rate estimate against the exact MAP of the same observations.

The stream keeps a bounded record per page (``streams/estimates/record.py``: a ring of
two changed intervals, the representative of older changed intervals, float32 fields) and
re-reads it before every interval; these tests drive it the way the outcomes agent does and
compare its rate with eq. (2) of paper 003 solved on every interval with the same
(scale-free) pseudo-intervals.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models.estimators import GRIMES_FORD, PseudoDatapoints, cho_garcia_molina_mle
from streams.estimates.estimation import Estimation, EstimatorRecord, Observation
from streams.events.records import SOURCES

DAY = 86400.0
NO_SIGNALS = (0,) * len(SOURCES)


def stream_rate(intervals: np.ndarray, changed: np.ndarray,
                prior_rate_per_s: float | None = None) -> float:
    """The rate the stream stores after these intervals, one outcome at a time (the page's
    own prior rate ``prior_rate_per_s`` with each, as the outcomes agent passes it)."""
    est = Estimation()
    record: str | None = None
    t = 1.7e9
    for tau, ch in zip(intervals.tolist(), changed.tolist(), strict=True):
        t += tau
        (record,) = est.observe([Observation(record, tau, NO_SIGNALS, bool(ch), t,
                                             prior_rate_per_s)])
    assert record is not None
    return EstimatorRecord.decode(record, t).estimates.alpha_per_s


def exact_rate(intervals: np.ndarray, changed: np.ndarray) -> float:
    return cho_garcia_molina_mle(intervals[changed], intervals[~changed], pseudo=GRIMES_FORD)


@pytest.mark.parametrize("interval_s", [35.0, 3600.0, DAY])
def test_alternating_history_is_within_ten_percent_of_the_truth(interval_s: float) -> None:
    """200 equal intervals, every second one changed: true rate ln 2 per interval."""
    intervals = np.full(200, interval_s)
    changed = np.arange(200) % 2 == 1
    rate = stream_rate(intervals, changed)
    truth = math.log(2.0) / interval_s
    assert rate == pytest.approx(truth, rel=0.10)
    assert rate == pytest.approx(exact_rate(intervals, changed), rel=0.01)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    log_n=st.floats(0.0, 4.0),
    log_interval=st.floats(math.log(10.0), math.log(30 * DAY)),
    share=st.floats(0.0, 1.0),
    spread=st.sampled_from([0.0, 0.1, 0.3]),
    seed=st.integers(0, 2**32 - 1),
)
def test_stream_estimate_is_the_exact_map_within_one_percent(
    log_n: float, log_interval: float, share: float, spread: float, seed: int
) -> None:
    """1 to 10^4 intervals of 10 s to 30 days (each within a factor ``exp(spread)`` of the
    page's interval, clipped to that range), any share changed."""
    rng = np.random.default_rng(seed)
    n = round(10.0**log_n)
    intervals = np.exp(log_interval + spread * rng.uniform(-1.0, 1.0, n))
    intervals = np.clip(intervals, 10.0, 30 * DAY)
    changed = rng.uniform(size=n) < share
    assert stream_rate(intervals, changed) == pytest.approx(
        exact_rate(intervals, changed), rel=0.01)


@pytest.mark.parametrize("prior_rate_per_s", [1e-5, 1e-3, 0.01])
@pytest.mark.parametrize("interval_s", [2.0, 3600.0])
def test_a_pages_own_prior_rate_centres_its_pseudo_intervals(
    prior_rate_per_s: float, interval_s: float
) -> None:
    """A page given a prior rate r (``pages load``'s ``change_rate_per_s``): the two
    pseudo-intervals alone imply r, whatever the page's crawl interval; the stream's rate is
    the exact MAP under them; with no change seen it stays below r (before, the points
    followed the crawl interval: a page given 0.01/s and crawled every 2 s was believed to
    change 3.5 times as often after 12 unchanged intervals)."""
    k = GRIMES_FORD.scale_for_rate(prior_rate_per_s)
    points = PseudoDatapoints(GRIMES_FORD.changed_interval_s * k,
                              GRIMES_FORD.unchanged_interval_s * k, GRIMES_FORD.weight)
    assert points.prior_rate_per_s == pytest.approx(prior_rate_per_s, rel=1e-12)
    rng = np.random.default_rng(round(interval_s))
    for share in (0.0, 0.3, 1.0):
        intervals = interval_s * rng.uniform(0.5, 1.5, 12)
        changed = rng.uniform(size=12) < share
        rate = stream_rate(intervals, changed, prior_rate_per_s)
        exact = cho_garcia_molina_mle(intervals[changed], intervals[~changed], pseudo=points)
        assert rate == pytest.approx(exact, rel=0.01), share
        if share == 0.0:
            assert rate < prior_rate_per_s
            # the points that follow the crawl interval imply about one change per 2.4
            # intervals: a page given a slower rate is believed slower than with them
            if prior_rate_per_s < GRIMES_FORD.prior_rate_per_s * DAY / intervals.mean():
                assert rate < stream_rate(intervals, changed)
