"""A recorded history with its pings (models/sim/trace_history.py): the crawls it becomes,
and what the replay's learner takes from them (``--learn-days`` with pings, as ``recrawl
import --ping-log``)."""

from __future__ import annotations

import numpy as np
from test_trace import DAY_S, _poisson_trace

from models.estimators import batch_result
from models.sim.trace import OnlineRates, average_rates, ping_history_crawls


def test_ping_history_crawls_crawl_at_each_ping_and_on_the_change_gap_grid() -> None:
    # two changes in (0, 10]: grid period 10/3; a ping before, inside and after the window
    times, changed, n = ping_history_crawls(np.array([1.0, 5.0]),
                                             np.array([-1.0, 1.5, 7.0, 12.0]), 0.0, 10.0)
    np.testing.assert_allclose(times, [1.5, 10 / 3, 20 / 3, 7.0, 10.0])
    assert changed.tolist() == [True, False, True, False, False]
    assert n.tolist() == [1, 0, 0, 1, 0]
    # no change and no ping: one interval over the window
    times, changed, n = ping_history_crawls(np.zeros(0), np.zeros(0), 2.0, 4.0)
    assert times.tolist() == [4.0] and changed.tolist() == [False] and n.tolist() == [0]


def test_an_import_with_a_ping_log_teaches_the_pings_quality() -> None:
    """With the learn window's pings recorded (``recrawl import --ping-log``), pages whose
    every change is pinged soon after are learned as announced (high recall), pages whose
    pings are all false as unannounced; without the log both stay at the prior's split."""
    tr = _poisson_trace(7, 60, 50.0, log_median=1.0)
    upto = 40.0
    rng = np.random.default_rng(8)
    pp: list[np.ndarray] = []
    pt: list[np.ndarray] = []
    for i in range(tr.m):
        c = tr.changes_of(i)
        if i % 2 == 0:  # every change pinged a little later
            t = c + rng.exponential(0.01, c.size)
        else:  # pings at random, as often as changes
            t = rng.uniform(0.0, tr.horizon, c.size)
        pp.append(np.full(t.size, i))
        pt.append(t)
    pings = (np.concatenate(pp).astype(np.int64), np.concatenate(pt))
    logged, unlogged = OnlineRates(tr.m, use_pings=True), OnlineRates(tr.m, use_pings=True)
    logged.learn_complete(tr, upto, 1.0 / DAY_S, pings=pings)
    unlogged.learn_complete(tr, upto, 1.0 / DAY_S)
    assert np.all(unlogged.state.totals[:, 1:] == 0.0)  # signals unknown without the log
    assert logged.state.unknown[:, 0].max() == 0.0
    busy = np.array([tr.changes_of(i)[tr.changes_of(i) <= upto].size >= 20
                     for i in range(tr.m)])
    even = (np.arange(tr.m) % 2 == 0) & busy
    odd = (np.arange(tr.m) % 2 == 1) & busy
    assert even.sum() >= 5 and odd.sum() >= 5
    rec_logged = batch_result(logged.est, logged.state).recall[:, 0]
    rec_unlogged = batch_result(unlogged.est, unlogged.state).recall[:, 0]
    assert np.median(rec_logged[even]) > 0.8 > np.median(rec_unlogged[even])
    assert np.median(rec_logged[odd]) < 0.3
    # the change rate is still the history's
    delta = batch_result(logged.est, logged.state).change_rate_per_s * DAY_S
    want = average_rates(tr, 0.0, upto)
    np.testing.assert_allclose(np.median(delta[busy] / want[busy]), 1.0, atol=0.2)
