"""Per-page estimators in the stream: crawl intervals in, ``(alpha, beta_s, gamma)`` out.

Each page with at least one observed crawl interval has an :class:`EstimatorRecord` in
``P:{host}:est``: helper B's :class:`models.estimators.SignalEstimator` state (<= 256 bytes,
base64) plus the estimates it gives, so the scheduler rebuilds a shard without re-solving
any MLE.  Only the outcomes agent writes it, in the outcome's offset-guarded Lua step with a
compare-and-set on the page value and the old record (``streams/state.py``), so redelivery
never applies an observation twice.

Source groups
-------------
``SignalEstimator`` takes at most 3 sources; recrawl has 5.  They are grouped by how a
signal is produced, which is also how alike their precision and recall should be:

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
paper 004 applied to the merged source (:func:`models.decision.pooling.pooled_beta`, the
same rule as the simulator; the plain mean of ``beta_g`` while ``gamma = 0``).  ``alpha``
may be taken at an upper quantile of its posterior (``settings.estimate_quantile``,
:func:`conservative_change_rate` of paper 003 Sec. 5.3) while the estimate converges;
``kappa_g = alpha*beta_g`` is kept, so a signal's evidence does not change with the quantile.

A crawl whose outcome says ``changed: null`` (the fetcher's first fetch of a URL: nothing to
compare with) is not an observation; the next interval starts at it, because the fetcher
compares the next fetch with that one.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from models.decision.pooling import pooled_beta
from models.estimators import (
    BatchEstimate,
    BatchSignalState,
    CrawlInterval,
    SignalEstimator,
    SignalState,
    batch_from_bytes,
    batch_result,
    batch_to_bytes,
    batch_update,
    conservative_change_rate,
    states_to_batch,
    update_many,
)
from streams.records import SOURCES

__all__ = [
    "GROUPS",
    "GROUP_NAMES",
    "GROUP_OF",
    "N_GROUPS",
    "Estimates",
    "Estimation",
    "EstimatorRecord",
    "Observation",
    "estimates_of",
    "group_counts",
    "value_parameters",
]

#: Estimator source groups (see the module docstring): name -> recrawl sources.
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
N_GROUPS = len(GROUPS)
#: ``signals (M, sources) @ _GROUP_SUM`` = per-group sums (:func:`group_counts` on arrays)
_GROUP_SUM = np.array([[1.0 if GROUP_OF[s] == g else 0.0 for g in range(N_GROUPS)]
                       for s in range(len(SOURCES))])
#: :meth:`Estimates.encode`'s text: 4 + 6 per-group fields at 6 significant digits, the count
_ESTIMATES_FORMAT = ",".join(["{:.6g}"] * (4 + 6 * N_GROUPS)) + ",{}"


def group_counts(signals: Sequence[int]) -> tuple[float, ...]:
    """Per-source signal counts (``SOURCES`` order) summed per group."""
    out = [0.0] * N_GROUPS
    for s, n in enumerate(signals):
        out[GROUP_OF[s]] += n
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Estimates:
    """What the crawl value needs from a page's estimator, with standard errors."""

    alpha_per_s: float
    alpha_se_per_s: float
    change_rate_per_s: float
    change_rate_se_per_s: float
    gamma_per_s: tuple[float, ...]  # per group
    kappa: tuple[float, ...]  # per group
    precision: tuple[float, ...]
    precision_se: tuple[float, ...]
    recall: tuple[float, ...]
    recall_se: tuple[float, ...]
    n_intervals: int

    def encode(self) -> str:
        nums = (self.alpha_per_s, self.alpha_se_per_s, self.change_rate_per_s,
                self.change_rate_se_per_s, *self.gamma_per_s, *self.kappa, *self.precision,
                *self.precision_se, *self.recall, *self.recall_se)
        return ",".join(f"{x:.6g}" for x in nums) + f",{self.n_intervals}"

    @classmethod
    def decode(cls, text: str) -> Estimates:
        v = text.split(",")
        if len(v) != 4 + 6 * N_GROUPS + 1:
            raise ValueError(f"estimates: expected {4 + 6 * N_GROUPS + 1} fields, got {len(v)}")
        f = [float(x) for x in v[:-1]]
        g = N_GROUPS

        def grp(i: int) -> tuple[float, ...]:
            return tuple(f[4 + i * g : 4 + (i + 1) * g])

        return cls(f[0], f[1], f[2], f[3], grp(0), grp(1), grp(2), grp(3), grp(4), grp(5),
                   int(v[-1]))


@dataclass(frozen=True, slots=True)
class EstimatorRecord:
    """``P:{host}:est`` value: ``<estimates>|<base64 SignalState>``."""

    estimates: Estimates
    state: SignalState

    def encode(self) -> str:
        return f"{self.estimates.encode()}|{base64.b64encode(self.state.to_bytes()).decode()}"

    @classmethod
    def decode(cls, text: str) -> EstimatorRecord:
        est, _, b64 = text.partition("|")
        try:
            raw = base64.b64decode(b64, validate=True)
        except binascii.Error as exc:
            raise ValueError(f"estimator state is not base64: {exc}") from None
        return cls(Estimates.decode(est), SignalState.from_bytes(raw))


def estimates_of(text: str | None) -> Estimates | None:
    """The estimates part of a stored record (cheap: no state decoding); None if absent/bad."""
    if not text:
        return None
    try:
        return Estimates.decode(text.partition("|")[0])
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Observation:
    """One crawl interval of one page, as the outcomes agent sees it."""

    record: str | None  # the stored record before this interval (None: none yet)
    interval_s: float
    signals: tuple[int, ...]  # per source, SOURCES order
    changed: bool
    fetched_at_s: float


