"""Vectorised streaming estimator: the :class:`~models.estimators.signals.SignalEstimator`
update and result over ``N`` pages at once, for the simulator and the service.

The model is paper 004 App. E (``P(no change) = exp(-alpha*tau - sum_s kappa_s*n_s)``); the
streaming state and its eviction rule (the quadratic, Laplace-style summary of a changed
interval leaving the ring, expanded at the running estimate after one Newton step, or
``FIRST_EVICTION_STEPS`` at a page's first eviction) are :mod:`.signals`'s.  The arithmetic is
the scalar estimator's (same ring, same eviction rule, same Newton steps), so a page updated
here and the same page updated with ``SignalEstimator.update`` agree to rounding
(``tests/unit/test_estimators.py`` checks it over randomised histories).  The ring is circular here
(``ring_pos`` = oldest).  Unlike the scalar form, :func:`batch_update` updates the arrays in
place, for speed.

Three entry points:

* arrays: :func:`batch_init` / :func:`states_to_batch`, then :func:`batch_update` and
  :func:`batch_result` on a :class:`BatchSignalState` (no per-page Python objects);
* bytes: :func:`batch_from_bytes` / :func:`batch_to_bytes` read and write many pages'
  ``SignalState.to_bytes`` records at once (the same bytes), so a service can go from stored
  states to stored states without a ``SignalState`` per page;
* objects: :func:`update_many` - ``SignalState`` objects and ``CrawlInterval`` observations in,
  new states and a :class:`BatchEstimate` out; the same as ``SignalEstimator.update`` then
  ``SignalEstimator.result`` page by page, in one vectorised pass.

Over 600 lines on purpose: the three entry points share the update's arithmetic, which
reads beside the scalar one of :mod:`.signals` step by step; split, each half would have to
be checked against the scalar form on its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from . import _numeric as nm
from ._prior import MAX_MEAN_INTERVAL_S, MIN_MEAN_INTERVAL_S, SignalPrior
from .signals import (
    _VERSION,
    FIRST_EVICTION_STEPS,
    CrawlInterval,
    SignalEstimator,
    SignalState,
    _check_interval,
    _estimates_from,
)

__all__ = [
    "BatchEstimate",
    "BatchSignalState",
    "batch_alpha_kappa",
    "batch_from_bytes",
    "batch_init",
    "batch_result",
    "batch_to_bytes",
    "batch_to_states",
    "batch_update",
    "states_to_batch",
    "update_many",
]

IntArray = npt.NDArray[np.int64]


@dataclass(slots=True)
class BatchSignalState:
    """Structure-of-arrays state of ``N`` pages (``d = 1 + n_sources``, ``K`` ring slots).

    ``end_s (N,)`` (``-inf`` before the first interval), ``n_intervals (N,)``,
    ``theta (N,d)``, ``unchanged (N,d)``, ``totals (N,d)``, ``ring (N,K,d+1)``,
    ``ring_len (N,)``, ``ring_pos (N,)``, ``quad_b (N,d)``, ``quad_a (N,d,d)``, ``rep (N,2)``
    (the representative changed interval without signals: weight, length), ``unknown (N,4)``
    (the intervals with signals unknown: time, unchanged time, representative weight, length).
    """

    end_s: nm.FloatArray
    n_intervals: IntArray
    theta: nm.FloatArray
    unchanged: nm.FloatArray
    totals: nm.FloatArray
    ring: nm.FloatArray
    ring_len: IntArray
    ring_pos: IntArray
    quad_b: nm.FloatArray
    quad_a: nm.FloatArray
    rep: nm.FloatArray
    unknown: nm.FloatArray

    @property
    def n_pages(self) -> int:
        """Number of pages ``N``."""
        return int(self.end_s.shape[0])

    def page_state(self, page: int, ring_capacity: int) -> SignalState:
        """The scalar :class:`SignalState` of one page (ring in chronological order)."""
        d = self.theta.shape[1]
        k = self.ring.shape[1]
        n = int(self.ring_len[page])
        order = [(int(self.ring_pos[page]) + j) % k for j in range(n)]
        ring = tuple(tuple(float(x) for x in self.ring[page, j]) for j in order)
        quad_a = tuple(float(self.quad_a[page, i, j]) for i in range(d) for j in range(i, d))
        return SignalState(
            d - 1,
            float(self.end_s[page]),
            int(self.n_intervals[page]),
            tuple(float(x) for x in self.theta[page]),
            tuple(float(x) for x in self.unchanged[page]),
            tuple(float(x) for x in self.totals[page]),
            ring,
            tuple(float(x) for x in self.quad_b[page]),
            quad_a,
            ring_capacity,
            (float(self.rep[page, 0]), float(self.rep[page, 1])),
            tuple(float(x) for x in self.unknown[page]),  # type: ignore[arg-type]
        )


@dataclass(frozen=True, slots=True)
class BatchEstimate:
    """Arrays of :class:`~models.estimators.signals.SignalEstimate` fields over pages."""

    alpha_per_s: nm.FloatArray
    alpha_se_per_s: nm.FloatArray
    kappa: nm.FloatArray
    kappa_se: nm.FloatArray
    gamma_per_s: nm.FloatArray
    gamma_se_per_s: nm.FloatArray
    change_rate_per_s: nm.FloatArray
    change_rate_se_per_s: nm.FloatArray
    precision: nm.FloatArray
    precision_se: nm.FloatArray
    recall: nm.FloatArray
    recall_se: nm.FloatArray
    nu_per_s: nm.FloatArray
    beta_s: nm.FloatArray


def batch_init(estimator: SignalEstimator, n_pages: int) -> BatchSignalState:
    """State of ``n_pages`` pages never crawled."""
    if not (isinstance(n_pages, int) and n_pages >= 0):
        raise ValueError(f"n_pages must be an integer >= 0, got {n_pages!r}")
    d = 1 + estimator.n_sources
    k = estimator.ring_capacity
    theta0 = np.array(estimator.init().theta)
    return BatchSignalState(
        end_s=np.full(n_pages, -np.inf),
        n_intervals=np.zeros(n_pages, dtype=np.int64),
        theta=np.tile(theta0, (n_pages, 1)),
        unchanged=np.zeros((n_pages, d)),
        totals=np.zeros((n_pages, d)),
        ring=np.zeros((n_pages, k, d + 1)),
        ring_len=np.zeros(n_pages, dtype=np.int64),
        ring_pos=np.zeros(n_pages, dtype=np.int64),
        quad_b=np.zeros((n_pages, d)),
        quad_a=np.zeros((n_pages, d, d)),
        rep=np.zeros((n_pages, 2)),
        unknown=np.zeros((n_pages, 4)),
    )


def prior_scales(estimator: SignalEstimator, observed_time_s: nm.FloatArray,
                 n_intervals: IntArray, prior: SignalPrior | None = None,
                 prior_rate_per_s: nm.FloatArray | None = None) -> nm.FloatArray:
    """:meth:`SignalEstimator.prior_scale` of many pages (the pseudo-intervals' factor);
    ``prior_rate_per_s``: each page's own prior rate (NaN or <= 0: none given)."""
    p = estimator.prior if prior is None else prior
    ref = p.change.reference_interval_s
    if ref is None or estimator.half_life_s != math.inf:
        return np.ones(np.shape(observed_time_s))
    t = np.asarray(observed_time_s, dtype=np.float64)
    n = np.asarray(n_intervals, dtype=np.float64)
    ok = (n > 0) & (t > 0.0)
    mean = np.clip(t / np.where(ok, n, 1.0), MIN_MEAN_INTERVAL_S, MAX_MEAN_INTERVAL_S)
    out: nm.FloatArray = np.where(ok, mean / ref, 1.0)
    if prior_rate_per_s is not None:
        r = np.asarray(prior_rate_per_s, dtype=np.float64)
        given = np.isfinite(r) & (r > 0.0)
        if given.any():
            by_rate = np.clip(p.change.prior_rate_per_s / np.where(given, r, 1.0),
                              MIN_MEAN_INTERVAL_S / ref, MAX_MEAN_INTERVAL_S / ref)
            out = np.where(given, by_rate, out)
    return out


def _prior_arrays(
    estimator: SignalEstimator, n: int, prior: SignalPrior | None = None,
    scale: nm.FloatArray | None = None,
) -> tuple[nm.FloatArray, nm.FloatArray, nm.FloatArray]:
    d = 1 + estimator.n_sources
    if prior is None:
        plin, pent = estimator._prior_lin, estimator._prior_entries
    else:
        plin, pent = prior.compiled(estimator.n_sources)
    lin = np.tile(np.array(plin), (n, 1))
    if pent:
        v = np.tile(np.array([e[:d] for e in pent])[None], (n, 1, 1))
        w = np.tile(np.array([e[d] for e in pent])[None], (n, 1))
    else:
        v, w = np.zeros((n, 0, d)), np.zeros((n, 0))
    if scale is not None:
        lin[:, 0] *= scale
        v[:, :, 0] *= scale[:, None]
    return lin, v, w


def _rep_entries(reps: nm.FloatArray, d: int) -> nm.FloatArray:
    """The representative intervals ``(N,2)`` as entries ``(N,1,d)`` ``(T, 0, .., 0)``."""
    out = np.zeros((reps.shape[0], 1, d))
    out[:, 0, 0] = reps[:, 1]
    return out


def _ring_weights(ring: nm.FloatArray, ring_len: IntArray, ring_pos: IntArray) -> nm.FloatArray:
    k = ring.shape[1]
    slot_age = (np.arange(k)[None, :] - ring_pos[:, None]) % k
    w: nm.FloatArray = np.where(slot_age < ring_len[:, None], ring[:, :, -1], 0.0)
    return w


def batch_update(
    estimator: SignalEstimator,
    state: BatchSignalState,
    interval_s: nm.FloatArray,
    changed: npt.NDArray[np.bool_],
    n_signals: nm.FloatArray | None = None,
    *,
    pages: IntArray | None = None,
    end_s: nm.FloatArray | None = None,
    prior_rate_per_s: nm.FloatArray | None = None,
    signals_known: npt.NDArray[np.bool_] | None = None,
) -> None:
    """Add one crawl interval to each page in ``pages`` (all pages if ``None``), in place.
    ``prior_rate_per_s``: each updated page's own prior rate (:func:`prior_scales`);
    ``signals_known``: ``False`` where the interval's signals were not recorded (default:
    all recorded; ``CrawlInterval.signals_known``).

    Parameters are arrays over the updated pages (``n_signals`` is ``(M, S)``); ``pages``
    must not repeat a page.  Validation and semantics are those of
    :meth:`SignalEstimator.update`; a ``ValueError`` names the offending field.
    """
    s = estimator.n_sources
    d = 1 + s
    # with pages=None every array below is a view and is updated in place
    idx: slice | IntArray = slice(None) if pages is None else np.asarray(pages, dtype=np.int64)
    m = state.n_pages if pages is None else len(idx)  # type: ignore[arg-type]
    tau = np.asarray(interval_s, dtype=np.float64)
    ch = np.asarray(changed, dtype=bool)
    if tau.shape != (m,) or not np.all((tau >= 0.0) & np.isfinite(tau)):
        raise ValueError(f"interval_s must be {m} finite values >= 0")
    if ch.shape != (m,):
        raise ValueError(f"changed must have shape ({m},), got {ch.shape}")
    sig = np.zeros((m, 0)) if n_signals is None else np.asarray(n_signals, dtype=np.float64)
    if sig.ndim == 1 and s == 1:
        sig = sig[:, None]
    if sig.shape != (m, s) or not np.all((sig >= 0.0) & np.isfinite(sig)):
        raise ValueError(f"n_signals must be finite counts >= 0 of shape ({m}, {s})")
    if pages is not None and np.unique(np.asarray(idx)).size != m:
        raise ValueError("pages must not repeat a page")
    known = (np.ones(m, dtype=bool) if signals_known is None
             else np.asarray(signals_known, dtype=bool))
    if known.shape != (m,):
        raise ValueError(f"signals_known must have shape ({m},), got {known.shape}")
    if np.any(~known & np.any(sig != 0.0, axis=1)):
        raise ValueError("n_signals must be zeros when signals_known is False")
    if s == 0:
        known = np.ones(m, dtype=bool)  # without sources Delta = alpha: ordinary intervals
    # a copy: with pages=None this would be a view, overwritten below before the decay uses it
    prev = state.end_s[idx].copy()
    has_prev = prev > -np.inf
    if end_s is None:
        end = np.where(has_prev, prev + tau, tau)
    else:
        end = np.asarray(end_s, dtype=np.float64)
        if end.shape != (m,) or not np.all(np.isfinite(end)):
            raise ValueError(f"end_s must be {m} finite values")
        if np.any(has_prev & (end < prev)):
            raise ValueError("end_s is before the previous crawl for some pages")
    state.end_s[idx] = end
    v = np.concatenate([tau[:, None], sig], axis=1)
    informative = np.any(v > 0.0, axis=1)
    unchanged = state.unchanged[idx]
    totals = state.totals[idx]
    ring = state.ring[idx]
    quad_b = state.quad_b[idx]
    quad_a = state.quad_a[idx]
    reps = state.rep[idx]
    unk = state.unknown[idx]
    if estimator.half_life_s < math.inf:
        lapse = np.where(has_prev & (end > prev), end - prev, 0.0)
        decay = np.exp2(-lapse / estimator.half_life_s)
        unchanged *= decay[:, None]
        totals *= decay[:, None]
        ring[:, :, d] *= decay[:, None]
        quad_b *= decay[:, None]
        quad_a *= decay[:, None, None]
        reps[:, 0] *= decay
        unk[:, :3] *= decay[:, None]
    totals += np.where(informative[:, None], v, 0.0)
    hidden = informative & ~known
    if hidden.any():
        # intervals with signals unknown inform Delta only (SignalEstimator.update)
        h = np.flatnonzero(hidden)
        unk[h, 0] += tau[h]
        unk[h, 1] += np.where(ch[h], 0.0, tau[h])
        hc = h[ch[h]]
        if hc.size:
            rows_hc = hc if pages is None else np.asarray(idx)[hc]
            delta = nm.change_rate(state.theta[rows_hc], nm.gamma_rates(totals[hc], unk[hc]))
            nw, nt = nm.merge_representative(delta, unk[hc, 2], unk[hc, 3],
                                             np.ones(hc.size), tau[hc])
            unk[hc, 2] = nw
            unk[hc, 3] = nt
    unchanged += np.where((informative & known & ~ch)[:, None], v, 0.0)
    state.n_intervals[idx] += informative
    add = informative & known & ch
    ring_len = state.ring_len[idx]
    ring_pos = state.ring_pos[idx]
    k = estimator.ring_capacity
    full = add & (ring_len >= k)
    if full.any():
        f = np.flatnonzero(full)
        rows = f if pages is None else np.asarray(idx)[f]
        th = state.theta[rows]
        lin_p, v_p, w_p = _prior_arrays(
            estimator, f.size, None,
            prior_scales(estimator, totals[f, 0], state.n_intervals[rows], None,
                         None if prior_rate_per_s is None
                         else np.asarray(prior_rate_per_s, dtype=np.float64)[f]))
        rw = _ring_weights(ring[f], ring_len[f], ring_pos[f])
        vv = np.concatenate([ring[f, :, :d], _rep_entries(reps[f], d), v_p], axis=1)
        ww = np.concatenate([rw, reps[f, :1], w_p], axis=1)
        lin = unchanged[f] + lin_p
        qb, qa = quad_b[f], quad_a[f]
        first = ~((qa[:, 0, 0] > 0.0) | (reps[f, 0] > 0.0))
        uf = nm.unknown_of(totals[f], unk[f])
        th = nm.newton_step(th, lin, vv, ww, qb, qa, uf)
        if first.any():
            fi = np.flatnonzero(first)
            ufi = None if uf is None else uf.take(fi)
            for _ in range(FIRST_EVICTION_STEPS - 1):
                th[fi] = nm.newton_step(th[fi], lin[fi], vv[fi], ww[fi], qb[fi], qa[fi], ufi)
        old = ring[f, ring_pos[f]]
        ov, ow = old[:, :d], old[:, d]
        # without signals: into the representative interval; with: the quadratic summary
        plain = ~np.any(ov[:, 1:] != 0.0, axis=1)
        ow_q = np.where(plain, 0.0, ow)
        x = np.einsum("nd,nd->n", th, ov)
        _, c1, c2 = nm.entry_coefficients(x)
        quad_b[f] += ((ow_q * (c1 + c2 * x))[:, None]) * ov
        quad_a[f] += (ow_q * c2)[:, None, None] * ov[:, :, None] * ov[:, None, :]
        if plain.any():
            pf = f[plain]
            nw, nt = nm.merge_representative(th[plain, 0], reps[pf, 0], reps[pf, 1],
                                             ow[plain], ov[plain, 0])
            reps[pf, 0] = nw
            reps[pf, 1] = nt
        ring[f, ring_pos[f]] = np.concatenate([v[f], np.ones((f.size, 1))], axis=1)
        ring_pos[f] = (ring_pos[f] + 1) % k
        state.theta[rows] = th
    grow = add & ~full
    if grow.any():
        g = np.flatnonzero(grow)
        slot = (ring_pos[g] + ring_len[g]) % k
        ring[g, slot] = np.concatenate([v[g], np.ones((g.size, 1))], axis=1)
        ring_len[g] += 1
    if pages is not None:
        state.unchanged[idx] = unchanged
        state.totals[idx] = totals
        state.ring[idx] = ring
        state.quad_b[idx] = quad_b
        state.quad_a[idx] = quad_a
        state.rep[idx] = reps
        state.unknown[idx] = unk
        state.ring_len[idx] = ring_len
        state.ring_pos[idx] = ring_pos


def batch_result(
    estimator: SignalEstimator,
    state: BatchSignalState,
    *,
    pages: IntArray | None = None,
    prior: SignalPrior | None = None,
    prior_rate_per_s: nm.FloatArray | None = None,
) -> BatchEstimate:
    """Converged estimates (as :meth:`SignalEstimator.result`) for ``pages`` (default all);
    ``prior_rate_per_s``: each of those pages' own prior rate (:func:`prior_scales`)."""
    idx = np.arange(state.n_pages) if pages is None else np.asarray(pages, dtype=np.int64)
    theta, hess = _solve(estimator, state, idx, prior, prior_rate_per_s)
    est = _estimates_from(
        theta, hess, state.totals[idx], estimator.prior if prior is None else prior,
        state.unknown[idx],
    )
    return BatchEstimate(
        alpha_per_s=est["alpha"],
        alpha_se_per_s=est["alpha_se"],
        kappa=est["kappa"],
        kappa_se=est["kappa_se"],
        gamma_per_s=est["gamma"],
        gamma_se_per_s=est["gamma_se"],
        change_rate_per_s=est["change_rate"],
        change_rate_se_per_s=est["change_rate_se"],
        precision=est["precision"],
        precision_se=est["precision_se"],
        recall=est["recall"],
        recall_se=est["recall_se"],
        nu_per_s=est["nu"],
        beta_s=est["beta"],
    )


def _solve(estimator: SignalEstimator, state: BatchSignalState, idx: IntArray,
           prior: SignalPrior | None, prior_rate_per_s: nm.FloatArray | None = None
           ) -> tuple[nm.FloatArray, nm.FloatArray]:
    """The posterior mode ``theta = (alpha, kappa)`` of the pages ``idx`` and its Hessian
    (one vectorised Newton solve)."""
    d = 1 + estimator.n_sources
    lin_p, v_p, w_p = _prior_arrays(
        estimator, idx.size, prior,
        prior_scales(estimator, state.totals[idx, 0], state.n_intervals[idx], prior,
                     prior_rate_per_s))
    ring = state.ring[idx]
    rw = _ring_weights(ring, state.ring_len[idx], state.ring_pos[idx])
    reps = state.rep[idx]
    vv = np.concatenate([ring[:, :, :d], _rep_entries(reps, d), v_p], axis=1)
    ww = np.concatenate([rw, reps[:, :1], w_p], axis=1)
    return nm.newton_solve(
        state.theta[idx], state.unchanged[idx] + lin_p, vv, ww, state.quad_b[idx],
        state.quad_a[idx], unk=nm.unknown_of(state.totals[idx], state.unknown[idx]),
    )


def batch_alpha_kappa(estimator: SignalEstimator, state: BatchSignalState,
                      prior_rate_per_s: nm.FloatArray | None = None
                      ) -> tuple[nm.FloatArray, nm.FloatArray, nm.FloatArray]:
    """``alpha``, its standard error and ``kappa`` of every page: what
    :func:`batch_result` gives for them (the same solve and covariance), without the
    derived quantities and their delta-method standard errors (14 more evaluations of
    :func:`models.estimators._numeric.derive`), for a caller that keeps only these three
    (the stream's estimator record, ``streams/estimates/record.py``)."""
    theta, hess = _solve(estimator, state, np.arange(state.n_pages), None, prior_rate_per_s)
    cov = nm.covariance(hess)
    return theta[:, 0], np.sqrt(np.maximum(cov[:, 0, 0], 0.0)), theta[:, 1:]


def states_to_batch(
    states: Sequence[SignalState], ring_capacity: int, n_sources: int | None = None
) -> BatchSignalState:
    """Stack scalar states into a :class:`BatchSignalState` (rings chronological, ``ring_pos = 0``).

    ``n_sources`` is required when ``states`` is empty (default: the first state's).
    Raises ``ValueError`` naming ``states`` when they mix source counts or a ring is longer
    than ``ring_capacity``.
    """
    n = len(states)
    if n_sources is None:
        if n == 0:
            raise ValueError("states: empty; pass n_sources")
        n_sources = states[0].n_sources
    s = n_sources
    d = 1 + s
    k = ring_capacity
    if any(st.n_sources != s for st in states):
        raise ValueError(f"states: every state must have {s} sources")
    lens = np.fromiter((len(st.ring) for st in states), dtype=np.int64, count=n)
    if n and int(lens.max()) > k:
        raise ValueError(f"states: a ring holds {int(lens.max())} intervals > capacity {k}")
    ring = np.zeros((n, k, d + 1))
    total = int(lens.sum())
    if total:
        flat = np.array([e for st in states for e in st.ring], dtype=np.float64)
        rows = np.repeat(np.arange(n), lens)
        starts = np.repeat(np.cumsum(lens) - lens, lens)
        ring[rows, np.arange(total) - starts] = flat.reshape(total, d + 1)
    iu = np.triu_indices(d)
    quad_a = np.zeros((n, d, d))
    if n:
        upper = np.array([st.quad_a for st in states], dtype=np.float64).reshape(n, -1)
        quad_a[:, iu[0], iu[1]] = upper
        quad_a[:, iu[1], iu[0]] = upper

    def rows_of(attr: str) -> nm.FloatArray:
        out: nm.FloatArray = np.array([getattr(st, attr) for st in states], dtype=np.float64)
        return out.reshape(n, d)

    return BatchSignalState(
        end_s=np.fromiter((st.end_s for st in states), dtype=np.float64, count=n),
        n_intervals=np.fromiter((st.n_intervals for st in states), dtype=np.int64, count=n),
        theta=rows_of("theta"),
        unchanged=rows_of("unchanged"),
        totals=rows_of("totals"),
        ring=ring,
        ring_len=lens,
        ring_pos=np.zeros(n, dtype=np.int64),
        quad_b=rows_of("quad_b"),
        quad_a=quad_a,
        rep=np.array([st.rep for st in states], dtype=np.float64).reshape(n, 2),
        unknown=np.array([st.unknown for st in states], dtype=np.float64).reshape(n, 4),
    )


def batch_to_states(state: BatchSignalState, ring_capacity: int) -> list[SignalState]:
    """Every page of ``state`` as a scalar :class:`SignalState` (as :meth:`page_state`)."""
    n = state.n_pages
    d = state.theta.shape[1]
    k = state.ring.shape[1]
    order = (state.ring_pos[:, None] + np.arange(k)[None, :]) % k
    ring = np.take_along_axis(state.ring, order[:, :, None], axis=1).tolist()
    iu = np.triu_indices(d)
    quad_a = state.quad_a[:, iu[0], iu[1]].tolist()
    lens = state.ring_len.tolist()
    end_s = state.end_s.tolist()
    n_int = state.n_intervals.tolist()
    theta = state.theta.tolist()
    unchanged = state.unchanged.tolist()
    totals = state.totals.tolist()
    quad_b = state.quad_b.tolist()
    reps = state.rep.tolist()
    unks = state.unknown.tolist()
    s = d - 1
    return [
        SignalState(
            s, end_s[i], n_int[i], tuple(theta[i]), tuple(unchanged[i]), tuple(totals[i]),
            tuple(map(tuple, ring[i][: lens[i]])), tuple(quad_b[i]), tuple(quad_a[i]),
            ring_capacity, (reps[i][0], reps[i][1]),
            (unks[i][0], unks[i][1], unks[i][2], unks[i][3]),
        )
        for i in range(n)
    ]


def update_many(
    estimator: SignalEstimator,
    states: Sequence[SignalState],
    intervals: Sequence[CrawlInterval],
    *,
    prior: SignalPrior | None = None,
) -> tuple[list[SignalState], BatchEstimate]:
    """``SignalEstimator.update`` then ``.result`` for many pages, in one vectorised pass.

    ``states[i]`` takes ``intervals[i]``; the returned states and the estimate arrays are in
    the same order (a page listed twice is two independent pages here: chain two calls to
    add two intervals to one page).  Validation and messages are ``SignalEstimator.update``'s
    (a ``ValueError`` names ``interval_s``, ``n_signals`` or ``end_s``).  ``prior`` overrides
    the estimator's prior in the result only, as in ``SignalEstimator.result``.
    """
    if len(states) != len(intervals):
        raise ValueError(f"intervals: {len(intervals)} for {len(states)} states")
    s = estimator.n_sources
    for st in states:
        if st.n_sources != s:
            raise ValueError(f"state has {st.n_sources} sources, estimator {s}")
    for obs in intervals:
        _check_interval(obs, s)
    batch = states_to_batch(states, estimator.ring_capacity, s)
    m = len(states)
    tau = np.fromiter((float(o.interval_s) for o in intervals), dtype=np.float64, count=m)
    changed = np.fromiter((bool(o.changed) for o in intervals), dtype=bool, count=m)
    sig = np.array([o.n_signals for o in intervals], dtype=np.float64).reshape(m, s)
    prev = batch.end_s
    has_prev = prev > -np.inf
    # end_s omitted: the previous crawl plus the interval (as SignalEstimator.update)
    end = np.where(has_prev, prev + tau, tau)
    for i, o in enumerate(intervals):
        if o.end_s is not None:
            e = float(o.end_s)
            if has_prev[i] and e < prev[i]:
                raise ValueError(f"end_s={e!r} is before the previous crawl at {prev[i]!r}")
            end[i] = e
    rates = np.fromiter((np.nan if o.prior_rate_per_s is None else float(o.prior_rate_per_s)
                         for o in intervals), dtype=np.float64, count=m)
    known = np.fromiter((bool(o.signals_known) for o in intervals), dtype=bool, count=m)
    batch_update(estimator, batch, tau, changed, sig, end_s=end, prior_rate_per_s=rates,
                 signals_known=known)
    result = batch_result(estimator, batch, prior=prior, prior_rate_per_s=rates)
    return batch_to_states(batch, estimator.ring_capacity), result


def _record_dtype(d: int, ring_len: int) -> np.dtype[np.void]:
    """``SignalState.to_bytes``'s layout with ``ring_len`` ring entries, as a packed record."""
    fields: list[tuple[str, str] | tuple[str, str, tuple[int, ...]]] = [
        ("version", "u1"), ("n_sources", "u1"), ("capacity", "u1"), ("ring_len", "u1"),
        ("end_s", "<f8"), ("n_intervals", "<u4"),
        ("theta", "<f4", (d,)), ("unchanged", "<f8", (d,)), ("totals", "<f8", (d,)),
    ]
    if ring_len:
        fields.append(("ring", "<f4", (ring_len, d + 1)))
    fields += [("quad_b", "<f4", (d,)), ("quad_a", "<f4", (d * (d + 1) // 2,)),
               ("rep", "<f4", (2,)), ("unknown_time", "<f8", (2,)), ("unknown_rep", "<f4", (2,))]
    return np.dtype(fields)


def batch_from_bytes(
    estimator: SignalEstimator, blobs: Sequence[bytes | None]
) -> tuple[BatchSignalState, npt.NDArray[np.bool_]]:
    """Many ``SignalState.to_bytes`` records as one :class:`BatchSignalState` (``numpy``
    reads of each ring length's records at once; ``SignalState.from_bytes`` per page gives the
    same numbers).

    Returns the state and a mask of the records read; a page whose record is ``None``, empty,
    malformed, of another version, another source count, or a ring longer than the
    estimator's capacity is a page never crawled (``batch_init``) with mask ``False``.
    """
    n = len(blobs)
    s = estimator.n_sources
    d = 1 + s
    k = estimator.ring_capacity
    state = batch_init(estimator, n)
    ok = np.zeros(n, dtype=bool)
    base = _record_dtype(d, 0).itemsize
    per_entry = 4 * (d + 1)
    groups: dict[int, list[int]] = {}
    for i, blob in enumerate(blobs):
        if not blob:
            continue
        ring_len, rest = divmod(len(blob) - base, per_entry)
        if rest == 0 and 0 <= ring_len <= k:
            groups.setdefault(ring_len, []).append(i)
    iu = np.triu_indices(d)
    for ring_len, members in groups.items():
        arr = np.frombuffer(b"".join(blobs[i] for i in members),  # type: ignore[misc]
                            dtype=_record_dtype(d, ring_len))
        good = ((arr["version"] == _VERSION) & (arr["n_sources"] == s)
                & (arr["ring_len"] == ring_len))
        rows = np.asarray(members, dtype=np.int64)[good]
        arr = arr[good]
        state.end_s[rows] = arr["end_s"]
        state.n_intervals[rows] = arr["n_intervals"]
        state.theta[rows] = arr["theta"]
        state.unchanged[rows] = arr["unchanged"]
        state.totals[rows] = arr["totals"]
        if ring_len:
            state.ring[rows, :ring_len] = arr["ring"]
        state.ring_len[rows] = ring_len
        state.quad_b[rows] = arr["quad_b"]
        upper = arr["quad_a"].astype(np.float64)
        qa = np.zeros((rows.size, d, d))
        qa[:, iu[0], iu[1]] = upper
        qa[:, iu[1], iu[0]] = upper
        state.quad_a[rows] = qa
        state.rep[rows] = arr["rep"]
        state.unknown[rows, :2] = arr["unknown_time"]
        state.unknown[rows, 2:] = arr["unknown_rep"]
        ok[rows] = True
    return state, ok


def batch_to_bytes(state: BatchSignalState, ring_capacity: int) -> list[bytes]:
    """Every page's ``SignalState.to_bytes`` record (byte for byte), without the objects.

    Floats are rounded to float32 where the layout says so, as ``struct`` does (a value beyond
    float32's range becomes infinite here where ``struct`` raises ``OverflowError``).
    """
    n = state.n_pages
    d = state.theta.shape[1]
    k = state.ring.shape[1]
    out: list[bytes] = [b""] * n
    iu = np.triu_indices(d)
    for ring_len in np.unique(state.ring_len).tolist():
        rows = np.flatnonzero(state.ring_len == ring_len)
        arr = np.zeros(rows.size, dtype=_record_dtype(d, ring_len))
        arr["version"] = _VERSION
        arr["n_sources"] = d - 1
        arr["capacity"] = ring_capacity
        arr["ring_len"] = ring_len
        arr["end_s"] = state.end_s[rows]
        arr["n_intervals"] = np.minimum(state.n_intervals[rows], 0xFFFFFFFF)
        arr["theta"] = state.theta[rows]
        arr["unchanged"] = state.unchanged[rows]
        arr["totals"] = state.totals[rows]
        if ring_len:
            order = (state.ring_pos[rows, None] + np.arange(ring_len)[None, :]) % k
            arr["ring"] = np.take_along_axis(state.ring[rows], order[:, :, None], axis=1)
        arr["quad_b"] = state.quad_b[rows]
        arr["quad_a"] = state.quad_a[rows][:, iu[0], iu[1]]
        arr["rep"] = state.rep[rows]
        arr["unknown_time"] = state.unknown[rows, :2]
        arr["unknown_rep"] = state.unknown[rows, 2:]
        buf = arr.tobytes()
        size = arr.dtype.itemsize
        for j, r in enumerate(rows.tolist()):
            out[r] = buf[j * size : (j + 1) * size]
    return out
