"""Per-page estimators in the stream: crawl intervals in, ``(alpha, beta_s, gamma)`` out.

Each page with at least one observed crawl interval has an estimator record
(:mod:`streams.estimates.record`: the layout, its encoding and decoding) after its page
record in ``P:{host}:pages`` (``streams/store/redis_store.py``): the
:class:`models.estimators.SignalEstimator` state plus the converged ``alpha``, its standard
error and ``kappa``, so the scheduler rebuilds a shard without re-solving any MLE
(``batch_result`` over 10^6 pages takes 24-55 s here, ``docs/benchmarks.md "Design
decisions"``).  The stream's ring holds :data:`STREAM_RING` changed intervals (the model's
default for 3 sources is 5; older ones are in the quadratic expansion, as with any capacity:
``tests/integration/test_estimation.py`` compares the two).  The stream keeps the posterior
mode it solves at every update as the state's running estimate ``theta`` (the point at
which a changed interval leaving the ring is expanded, ``models.estimators.signals``), so
the record leaves ``theta`` out (``benchmarks/bench_running_estimate.py``).

Only the outcomes agent writes a record, in the outcome's offset-guarded Lua step with a
compare-and-set on the page value and the old record (``streams/store/redis_store.py``), so
redelivery never applies an observation twice.

Source groups
-------------
``SignalEstimator`` takes at most 3 sources; recrawl has 5.  They are grouped
(:data:`GROUPS`) by how a signal is produced, which is also how alike their precision and
recall should be:

* ``sitemap`` - sitemap ``lastmod`` (polled, often stale or bulk-touched);
* ``push``    - IndexNow and WebSub (the publisher pushes on an edit);
* ``cdn``     - CDN cache hints and ``other`` (infrastructure-side, noisy).

A page's signal counts are summed per group; every source of a group shares the group's
``beta`` (``tau_eff`` adds ``beta_g`` per signal of any source in group ``g``).

Parameters for the crawl value
------------------------------
The value function (Theorem 1 of paper 004) has one signal source; with several we use
``alpha`` (changes no source signals), ``gamma = sum_g gamma_g`` (all signals observed) and
``beta = ln(gamma/nu)/alpha`` with ``nu = sum_g gamma_g exp(-alpha beta_g)``: Sec. 3 of
paper 004 applied to the merged source (:func:`models.decision.pooling.pooled_params`, the
same rule as the simulator, in :func:`streams.estimates.params.params_arrays`; the plain
mean of ``beta_g`` while ``gamma = 0``).  ``alpha`` may be taken at an upper quantile of
its posterior (``settings.estimate_quantile``, paper 003 Sec. 5.3) while the estimate
converges: :func:`conservative_change_rate` around the page's own mode, or, where ``alpha``
is its posterior mean under its host's prior, that posterior's quantile read as a Gamma
(:func:`streams.estimates.params.params_arrays`);
``kappa_g = alpha*beta_g`` is kept, so a signal's evidence does not change with the quantile.

A crawl whose outcome says ``changed: null`` (the fetcher's first fetch of a URL: nothing to
compare with) is not an observation; the next interval starts at it, because the fetcher
compares the next fetch with that one.

A crawl whose outcome says ``signals_known: false`` (``recrawl import`` without a ping log:
a history alone records no pings) adds an interval whose signals were not recorded, with no
signal counts: it informs the page's change rate only, not how the change rate splits into
signalled and unsignalled changes, and it does not count in the signal rates' observed time
(:class:`models.estimators.CrawlInterval`'s ``signals_known``: App. E's likelihood
marginalised over the unrecorded Poisson counts).  A crawl whose outcome gives
``signals`` (``recrawl import --ping-log``: the interval's pings as recorded) adds its
interval with those counts instead of the page record's (the pings received since its last
crawl: :meth:`streams.events.records.OutcomeEvent.interval_signals`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from models.estimators import (
    BatchEstimate,
    BatchSignalState,
    CrawlInterval,
    SignalEstimator,
    SignalState,
    batch_alpha_kappa,
    batch_from_bytes,
    batch_result,
    batch_update,
    states_to_batch,
    update_many,
)
from models.estimators.host_prior import (
    MIN_PAGES,
    grid_log_likelihood,
    host_contributions,
    host_priors,
)
from streams.estimates.record import (
    COUNT_MAX,
    N_GROUPS,
    STREAM_RING,
    Estimates,
    EstimatorRecord,
    fill_batch,
    gamma_from_totals,
    raw_bytes,
    records_from_batch,
    unpack_records,
)
from streams.events.records import SOURCES

__all__ = [
    "GROUPS",
    "GROUP_NAMES",
    "GROUP_OF",
    "N_GROUPS",
    "STREAM_RING",
    "Estimates",
    "Estimation",
    "EstimatorRecord",
    "Observation",
    "estimates_of",
    "full_estimates",
    "gamma_from_totals",
    "group_counts",
]


#: Estimator source groups (module docstring): name -> recrawl sources.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sitemap", ("sitemap",)),
    ("push", ("indexnow", "websub")),
    ("cdn", ("cdn", "other")),
)
GROUP_NAMES: tuple[str, ...] = tuple(g for g, _ in GROUPS)
#: For each recrawl source (in ``SOURCES`` order), the index of its group.
GROUP_OF: tuple[int, ...] = tuple(
    next(i for i, (_, members) in enumerate(GROUPS) if s in members) for s in SOURCES
)
assert len(GROUPS) == N_GROUPS  # the record's layout (streams.estimates.record)
#: ``signals (M, sources) @ _GROUP_SUM`` = per-group sums
_GROUP_SUM = np.array([[1.0 if GROUP_OF[s] == g else 0.0 for g in range(N_GROUPS)]
                       for s in range(len(SOURCES))])



def group_counts(signals: Sequence[int]) -> tuple[float, ...]:
    """Per-source signal counts (``SOURCES`` order) summed per group, each at most
    :data:`streams.estimates.record.COUNT_MAX`, as a ring count holds."""
    out = [0.0] * N_GROUPS
    for s, n in enumerate(signals):
        out[GROUP_OF[s]] += n
    return tuple(min(x, float(COUNT_MAX)) for x in out)


def group_sums(signals: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """:func:`group_counts` on arrays: ``(M, sources)`` -> ``(M, groups)``."""
    out: npt.NDArray[np.float64] = np.minimum(signals @ _GROUP_SUM, float(COUNT_MAX))
    return out


def estimates_of(record: str | bytes | None) -> Estimates | None:
    """The estimates of a stored record as the crawl value reads them (cheap: no solve;
    ``alpha`` the host posterior mean where the record says so:
    :attr:`EstimatorRecord.value_estimates`); None if absent/unreadable."""
    if not record:
        return None
    try:
        return EstimatorRecord.decode(record).value_estimates
    except ValueError:
        return None


def full_estimates(record: str | bytes | None,
                   prior_rate_per_s: float | None = None) -> Estimates | None:
    """The estimates of a stored record with every standard error (one Newton solve of its
    state: ``recrawl explain``; ``prior_rate_per_s``: the page's own prior rate, as its
    updates had it); None if absent/unreadable."""
    if not record:
        return None
    try:
        rec = EstimatorRecord.decode(record)
    except ValueError:
        return None
    (full,) = Estimation().results([rec.state], [prior_rate_per_s])
    return full


@dataclass(frozen=True, slots=True)
class Observation:
    """One crawl interval of one page, as the outcomes agent sees it."""

    record: str | None  # the stored record before this interval (None: none yet)
    interval_s: float
    signals: tuple[int, ...]  # per source, SOURCES order
    changed: bool
    fetched_at_s: float
    #: the page's own prior change rate (its page record's, given by the operator), if any:
    #: the estimator's pseudo-intervals imply it (``SignalEstimator.prior_scale``)
    prior_rate_per_s: float | None = None
    #: the page's host's prior sums ``(n, sum E[lambda], sum E[log lambda])`` as stored
    #: before this interval (``StateStore.read_outcome_inputs``); None: the record gets no
    #: contribution to a host prior
    host_sums: tuple[float, float, float] | None = None
    #: False: the pings during the interval were not recorded (an outcome from a history,
    #: ``recrawl import``): the interval informs the page's change rate only
    #: (:class:`models.estimators.CrawlInterval`'s ``signals_known``) and carries no signal
    #: counts (``signals``, the page record's counts since its last crawl, are not this
    #: interval's: a history's interval is in the past)
    signals_known: bool = True

    @property
    def interval_signals(self) -> tuple[int, ...]:
        """The interval's signal counts per source: ``signals``, or zeros if unknown."""
        return self.signals if self.signals_known else (0,) * len(self.signals)


