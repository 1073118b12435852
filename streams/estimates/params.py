"""A page's crawl-value parameters ``(alpha, beta, gamma, mu)`` and ``origin`` from its state.

This is the one place that decides where parameters come from: the page's estimates
(``streams/estimates/estimation.py``: ``models.estimators.SignalEstimator`` over three source
groups) once it has an observed crawl interval, priors before.

``tau_eff(t) = t - origin`` with ``origin = last_crawl - sum_s beta_s n_s`` (paper 004
Sec. 3: every signal of source ``s`` since the last crawl adds ``beta_s``).  A page never
crawled has ``origin = 0`` (epoch): its ``tau_eff`` is decades, its value ``mu/Delta``, the
largest it can be - we hold no copy of it, so it is stale for sure.

Before a page has an estimate:

* ``Delta`` is its prior change rate, else ``settings.default_change_rate_per_s``;
* ``alpha = Delta`` and ``gamma = 0`` (Greedy's value function, Sec. 5.1), so a signal
  only moves ``tau_eff``;
* ``beta_s = -ln(1 - p_s) / alpha`` with the default precision ``p_s`` of every source
  (the elapsed-time equivalent of one signal that is right with probability ``p_s``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy.special import gammaincinv

from models.decision.pooling import pooled_params
from models.estimators import _numeric as nm
from models.estimators import conservative_change_rate
from models.estimators.host_prior import fit_gammas
from streams.estimates.estimation import (
    GROUP_OF,
    GROUPS,
    Estimates,
    estimates_of,
)
from streams.estimates.record import gamma_from_totals, record_heads, record_sizes
from streams.events.records import SOURCES
from streams.settings import Settings
from streams.store.page_record import (
    FP_BYTES,
    N_SOURCES,
    PAGE_HEAD_DTYPE,
    PAGE_VERSION,
    SHAPE_COUNTS,
    SHAPE_PRIOR,
    SHAPE_SEEN,
    PageState,
    record_bytes,
    shape_length,
)

__all__ = ["PageParams", "ParamsMany", "page_origin", "page_params", "page_params_many",
           "params_arrays"]


@dataclass(frozen=True, slots=True)
class PageParams:
    alpha_per_s: float
    beta_s: float
    gamma_per_s: float
    mu: float
    change_rate_per_s: float
    source_beta_s: tuple[float, ...]
    origin_s: float
    estimated: bool

    def tau_eff_s(self, now_s: float) -> float:
        return max(0.0, now_s - self.origin_s)

    def max_value(self) -> float:
        """``V(inf) = mu/Delta`` of the value function's model (the value of a page never
        crawled): ``Delta = alpha + gamma - nu``, ``nu = gamma exp(-alpha beta)`` (paper 004
        Sec. 3)."""
        a, b, g = self.alpha_per_s, self.beta_s, self.gamma_per_s
        delta = a + (g * -math.expm1(-a * b) if g > 0 else 0.0)
        return self.mu / delta if delta > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "alpha_per_s": self.alpha_per_s,
            "beta_s": self.beta_s,
            "gamma_per_s": self.gamma_per_s,
            "mu": self.mu,
            "change_rate_per_s": self.change_rate_per_s,
            "source_beta_s": dict(zip(SOURCES, self.source_beta_s, strict=True)),
            "origin_s": self.origin_s,
            "from": "estimator" if self.estimated else "prior",
        }


def page_params(
    state: PageState, estimator: str | Estimates | None, settings: Settings
) -> PageParams:
    """Parameters of one page (``estimator``: its stored record or its parsed estimates):
    :func:`params_arrays` on arrays of one page.  ``ValueError`` if its estimate is out
    of the quantile's range."""
    est = estimates_of(estimator) if isinstance(estimator, str) else estimator
    rows = None
    if est is not None and est.n_intervals > 0:
        e = np.full((1, _N_EST), np.nan)
        e[0, :3] = est.alpha_per_s, est.alpha_se_per_s, est.change_rate_per_s
        e[0, _GAMMA], e[0, _KAPPA] = est.gamma_per_s, est.kappa
        e[0, _MEAN_LOG] = est.alpha_mean_log
        e[0, _N_INTERVALS] = est.n_intervals
        rows = (_ROW0, e)
    prior = state.prior_change_rate_per_s
    m = params_arrays(np.array([state.importance]),
                      np.array([math.nan if prior is None else prior]),
                      np.array([state.last_crawl_s]),
                      np.array([state.signals], dtype=np.float64), rows, settings)
    return PageParams(float(m.alpha[0]), float(m.beta[0]), float(m.gamma[0]),
                      state.importance, float(m.delta[0]), tuple(m.src_beta[0].tolist()),
                      float(m.origin[0]), bool(m.estimated[0]))


