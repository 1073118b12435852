"""Three capabilities beyond paper 004: uncertain estimates, several ping sources, a floor.

* **Uncertainty-aware Algorithm 1** (:class:`UncertainAlgorithm1`): Algorithm 1 with
  online App. E estimates (:class:`~models.sim.policies.EstimatingAlgorithm1`) that ranks
  pages by the *expected* crawl value under the estimate's uncertainty (``"expected"``),
  or by the crawl value at a conservative (upper-quantile) change rate
  (``"conservative"``, paper 003 Sec. 5.3).
* **Several ping sources per page** (:class:`SourceWorld`, :func:`two_source_world`,
  :func:`simulate_source_events`, :func:`multi_source_value`,
  :class:`MultiSourceAlgorithm1`, :func:`source_policy`): each source ``s`` has its own
  recall ``lam_s``, false rate ``nu_s``, lag, and time-equivalent ``beta_s``.
* **Longest-interval floor** (:class:`FloorPolicy`): a wrapper that spends a slot on any
  page whose last crawl is older than a floor ``F`` (the streaming scheduler's floor,
  ``streams/scheduler/``), otherwise asks the wrapped policy.

The several-source model (which pings move the origin by how much, and why Theorem 1's
value with pooled parameters is not the exact one) is derived in :mod:`models.sim.sources`.

The three live in their own modules: :mod:`models.sim.uncertain`,
:mod:`models.sim.sources` and :mod:`models.sim.floor`; every name is still importable from
here.

Pure: numpy and scipy; randomness from a :class:`numpy.random.Generator` passed in.

References
----------
[004] R. Busa-Fekete, J. Zimmert, A. György et al., "A Scalable Crawling Algorithm
Utilizing Noisy Change-Indicating Signals": Sec. 3 (eqs. 1-2, footnote 2), Sec. 4
(Theorem 1 and the remark on abandoned pages after eq. 5), Algorithm 1, App. A (Lemmas
3-4, eqs. 6-7), App. C (ping rules), App. E (estimation).
[003] The change-rate estimation paper: Sec. 5.3 ("the chance of being very wrong about
Delta": very stale pages while the estimate converges).
"""

from __future__ import annotations

from models.sim.floor import FloorPolicy as FloorPolicy
from models.sim.sources import SOURCE_POLICIES as SOURCE_POLICIES
from models.sim.sources import ExactSourceAlgorithm1 as ExactSourceAlgorithm1
from models.sim.sources import MultiSourceAlgorithm1 as MultiSourceAlgorithm1
from models.sim.sources import SourceEvents as SourceEvents
from models.sim.sources import SourceWorld as SourceWorld
from models.sim.sources import multi_source_value as multi_source_value
from models.sim.sources import pooled_params as pooled_params
from models.sim.sources import simulate_source_events as simulate_source_events
from models.sim.sources import source_policy as source_policy
from models.sim.sources import two_source_world as two_source_world
from models.sim.uncertain import UncertainAlgorithm1 as UncertainAlgorithm1
from models.sim.uncertain import gauss_hermite_lognormal as gauss_hermite_lognormal

__all__ = [
    "SOURCE_POLICIES",
    "ExactSourceAlgorithm1",
    "FloorPolicy",
    "MultiSourceAlgorithm1",
    "SourceEvents",
    "SourceWorld",
    "UncertainAlgorithm1",
    "gauss_hermite_lognormal",
    "multi_source_value",
    "pooled_params",
    "simulate_source_events",
    "source_policy",
    "two_source_world",
]
