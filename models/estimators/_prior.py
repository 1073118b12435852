"""Weak priors expressed as pseudo-observations (Grimes-Ford style).

Every estimator in this package starts from a handful of *pseudo-intervals* that are added to
the likelihood exactly, as if they had been observed.  They keep the maximum a-posteriori
estimate finite and interior for new pages and for all-changed or never-changed histories,
and they are overwhelmed by real data after a few dozen intervals.

References
----------
.. [1] Paper 003 Sec. 4.4: "a prior sample of two pseudo-datapoints, a change observed after
   1 hour and no change observed after 57 hours" (after Grimes and Ford, 2008).
.. [2] Paper 004 App. E: ``P(no change) = exp(-alpha*tau_elap - kappa*n)``.

Scale-free pseudo-intervals
---------------------------
Paper 003's two points are lengths in absolute time, fitted to a corpus of pages crawled
about daily (Cho and Garcia-Molina's daily crawl, paper 003 Sec. 2).  Read literally they
outweigh hundreds of real intervals of a page crawled every minute: 200 intervals of 35 s,
every second one changed (true rate ``ln 2/35 s``), give an estimate 40x too slow.
:data:`GRIMES_FORD` therefore states the points *relative to the page's own crawl
interval*: ``t_c = 1 h x T/1 day`` and ``t_u = 57 h x T/1 day``, with ``T`` the page's mean
observed crawl interval (observed time / intervals; one day before the first interval).
Justification: (a) at a daily crawl interval they are paper 003's points exactly; (b) a
scheduler crawls a page at an interval that follows its expected change period (paper 003
Sec. 5 picks the next interval from the current estimate), so the crawl interval is the
natural unit of a page's rate, and the prior keeps its shape in that unit: about one change
per ``57.5/24 = 2.4`` crawl intervals, worth two intervals of evidence; (c) the estimate is
then invariant under a change of time unit (all intervals times ``k`` gives the rate over
``k``), so the same data at 35 s, 1 h or 1 day gives the same relative error
(``docs/estimators.md``, "Scale-free prior").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["GRIMES_FORD", "PseudoDatapoints", "SignalPrior"]

_HOUR_S = 3600.0
_DAY_S = 86400.0
#: the range of a page's mean crawl interval the scale-free points follow (s)
MIN_MEAN_INTERVAL_S = 1.0
MAX_MEAN_INTERVAL_S = 3650.0 * _DAY_S


def _check_positive(name: str, value: float) -> None:
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def _check_nonneg(name: str, value: float) -> None:
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class PseudoDatapoints:
    """Grimes-Ford start for the change rate: one changed and one unchanged pseudo-interval.

    Parameters
    ----------
    changed_interval_s
        Length of the pseudo-interval in which a change was seen (default 1 h).
    unchanged_interval_s
        Length of the pseudo-interval in which no change was seen (default 57 h).
    weight
        Weight of each of the two pseudo-intervals (1 = one real observation each).
    reference_interval_s
        ``None``: the lengths are absolute.  Otherwise they scale with the page's mean crawl
        interval ``T``: each length is multiplied by ``T/reference_interval_s`` (module
        docstring, "Scale-free pseudo-intervals"; :meth:`scale_for`).

    Notes
    -----
    On their own the two points give the rate that solves eq. (2) of paper 003 (Cho and
    Garcia-Molina's irregular-interval MLE) with one changed and one unchanged interval:
    ``t_c/(exp(rate*t_c) - 1) = t_u``, i.e. ``rate = ln(1 + t_c/t_u)/t_c`` (1/57.5 per hour
    for the defaults).  See :func:`models.estimators.fit_pseudo_datapoints` to fit them to a
    corpus.
    """

    changed_interval_s: float = 1.0 * _HOUR_S
    unchanged_interval_s: float = 57.0 * _HOUR_S
    weight: float = 1.0
    reference_interval_s: float | None = None

    def __post_init__(self) -> None:
        _check_positive("changed_interval_s", self.changed_interval_s)
        _check_positive("unchanged_interval_s", self.unchanged_interval_s)
        _check_nonneg("weight", self.weight)
        if self.reference_interval_s is not None:
            _check_positive("reference_interval_s", self.reference_interval_s)

    def scale_for(self, observed_time_s: float, n_intervals: float) -> float:
        """Factor on both lengths for a page with that history: ``(observed/n)/reference``.

        ``1`` for absolute points and for a page without an observed interval; the mean
        interval is clipped to [:data:`MIN_MEAN_INTERVAL_S`, :data:`MAX_MEAN_INTERVAL_S`]
        (1 s to 10 years: no page is crawled outside it, and a subnormal interval would
        otherwise shrink the points to nothing).
        """
        ref = self.reference_interval_s
        if ref is None or not (n_intervals > 0 and observed_time_s > 0.0):
            return 1.0
        mean = min(max(observed_time_s / n_intervals, MIN_MEAN_INTERVAL_S), MAX_MEAN_INTERVAL_S)
        return mean / ref

    def scale_for_rate(self, rate_per_s: float) -> float:
        """Factor on both lengths for a page whose own prior rate is ``rate_per_s`` (the
        operator's, e.g. ``change_rate_per_s`` of ``recrawl pages load``): the two points
        alone then imply that rate (their rate ``ln(1 + t_c/t_u)/t_c`` is inversely
        proportional to the factor), with the same weight as ever.  Clipped to the range of
        :meth:`scale_for`; ``1`` for absolute points."""
        ref = self.reference_interval_s
        if ref is None:
            return 1.0
        return min(max(self.prior_rate_per_s / rate_per_s, MIN_MEAN_INTERVAL_S / ref),
                   MAX_MEAN_INTERVAL_S / ref)

    @property
    def prior_rate_per_s(self) -> float:
        """Rate the two pseudo-datapoints alone imply: ``ln(1 + t_c/t_u)/t_c``."""
        return math.log1p(self.changed_interval_s / self.unchanged_interval_s) / (
            self.changed_interval_s
        )


#: Paper 003's points (1 h changed, 57 h unchanged) at a daily crawl interval, scaled with
#: the page's own mean crawl interval (module docstring).
GRIMES_FORD = PseudoDatapoints(1.0 * _HOUR_S, 57.0 * _HOUR_S, 1.0, _DAY_S)


@dataclass(frozen=True, slots=True)
class SignalPrior:
    """Pseudo-observations for the App. E model ``(alpha, kappa_1..kappa_S)``.

    Parameters
    ----------
    change : PseudoDatapoints
        Pseudo-intervals without signals (default :data:`GRIMES_FORD`, scale-free); they
        inform ``alpha`` (the rate of changes no source signals; equal to the change rate
        ``Delta`` when there are no sources).
    precision_changed : tuple of float
        Per source, the weight of a zero-length pseudo-interval holding one signal of that
        source and a change (default 1 for each source).
    precision_unchanged : tuple of float
        Per source, the weight of the same pseudo-interval without a change (default 1).

    Notes
    -----
    A zero-length interval with one signal is unchanged with probability ``exp(-kappa)``, so
    the source pseudo-intervals form a Bernoulli likelihood for ``precision = 1 - exp(-kappa)``
    (paper 004 App. E): weights ``(c, u)`` act like a ``Beta(c + 1, u + 1)`` prior on the
    precision, mode ``c/(c + u)``.  The defaults (1, 1) centre it on 0.5.
    """

    change: PseudoDatapoints = GRIMES_FORD
    precision_changed: tuple[float, ...] = ()
    precision_unchanged: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if len(self.precision_changed) != len(self.precision_unchanged):
            raise ValueError(
                "precision_changed and precision_unchanged must have the same length, got "
                f"{len(self.precision_changed)} and {len(self.precision_unchanged)}"
            )
        for w in self.precision_changed:
            _check_nonneg("precision_changed", w)
        for w in self.precision_unchanged:
            _check_nonneg("precision_unchanged", w)

    @classmethod
    def centred(
        cls,
        alpha_per_s: float,
        precisions: tuple[float, ...],
        strength: float,
    ) -> SignalPrior:
        """A prior whose mode is ``(alpha_per_s, precisions)``, worth ``strength`` intervals.

        Used for the per-host pool (:mod:`models.estimators.sources`).  The ``alpha`` part is
        a changed pseudo-interval of length ``L = 1/alpha`` and an unchanged one of length
        ``L/(e - 1)``, each of weight ``strength/2``: eq. (2) of paper 003 then gives
        ``alpha*L = 1``.  The precision part is ``strength*p`` changed and
        ``strength*(1 - p)`` unchanged zero-length one-signal pseudo-intervals, with ``p``
        clipped to ``[0.01, 0.99]``.
        """
        _check_positive("alpha_per_s", alpha_per_s)
        _check_positive("strength", strength)
        length_s = 1.0 / alpha_per_s
        change = PseudoDatapoints(length_s, length_s / (math.e - 1.0), strength / 2.0)
        clipped = []
        for p in precisions:
            if not math.isfinite(p):
                raise ValueError(f"precisions must be finite, got {p!r}")
            clipped.append(min(max(p, 0.01), 0.99))
        return cls(
            change,
            tuple(strength * p for p in clipped),
            tuple(strength * (1.0 - p) for p in clipped),
        )

    def compiled(self, n_sources: int) -> tuple[tuple[float, ...], tuple[tuple[float, ...], ...]]:
        """Linear (unchanged) coefficients and changed pseudo-entries for ``n_sources``.

        Returns ``(lin, entries)``: ``lin`` has ``1 + n_sources`` entries (``sum w*tau``,
        ``sum w*n_s`` over unchanged pseudo-intervals); each entry is
        ``(tau, n_1, ..., n_S, weight)`` for a changed pseudo-interval.
        """
        if self.precision_changed:
            if len(self.precision_changed) != n_sources:
                raise ValueError(
                    f"prior has {len(self.precision_changed)} sources, estimator has {n_sources}"
                )
            pc, pu = self.precision_changed, self.precision_unchanged
        else:
            pc = pu = (1.0,) * n_sources
        d = 1 + n_sources
        w0 = self.change.weight
        lin = [w0 * self.change.unchanged_interval_s] + [0.0] * n_sources
        entries: list[tuple[float, ...]] = []
        if w0 > 0.0:
            entries.append((self.change.changed_interval_s,) + (0.0,) * n_sources + (w0,))
        for s in range(n_sources):
            lin[1 + s] += pu[s]
            if pc[s] > 0.0:
                v = [0.0] * d
                v[1 + s] = 1.0
                entries.append((*v, pc[s]))
        return tuple(lin), tuple(entries)
