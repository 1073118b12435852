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
  ``streams/scheduler.py``), otherwise asks the wrapped policy.

Several sources: the model
--------------------------
Paper 004 treats one source and notes that "it is straightforward to extend the model to
multiple independent sources of CI signals" (Sec. 3, footnote 2) without giving the
formulas; the ones below are ours, derived the way the paper derives the one-source case.

A page changes as Poisson(``Delta``).  Each change is announced by *at most one* source:
by source ``s`` with probability ``lam_s`` (``sum_s lam_s <= 1``); source ``s`` also
sends false pings as Poisson(``nu_s``).  This is the reading under which the App. E
likelihood with several sources is exact (:mod:`models.estimators.signals`, whose
``derive`` uses ``Delta = alpha + sum_s recall_s Delta``).  By the thinning and merging
properties of Poisson processes (Sec. 3 of paper 004), unannounced changes are
Poisson(``alpha``) with ``alpha = Delta (1 - sum_s lam_s)`` and the pings of source
``s`` are Poisson(``gamma_s``) with ``gamma_s = lam_s Delta + nu_s``, all independent;
each ping of ``s`` is false with probability ``nu_s/gamma_s``.  Eq. (1) of paper 004
becomes::

    P(fresh | H_t) = exp(-alpha tau_elap) prod_s (nu_s/gamma_s)^{n_s} = exp(-alpha tau_eff),
    tau_eff = tau_elap + sum_s beta_s n_s,       beta_s = ln(gamma_s/nu_s) / alpha,

so a ping of source ``s`` moves the page's origin (``tau_eff = t - origin``) back by
``beta_s`` and objective (2) is unchanged.  The crawl value, however, is **not** Theorem
1's ``V(tau_eff)`` with the combined ``alpha`` and ``gamma = sum_s gamma_s``: ``V =
mu (w - e^{-alpha iota} psi)`` (Theorem 1; App. A, from Lemma 3, whose proof holds for any
jump process) still holds, but Lemma 4's sums become sums over one count per source (see
:func:`multi_source_value`).  Merging all pings into one source (``nu = sum_s nu_s``,
``beta_bar = ln(gamma/nu)/alpha``) is a valid one-source model of the same page and its
value is Lemma 4's; it equals the several-source value when every ``beta_s`` is the same.

:class:`MultiSourceAlgorithm1` moves the origin by each ping's own ``beta_s`` (exact
posterior) and ranks with Theorem 1's value at the merged ``(alpha, beta_bar, gamma)``
(the *pooled shape*, so that the :class:`models.index.CrawlIndex` can serve it); the
difference from the exact several-source value is measured in the tests.

The three live in their own modules (issue 17): :mod:`models.sim.uncertain`,
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