class Estimation:
    """The estimator of every page (one :class:`SignalEstimator` over the source groups)."""

    def __init__(self, half_life_s: float = math.inf) -> None:
        self.estimator = SignalEstimator(N_GROUPS, half_life_s=half_life_s)

    def state_of(self, record: str | None) -> SignalState:
        """The stored state, or the prior's if absent, unreadable, or of another shape (a
        record written with other source groups or ring capacity starts again)."""
        if record:
            try:
                st = EstimatorRecord.decode(record).state
            except (ValueError, TypeError):
                pass  # unreadable (or another version): start again from the prior
            else:
                if (st.n_sources == self.estimator.n_sources
                        and len(st.ring) <= self.estimator.ring_capacity):
                    return st
        return self.estimator.init()

    def observe(self, observations: Sequence[Observation]) -> list[str]:
        """New records after one interval each, every page at once: the stored states read
        into arrays, one vectorised update (:func:`models.estimators.batch_update`, equal to
        ``SignalEstimator.update`` page by page), one Newton solve for the estimates
        (``batch_result``), the records written from the arrays.  No ``SignalState`` object
        per page (``tests/streams/test_estimation.py`` checks the records against that path).
        Each observation must be a different page (the outcomes agent's chunks)."""
        if not observations:
            return []
        batch = self.states_of([o.record for o in observations])
        m = len(observations)
        tau = np.fromiter((max(0.0, o.interval_s) for o in observations), np.float64, m)
        changed = np.fromiter((o.changed for o in observations), bool, m)
        signals = np.array([o.signals for o in observations], dtype=np.float64)
        fetched = np.fromiter((o.fetched_at_s for o in observations), np.float64, m)
        # a fetch before the stored last crawl (a clock step): the interval follows it
        prev = batch.end_s
        end = np.where(fetched >= prev, fetched, prev + tau)
        batch_update(self.estimator, batch, tau, changed, signals.reshape(m, -1) @ _GROUP_SUM,
                     end_s=end)
        return self.records_of(batch, batch_result(self.estimator, batch))

    # -- the stored record <-> arrays (the storage encoding lives here and in EstimatorRecord)
    def states_of(self, records: Sequence[str | None]) -> BatchSignalState:
        """The stored states as arrays; absent or unreadable records (another version, other
        source groups or ring capacity) start from the prior, as :meth:`state_of`."""
        blobs: list[bytes | None] = []
        for rec in records:
            blob = None
            if rec:
                with contextlib.suppress(binascii.Error, ValueError):
                    blob = base64.b64decode(rec.partition("|")[2], validate=True)
            blobs.append(blob)
        return batch_from_bytes(self.estimator, blobs)[0]

    def records_of(self, batch: BatchSignalState, r: BatchEstimate) -> list[str]:
        """:meth:`EstimatorRecord.encode` of every page of ``batch`` with its estimates."""
        blobs = batch_to_bytes(batch, self.estimator.ring_capacity)
        nums = np.column_stack([
            r.alpha_per_s, r.alpha_se_per_s, r.change_rate_per_s, r.change_rate_se_per_s,
            r.gamma_per_s, r.kappa, r.precision, r.precision_se, r.recall, r.recall_se,
        ]).tolist()
        fmt = _ESTIMATES_FORMAT
        b64 = base64.b64encode
        return [f"{fmt.format(*row, n)}|{b64(blob).decode()}"
                for row, n, blob in zip(nums, batch.n_intervals.tolist(), blobs, strict=True)]

    def observe_states(self, observations: Sequence[Observation]) -> list[str]:
        """:meth:`observe` through ``SignalState`` objects (:func:`update_many`): the same
        records, kept as the reference the array path is tested against."""
        if not observations:
            return []
        states = [self.state_of(o.record) for o in observations]
        intervals = [
            CrawlInterval(max(0.0, o.interval_s), o.changed, group_counts(o.signals),
                          end_s=o.fetched_at_s if o.fetched_at_s >= st.end_s else None)
            for o, st in zip(observations, states, strict=True)
        ]
        new_states, r = update_many(self.estimator, states, intervals)
        return [EstimatorRecord(e, s).encode()
                for e, s in zip(_estimates_list(r, new_states), new_states, strict=True)]

    def results(self, states: Sequence[SignalState]) -> list[Estimates]:
        """Converged estimates of several states (``batch_result``: one Newton solve)."""
        if not states:
            return []
        batch = states_to_batch(states, self.estimator.ring_capacity, self.estimator.n_sources)
        return _estimates_list(batch_result(self.estimator, batch), states)


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


def value_parameters(
    est: Estimates, quantile: float
) -> tuple[float, tuple[float, ...], float, float]:
    """``(alpha, beta per group, gamma, beta)`` for the crawl value (module docstring)."""
    alpha = max(est.alpha_per_s, 1e-300)
    if quantile != 0.5:
        alpha = float(conservative_change_rate(alpha, est.alpha_se_per_s, quantile)) or alpha
    betas = tuple(k / alpha for k in est.kappa)
    gamma = float(sum(est.gamma_per_s))
    # the merged source of paper 004 Sec. 3 (models.decision.pooling): the simulator's rule
    beta = pooled_beta(alpha, betas, est.gamma_per_s)
    return alpha, betas, gamma, beta