class Estimation:
    """The estimator of every page (one :class:`SignalEstimator` over the source groups)."""

    def __init__(self, half_life_s: float = math.inf, ring_capacity: int = STREAM_RING,
                 host_min_pages: int = MIN_PAGES) -> None:
        self.estimator = SignalEstimator(N_GROUPS, half_life_s=half_life_s,
                                         ring_capacity=ring_capacity)
        #: crawled pages a host needs before its prior sets its pages' ``alpha``
        self.host_min_pages = int(host_min_pages)

    def state_of(self, record: str | bytes | None, end_s: float = -math.inf) -> SignalState:
        """The stored state, or the prior's if absent, unreadable or of a longer ring than
        this estimator's (as :meth:`states_of`); ``end_s``: the page's last crawl (a record
        does not keep it)."""
        if record:
            try:
                st = EstimatorRecord.decode(record, end_s, self.estimator.ring_capacity).state
            except ValueError:
                pass  # unreadable: start again from the prior
            else:
                if len(st.ring) <= self.estimator.ring_capacity:
                    return st
        return self.estimator.init()

    def observe(self, observations: Sequence[Observation]) -> list[str]:
        """New records after one interval each, every page at once: the stored states read
        into arrays, one vectorised update (:func:`models.estimators.batch_update`, equal to
        ``SignalEstimator.update`` page by page), one Newton solve for the estimates
        (``batch_alpha_kappa``), the records written from the arrays.  No ``SignalState``
        object per page (``tests/integration/test_estimation.py`` checks the records against
        that path).  Each observation must be a different page (the outcomes agent's
        chunks)."""
        if not observations:
            return []
        m = len(observations)
        tau = np.fromiter((max(0.0, o.interval_s) for o in observations), np.float64, m)
        fetched = np.fromiter((o.fetched_at_s for o in observations), np.float64, m)
        batch = self.states_of([o.record for o in observations], fetched - tau)
        changed = np.fromiter((o.changed for o in observations), bool, m)
        known = np.fromiter((o.signals_known for o in observations), bool, m)
        signals = np.array([o.interval_signals for o in observations], dtype=np.float64)
        # a fetch before the stored last crawl (a clock step): the interval follows it
        prev = batch.end_s
        end = np.where(fetched >= prev, fetched, prev + tau)
        rates = _prior_rates(observations)
        batch_update(self.estimator, batch, tau, changed, group_sums(signals.reshape(m, -1)),
                     end_s=end, prior_rate_per_s=rates,
                     signals_known=None if known.all() else known)
        alpha, alpha_se, kappa = batch_alpha_kappa(self.estimator, batch, rates)
        # the mode is the running estimate from here on (module docstring)
        batch.theta[:, 0], batch.theta[:, 1:] = alpha, kappa
        host = self.host_contributions(observations, batch, rates)
        return self.records_of(batch, alpha, alpha_se, kappa, host)

    def host_contributions(self, observations: Sequence[Observation], batch: BatchSignalState,
                           rates: npt.NDArray[np.float64]) -> npt.NDArray[np.float64] | None:
        """The records' ``host`` fields (``streams.estimates.record``): each page's posterior
        ``E[lambda]`` and ``E[log lambda]`` under its host's prior as read before the update
        (the E-step of the incremental EM, :func:`models.estimators.host_prior.host_contributions`;
        a host whose sums hold no page: ``Gamma(1, 1/r)`` at the page's own prior rate, else
        at the page's own posterior mode after this interval), the mean negated where it is
        not the page's crawl ``alpha`` (host with fewer than ``host_min_pages`` pages, or a
        page with its own prior rate).  None when no observation carries host sums.

        The empty host's Gamma is centred on the page's own mode, not on a fixed rate: the
        first pages' contributions start the host's EM, and a fixed start (the estimator's
        rate before any interval is the daily-scale 1 per 57.5 h) pulled the first posterior
        means of pages crawled every 35 s down about 750-fold (ten intervals, six changed:
        3.4e-5/s against the page's own 0.022/s, ``tests/unit/test_estimation_host_start.py``);
        the later E-steps under the Gamma those fitted stayed low (docs/streaming.md "Host
        prior").  The mode
        scales with the page's crawl interval as the scale-free pseudo-intervals do
        (:mod:`models.estimators._prior`), so the start is scale-free too."""
        use = np.fromiter((o.host_sums is not None for o in observations), bool,
                          len(observations))
        if not use.any():
            return None
        rows = np.flatnonzero(use)
        sums = np.array([observations[i].host_sums for i in rows.tolist()], dtype=np.float64)
        # one M-step per host (a chunk's pages of one host read the same sums)
        uniq, inv = np.unique(sums, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        h_shape, h_rate, h_fitted = host_priors(uniq[:, 0], uniq[:, 1], uniq[:, 2])
        shape, rate, fitted = h_shape[inv], h_rate[inv], h_fitted[inv]
        own = np.isfinite(rates[rows]) & (rates[rows] > 0.0)
        start = np.where(own, rates[rows], batch.theta[rows, 0])
        post = host_contributions(grid_log_likelihood(batch, rows), shape, rate, fitted,
                                  (np.ones(rows.size), 1.0 / start))
        in_use = fitted & (sums[:, 0] >= self.host_min_pages) & ~own
        out = np.zeros((len(observations), 2))
        out[rows, 0] = np.where(in_use, post.mean_per_s, -post.mean_per_s)
        out[rows, 1] = post.mean_log
        return out

    def states_of(self, records: Sequence[str | bytes | None],
                  end_s: npt.NDArray[np.float64] | None = None) -> BatchSignalState:
        """Records as arrays, one ``numpy.frombuffer`` per layout; absent or unreadable
        records, and those of a ring longer than this estimator's, start from the prior.
        ``end_s``: each page's last crawl (not kept in the record; ``-inf`` if not given)."""
        n = len(records)
        batch = batch_from_bytes(self.estimator, [None] * n)[0]  # the prior everywhere
        raws = [raw_bytes(r) if r else b"" for r in records]
        for rows, ring_len, arr in unpack_records(raws):
            if ring_len <= self.estimator.ring_capacity:
                fill_batch(batch, rows, ring_len, arr, end_s)
        return batch

    def records_of(self, batch: BatchSignalState, alpha: npt.NDArray[np.float64],
                   alpha_se: npt.NDArray[np.float64], kappa: npt.NDArray[np.float64],
                   host: npt.NDArray[np.float64] | None = None) -> list[str]:
        """The record of every page of ``batch`` with its estimates and host contributions
        (:func:`streams.estimates.record.records_from_batch`), as surrogate-escaped ``str``."""
        return [r.decode("utf-8", "surrogateescape")
                for r in records_from_batch(batch, alpha, alpha_se, kappa, host)]

    def observe_states(self, observations: Sequence[Observation]) -> list[str]:
        """:meth:`observe` through ``SignalState`` objects (:func:`update_many`): the same
        records, kept as the reference the array path is tested against."""
        if not observations:
            return []
        states = [self.state_of(o.record, o.fetched_at_s - o.interval_s) for o in observations]
        intervals = [
            CrawlInterval(max(0.0, o.interval_s), o.changed, group_counts(o.interval_signals),
                          end_s=o.fetched_at_s if o.fetched_at_s >= st.end_s else None,
                          prior_rate_per_s=o.prior_rate_per_s,
                          signals_known=o.signals_known)
            for o, st in zip(observations, states, strict=True)
        ]
        new_states, r = update_many(self.estimator, states, intervals)
        ests = _estimates_list(r, new_states)
        # the mode is the running estimate from here on, as in observe
        return [EstimatorRecord(e, replace(s, theta=(e.alpha_per_s, *e.kappa))).encode()
                for e, s in zip(ests, new_states, strict=True)]

    def results(self, states: Sequence[SignalState],
                prior_rates_per_s: Sequence[float | None] | None = None) -> list[Estimates]:
        """Converged estimates of several states (``batch_result``: one Newton solve);
        ``prior_rates_per_s``: each page's own prior rate, as its observations had it."""
        if not states:
            return []
        capacity = max([self.estimator.ring_capacity, *(len(st.ring) for st in states)])
        batch = states_to_batch(states, capacity, self.estimator.n_sources)
        rates = None if prior_rates_per_s is None else np.array(
            [np.nan if r is None else r for r in prior_rates_per_s], dtype=np.float64)
        return _estimates_list(batch_result(self.estimator, batch, prior_rate_per_s=rates),
                               states)


def _prior_rates(observations: Sequence[Observation]) -> npt.NDArray[np.float64]:
    """The observations' pages' own prior rates (NaN: none given)."""
    return np.fromiter((np.nan if o.prior_rate_per_s is None else o.prior_rate_per_s
                        for o in observations), np.float64, len(observations))


def _estimates_list(r: BatchEstimate, states: Sequence[SignalState]) -> list[Estimates]:
    a, a_se = r.alpha_per_s.tolist(), r.alpha_se_per_s.tolist()
    c, c_se = r.change_rate_per_s.tolist(), r.change_rate_se_per_s.tolist()
    g, k = r.gamma_per_s.tolist(), r.kappa.tolist()
    p, p_se, q, q_se = (r.precision.tolist(), r.precision_se.tolist(), r.recall.tolist(),
                        r.recall_se.tolist())
    return [
        Estimates(a[i], a_se[i], c[i], c_se[i], tuple(g[i]), tuple(k[i]), tuple(p[i]),
                  tuple(p_se[i]), tuple(q[i]), tuple(q_se[i]), st.n_intervals)
        for i, st in enumerate(states)
    ]
