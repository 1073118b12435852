"""recrawl's mathematics: crawl values, optimal policies, cost model and estimators.

Pure: numpy, scipy and the standard library only.  No clock, no environment, no I/O;
time always comes in as an argument.  ``streams`` imports ``models``, never the reverse.
"""

# --- crawl values, optimal policies, cost model ---
from models.cost import asymptotic_interval as asymptotic_interval
from models.cost import cost_per_hour as cost_per_hour
from models.cost import optimal_interval as optimal_interval
from models.cost import optimal_ratio as optimal_ratio
from models.cost import stale_fraction as stale_fraction
from models.policies import RatesSolution as RatesSolution
from models.policies import ThresholdSolution as ThresholdSolution
from models.policies import expected_accuracy as expected_accuracy
from models.policies import low_discrepancy_schedule as low_discrepancy_schedule
from models.policies import optimal_rates as optimal_rates
from models.policies import optimal_thresholds as optimal_thresholds
from models.policies import solve_optimal_rates as solve_optimal_rates
from models.values import TRUNCATION_RTOL as TRUNCATION_RTOL
from models.values import ChangeParams as ChangeParams
from models.values import PrecisionRecallParams as PrecisionRecallParams
from models.values import SignalParams as SignalParams
from models.values import change_params as change_params
from models.values import crawl_frequency as crawl_frequency
from models.values import crawl_value as crawl_value
from models.values import from_precision_recall as from_precision_recall
from models.values import precision_recall as precision_recall
from models.values import psi as psi
from models.values import residual as residual
from models.values import signal_params as signal_params
from models.values import time_to_value as time_to_value
from models.values import value_at_infinity as value_at_infinity
from models.values import w as w

# isort: split
# --- index and simulator ---
from models.index import CrawlIndex as CrawlIndex

# --- estimators ---
# isort: split
from models.estimators import ChangeRateEstimator as ChangeRateEstimator
from models.estimators import CrawlInterval as CrawlInterval
from models.estimators import HostPool as HostPool
from models.estimators import PseudoDatapoints as PseudoDatapoints
from models.estimators import RequestRateEstimator as RequestRateEstimator
from models.estimators import SignalEstimator as SignalEstimator
from models.estimators import SignalPrior as SignalPrior
from models.estimators import cho_garcia_molina_mle as cho_garcia_molina_mle
from models.estimators import conservative_change_rate as conservative_change_rate
from models.estimators import fit_pseudo_datapoints as fit_pseudo_datapoints
from models.estimators import fit_signal_mle as fit_signal_mle
from models.estimators import importance_from_score as importance_from_score
from models.estimators import naive_change_rate as naive_change_rate
from models.estimators import naive_precision_recall as naive_precision_recall
