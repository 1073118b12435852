"""Online estimators of per-page parameters: change rate, ping-source quality, importance.

Every estimator is ``init() -> state``, ``update(state, observation) -> state``,
``result(state) -> estimate`` over a small immutable state that serialises to at most 288
bytes; vectorised versions over many pages live in :mod:`.batch`.

* :mod:`.change_rate` - Cho and Garcia-Molina's irregular-interval MLE from Grimes-Ford
  pseudo-datapoints (paper 003 Sec. 4), naive rate, pseudo-datapoint fit, conservative rate.
* :mod:`.signals` - the paper 004 App. E MLE of ``(alpha, kappa_s)``, ``gamma_s`` and the
  derived ``Delta``, ``nu_s``, precision, recall, ``beta_s``; the naive counting estimator.
* :mod:`.sources` - per-host pooling of source quality as a prior for young pages.
* :mod:`.host_prior` - empirical-Bayes Gamma prior over a host's change rates, fitted by
  marginal likelihood (EM on a rate grid) to its pages' crawl observations; posterior means.
* :mod:`.importance` - ``mu`` from a score or from request counts.
* :mod:`.batch` - structure-of-arrays versions for the simulator and the service
  (``update_many``: many pages' update and result in one vectorised pass).
"""

from ._prior import PseudoDatapoints, SignalPrior
from .batch import (
    BatchEstimate,
    BatchSignalState,
    batch_alpha_kappa,
    batch_from_bytes,
    batch_init,
    batch_result,
    batch_to_bytes,
    batch_to_states,
    batch_update,
    states_to_batch,
    update_many,
)
from .change_rate import (
    GRIMES_FORD,
    ChangeRateEstimate,
    ChangeRateEstimator,
    cho_garcia_molina_mle,
    conservative_change_rate,
    fit_pseudo_datapoints,
    naive_change_rate,
    pseudo_datapoint_log_density,
)
from .importance import (
    ImportanceEstimate,
    RequestRateEstimator,
    RequestRateState,
    importance_from_score,
)
from .signal_fit import fit_signal_mle, naive_precision_recall
from .signals import (
    MAX_STATE_BYTES,
    CrawlInterval,
    SignalEstimate,
    SignalEstimator,
    SignalState,
    state_size_bytes,
)
from .sources import HostPool, HostPoolEstimate, HostPoolState

__all__ = [
    "GRIMES_FORD",
    "MAX_STATE_BYTES",
    "BatchEstimate",
    "BatchSignalState",
    "ChangeRateEstimate",
    "ChangeRateEstimator",
    "CrawlInterval",
    "HostPool",
    "HostPoolEstimate",
    "HostPoolState",
    "ImportanceEstimate",
    "PseudoDatapoints",
    "RequestRateEstimator",
    "RequestRateState",
    "SignalEstimate",
    "SignalEstimator",
    "SignalPrior",
    "SignalState",
    "batch_alpha_kappa",
    "batch_from_bytes",
    "batch_init",
    "batch_result",
    "batch_to_bytes",
    "batch_to_states",
    "batch_update",
    "cho_garcia_molina_mle",
    "conservative_change_rate",
    "fit_pseudo_datapoints",
    "fit_signal_mle",
    "importance_from_score",
    "naive_change_rate",
    "naive_precision_recall",
    "pseudo_datapoint_log_density",
    "state_size_bytes",
    "states_to_batch",
    "update_many",
]