_ROW0 = np.zeros(1, dtype=np.int64)


#: columns of the estimates matrix of :func:`_estimates_many` (as the fields of
#: :class:`streams.estimates.estimation.Estimates`: n_intervals, then alpha_mean_log)
_N_EST = 4 + 6 * len(GROUPS) + 2
_N_INTERVALS, _MEAN_LOG = _N_EST - 2, _N_EST - 1
_KAPPA = slice(4 + len(GROUPS), 4 + 2 * len(GROUPS))
_GAMMA = slice(4, 4 + len(GROUPS))


@dataclass(slots=True)
class ParamsMany:
    """:func:`page_params` of many pages as arrays (a shard's rebuild), with the stored
    page fields they came from."""

    importance: npt.NDArray[np.float64]
    last_crawl_s: npt.NDArray[np.float64]
    crawled: npt.NDArray[np.bool_]
    alpha: npt.NDArray[np.float64]
    beta: npt.NDArray[np.float64]
    gamma: npt.NDArray[np.float64]
    delta: npt.NDArray[np.float64]
    src_beta: npt.NDArray[np.float64]
    origin: npt.NDArray[np.float64]
    estimated: npt.NDArray[np.bool_]
    max_value: npt.NDArray[np.float64]


def page_params_many(values: Sequence[str | bytes], settings: Settings) -> ParamsMany | None:
    """:func:`page_params` of many stored pages at once (their ``P:{host}:pages`` values,
    each its page record and estimator record): the same formulas on arrays, so a shard of 10^6
    pages is rebuilt without 10^6 Python calls (binary records: ``numpy.frombuffer``).
    None if a stored value is no page record (the caller then goes page by page, which counts
    the bad ones); ``tests/unit/test_params_many.py`` checks it equals
    :func:`page_params`."""
    pages = _pages_many([record_bytes(v) for v in values])
    if pages is None:
        return None
    try:
        return params_arrays(*pages, settings)
    except ValueError:  # some record out of range: page by page, counted
        return None


def params_arrays(
    imp: npt.NDArray[np.float64], prior: npt.NDArray[np.float64],
    last: npt.NDArray[np.float64], sig: npt.NDArray[np.float64],
    est: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None, settings: Settings,
) -> ParamsMany:
    """The parameters (module docstring) of pages given as arrays: importance, prior change
    rate (NaN: none), last crawl (0: never), signal counts ``(n, sources)`` and, for the
    rows ``est[0]`` with an estimate, its numbers ``est[1]`` (columns as
    :class:`streams.estimates.estimation.Estimates`' fields: alpha, alpha_se, Delta, -,
    gamma per group, kappa per group, ..., n_intervals last).  The one implementation of
    the formulas: :func:`page_params` (one page) and :func:`page_params_many` (stored
    values) call it.  ``ValueError`` if an estimate is out of the quantile's range."""
    n, n_src = len(imp), sig.shape[1]
    crawled = last > 0.0
    # priors (before any observed interval): Greedy's alpha = Delta, gamma = 0
    delta = np.where(np.isfinite(prior) & (prior > 0.0), prior,
                     settings.default_change_rate_per_s)
    alpha = delta.copy()
    gamma = np.zeros(n)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        beta = -math.log(1.0 - settings.default_source_precision) / alpha
    src_beta = np.repeat(beta[:, None], n_src, axis=1)
    estimated = np.zeros(n, dtype=bool)
    if est is not None:
        rows, e = est
        use = e[:, _N_INTERVALS] > 0
        rows, e = rows[use], e[use]
        if rows.size:
            a = np.maximum(e[:, 0], 1e-300)
            if settings.estimate_quantile != 0.5:
                a = _alpha_quantile(a, e[:, 1], e[:, _MEAN_LOG], settings.estimate_quantile)
            gam = e[:, _GAMMA]
            with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                bg = e[:, _KAPPA] / a[:, None]
            _, bbar, gbar = pooled_params(a, bg, gam)
            # without any signal the mean of the groups' betas (pooled_beta)
            bbar = np.where((gam > 0.0).any(axis=1), bbar, bg.mean(axis=1))
            alpha[rows], beta[rows], gamma[rows] = a, bbar, gbar
            delta[rows] = e[:, 2]
            src_beta[rows] = bg[:, list(GROUP_OF)]
            estimated[rows] = True
    origin = page_origin(last, src_beta, sig)
    with np.errstate(invalid="ignore", over="ignore"):
        mdelta = alpha + np.where(gamma > 0.0, gamma * -np.expm1(-alpha * beta), 0.0)
        max_value = np.where(mdelta > 0.0, imp / np.where(mdelta > 0.0, mdelta, 1.0), 0.0)
    return ParamsMany(imp, last, crawled, alpha, beta, gamma, delta, src_beta, origin,
                      estimated, max_value)


