"""The budget planner: expected accuracy as a function of the crawl budget, from the
current estimates in Redis (``recrawl plan``, ``GET /plan``).

Every page's crawl-value parameters ``(alpha, beta, gamma, mu)`` are the worker's own
(:func:`streams.estimates.params.page_params`: the estimator record once the page has an observed
interval, its prior before), read from the same keys the scheduler rebuilds a shard from
(``P:shard:{p}:hosts``, then each host's ``pages`` hashes).  For each budget
``R`` the planner solves the optimal continuous policy with signals (eq. 4 and Theorem 1 of
Busa-Fekete et al., paper 004: thresholds ``iota_i`` with ``V_i(iota_i) = Lambda`` and
``sum_i f(iota_i) = R``; :func:`models.policies.optimal_thresholds`) and reports its
request-weighted accuracy ``sum_i mu_i w_i(iota_i)/psi_i(iota_i) / sum_i mu_i`` (the
``o(iota)`` of the proof of Theorem 1), the multiplier ``Lambda`` (the threshold the
worker's would settle at) and how many pages the optimum crawls at all.  Pages without
signals (``gamma = 0``) reduce to eq. 5 (the optimum of ``sum G(xi_i)``, Sec. 5.1's Greedy
value).  Algorithm 1, what the worker runs, tracks this optimum closely (Sec. 6.4 of
paper 004), so the curve is what a budget buys at best under the current estimates.

Not modelled: per-host limits (they can only lower the accuracy), the longest-interval
floor (``max_interval_s``) and orders lost to failed fetches.  The operating point is the
control budget (``P:control`` ``budget_per_s``, set through ``recrawl.control``); before
any control event, the ``budget_per_s`` the live workers publish in ``P:sched:shards``,
else ``settings.budget_per_s``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.policies import optimal_thresholds
from streams.estimates.params import page_params_many
from streams.scheduler import Control
from streams.settings import Settings
from streams.store import StateStore
from streams.store.page_record import PageState

#: a shard entry younger than this is a live worker's (as the scheduler's resplit reads them)
LIVE_S = 3.0

__all__ = ["MAX_PLAN_BUDGETS", "PLAN_CACHE_S", "PlanInputs", "SingleFlight", "load_inputs",
           "plan", "plan_from_store", "steady_threshold"]

#: the most budgets one ``GET /plan`` may ask for (each is a solve over every page: ~0.6 s
#: of CPU at 5x10^4 pages)
MAX_PLAN_BUDGETS = 20
#: how long ``GET /plan`` answers a plan again from its cache
PLAN_CACHE_S = 30.0


@dataclass(frozen=True)
class PlanInputs:
    """The catalogue's crawl-value parameters, one entry per usable page."""

    mu: np.ndarray
    alpha_per_s: np.ndarray
    beta_s: np.ndarray
    gamma_per_s: np.ndarray
    estimated: int  # pages whose parameters come from their estimator
    unusable: int  # pages left out (no finite parameters), as the scheduler does
    budget_per_s: float  # the current operating point (module docstring)
    budget_source: str
    paused: bool

    @property
    def pages(self) -> int:
        return int(self.mu.size)


async def load_inputs(store: StateStore, settings: Settings, *, chunk: int = 50) -> PlanInputs:
    """Every page's parameters, read the way the scheduler rebuilds its shards (on arrays:
    :func:`streams.estimates.params.page_params_many`)."""
    raw_control = await store.get_control()
    control = Control.from_redis(raw_control, settings)
    shards = await store.get_shards()
    now = await store.server_time()  # the entries' ts is Redis's clock (the heartbeat's)
    live = [e for e in shards.values() if now - float(e.get("ts", 0)) < LIVE_S]
    if "budget_per_s" in raw_control:
        budget, source = control.budget_per_s, "control (recrawl.control)"
    elif any("budget_per_s" in e for e in live):  # the R the workers split (their settings)
        budget = max(float(e["budget_per_s"]) for e in live if "budget_per_s" in e)
        source = "the live workers (their RECRAWL_BUDGET_PER_S)"
    else:
        budget, source = settings.budget_per_s, "settings (RECRAWL_BUDGET_PER_S)"
    partitions = set(range(settings.partitions)) | set(shards)
    hosts: set[str] = set()
    for p in sorted(partitions):
        hosts.update(await store.shard_hosts(p))
    cols: list[list[np.ndarray]] = [[], [], [], []]
    estimated = unusable = 0
    ordered = sorted(hosts)
    for i in range(0, len(ordered), chunk):
        dumps = await store.dump_hosts(ordered[i : i + chunk])
        values = [v for d in dumps for v in d.pages.values()]
        many = page_params_many(values, settings) if values else None
        if many is None:  # some value is no page record: those pages are left out
            many = page_params_many([v for v in values if _readable(v)], settings)
            unusable += sum(not _readable(v) for v in values)
        if many is None:
            continue
        row = (many.importance, many.alpha, many.beta, many.gamma)
        with np.errstate(invalid="ignore"):
            ok = (np.isfinite(row[0]) & np.isfinite(row[1]) & np.isfinite(row[3])
                  & ~np.isnan(row[2]) & (np.minimum.reduce(row) >= 0.0))
        unusable += int((~ok).sum())
        estimated += int(many.estimated[ok].sum())
        for c, x in zip(cols, row, strict=True):
            c.append(x[ok])
    mu, a, b, g = (np.concatenate(c) if c else np.zeros(0) for c in cols)
    return PlanInputs(mu, a, b, g, estimated, unusable, budget, source, control.paused)


