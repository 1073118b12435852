"""recrawl's mathematics: crawl values, optimal policies, cost model and estimators.

Pure: numpy, scipy and the standard library only.  No clock, no environment, no I/O;
time always comes in as an argument.  ``streams`` imports ``models``, never the reverse.
"""

# --- index and simulator (issue 5) ---
from models.index import CrawlIndex as CrawlIndex
