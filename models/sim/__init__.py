"""Simulator of a Poisson web with noisy, delayed pings (paper 004 Sec. 6, App. B-D, F).

* :mod:`.world` - page parameters (synthetic Sec. 6.1, semi-synthetic Sec. 6.7, hosts).
* :mod:`.events` - change and ping processes, ping lag (App. C).
* :mod:`.policies` - Algorithm 1 variants over the decision engine's
  :class:`models.decision.core.ShardBook`.
* :mod:`.peers` - LDS and the peers (Nutch, StormCrawler, round robin).
* :mod:`.engine` - the slot loop (budget over time, host limits) and accuracy.

Pure: randomness comes from a :class:`numpy.random.Generator` passed in; no clock, no I/O.
"""

from models.sim.engine import Budget, RunResult, accuracy, accuracy_curve, crawl_rates, run
from models.sim.events import Events, simulate_events
from models.sim.peers import NutchAdaptive, RoundRobin, ScheduledPolicy, StormCrawlerAdaptive
from models.sim.policies import (
    POLICY_NAMES,
    Algorithm1,
    EstimatingAlgorithm1,
    algorithm1,
    value_params,
)
from models.sim.world import World, assign_hosts, corrupt, semi_synthetic_world, synthetic_world

__all__ = [
    "POLICY_NAMES",
    "Algorithm1",
    "Budget",
    "EstimatingAlgorithm1",
    "Events",
    "NutchAdaptive",
    "RoundRobin",
    "RunResult",
    "ScheduledPolicy",
    "StormCrawlerAdaptive",
    "World",
    "accuracy",
    "accuracy_curve",
    "algorithm1",
    "assign_hosts",
    "corrupt",
    "crawl_rates",
    "run",
    "semi_synthetic_world",
    "simulate_events",
    "synthetic_world",
    "value_params",
]
