"""The budget planner: expected accuracy as a function of the crawl budget, from what the
worker knows (``recrawl plan``, ``GET /plan``): its estimates in Redis, its host limits and
its settings.

Every page's crawl-value parameters ``(alpha, beta, gamma, mu)`` are the worker's own
(:func:`streams.estimates.params.page_params`: the estimator record once the page has an observed
interval, its prior before), read from the same keys the scheduler rebuilds a shard from
(``P:shard:{p}:hosts``, then each host's ``pages`` hashes), with each host's crawl rate
(``recrawl.hosts``; else ``settings.default_host_crawls_per_s``).

For each budget ``R`` the accuracy is simulated (:func:`models.plan.simulate_budget`):
Algorithm 1 on the worker's engine ranks pages with these point estimates, under the host
limits and the worker's ping rule (``t_delay_s``), in :data:`DRAWS` worlds drawn from the
estimates' posterior (:func:`models.plan.posterior_world`: each page's ``(alpha, kappa)``
drawn from the catalogue's estimates weighted by the page's own likelihood of its crawl
observations, its signal rates its own), and the draws' mean is reported.  A point estimate
from a few crawls is taken at face value by the continuous optimum (eq. 4 and Theorem 1 of
Busa-Fekete et al., paper 004; :func:`models.policies.optimal_thresholds`), which is kept
next to it as ``optimum_accuracy`` (an upper bound under the estimates) and gives the
multiplier ``Lambda`` (the threshold the worker's would settle at).

Not modelled: the longest-interval floor (``max_interval_s``), ping delays and orders lost
to failed fetches.  The operating point is the control budget (``P:control``
``budget_per_s``, set through ``recrawl.control``); before any control event, the
``budget_per_s`` the live workers publish in ``P:sched:shards``, else
``settings.budget_per_s``.  The ping rule's ``t_delay_s``: the control's if set, else the
one in the newest ``P:sched:shards`` entry (a stopped worker's entry stays, so a plan after
a run simulates that run's rule), else ``settings.t_delay_s``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from models.conversions import change_params
from models.plan import (
    PageLikelihood,
    fit_prior,
    posterior_world,
    sample_pages,
    simulate_budget,
)
from models.policies import optimal_thresholds
from streams.estimates.params import page_params_many
from streams.estimates.record import N_GROUPS, gamma_from_totals, unpack_records
from streams.scheduler import Control
from streams.settings import Settings
from streams.store import StateStore
from streams.store.page_record import PageState, page_length, record_bytes

#: a shard entry younger than this is a live worker's (as the scheduler's resplit reads them)
LIVE_S = 3.0

__all__ = ["DRAWS", "MAX_PLAN_BUDGETS", "MAX_SIM_PAGES", "PLAN_CACHE_S", "PlanInputs",
           "SingleFlight", "likelihood_of", "load_inputs", "plan", "plan_from_store",
           "steady_threshold"]

#: the most budgets one ``GET /plan`` may ask for (each is :data:`DRAWS` simulations of at
#: most :data:`MAX_SIM_PAGES` pages and a solve over every page)
MAX_PLAN_BUDGETS = 20
#: how long ``GET /plan`` answers a plan again from its cache
PLAN_CACHE_S = 30.0
#: posterior worlds simulated per budget (their mean is the row's accuracy)
DRAWS = 2
#: pages simulated per world (a uniform sample of larger catalogues: models.plan)
MAX_SIM_PAGES = 1000


@dataclass(frozen=True)
class PlanInputs:
    """The catalogue's crawl-value parameters, one entry per usable page."""

    mu: np.ndarray
    alpha_per_s: np.ndarray
    beta_s: np.ndarray
    gamma_per_s: np.ndarray
    host: np.ndarray  # each page's host (index into host_rate_per_s)
    host_rate_per_s: np.ndarray
    likelihood: PageLikelihood
    t_delay_s: float
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
    :func:`streams.estimates.params.page_params_many`), its host and its estimator's
    observations (:func:`likelihood_of`)."""
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
    t_delay_s = _t_delay(raw_control, control, shards.values(), settings)
    partitions = set(range(settings.partitions)) | set(shards)
    hosts: set[str] = set()
    for p in sorted(partitions):
        hosts.update(await store.shard_hosts(p))
    cols: list[list[np.ndarray]] = [[], [], [], [], []]
    liks: list[PageLikelihood] = []
    rates: list[float] = []
    estimated = unusable = 0
    ordered = sorted(hosts)
    for i in range(0, len(ordered), chunk):
        dumps = await store.dump_hosts(ordered[i : i + chunk])
        values: list[str | bytes] = []
        host_of: list[int] = []
        for d in dumps:
            rate = d.info.rate_per_s
            rates.append(rate if rate is not None and rate > 0 else
                         settings.default_host_crawls_per_s)
            values.extend(d.pages.values())
            host_of.extend([len(rates) - 1] * len(d.pages))
        hidx = np.asarray(host_of, dtype=np.int64)
        many = page_params_many(values, settings) if values else None
        if many is None:  # some value is no page record: those pages are left out
            readable = np.array([_readable(v) for v in values], dtype=bool)
            values = [v for v, r in zip(values, readable, strict=True) if r]
            hidx = hidx[readable]
            many = page_params_many(values, settings) if values else None
            unusable += int((~readable).sum())
        if many is None:
            continue
        row = (many.importance, many.alpha, many.beta, many.gamma)
        with np.errstate(invalid="ignore"):
            ok = (np.isfinite(row[0]) & np.isfinite(row[1]) & np.isfinite(row[3])
                  & ~np.isnan(row[2]) & (np.minimum.reduce(row) >= 0.0))
        unusable += int((~ok).sum())
        estimated += int(many.estimated[ok].sum())
        for c, x in zip(cols, (*row, hidx), strict=True):
            c.append(x[ok])
        liks.append(likelihood_of([v for v, k in zip(values, ok, strict=True) if k]))
    mu, a, b, g = (np.concatenate(c) if c else np.zeros(0) for c in cols[:4])
    host = np.concatenate(cols[4]) if cols[4] else np.zeros(0, dtype=np.int64)
    return PlanInputs(mu, a, b, g, host, np.asarray(rates, dtype=np.float64),
                      _concat(liks), t_delay_s, estimated, unusable, budget, source,
                      control.paused)


def _t_delay(raw_control: dict[str, str], control: Control,
             entries: Iterable[dict[str, Any]], settings: Settings) -> float:
    """The ping rule's ``t_delay_s`` the workers run with: the control's when set there,
    else the one the newest shard entry published (the worker's setting; kept after the
    worker stops, so a plan after a run uses that run's), else ``settings.t_delay_s``."""
    if "t_delay_s" in raw_control:
        return control.t_delay_s
    published = [e for e in entries if isinstance(e.get("t_delay_s"), (int, float))]
    if published:
        newest = max(published, key=lambda e: float(e.get("ts", 0)))
        return float(newest["t_delay_s"])
    return settings.t_delay_s


def likelihood_of(values: Sequence[str | bytes]) -> PageLikelihood:
    """The estimator observations of stored page values (their estimator records' full
    layout, :func:`streams.estimates.record.unpack_records`); a page without a readable
    record is not usable."""
    n = len(values)
    raws = []
    for v in values:
        raw = record_bytes(v)
        raws.append(raw[page_length(raw):])
    groups = unpack_records(raws)
    k = max([ring for _, ring, _ in groups] + [0])
    d = 1 + N_GROUPS
    lin, theta, gamma = np.zeros((n, d)), np.zeros((n, d)), np.zeros((n, N_GROUPS))
    totals, unknown = np.zeros((n, d)), np.zeros((n, 4))
    ring, quad, rep = np.zeros((n, k, d + 1)), np.zeros((n, d, d)), np.zeros((n, 2))
    usable = np.zeros(n, dtype=bool)
    iu = np.triu_indices(d)
    for rows, length, arr in groups:
        usable[rows] = arr["n_intervals"] > 0
        lin[rows] = arr["lin"]
        theta[rows, 0], theta[rows, 1:] = arr["alpha"], arr["kappa"]
        totals[rows] = arr["totals"]
        unknown[rows] = arr["unknown"]
        gamma[rows] = gamma_from_totals(totals[rows], unknown[rows, 0])
        if length:
            r = arr["ring"]
            ring[rows, :length, 0] = r["tau"]
            ring[rows, :length, 1:d] = r["n"]
            ring[rows, :length, d] = r["w"] if "w" in (r.dtype.names or ()) else 1.0
        q = np.zeros((rows.size, d, d))
        q[:, iu[0], iu[1]] = arr["quad_a"]
        q[:, iu[1], iu[0]] = arr["quad_a"]
        quad[rows] = q
        rep[rows] = arr["rep"]
    usable &= (np.isfinite(theta).all(axis=1) & (theta >= 0.0).all(axis=1)
               & np.isfinite(gamma).all(axis=1))
    return PageLikelihood(lin=lin, ring=ring, quad_a=quad, rep=rep, totals=totals,
                          theta=theta, gamma=gamma, usable=usable, unknown=unknown)


def _concat(liks: Sequence[PageLikelihood]) -> PageLikelihood:
    if not liks:
        return likelihood_of([])
    k = max(x.ring.shape[1] for x in liks)
    rings = [np.pad(x.ring, ((0, 0), (0, k - x.ring.shape[1]), (0, 0))) for x in liks]
    return PageLikelihood(
        lin=np.concatenate([x.lin for x in liks]), ring=np.concatenate(rings),
        quad_a=np.concatenate([x.quad_a for x in liks]),
        rep=np.concatenate([x.rep for x in liks]),
        totals=np.concatenate([x.totals for x in liks]),
        theta=np.concatenate([x.theta for x in liks]),
        gamma=np.concatenate([x.gamma for x in liks]),
        usable=np.concatenate([x.usable for x in liks]),
        unknown=np.concatenate([x.unknown for x in liks]))


def _readable(value: str | bytes) -> bool:
    try:
        PageState.decode(value)
        return True
    except ValueError:
        return False


def plan(inputs: PlanInputs, budgets_per_s: Sequence[float], *, draws: int = DRAWS,
         max_pages: int = MAX_SIM_PAGES, seed: int = 0) -> dict[str, Any]:
    """The simulated accuracy at each budget and at the operating point (module docstring).

    Returns a JSON-able dict: ``rows`` (one per budget, ascending, the operating point
    among them with ``"current": true``), ``current`` (its row or None while the budget is
    0), page counts and ``source`` (the method).
    """
    budgets = sorted({float(b) for b in budgets_per_s})
    for b in budgets:
        if not (b > 0 and math.isfinite(b)):
            raise ValueError(f"budget must be positive and finite, got {b!r}")
    cur = inputs.budget_per_s
    sim = _Simulation.of(inputs, draws, max_pages, seed) if inputs.pages else None
    rows = []
    for b in sorted(set(budgets) | ({cur} if cur > 0 else set())):
        rows.append({**_row(inputs, b, sim, seed), "current": b == cur,
                     "requested": b in budgets})
    return {
        "pages": inputs.pages,
        "pages_estimated": inputs.estimated,
        "pages_unusable": inputs.unusable,
        "pages_simulated": min(inputs.pages, max_pages),
        "draws": draws,
        "t_delay_s": inputs.t_delay_s,
        "budget_per_s": cur,
        "budget_source": inputs.budget_source,
        "paused": inputs.paused,
        "rows": rows,
        "current": next((r for r in rows if r["current"]), None),
        "source": f"Algorithm 1 on the worker's engine with its host limits and t_delay, "
                  f"acting on the point estimates in {draws} worlds drawn from their "
                  "posterior (models.plan); optimum_accuracy and multiplier: continuous "
                  "optimum, eq. 4 and Theorem 1 of Busa-Fekete et al. (paper 004), "
                  "models.policies.optimal_thresholds",
    }


@dataclass(frozen=True)
class _Simulation:
    """The pages simulated (a sample of at most ``max_pages``), their share of the
    catalogue and the posterior worlds drawn for them (module docstring)."""

    rows: np.ndarray
    share: float
    worlds: list[tuple[np.ndarray, np.ndarray, np.ndarray]]

    @classmethod
    def of(cls, inputs: PlanInputs, draws: int, max_pages: int, seed: int) -> _Simulation:
        rng = np.random.default_rng(seed)
        rows = sample_pages(inputs.pages, max_pages, rng)
        cp = change_params(inputs.alpha_per_s[rows], inputs.beta_s[rows],
                           inputs.gamma_per_s[rows])
        point = (cp.change_rate, cp.recall, cp.false_signal_rate)
        lik = inputs.likelihood.take(rows)
        if not lik.usable.any():  # nothing observed yet: the estimates are all there is
            return cls(rows, rows.size / inputs.pages, [point] * draws)
        prior = fit_prior(lik, rng)
        return cls(rows, rows.size / inputs.pages,
                   [posterior_world(lik, prior, point, rng) for _ in range(draws)])


def _row(inputs: PlanInputs, budget_per_s: float, sim: _Simulation | None, seed: int
         ) -> dict[str, Any]:
    if sim is None or not (inputs.mu > 0).any():
        return {"budget_per_s": budget_per_s, "accuracy": None, "optimum_accuracy": None,
                "multiplier": None, "pages_crawled": 0, "mean_interval_s": None}
    sol = optimal_thresholds(inputs.mu, inputs.alpha_per_s, inputs.beta_s,
                             inputs.gamma_per_s, budget_per_s)
    r = sim.rows
    sims = [simulate_budget(inputs.mu[r], inputs.alpha_per_s[r], inputs.beta_s[r],
                            inputs.gamma_per_s[r], budget_per_s=budget_per_s,
                            host=inputs.host[r], host_rate_per_s=inputs.host_rate_per_s,
                            t_delay_s=inputs.t_delay_s, world=w, share=sim.share,
                            seed=seed + k) for k, w in enumerate(sim.worlds)]
    intervals = [s.mean_interval_s for s in sims if s.mean_interval_s is not None]
    return {
        "budget_per_s": budget_per_s,
        "accuracy": float(np.mean([s.accuracy for s in sims])),
        "optimum_accuracy": sol.accuracy,
        "multiplier": sol.multiplier,
        "pages_crawled": round(float(np.mean([s.pages_crawled for s in sims]))),
        # the simulated crawl interval of the pages crawled
        "mean_interval_s": float(np.mean(intervals)) if intervals else None,
    }


async def plan_from_store(
    store: StateStore, settings: Settings, budgets_per_s: Sequence[float]
) -> dict[str, Any]:
    """:func:`load_inputs` then :func:`plan` in a child process (the simulation is tens of
    seconds of Python at 5x10^4 pages: in a thread it would hold the GIL against the
    worker's event loop; ``spawn``, as the worker runs threads a fork would copy mid-way)."""
    import asyncio
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    inputs = await load_inputs(store, settings)
    budgets = [float(b) for b in budgets_per_s]
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    try:
        return await asyncio.get_running_loop().run_in_executor(pool, plan, inputs, budgets)
    finally:  # never wait here: a cancelled request leaves the child to finish on its own
        pool.shutdown(wait=False, cancel_futures=True)


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
