"""Stored estimator records of varied histories, for the parameter tests (unit and
integration)."""

from __future__ import annotations

from streams.estimates.estimation import Estimation, Observation


def estimator_records() -> list[str]:
    """50 records: 40 pages after one observed interval each, 10 of them after a second."""
    est = Estimation()
    obs = [Observation(None, 600.0 * (1 + i % 7), (i % 3, 0, i % 2, 0, 1 if i % 5 == 0 else 0),
                       i % 3 != 0, 1e9 + i) for i in range(40)]
    recs = est.observe(obs)
    # a second interval for some: other estimates
    recs += est.observe([Observation(r, 1800.0, (0, 1, 0, 0, 0), True, 2e9) for r in recs[:10]])
    return recs
