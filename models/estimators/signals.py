"""Online MLE of a page's change rate and of its ping sources' precision and recall.

The model is paper 004 App. E: a crawl interval of length ``tau`` (``tau_elap``) in which
source ``s`` sent ``n_s`` change-indicating signals is unchanged with probability::

    P(no change) = exp(-alpha*tau - sum_s kappa_s*n_s),   kappa_s = alpha*beta_s,

where ``alpha`` is the rate of changes no source signals.  With one source this is exact
(``exp(-alpha*tau)*(nu/gamma)^n``, paper 004 Sec. 3).  With several sources it is exact when
each change is signalled by at most one source (the true signals of the sources are then
independent Poisson processes, and ``Delta = alpha + sum_s recall_s*Delta``); when sources
overlap (a change signalled by two sources) it is the best product approximation, the one
that lets ``tau_eff = tau + sum_s beta_s*n_s`` add one ``beta_s`` per source, and ``kappa_s``
then measures a source's evidence *given* the others.
Without sources it is Cho and Garcia-Molina's change model, and the estimate solves eq. (2)
of paper 003 (see :mod:`models.estimators.change_rate`).

Streaming state
---------------
A :class:`SignalState` keeps, with exponential forgetting (weights halve every
``half_life_s`` of crawl time):

* exact weighted sums of ``(tau, n_1..n_S)`` over unchanged intervals (their log-likelihood
  ``-alpha*tau - kappa.n`` is linear, so the sums are sufficient);
* exact weighted sums over all intervals (for ``gamma_s = signals/time``);
* the last ``K`` changed intervals exactly (a ring of ``(tau, n_1..n_S, weight)``);
* older changed intervals *without signals* as one representative changed interval
  ``rep = (weight, length)``: each one leaving the ring is merged into it so that the merged
  term ``w log(1 - exp(-alpha T))`` has the first and second derivative of the sum at the
  running estimate (:func:`models.estimators._numeric.merge_representative`).  It is exact
  for intervals of one length and for short intervals (``alpha t << 1``) of any lengths, and
  keeps the true term's shape elsewhere, so the estimate of a page without signals stays
  within 1% of the full-data MAP over 1 to 10^4 intervals of 10 s to 30 days
  (``tests/unit/test_estimators.py``, property test);
* older changed intervals *with signals* as a quadratic summary ``b.theta - theta'A
  theta/2`` of their log-likelihood ``log(1 - exp(-theta.v))``, each expanded at the
  running estimate when it left the ring (a streaming Laplace approximation).  A term is
  exact at its expansion point and its error is second order in the estimate's drift since
  then.

* intervals whose signals were not recorded (an imported history:
  ``CrawlInterval(signals_known=False)``) as their own block ``unknown = (time, unchanged time,
  representative (w, T))``: they inform the page's whole change rate ``Delta = alpha +
  sum_s gamma_s*(1 - exp(-kappa_s))`` only (their likelihood ``exp(-tau*Delta)`` is the App. E
  one averaged over Poisson signal counts: :mod:`models.estimators._numeric`), their changed
  ones merged into one representative at the running ``Delta`` as ``rep`` is at ``alpha``
  (exact for one length and for ``Delta*t << 1``, as a complete change log's 1 s changed
  intervals are; :meth:`SignalEstimator.update` refreshes the running estimate only when a
  changed interval leaves the ring, the stream sets it to the mode after every update,
  :mod:`streams.estimates.estimation`), and their time does not count in ``gamma_s =
  signals / time with signals recorded``.

The state serialises to at most 288 bytes (``SignalState.to_bytes``) whatever the page's age.

Over 600 lines on purpose: the state, its update (ring, eviction into the quadratic
summary, the Newton step) and the estimate read from it are one derivation over one state
layout; the offline fits that need none of it are in :mod:`models.estimators.signal_fit`.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np

from . import _numeric as nm
from ._prior import SignalPrior

__all__ = [
    "MAX_STATE_BYTES",
    "CrawlInterval",
    "SignalEstimate",
    "SignalEstimator",
    "SignalState",
    "state_size_bytes",
]

#: The default weak prior (Grimes-Ford points, precision prior centred on 0.5).
DEFAULT_PRIOR = SignalPrior()
#: Upper bound on ``len(SignalState.to_bytes())`` for every configuration we accept.
MAX_STATE_BYTES = 288
_VERSION = 3
_HEADER = struct.Struct("<BBBBdI")
#: the ``unknown`` block: its time and unchanged time (float64), its representative (float32)
_UNKNOWN = struct.Struct("<2d2f")
#: an empty ``unknown`` block
NO_UNKNOWN = (0.0, 0.0, 0.0, 0.0)
_X_MAX = 700.0
_X_MIN = 1e-150
_RIDGE = 1e-12
#: Newton steps at a page's first eviction (the estimate then still sits at the prior).
FIRST_EVICTION_STEPS = 8
#: Newton steps at later evictions.
EVICTION_STEPS = 1


def state_size_bytes(n_sources: int, ring_capacity: int) -> int:
    """Serialised size of a full :class:`SignalState` (its maximum)."""
    d = 1 + n_sources
    n_quad = d + d * (d + 1) // 2
    return (_HEADER.size + 4 * d + 8 * d + 8 * d + 4 * ring_capacity * (d + 1) + 4 * n_quad + 8
            + _UNKNOWN.size)


def _default_ring_capacity(n_sources: int) -> int:
    for k in range(8, 0, -1):
        if state_size_bytes(n_sources, k) <= MAX_STATE_BYTES:
            return k
    raise ValueError(f"n_sources={n_sources} does not fit in {MAX_STATE_BYTES} bytes")


@dataclass(frozen=True, slots=True)
class CrawlInterval:
    """One crawl interval of one page: the observation every estimator here consumes.

    Parameters
    ----------
    interval_s
        Time since the previous crawl (``tau_elap``), finite and ``>= 0``.
    changed
        Whether the crawl found the page changed.
    n_signals
        Signals received during the interval, one count per source (``()`` without sources).
    end_s
        Time of this crawl.  Optional; when given it must not precede the previous crawl.
        When omitted it is the previous crawl's time plus ``interval_s``.
    prior_rate_per_s
        The page's own prior change rate (the operator's), if any: the scale-free
        pseudo-intervals then imply it (:meth:`SignalEstimator.prior_scale`) instead of
        following the page's mean crawl interval.
    signals_known
        ``False``: the signals during the interval were not recorded (a crawl of an imported
        history); ``n_signals`` must then be zeros, and the interval informs the page's whole
        change rate only (module docstring).  Without sources it changes nothing.
    """

    interval_s: float
    changed: bool
    n_signals: tuple[float, ...] = ()
    end_s: float | None = None
    prior_rate_per_s: float | None = None
    signals_known: bool = True


@dataclass(frozen=True, slots=True)
class SignalState:
    """Bounded streaming state of one page (see the module docstring for the layout).

    ``theta = (alpha_per_s, kappa_1..kappa_S)`` is the running estimate, refreshed when a
    changed interval leaves the ring (warm start and expansion point).  ``ring`` (oldest
    first) holds ``(tau, n_1..n_S, weight)``; ``quad_a`` is the upper triangle of ``A``;
    ``rep`` is the representative ``(weight, length)`` of the older changed intervals
    without signals (weight 0: none); ``unknown`` is ``(time, unchanged time, rep_w, rep_t)``
    of the intervals with signals unknown.
    """

    n_sources: int
    end_s: float = -math.inf
    n_intervals: int = 0
    theta: tuple[float, ...] = ()
    unchanged: tuple[float, ...] = ()
    totals: tuple[float, ...] = ()
    ring: tuple[tuple[float, ...], ...] = ()
    quad_b: tuple[float, ...] = ()
    quad_a: tuple[float, ...] = ()
    ring_capacity: int = field(default=8)
    rep: tuple[float, float] = (0.0, 0.0)
    unknown: tuple[float, float, float, float] = NO_UNKNOWN

    def to_bytes(self) -> bytes:
        """Pack into at most :data:`MAX_STATE_BYTES` bytes (little-endian struct).

        Layout: ``<BBBBdI`` header (version, n_sources, ring capacity, ring length, end_s,
        n_intervals), then float32 ``theta[d]``, float64 ``unchanged[d]``, float64
        ``totals[d]``, float32 ring ``[len][d+1]``, float32 ``quad_b[d]``,
        ``quad_a[d(d+1)/2]`` and ``rep[2]``, with ``d = 1 + n_sources``, then ``unknown`` as
        float64 ``time``, ``unchanged`` and float32 ``rep_w``, ``rep_t``.
        """
        d = 1 + self.n_sources
        head = _HEADER.pack(
            _VERSION, self.n_sources, self.ring_capacity, len(self.ring), self.end_s,
            min(self.n_intervals, 0xFFFFFFFF),
        )
        flat = [x for e in self.ring for x in e]
        body = struct.pack(
            f"<{d}f{2 * d}d{len(flat) + len(self.quad_b) + len(self.quad_a) + 2}f",
            *self.theta, *self.unchanged, *self.totals, *flat, *self.quad_b, *self.quad_a,
            *self.rep,
        )
        return head + body + _UNKNOWN.pack(*self.unknown)

    @classmethod
    def from_bytes(cls, data: bytes) -> SignalState:
        """Inverse of :meth:`to_bytes`; raises ``ValueError`` naming ``data`` if malformed."""
        if len(data) < _HEADER.size:
            raise ValueError(f"data: {len(data)} bytes is shorter than the header")
        version, s, cap, ring_len, end_s, n_int = _HEADER.unpack_from(data)
        if version != _VERSION:
            raise ValueError(f"data: unknown state version {version}")
        d = 1 + s
        nq = d + d * (d + 1) // 2
        fmt = f"<{d}f{2 * d}d{ring_len * (d + 1) + nq + 2}f"
        if struct.calcsize(fmt) != len(data) - _HEADER.size - _UNKNOWN.size:
            raise ValueError(
                f"data: expected {struct.calcsize(fmt) + _HEADER.size + _UNKNOWN.size} bytes")
        vals = struct.unpack_from(fmt, data, _HEADER.size)
        i = 0
        theta = tuple(vals[i : i + d])
        i += d
        unchanged = tuple(vals[i : i + d])
        i += d
        totals = tuple(vals[i : i + d])
        i += d
        ring = tuple(tuple(vals[i + j * (d + 1) : i + (j + 1) * (d + 1)]) for j in range(ring_len))
        i += ring_len * (d + 1)
        quad_b = tuple(vals[i : i + d])
        quad_a = tuple(vals[i + d : i + nq])
        rep = (float(vals[i + nq]), float(vals[i + nq + 1]))
        unk = tuple(float(x) for x in _UNKNOWN.unpack_from(data, len(data) - _UNKNOWN.size))
        return cls(s, end_s, n_int, theta, unchanged, totals, ring, quad_b, quad_a, cap, rep,
                   (unk[0], unk[1], unk[2], unk[3]))


@dataclass(frozen=True, slots=True)
class SignalEstimate:
    """Estimates of one page, each with its standard error (Laplace posterior + delta method).

    Attributes are per second (``*_per_s``) or dimensionless; per-source values are tuples.
    ``covariance`` is the posterior covariance of ``(alpha, kappa_1..kappa_S)``.
    """

    alpha_per_s: float
    alpha_se_per_s: float
    kappa: tuple[float, ...]
    kappa_se: tuple[float, ...]
    gamma_per_s: tuple[float, ...]
    gamma_se_per_s: tuple[float, ...]
    change_rate_per_s: float
    change_rate_se_per_s: float
    precision: tuple[float, ...]
    precision_se: tuple[float, ...]
    recall: tuple[float, ...]
    recall_se: tuple[float, ...]
    nu_per_s: tuple[float, ...]
    beta_s: tuple[float, ...]
    covariance: tuple[tuple[float, ...], ...]
    n_intervals: int
    observed_time_s: float


def _check_interval(obs: CrawlInterval, n_sources: int) -> None:
    t = obs.interval_s
    if not (isinstance(t, (int, float)) and t >= 0.0 and t < math.inf):
        raise ValueError(f"interval_s must be a finite number >= 0, got {t!r}")
    if len(obs.n_signals) != n_sources:
        raise ValueError(
            f"n_signals must have one count per source ({n_sources}), got {obs.n_signals!r}"
        )
    for n in obs.n_signals:
        if not (n >= 0.0 and n < math.inf):
            raise ValueError(f"n_signals must be finite counts >= 0, got {obs.n_signals!r}")
    if obs.end_s is not None and not math.isfinite(obs.end_s):
        raise ValueError(f"end_s must be finite, got {obs.end_s!r}")
    if not obs.signals_known and any(obs.n_signals):
        raise ValueError(
            f"n_signals must be zeros when signals_known is False, got {obs.n_signals!r}")


def gamma_of(totals: tuple[float, ...] | list[float], unknown_time: float) -> list[float]:
    """Signal rates from a state's ``totals``: signals over the time with signals recorded
    (scalar :func:`models.estimators._numeric.gamma_rates`)."""
    t = max(totals[0] - unknown_time, 0.0)
    if not t > 0.0:
        return [0.0] * (len(totals) - 1)
    return [x / max(t, 1.0) for x in totals[1:]]


def change_rate_of(theta: tuple[float, ...], gamma: list[float]) -> float:
    """``Delta = alpha + sum_s gamma_s*(1 - exp(-kappa_s))`` (paper 004 Sec. 3)."""
    return theta[0] + sum(g * -math.expm1(-k) for g, k in zip(gamma, theta[1:], strict=True))


def _solve_py(h: list[list[float]], g: list[float]) -> list[float]:
    """Solve a small SPD system (Gaussian elimination, ridge as in ``_numeric.solve_spd``)."""
    d = len(g)
    if d == 1:
        return [g[0] / (h[0][0] * (1.0 + _RIDGE))]
    m = [[*row, g[i]] for i, row in enumerate(h)]
    for i in range(d):
        m[i][i] += _RIDGE * max(m[i][i], 1e-300)
    if d == 2:
        h00, h01, h11 = m[0][0], m[0][1], m[1][1]
        det = h00 * h11 - h01 * h01
        if not det > 0.0:
            det = 1e-300
        return [(h11 * g[0] - h01 * g[1]) / det, (h00 * g[1] - h01 * g[0]) / det]
    for i in range(d):
        piv = m[i][i] if m[i][i] != 0.0 else 1e-300
        for r in range(i + 1, d):
            f = m[r][i] / piv
            for c in range(i, d + 1):
                m[r][c] -= f * m[i][c]
    x = [0.0] * d
    for i in range(d - 1, -1, -1):
        acc = m[i][d] - sum(m[i][c] * x[c] for c in range(i + 1, d))
        x[i] = acc / (m[i][i] if m[i][i] != 0.0 else 1e-300)
    return x


def _coefficients(x: float) -> tuple[float, float]:
    """``c1 = 1/(e^x - 1)`` and ``c2 = c1*(1 + c1)`` (as ``_numeric.grad_coefficients``)."""
    if x > _X_MAX:
        x = _X_MAX
    elif x < _X_MIN:
        x = _X_MIN
    c1 = 1.0 / math.expm1(x)
    return c1, c1 * (1.0 + c1)


def merge_rep(alpha: float, w0: float, t0: float, w1: float, t1: float) -> tuple[float, float]:
    """Scalar :func:`models.estimators._numeric.merge_representative` (the same arithmetic)."""
    if not w0 > 0.0:
        return w1, t1
    c1a, c2a = _coefficients(alpha * t0)
    c1b, c2b = _coefficients(alpha * t1)
    g = w0 * t0 * c1a + w1 * t1 * c1b
    h = w0 * t0 * t0 * c2a + w1 * t1 * t1 * c2b
    r = alpha * h / g if g > 0.0 else math.inf
    if alpha > 0.0 and r < _X_MAX:
        lo, hi = max(r - 1.0, 0.0), max(r, 1e-300)
        for _ in range(64):
            mid = 0.5 * (lo + hi)
            phi = mid / -math.expm1(-max(mid, 1e-300)) if mid > 0.0 else 1.0
            if phi < r:
                lo = mid
            else:
                hi = mid
        x = max(0.5 * (lo + hi), _X_MIN)
        t_new = x / alpha
        w_new = g / (t_new * _coefficients(x)[0])
        if math.isfinite(w_new) and math.isfinite(t_new):
            return w_new, t_new
    wt = w0 + w1
    geo = math.exp((w0 * math.log(max(t0, 1e-300)) + w1 * math.log(max(t1, 1e-300))) / wt)
    return wt, geo


def _unpack_quad(quad_a: tuple[float, ...] | list[float], d: int) -> list[list[float]]:
    a = [[0.0] * d for _ in range(d)]
    k = 0
    for i in range(d):
        for j in range(i, d):
            a[i][j] = a[j][i] = quad_a[k]
            k += 1
    return a


class SignalEstimator:
    """Streaming MAP estimator of ``(alpha, kappa_1..kappa_S)`` and ``gamma_s`` (paper 004 App. E).

    Parameters
    ----------
    n_sources
        Number of ping sources ``S`` (0 = change rate only, Cho and Garcia-Molina).
    prior
        Pseudo-observations (default :class:`SignalPrior`: the Grimes-Ford points for
        ``alpha`` and a ``Beta(2, 2)``-like prior on each source's precision).
    half_life_s
        Exponential forgetting: an interval's weight halves every ``half_life_s`` of crawl
        time after it ended (``inf`` = no forgetting).
    ring_capacity
        Changed intervals kept exactly (default: the largest ``K <= 8`` such that the state
        fits in 288 bytes: 8 for ``S <= 2``, 5 for ``S = 3``).

    Notes
    -----
    ``update`` is O(1) bookkeeping, except when a changed interval leaves the ring: the
    running estimate then takes one Newton step on the bounded state (``FIRST_EVICTION_STEPS``
    at the first eviction) and is the expansion point of the evicted term.  ``result`` runs
    Newton to convergence and derives ``Delta``, ``nu``, precision, recall and ``beta`` with
    delta-method standard errors.  The state is immutable; ``update`` returns a new one.
    """

    def __init__(
        self,
        n_sources: int = 1,
        *,
        prior: SignalPrior | None = None,
        half_life_s: float = math.inf,
        ring_capacity: int | None = None,
    ) -> None:
        if not (isinstance(n_sources, int) and 0 <= n_sources <= 3):
            raise ValueError(f"n_sources must be an integer in [0, 3], got {n_sources!r}")
        if not half_life_s > 0.0:
            raise ValueError(f"half_life_s must be > 0, got {half_life_s!r}")
        cap = _default_ring_capacity(n_sources) if ring_capacity is None else ring_capacity
        if not (isinstance(cap, int) and 1 <= cap <= 255):
            raise ValueError(f"ring_capacity must be an integer in [1, 255], got {cap!r}")
        if state_size_bytes(n_sources, cap) > MAX_STATE_BYTES:
            raise ValueError(
                f"ring_capacity={cap} with n_sources={n_sources} needs "
                f"{state_size_bytes(n_sources, cap)} bytes > {MAX_STATE_BYTES}"
            )
        self.n_sources = n_sources
        self.prior = prior if prior is not None else SignalPrior()
        self.half_life_s = float(half_life_s)
        self.ring_capacity = cap
        self._prior_lin, self._prior_entries = self.prior.compiled(n_sources)
        #: scale-free pseudo-intervals (``models.estimators._prior``) follow the page's mean
        #: interval, observed time over intervals; under forgetting the state keeps the
        #: forgotten time but not a forgotten count, so the points stay absolute there
        self.scale_free = (self.prior.change.reference_interval_s is not None
                           and self.half_life_s == math.inf)
        #: the prior's MAP, solved once (``init`` is called for every new page)
        self._theta0: tuple[float, ...] | None = None

    def prior_scale(self, observed_time_s: float, n_intervals: int,
                    prior: SignalPrior | None = None,
                    prior_rate_per_s: float | None = None) -> float:
        """Factor on the pseudo-intervals' lengths for a page with that history (``1``
        unless the prior is scale-free): set by the page's own prior rate when one is given
        (finite, > 0: :meth:`PseudoDatapoints.scale_for_rate`), else by its mean crawl
        interval (:meth:`PseudoDatapoints.scale_for`)."""
        p = self.prior if prior is None else prior
        if p.change.reference_interval_s is None or self.half_life_s != math.inf:
            return 1.0
        if prior_rate_per_s is not None and 0.0 < prior_rate_per_s < math.inf:
            return p.change.scale_for_rate(prior_rate_per_s)
        return p.change.scale_for(observed_time_s, n_intervals)

    def compiled_prior(self, scale: float, prior: SignalPrior | None = None
                       ) -> tuple[tuple[float, ...], tuple[tuple[float, ...], ...]]:
        """The prior's ``(lin, entries)`` (:meth:`SignalPrior.compiled`) with the change
        pseudo-intervals' lengths times ``scale`` (the source pseudo-intervals have length 0)."""
        plin, pent = ((self._prior_lin, self._prior_entries) if prior is None
                      else prior.compiled(self.n_sources))
        if scale == 1.0:
            return plin, pent
        return ((plin[0] * scale, *plin[1:]),
                tuple((e[0] * scale, *e[1:]) for e in pent))

    # -- streaming interface -------------------------------------------------------------
    def init(self) -> SignalState:
        """State of a page never crawled: only the prior."""
        d = 1 + self.n_sources
        if self._theta0 is None:
            self._theta0 = self._initial_theta()
        theta = self._theta0
        return SignalState(
            self.n_sources,
            -math.inf,
            0,
            theta,
            (0.0,) * d,
            (0.0,) * d,
            (),
            (0.0,) * d,
            (0.0,) * (d * (d + 1) // 2),
            self.ring_capacity,
        )

    def _initial_theta(self) -> tuple[float, ...]:
        d = 1 + self.n_sources
        lin = np.array([self._prior_lin])
        ents = self._prior_entries
        v = np.array([[e[:d] for e in ents]]) if ents else np.zeros((1, 0, d))
        w = np.array([[e[d] for e in ents]]) if ents else np.zeros((1, 0))
        theta0 = np.full((1, d), 1e-5)
        theta0[0, 1:] = 1.0
        theta, _ = nm.newton_solve(theta0, lin, v, w, np.zeros((1, d)), np.zeros((1, d, d)))
        return tuple(float(x) for x in theta[0])

    def update(self, state: SignalState, obs: CrawlInterval) -> SignalState:
        """Add one crawl interval (pure: returns a new state).

        Raises
        ------
        ValueError
            Naming ``interval_s`` (negative, NaN, infinite), ``n_signals`` (wrong length,
            negative, NaN), or ``end_s`` (not finite, or before the previous crawl).

        Notes
        -----
        A zero-length interval without signals carries no information (and a change in it
        is impossible under the model); it only moves ``end_s``.
        """
        if state.n_sources != self.n_sources:
            raise ValueError(f"state has {state.n_sources} sources, estimator {self.n_sources}")
        _check_interval(obs, self.n_sources)
        tau = float(obs.interval_s)
        prev = state.end_s
        has_prev = prev > -math.inf
        if obs.end_s is None:
            end = prev + tau if has_prev else tau
        else:
            end = float(obs.end_s)
            if has_prev and end < prev:
                raise ValueError(f"end_s={end!r} is before the previous crawl at {prev!r}")
        decay = 1.0
        if has_prev and self.half_life_s < math.inf and end > prev:
            decay = math.exp2(-(end - prev) / self.half_life_s)
        n_sig = tuple(float(x) for x in obs.n_signals)
        d = 1 + self.n_sources
        rep_w, rep_t = state.rep
        unk = list(state.unknown)
        if decay != 1.0:
            rep_w *= decay
            unk[0] *= decay
            unk[1] *= decay
            unk[2] *= decay
            unchanged = [u * decay for u in state.unchanged]
            totals = [u * decay for u in state.totals]
            ring = [(*e[:d], e[d] * decay) for e in state.ring]
            quad_b = [u * decay for u in state.quad_b]
            quad_a = [u * decay for u in state.quad_a]
        else:
            unchanged = list(state.unchanged)
            totals = list(state.totals)
            ring = list(state.ring)
            quad_b = list(state.quad_b)
            quad_a = list(state.quad_a)
        if tau == 0.0 and not any(n_sig):
            return SignalState(
                self.n_sources, end, state.n_intervals, state.theta, tuple(unchanged),
                tuple(totals), tuple(ring), tuple(quad_b), tuple(quad_a),
                self.ring_capacity, (rep_w, rep_t), (unk[0], unk[1], unk[2], unk[3]),
            )
        theta = state.theta
        v = (tau, *n_sig)
        totals[0] += tau
        for s in range(self.n_sources):
            totals[1 + s] += n_sig[s]
        if not obs.signals_known and self.n_sources:
            # informs Delta only: its own block, changed ones merged at the running Delta
            unk[0] += tau
            if obs.changed:
                unk[2], unk[3] = merge_rep(change_rate_of(theta, gamma_of(totals, unk[0])),
                                           unk[2], unk[3], 1.0, tau)
            else:
                unk[1] += tau
        elif obs.changed:
            if len(ring) >= self.ring_capacity:
                summarised = quad_a[0] > 0.0 or rep_w > 0.0
                steps = EVICTION_STEPS if summarised else FIRST_EVICTION_STEPS
                scale = self.prior_scale(totals[0], state.n_intervals + 1, None,
                                         obs.prior_rate_per_s)
                for _ in range(steps):
                    theta = self._newton_step(theta, unchanged, ring, quad_b, quad_a, scale,
                                              (rep_w, rep_t), totals, unk)
                old = ring.pop(0)
                if any(old[1:d]):
                    self._evict(theta, old, quad_b, quad_a)
                else:
                    rep_w, rep_t = merge_rep(theta[0], rep_w, rep_t, old[d], old[0])
            ring.append((*v, 1.0))
        else:
            for j in range(d):
                unchanged[j] += v[j]
        return SignalState(
            self.n_sources, end, state.n_intervals + 1, theta, tuple(unchanged),
            tuple(totals), tuple(ring), tuple(quad_b), tuple(quad_a),
            self.ring_capacity, (rep_w, rep_t), (unk[0], unk[1], unk[2], unk[3]),
        )

    def _evict(
        self,
        theta: tuple[float, ...],
        old: tuple[float, ...],
        quad_b: list[float],
        quad_a: list[float],
    ) -> None:
        """Fold a changed interval into the quadratic summary, expanded at ``theta``.

        With ``x = theta.v``, ``log(1 - e^-x)`` has gradient ``c1*v`` and negative Hessian
        ``c2*v v'`` (``c1 = 1/(e^x - 1)``, ``c2 = 1/((e^x - 1)(1 - e^-x))``); its second-order
        expansion adds ``w*(c1 + c2*x)*v`` to ``b`` and ``w*c2*v v'`` to ``A``.
        """
        d = 1 + self.n_sources
        x = 0.0
        for j in range(d):
            x += theta[j] * old[j]
        c1, c2 = _coefficients(x)
        w = old[d]
        cb = w * (c1 + c2 * x)
        ca = w * c2
        k = 0
        for i in range(d):
            quad_b[i] += cb * old[i]
            for j in range(i, d):
                quad_a[k] += ca * old[i] * old[j]
                k += 1

    def _newton_step(
        self,
        theta: tuple[float, ...],
        unchanged: list[float],
        ring: list[tuple[float, ...]],
        quad_b: list[float],
        quad_a: list[float],
        scale: float = 1.0,
        rep: tuple[float, float] = (0.0, 0.0),
        totals: list[float] | None = None,
        unknown: list[float] | tuple[float, ...] = NO_UNKNOWN,
    ) -> tuple[float, ...]:
        """One Newton step with the fraction-to-boundary rule (``_numeric.newton_step``);
        ``totals`` and ``unknown``: the state's, for the intervals with signals unknown."""
        d = 1 + self.n_sources
        plin, pent = self.compiled_prior(scale)
        if rep[0] > 0.0:
            pent = (*pent, (rep[1],) + (0.0,) * self.n_sources + (rep[0],))
        expm1 = math.expm1
        has_unknown = d > 1 and unknown[0] > 0.0 and totals is not None
        if d == 1:
            th = theta[0]
            g = unchanged[0] + plin[0] - quad_b[0] + quad_a[0] * th
            h = quad_a[0]
            for e in (*ring, *pent):
                x = th * e[0]
                if x > _X_MAX:
                    x = _X_MAX
                elif x < _X_MIN:
                    x = _X_MIN
                c1 = 1.0 / expm1(x)
                wc1 = e[1] * c1
                g -= wc1 * e[0]
                h += wc1 * (1.0 + c1) * e[0] * e[0]
            step = g / (h * (1.0 + _RIDGE)) if h > 0.0 else 0.0
            t = 1.0
            if step > 0.0:
                t = min(1.0, 0.9 * th / step)
            return (th - t * step,)
        if d == 2 and not has_unknown:
            t0, t1 = theta
            a00, a01, a11 = quad_a
            g0 = unchanged[0] + plin[0] - quad_b[0] + a00 * t0 + a01 * t1
            g1 = unchanged[1] + plin[1] - quad_b[1] + a01 * t0 + a11 * t1
            for e in (*ring, *pent):
                v0, v1, w = e
                x = t0 * v0 + t1 * v1
                if x > _X_MAX:
                    x = _X_MAX
                elif x < _X_MIN:
                    x = _X_MIN
                u = 1.0 / expm1(x)
                c1 = w * u
                c2 = c1 * (1.0 + u)
                g0 -= c1 * v0
                g1 -= c1 * v1
                a00 += c2 * v0 * v0
                a01 += c2 * v0 * v1
                a11 += c2 * v1 * v1
            a00 += _RIDGE * a00
            a11 += _RIDGE * a11
            det = a00 * a11 - a01 * a01
            if not det > 0.0:
                det = 1e-300
            s0 = (a11 * g0 - a01 * g1) / det
            s1 = (a00 * g1 - a01 * g0) / det
            t = 1.0
            if s0 > 0.0:
                t = min(t, 0.9 * t0 / s0)
            if s1 > 0.0:
                t = min(t, 0.9 * t1 / s1)
            return (t0 - t * s0, t1 - t * s1)
        a = _unpack_quad(quad_a, d)
        grad = [
            unchanged[i] + plin[i] - quad_b[i] + sum(a[i][j] * theta[j] for j in range(d))
            for i in range(d)
        ]
        for e in (*ring, *pent):
            x = 0.0
            for j in range(d):
                x += theta[j] * e[j]
            c1, c2 = _coefficients(x)
            w = e[d]
            for i in range(d):
                vi = e[i]
                if vi == 0.0:
                    continue
                grad[i] -= w * c1 * vi
                for j in range(d):
                    a[i][j] += w * c2 * vi * e[j]
        if has_unknown:
            assert totals is not None
            _, ug, uh = nm.unknown_terms(np.array([theta]), nm.Unknown(
                np.array([gamma_of(totals, unknown[0])]), np.array([unknown[1]]),
                np.array([unknown[2]]), np.array([unknown[3]])))
            for i in range(d):
                grad[i] += float(ug[0, i])
                for j in range(d):
                    a[i][j] += float(uh[0, i, j])
        steps = _solve_py(a, grad)
        t = 1.0
        for j in range(d):
            if steps[j] > 0.0:
                t = min(t, 0.9 * theta[j] / steps[j])
        return tuple(theta[j] - t * steps[j] for j in range(d))

    def result(self, state: SignalState, *, prior: SignalPrior | None = None,
               prior_rate_per_s: float | None = None) -> SignalEstimate:
        """Converged MAP estimate with standard errors (``prior`` overrides the estimator's;
        ``prior_rate_per_s``: the page's own prior rate, :meth:`prior_scale`)."""
        if state.n_sources != self.n_sources:
            raise ValueError(f"state has {state.n_sources} sources, estimator {self.n_sources}")
        d = 1 + self.n_sources
        scale = self.prior_scale(state.totals[0], state.n_intervals, prior, prior_rate_per_s)
        plin, pent = self.compiled_prior(scale, prior)
        ents = (*state.ring, *pent)
        if state.rep[0] > 0.0:
            ents = (*ents, (state.rep[1],) + (0.0,) * self.n_sources + (state.rep[0],))
        lin = np.array([state.unchanged]) + np.array([plin])
        v = np.array([[e[:d] for e in ents]]) if ents else np.zeros((1, 0, d))
        w = np.array([[e[d] for e in ents]]) if ents else np.zeros((1, 0))
        b = np.array([state.quad_b])
        a = np.array([_unpack_quad(state.quad_a, d)])
        totals, unknown = np.array([state.totals]), np.array([state.unknown])
        theta, hess = nm.newton_solve(np.array([state.theta]), lin, v, w, b, a,
                                      unk=nm.unknown_of(totals, unknown))
        est = _estimates_from(
            theta, hess, totals, self.prior if prior is None else prior, unknown
        )
        return _scalar_estimate(est, 0, state.n_intervals)


def _estimates_from(
    theta: nm.FloatArray, hess: nm.FloatArray, totals: nm.FloatArray, prior: SignalPrior,
    unknown: nm.FloatArray,
) -> dict[str, nm.FloatArray]:
    """Everything :class:`SignalEstimate` holds, as arrays over ``N`` pages (``unknown``:
    their ``(N,4)`` blocks of intervals with signals unknown)."""
    s = theta.shape[1] - 1
    cov = nm.covariance(hess)
    time_s = nm.known_time(totals, unknown)
    counts = totals[:, 1:]
    # gamma = signals / time with signals recorded; under one second counts as one second,
    # and the standard error counts at least one signal (before any observation: over the
    # prior's unchanged pseudo-interval)
    pos = time_s > 0.0
    safe_t = np.maximum(time_s, 1.0)
    gamma = nm.gamma_rates(totals, unknown)
    t_ref = np.where(pos, safe_t, prior.change.unchanged_interval_s)
    var_gamma = np.maximum(counts, 1.0) / (t_ref**2)[:, None]
    alpha = theta[:, 0]
    kappa = theta[:, 1:]
    der = nm.derive(alpha, kappa, gamma)
    ses = nm.derived_standard_errors(alpha, kappa, gamma, cov, var_gamma.reshape(theta.shape[0], s))
    out = {
        "alpha": alpha,
        "alpha_se": np.sqrt(np.maximum(cov[:, 0, 0], 0.0)),
        "kappa": kappa,
        "kappa_se": np.sqrt(np.maximum(np.einsum("nii->ni", cov)[:, 1:], 0.0)),
        "gamma": gamma,
        "gamma_se": np.sqrt(var_gamma),
        "cov": cov,
        "time": totals[:, 0],
    }
    for k, val in der.items():
        out[k] = val
        out[k + "_se"] = ses[k]
    return out


def _scalar_estimate(est: dict[str, nm.FloatArray], i: int, n_intervals: int) -> SignalEstimate:
    def tup(key: str) -> tuple[float, ...]:
        return tuple(float(x) for x in est[key][i])

    return SignalEstimate(
        alpha_per_s=float(est["alpha"][i]),
        alpha_se_per_s=float(est["alpha_se"][i]),
        kappa=tup("kappa"),
        kappa_se=tup("kappa_se"),
        gamma_per_s=tup("gamma"),
        gamma_se_per_s=tup("gamma_se"),
        change_rate_per_s=float(est["change_rate"][i]),
        change_rate_se_per_s=float(est["change_rate_se"][i]),
        precision=tup("precision"),
        precision_se=tup("precision_se"),
        recall=tup("recall"),
        recall_se=tup("recall_se"),
        nu_per_s=tup("nu"),
        beta_s=tup("beta"),
        covariance=tuple(tuple(float(x) for x in row) for row in est["cov"][i]),
        n_intervals=n_intervals,
        observed_time_s=float(est["time"][i]),
    )
