"""A page's crawl-value parameters ``(alpha, beta, gamma, mu)`` and ``origin`` from its state.

This is the one place that decides where parameters come from: the page's estimates
(``streams/estimation.py``: helper B's ``SignalEstimator`` over three source groups) once it
has an observed crawl interval, priors before.

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
from dataclasses import dataclass

from streams.estimation import GROUP_OF, Estimates, estimates_of, value_parameters
from streams.records import SOURCES
from streams.settings import Settings
from streams.state import PageState


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
    """Parameters of one page (``estimator``: its stored record or its parsed estimates)."""
    est = estimates_of(estimator) if isinstance(estimator, str) else estimator
    if est is not None and est.n_intervals > 0:
        alpha, group_betas, gamma, beta = value_parameters(est, settings.estimate_quantile)
        betas = tuple(group_betas[g] for g in GROUP_OF)
        delta = est.change_rate_per_s
        estimated = True
    else:
        prior = state.prior_change_rate_per_s
        delta = prior if prior is not None and prior > 0.0 else settings.default_change_rate_per_s
        alpha, gamma = delta, 0.0
        beta = -math.log(1.0 - settings.default_source_precision) / alpha
        betas = (beta,) * len(SOURCES)
        estimated = False
    if state.crawled:
        origin = state.last_crawl_s - sum(b * n for b, n in zip(betas, state.signals, strict=True))
    else:
        origin = 0.0
    return PageParams(alpha, beta, gamma, state.importance, delta, betas, origin, estimated)