def _alpha_quantile(alpha: npt.NDArray[np.float64], alpha_se: npt.NDArray[np.float64],
                    mean_log: npt.NDArray[np.float64], quantile: float
                    ) -> npt.NDArray[np.float64]:
    """``alpha`` at an upper ``quantile`` of the page's posterior (module docstring of
    :mod:`streams.estimates.estimation`).  Where ``alpha`` is the page's own mode, the
    log-normal approximation around it with its standard error
    (:func:`conservative_change_rate`, paper 003 Sec. 5.3).  Where it is the posterior mean
    under the host's Gamma prior (``mean_log`` finite: that posterior's ``E[log lambda]``),
    the quantile of the Gamma with that posterior's ``E[lambda]`` and ``E[log lambda]`` (the
    Gamma closest to it in Kullback-Leibler divergence, Minka 2002:
    :func:`models.estimators.host_prior.fit_gammas`); the page's own standard error
    describes the spread around its own mode, not this posterior's.  A rate of 0 stays."""
    q = conservative_change_rate(alpha, alpha_se, quantile)
    host = np.isfinite(mean_log) & (alpha > 0.0) & np.isfinite(alpha)
    if host.any():
        shape, rate = fit_gammas(alpha[host], mean_log[host])
        # the Gamma's quantile function (scipy.stats.gamma.ppf without its per-call cost)
        q[host] = gammaincinv(shape, quantile) / rate
    out: npt.NDArray[np.float64] = np.where(q != 0.0, q, alpha)
    return out


