"""The planner's likelihood of stored pages (streams/worker/plan.py ``likelihood_of``): what
it reads of each estimator record.  Logic only: the values are built here, no service."""

from __future__ import annotations

import numpy as np
import pytest

from streams.estimates.estimation import Estimation, Observation
from streams.estimates.record import EstimatorRecord
from streams.store.page_record import PageState
from streams.worker.plan import likelihood_of


def test_the_likelihood_of_stored_pages_keeps_the_intervals_whose_signals_are_unknown() -> None:
    """A page with imported intervals (signals unknown) and a page crawled live, both pinged
    after: the planner's likelihood carries each record's unknown block, and the signal
    rates count the known time only."""
    est = Estimation()
    values, states = [], []
    for imported in (True, False):
        record: str | None = None
        t = 1e9
        for k in range(12):
            t += 600.0
            live = k >= 8  # the last four intervals: live, one push ping each
            (record,) = est.observe([Observation(record, 600.0, (0, 1 if live else 0, 0, 0, 0),
                                                 k % 3 == 0, t,
                                                 signals_known=live or not imported)])
        assert record is not None
        values.append(PageState(last_crawl_s=t).encode(record))
        states.append(EstimatorRecord.decode(record).state)
    lik = likelihood_of(values)
    assert lik.usable.all()
    np.testing.assert_allclose(lik.unknown, [states[0].unknown, states[1].unknown], rtol=1e-6)
    assert lik.unknown[0, 0] == pytest.approx(8 * 600.0, rel=1e-6) and lik.unknown[1, 0] == 0
    # four push signals: over the 2400 s of known time, over all 7200 s of the live page
    np.testing.assert_allclose(lik.gamma[:, 1], [4 / 2400.0, 4 / 7200.0], rtol=1e-6)