def _readable(value: str | bytes) -> bool:
    try:
        PageState.decode(value)
        return True
    except ValueError:
        return False


def plan(inputs: PlanInputs, budgets_per_s: Sequence[float]) -> dict[str, Any]:
    """The optimum at each budget and at the operating point (module docstring).

    Returns a JSON-able dict: ``rows`` (one per budget, ascending, the operating point
    among them with ``"current": true``), ``current`` (its row or None while the budget is
    0), page counts and ``source`` (the equations used).
    """
    budgets = sorted({float(b) for b in budgets_per_s})
    for b in budgets:
        if not (b > 0 and math.isfinite(b)):
            raise ValueError(f"budget must be positive and finite, got {b!r}")
    cur = inputs.budget_per_s
    rows = []
    for b in sorted(set(budgets) | ({cur} if cur > 0 else set())):
        rows.append({**_row(inputs, b), "current": b == cur,
                     "requested": b in budgets})
    return {
        "pages": inputs.pages,
        "pages_estimated": inputs.estimated,
        "pages_unusable": inputs.unusable,
        "budget_per_s": cur,
        "budget_source": inputs.budget_source,
        "paused": inputs.paused,
        "rows": rows,
        "current": next((r for r in rows if r["current"]), None),
        "source": "continuous optimum, eq. 4 and Theorem 1 of Busa-Fekete et al. (paper 004; "
                  "eq. 5 for pages without signals), models.policies.optimal_thresholds",
    }


def _row(inputs: PlanInputs, budget_per_s: float) -> dict[str, Any]:
    if inputs.pages == 0 or not (inputs.mu > 0).any():
        return {"budget_per_s": budget_per_s, "accuracy": None, "multiplier": None,
                "pages_crawled": 0, "mean_interval_s": None}
    sol = optimal_thresholds(inputs.mu, inputs.alpha_per_s, inputs.beta_s,
                             inputs.gamma_per_s, budget_per_s)
    crawled = sol.rates > 0
    n = int(crawled.sum())
    return {
        "budget_per_s": budget_per_s,
        "accuracy": sol.accuracy,
        "multiplier": sol.multiplier,
        "pages_crawled": n,
        # mean over the crawled pages of 1/f(iota_i) (the expected crawl interval psi)
        "mean_interval_s": float(np.mean(1.0 / sol.rates[crawled])) if n else None,
    }


async def plan_from_store(
    store: StateStore, settings: Settings, budgets_per_s: Sequence[float]
) -> dict[str, Any]:
    """:func:`load_inputs` then :func:`plan` in a thread (the solver is CPU work: a worker
    calling this keeps its event loop free)."""
    import asyncio

    inputs = await load_inputs(store, settings)
    return await asyncio.to_thread(plan, inputs, budgets_per_s)


class SingleFlight:
    """At most one computation at a time, answers cached for ``ttl_s`` (``GET /plan``).

    :meth:`get` returns the cached answer for ``key`` when fresh; else, when no computation
    runs, starts ``compute()`` and returns its answer (callers asking for the same key
    meanwhile share it); when another key's computation runs, returns None at once (the
    caller answers 503: busy), so requests never pile up behind the solver."""

    def __init__(self, ttl_s: float = PLAN_CACHE_S, max_entries: int = 64,
                 clock: Any = None) -> None:
        import time

        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock or time.monotonic
        self.cache: dict[Any, tuple[float, Any]] = {}
        self._running: tuple[Any, Any] | None = None  # (key, future)
        self.computations = 0

    async def get(self, key: Any, compute: Any) -> Any:
        import asyncio

        now = self.clock()
        hit = self.cache.get(key)
        if hit is not None and now - hit[0] < self.ttl_s:
            return hit[1]
        if self._running is not None:
            running_key, fut = self._running
            if running_key != key:
                return None
            return await asyncio.shield(fut)
        fut = asyncio.get_running_loop().create_future()
        self._running = (key, fut)
        self.computations += 1
        try:
            value = await compute()
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as exc:
            fut.set_exception(exc)
            fut.exception()  # (retrieved: no "never retrieved" warning without waiters)
            raise
        finally:
            self._running = None
        fut.set_result(value)
        if len(self.cache) >= self.max_entries:
            self.cache.clear()
        self.cache[key] = (self.clock(), value)
        return value


async def steady_threshold(store: StateStore, settings: Settings) -> float | None:
    """``Lambda`` of the continuous optimum at the control budget: where the crawl-value
    threshold settles once the pages above it have been crawled (Theorem 1 of paper 004);
    None with no budget or no pages.  Reads the whole catalogue (as :func:`load_inputs`)."""
    import asyncio

    inputs = await load_inputs(store, settings)
    if not (inputs.budget_per_s > 0) or not (inputs.mu > 0).any():
        return None

    def solve() -> float:
        return optimal_thresholds(inputs.mu, inputs.alpha_per_s, inputs.beta_s,
                                  inputs.gamma_per_s, inputs.budget_per_s).multiplier

    return await asyncio.to_thread(solve)