def page_origin(
    last_crawl_s: npt.ArrayLike, source_beta_s: npt.ArrayLike, signals: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """``origin = last_crawl - sum_s beta_s n_s`` (paper 004 Sec. 3: every signal of source
    ``s`` since the last crawl adds ``beta_s`` to the elapsed time), 0 (the epoch) for a page
    never crawled (``last_crawl_s`` 0).  Pages as arrays: ``last_crawl_s`` ``(n,)``,
    ``source_beta_s`` and ``signals`` ``(n, sources)``; one page: a number and two
    ``(sources,)`` (a 0-d array back).  ``inf * 0`` (an infinite beta, no signal) is NaN."""
    last = np.asarray(last_crawl_s, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        beta, n = np.asarray(source_beta_s, np.float64), np.asarray(signals, np.float64)
        shift = (beta * n).sum(axis=-1)
        return np.where(last > 0.0, last - shift, 0.0)


def _shape_length_or_0(shape: int) -> int:
    try:
        return shape_length(shape)
    except ValueError:
        return 0


def _record_dtype(shape: int, size: int) -> np.dtype[Any]:
    """The dtype of a binary page value of ``size`` bytes with this shape byte: the page
    record's head, its prior and counts if stored, its fingerprints' bytes, then none or an
    estimator record (its bytes: whether it is one, the caller checks from its first
    bytes)."""
    n_seen = shape & SHAPE_SEEN
    fields: list[Any] = [("page", PAGE_HEAD_DTYPE)]
    if shape & SHAPE_PRIOR:
        fields.append(("prior", "<f4"))
    if shape & SHAPE_COUNTS:
        fields.append(("signals", "<u2", (N_SOURCES,)))
    if n_seen:
        fields.append(("seen", "u1", (n_seen, FP_BYTES)))
    page = shape_length(shape)
    if size > page:
        fields.append(("est", "u1", (size - page,)))
    return np.dtype(fields)


#: the page record's length of every shape byte (0 for a shape byte no page record has)
_SHAPE_LENGTH = np.array([_shape_length_or_0(s) for s in range(256)], dtype=np.int64)


_Arr = npt.NDArray[np.float64]


def _byte_at(joined: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64],
             lens: npt.NDArray[np.int64], k: int) -> npt.NDArray[np.uint8]:
    """Every value's byte ``k`` (0 where a value is shorter) from the values joined."""
    out = np.zeros(len(lens), dtype=np.uint8)
    has = lens > k
    out[has] = joined[starts[has] + k]
    return out


def _pages_many(raw: list[bytes]) -> tuple[
        _Arr, _Arr, _Arr, _Arr, tuple[npt.NDArray[np.int64], _Arr] | None] | None:
    """importance, prior (NaN: none), last crawl, signals ``(n, sources)`` of stored page
    values and their estimates (:func:`_estimates_many`): binary values grouped by their
    shape byte and length (one stable sort of the groups' numbers, then runs), each group
    one ``numpy.frombuffer`` (page and estimator record together), the fields a group does
    not store left at their empty values (prior NaN, counts 0); None if a value is no page
    record."""
    n = len(raw)
    imp = np.empty(n)
    prior = np.full(n, np.nan)
    last = np.empty(n)
    sig = np.zeros((n, N_SOURCES))
    lens = np.fromiter(map(len, raw), np.int64, n)
    # every value's first byte and shape byte: one join, no Python call per value
    joined = np.frombuffer(b"".join(raw), np.uint8)
    starts = np.cumsum(lens) - lens
    first = _byte_at(joined, starts, lens, 0)
    shape = _byte_at(joined, starts, lens, 1).astype(np.int64)
    page = _SHAPE_LENGTH[shape]
    if not (first == PAGE_VERSION).all() or not page.all():
        return None
    est_rows: list[npt.NDArray[np.int64]] = []
    est_heads: list[npt.NDArray[Any]] = []
    short = lens < page  # stored without trailing zero bytes: padded here
    # the (length, shape) pairs present numbered 0.. by counting, the values sorted by that
    # number (a stable sort of small integers: radix), each group a run
    key = np.maximum(lens, page) * 256 + shape
    present = np.bincount(key)
    groups = np.flatnonzero(present)
    number = np.zeros(len(present), np.int64)
    number[groups] = np.arange(len(groups))
    group_of = number[key].astype(np.uint16 if len(groups) < 1 << 16 else np.int64)
    order = np.argsort(group_of, kind="stable")
    bounds = [0, *np.cumsum(present[groups]).tolist()]
    for k, lo, hi in zip(groups.tolist(), bounds[:-1], bounds[1:], strict=True):
        size, sh = divmod(k, 256)
        rows = order[lo:hi]
        if short[rows].any():
            buf = b"".join([raw[i].ljust(size, b"\0") for i in rows.tolist()])
        else:
            buf = b"".join([raw[i] for i in rows.tolist()])
        a = np.frombuffer(buf, _record_dtype(sh, size))
        p = a["page"]
        imp[rows], last[rows] = p["importance"], p["last_crawl"]
        if sh & SHAPE_PRIOR:
            prior[rows] = a["prior"]
        if sh & SHAPE_COUNTS:
            sig[rows] = a["signals"]
        est_len = size - int(_SHAPE_LENGTH[sh])
        if est_len:
            # a tail that is no readable estimator record: the page record alone, no
            # estimates (as page_params reads it)
            ok = record_sizes(a["est"]) == est_len
            est_rows.append(rows[ok])
            est_heads.append(record_heads(a["est"][ok]))
    return imp, prior, last, sig, _estimates_many(est_rows, est_heads)


def _estimates_many(
    rows: list[npt.NDArray[np.int64]], heads: list[npt.NDArray[Any]],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]] | None:
    """Rows with a readable record and their numbers (columns: alpha, alpha_se, Delta, -,
    gamma, kappa, then only n_intervals and alpha_mean_log are filled) from the records'
    heads, ``alpha``, ``gamma`` and ``Delta`` as
    :func:`streams.estimates.estimation.estimates_of` gives them."""
    if not rows:
        return None
    h = np.concatenate(heads)
    e = np.full((len(h), _N_EST), np.nan)
    alpha = h["alpha"].astype(np.float64)
    # the host posterior mean where the record stores it as the page's alpha (value_alpha)
    hm = h["host"][:, 0].astype(np.float64)
    host = (hm > 0.0) & (hm < np.inf)
    alpha = np.where(host, hm, alpha)
    kappa = h["kappa"].astype(np.float64)
    gam = gamma_from_totals(h["totals"].astype(np.float64), h["unknown_s"].astype(np.float64))
    e[:, 0], e[:, 1] = alpha, h["alpha_se"]
    e[:, 2] = nm.derive(alpha, kappa, gam)["change_rate"]
    e[:, _GAMMA], e[:, _KAPPA] = gam, kappa
    e[:, _MEAN_LOG] = np.where(host, h["host"][:, 1], np.nan)
    e[:, _N_INTERVALS] = h["n"]
    return np.concatenate(rows), e
