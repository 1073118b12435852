"""recrawl's mathematics: crawl values, optimal policies, cost model and estimators.

Pure: numpy, scipy and the standard library only.  No clock, no environment, no I/O;
time always comes in as an argument.  ``streams`` imports ``models``, never the reverse.
"""

# --- index and simulator (issue 5) ---
from models.index import CrawlIndex as CrawlIndex

# --- estimators (issue 4) ---
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
