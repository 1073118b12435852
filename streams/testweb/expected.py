"""What the simulator expects of a live run: Algorithm 1 given what the worker is given.

Two policies run in the simulator's timed loop (:func:`models.sim.live.run_timed`), both on
the worker's own engine (:mod:`models.decision`: the shard's book, its host index, floor and
host buckets, and :func:`models.decision.core.choose`):

* :class:`WorkerMirror` - the worker's own parameter and placement code
  (:func:`streams.estimates.params.page_params` over
  :class:`streams.store.redis_store.PageState` and
  :class:`streams.estimates.estimation.Estimation`): the true change rate
  as a prior until a page's first observed crawl interval, the online
  estimates (change rate and per-source-group ping quality) after; the worker's ping rules
  (before-crawl, ``t_delay``).  It is what the worker would decide if its pipeline added
  nothing of its own (no sharding, no Kafka lag, no batching).
* the *oracle*: :class:`models.sim.live.EngineAlgorithm1` with the world's true
  ``(Delta, lambda, nu)`` (Greedy-NCIS), the same ping rules.

Each can run on *fresh draws* of the test web's processes (:func:`models.sim.live.testweb_events`:
the same world, other random changes and pings) or *replay* a live run's own record
(:class:`RunRecord`: the changes the test web made, the pings the producers published, the
times at which the worker issued orders and the fetcher fetched and reported them), so that
live and simulated accuracy differ only by what the live pipeline decided.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from models.decision.pings import APPLIED, ping_verdict
from models.sim.events import Events
from models.sim.live import EngineAlgorithm1, run_timed, testweb_events, windowed_accuracy
from models.sim.policies import value_params
from streams.estimates.estimation import Estimation, Observation, estimates_of
from streams.estimates.params import page_params
from streams.events.records import SOURCES
from streams.scheduler.placing import new_book, place_page
from streams.settings import Settings
from streams.store.host_prior import swapped
from streams.store.page_record import PageState
from streams.testweb.world import World

#: an imported crawl: ``(page, unix time, changed, signals)`` (``signals``: the interval's
#: recorded pings per source, None: not recorded;
#: :func:`streams.testweb.history.history_crawls`)
Imported = tuple[int, float, bool | None, tuple[int, ...] | None]

__all__ = ["EPOCH", "Loop", "RunRecord", "WorkerMirror", "fresh_draws", "oracle_policy", "replay"]

#: Fresh draws run in "epoch" seconds from here (the worker treats time 0 as never).
EPOCH = 1.0e9


class WorkerMirror:
    """The worker's decisions as a simulator policy, on the worker's own engine (an
    :class:`~models.sim.live.EnginePolicy`): its parameter code, its placement of a page in
    a shard's book (:func:`streams.scheduler.placing.place_page`, the floor included) and
    its pick (:func:`models.decision.core.choose` over the book
    :func:`streams.scheduler.placing.new_book` makes); times are relative to ``offset``
    (epoch seconds of the simulator's 0)."""

    name = "worker-mirror"

    def __init__(self, world: World, settings: Settings, offset: float,
                 initial_copy: np.ndarray, t_delay_s: float, *,
                 give_rates: bool = True) -> None:  # fmt: skip
        self.settings = settings
        self.offset = offset
        self.t_delay = t_delay_s
        self.src = [SOURCES.index(p.channel) for p in world.pages]
        self.hosts = _host_index(world).tolist()
        n = len(SOURCES)
        self.states = [
            PageState(p.importance, p.change_rate_per_s if give_rates else None,
                      float(initial_copy[i]) + offset,
                      (0,) * n)
            for i, p in enumerate(world.pages)
        ]  # fmt: skip
        self.records: list[str | None] = [None] * len(world.pages)
        self.estimation = Estimation(settings.estimator_half_life_s or math.inf,
                                     host_min_pages=settings.host_prior_min_pages)
        #: per host its prior sums, as the worker's store keeps them (streams.store.host_prior)
        self.prior_sums: dict[int, tuple[float, float, float]] = {}
        self.book = new_book(settings)
        self.failures = 0
        for i in range(len(world.pages)):
            self._rekey(i, offset)

    def warm_start(self, crawls: Sequence[Imported]) -> None:
        """Start from an imported history: each page uncrawled, then the history's crawls
        (``(page, unix time, changed, signals)``, in time order, all before the run's own
        first crawl of the page) as the worker's outcomes agent applies them (in chunks that
        hold a page at most once, every page of a chunk under its host's prior sums as they
        were before the chunk; each interval with its recorded pings, or, ``signals`` None,
        with its signals unknown, as ``recrawl import`` sends them), then the run's first
        crawl of every page (``initial_copy``), which, the first fetch the fetcher compares
        nothing with (``changed: null``), observes nothing."""
        first = [st.last_crawl_s for st in self.states]
        n = len(SOURCES)
        self.states = [PageState(st.importance, st.prior_change_rate_per_s, 0.0, (0,) * n)
                       for st in self.states]  # fmt: skip
        chunk: list[Imported] = []
        for crawl in crawls:
            page, t = crawl[0], crawl[1]
            if t >= first[page]:
                raise ValueError(f"page {page}: an imported crawl at {t} is not before the "
                                 f"run's first crawl ({first[page]})")
            if any(c[0] == page for c in chunk):
                self._apply_chunk(chunk)
                chunk = []
            chunk.append(crawl)
        self._apply_chunk(chunk)
        for i, t in enumerate(first):
            self.states[i] = self.states[i].after_crawl(t)
            self._rekey(i, self.offset)

    def _apply_chunk(self, chunk: Sequence[Imported]) -> None:
        # imported: each interval with its recorded pings (the outcome's signals), or its
        # signals unknown (no ping log: the outcome's signals_known false)
        self._observe([(page, t, changed, (0,) * len(SOURCES) if sig is None else sig)
                       for page, t, changed, sig in chunk if changed is not None],
                      known=[sig is not None for _p, _t, changed, sig in chunk
                             if changed is not None])
        for page, t, _changed, _sig in chunk:
            if t > self.states[page].last_crawl_s:
                self.states[page] = self.states[page].after_crawl(t)

    def _observe(self, crawls: Sequence[tuple[int, float, bool, tuple[int, ...] | None]], *,
                 known: Sequence[bool] | None = None) -> None:
        """Each crawl's interval since its page's last crawl into the page's estimator, as
        the worker's outcomes agent applies a batch (a page at most once; every page under
        its host's prior sums as they were before the batch); a page never crawled, or a
        crawl before its last, observes nothing.  A crawl's signals: the interval's
        (an imported outcome's ``signals``), or None: the page's since its last crawl;
        ``known`` false: imported crawls without a ping log (the outcomes'
        ``signals_known``)."""
        obs: list[Observation] = []
        pages: list[int] = []
        for k, (page, t, changed, sig) in enumerate(crawls):
            st = self.states[page]
            if st.crawled and t >= st.last_crawl_s:
                pages.append(page)
                obs.append(Observation(self.records[page], t - st.last_crawl_s,
                                       st.signals if sig is None else sig,
                                       changed, t, st.prior_change_rate_per_s,
                                       self.prior_sums.get(self.hosts[page], (0.0, 0.0, 0.0)),
                                       True if known is None else known[k]))
        try:
            new = self.estimation.observe(obs)
        except Exception:  # the worker applies the outcomes without their estimates too
            self.failures += 1
            return
        for page, record in zip(pages, new, strict=True):
            h = self.hosts[page]
            after = swapped(self.prior_sums.get(h, (0.0, 0.0, 0.0)), self.records[page],
                            record)
            if after is not None:
                self.prior_sums[h] = after
            self.records[page] = record

    def estimated(self) -> dict[str, float]:
        """Means over the pages of the parameters the worker's code gives them now
        (:func:`streams.estimates.params.page_params`, read as ``(Delta, recall, false-ping
        rate)`` by :func:`models.conversions.change_params`): ``change_rate_per_s``,
        ``recall``, ``false_rate_per_s``."""
        from models.conversions import change_params

        ps = [page_params(st, estimates_of(r), self.settings)
              for st, r in zip(self.states, self.records, strict=True)]
        cp = change_params(np.array([p.alpha_per_s for p in ps]),
                           np.array([p.beta_s for p in ps]),
                           np.array([p.gamma_per_s for p in ps]))
        return {"change_rate_per_s": float(np.mean(cp.change_rate)),
                "recall": float(np.mean(cp.recall)),
                "false_rate_per_s": float(np.mean(cp.false_signal_rate))}

    def _rekey(self, i: int, now_s: float) -> None:
        p = page_params(self.states[i], estimates_of(self.records[i]), self.settings)
        place_page(self.book, i, self.hosts[i], self.states[i], p,
                   max_interval_s=self.settings.max_interval_s, now_s=now_s)

    def on_ping(self, page: int, arrival: float, emitted: float) -> None:
        st = self.states[page]
        received, changed = arrival + self.offset, emitted + self.offset
        last = st.last_crawl_s  # the worker stores 0 for never crawled
        if ping_verdict("live", self.t_delay, last if last > 0 else -math.inf, received,
                        changed) != APPLIED:
            return
        sig = list(st.signals)
        sig[self.src[page]] += 1
        self.states[page] = PageState(st.importance, st.prior_change_rate_per_s, last,
                                      tuple(sig))  # fmt: skip
        self._rekey(page, received)

    def on_crawl(self, page: int, t: float, changed: bool, last_modified: float) -> None:
        fetched = t + self.offset
        self._observe([(page, fetched, changed, None)])
        self.states[page] = self.states[page].after_crawl(fetched)
        self._rekey(page, fetched)


def oracle_policy(world: World, initial_copy: np.ndarray, t_delay_s: float) -> EngineAlgorithm1:
    """Greedy-NCIS with the true parameters and the worker's ping rules, on the worker's
    engine."""
    a = world.arrays()
    al, be, ga, terms = value_params("greedy-ncis", a["change_rate_per_s"], a["recall"],
                                     a["false_rate_per_s"])  # fmt: skip
    return EngineAlgorithm1("oracle", a["importance"], al, be, ga, host=_host_index(world),
                            last_crawl=initial_copy, terms=terms, t_delay=t_delay_s)


@dataclass
class Loop:
    """How the live loop delivers pings and crawls (for fresh draws)."""

    budget_per_s: float
    duration_s: float
    warmup_s: float
    t_delay_s: float
    poll_interval_s: float = 1.0
    flush_interval_s: float = 0.2
    ping_lag_s: float = 0.0
    fetch_lag_s: float = 0.0
    outcome_lag_s: float = 0.0
    host_rate_per_s: float = math.inf
    host_burst: float = 1.0
    host_max_in_flight: int = 1
    #: the worker was given the true change rates as priors
    give_rates: bool = True


def _host_index(world: World) -> np.ndarray:
    hosts = {h: k for k, h in enumerate(world.hosts)}
    return np.array([hosts[p.host] for p in world.pages], dtype=np.int64)


def _run(world: World, settings: Settings, ev: Events, orders: np.ndarray, *, kind: str,
         offset: float, initial: np.ndarray, t_delay: float, fetch_lag: Any, outcome_lag: Any,
         loop: Loop, start: float, stop: float,
         history: Sequence[Imported] = (),
         mirrors: list[WorkerMirror] | None = None) -> float:  # fmt: skip
    pol: Any
    if kind == "oracle":
        pol = oracle_policy(world, initial, t_delay)
    else:
        pol = WorkerMirror(world, settings, offset, initial, t_delay,
                           give_rates=loop.give_rates)
        if history:
            pol.warm_start(history)
        if mirrors is not None:
            mirrors.append(pol)
    res = run_timed(ev, pol, orders, fetch_lag=fetch_lag, outcome_lag=outcome_lag,
                    last_crawl=initial, host=_host_index(world),
                    host_rate=loop.host_rate_per_s, host_burst=loop.host_burst,
                    host_max_in_flight=loop.host_max_in_flight)  # fmt: skip
    mu = world.arrays()["importance"]
    return windowed_accuracy(mu, ev, res.fetch_time, res.page, initial_copy=initial,
                             start=start, stop=stop)  # fmt: skip


def fresh_draws(world: World, settings: Settings, loop: Loop, *, kind: str = "mirror",
                runs: int = 4, seed: int = 0, history_s: float = 0.0,
                history_format: str = "changes",
                history_crawls_per_s: float | None = None, history_pings: bool = True,
                mirrors: list[WorkerMirror] | None = None) -> tuple[float, float]:  # fmt: skip
    """Mean and standard deviation of the accuracy over ``[warmup, duration]`` on ``runs``
    fresh draws of the test web's processes, orders evenly spaced at ``budget_per_s``;
    ``mirrors``: each draw's :class:`WorkerMirror` after its run is appended to it.

    ``history_s > 0``: the mirror starts from an import of the draw's past
    (:func:`streams.testweb.world.past_changes` over ``history_s``, written as
    ``history_format`` by :func:`streams.testweb.history.write_history`, an earlier
    crawler's CDX at ``history_crawls_per_s``, default the loop's budget, and read back as
    the importer reads it), with its ping log (:func:`streams.testweb.world.past_pings`)
    unless ``history_pings`` is false; the oracle needs no history."""
    a = world.arrays()
    sitemap = np.array([p.channel == "sitemap" for p in world.pages])
    orders = np.arange(1, int(loop.duration_s * loop.budget_per_s) + 1) / loop.budget_per_s
    initial = np.zeros(len(world.pages))
    accs = []
    for r in range(runs):
        rng = np.random.default_rng(seed + 1000 * r)
        ev = testweb_events(a["change_rate_per_s"], a["recall"], a["false_rate_per_s"],
                            a["delay_s"], sitemap, loop.duration_s, rng,
                            poll_interval=loop.poll_interval_s,
                            flush_interval=loop.flush_interval_s, lag=loop.ping_lag_s)  # fmt: skip
        history: list[Imported] = []
        if history_s > 0 and kind != "oracle":
            history = _drawn_history(world, history_s, seed + 1000 * r, history_format,
                                     history_crawls_per_s or loop.budget_per_s, loop,
                                     pings=history_pings)
        accs.append(_run(world, settings, ev, orders, kind=kind, offset=EPOCH, initial=initial,
                         t_delay=loop.t_delay_s, fetch_lag=loop.fetch_lag_s,
                         outcome_lag=loop.outcome_lag_s, loop=loop, start=loop.warmup_s,
                         stop=loop.duration_s, history=history, mirrors=mirrors))  # fmt: skip
    sd = float(np.std(accs, ddof=1)) if len(accs) > 1 else 0.0
    return float(np.mean(accs)), sd


def _drawn_history(world: World, history_s: float, seed: int, fmt: str,
                   crawls_per_s: float, loop: Loop, *, pings: bool) -> list[Imported]:
    """The crawls an import of a drawn past (and its ping log) gives (through written
    files, as the demo)."""
    import tempfile
    from pathlib import Path

    from streams.testweb.history import PING_LOG, history_crawls, history_name, write_history
    from streams.testweb.world import past_changes, past_pings

    urls = [p.url(1) for p in world.pages]
    past = past_changes(world, history_s, seed=seed)
    pinged = past_pings(world, past, history_s, poll_interval_s=loop.poll_interval_s,
                        flush_interval_s=loop.flush_interval_s, seed=seed) if pings else None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / history_name(fmt)
        log = Path(tmp) / PING_LOG if pings else None
        write_history(path, world, urls, past, EPOCH, history_s, fmt=fmt,
                      crawls_per_s=crawls_per_s, pings=pinged, ping_log=log)
        return history_crawls(path, urls, log)


@dataclass
class RunRecord:
    """What a live run's world did and when its pipeline acted (epoch seconds)."""

    t0: float = 0.0
    window_start: float = 0.0
    end: float = 0.0
    initial_fetch: list[float] = field(default_factory=list)
    changes: list[list[float]] = field(default_factory=list)
    #: (page, received_at, changed_at or None) of every ping published
    pings: list[tuple[int, float, float | None]] = field(default_factory=list)
    #: (issued_at, fetched_at, reported_at) of every order fetched after ``t0``
    orders: list[tuple[float, float, float]] = field(default_factory=list)
    #: (page, fetched_at, changed, signals) of every crawl the worker imported before the
    #: run, in time order (:func:`streams.testweb.history.history_crawls`; empty: a cold
    #: start)
    history: list[Imported] = field(default_factory=list)

    def events(self) -> Events:
        t0 = self.t0
        m = len(self.changes)
        ct = [np.asarray(sorted(c), dtype=np.float64) - t0 for c in self.changes]
        start = np.concatenate([[0], np.cumsum([c.size for c in ct])]).astype(np.int64)
        pings = sorted((r - t0, (c if c is not None else r) - t0, p) for p, r, c in self.pings)
        return Events(
            change_time=np.concatenate(ct) if m else np.zeros(0),
            change_start=start,
            ping_arrival=np.array([x[0] for x in pings], dtype=np.float64),
            ping_emitted=np.array([x[1] for x in pings], dtype=np.float64),
            ping_page=np.array([x[2] for x in pings], dtype=np.int64),
            ping_true=np.zeros(len(pings), dtype=bool),
            horizon=self.end - t0,
        )

    def lags(self) -> dict[str, float]:
        o = np.array(self.orders) if self.orders else np.zeros((0, 3))
        if not o.size:
            return {"fetch_lag_s": 0.0, "outcome_lag_s": 0.0}
        return {"fetch_lag_s": float(np.median(o[:, 1] - o[:, 0])),
                "outcome_lag_s": float(np.median(o[:, 2] - o[:, 0]))}  # fmt: skip


def replay(world: World, settings: Settings, rec: RunRecord, loop: Loop, *,
           kind: str = "mirror") -> float:  # fmt: skip
    """The accuracy the simulator's policy gets on the live run's own changes and pings,
    ordering at the worker's order times with the fetcher's measured lags."""
    ev = rec.events()
    o = np.array(sorted(rec.orders)) if rec.orders else np.zeros((0, 3))
    orders = o[:, 0] - rec.t0
    initial = np.asarray(rec.initial_fetch, dtype=np.float64) - rec.t0
    return _run(world, settings, ev, orders, kind=kind, offset=rec.t0, initial=initial,
                t_delay=loop.t_delay_s, fetch_lag=o[:, 1] - o[:, 0],
                outcome_lag=o[:, 2] - o[:, 0], loop=loop, start=rec.window_start - rec.t0,
                stop=rec.end - rec.t0, history=rec.history)  # fmt: skip
