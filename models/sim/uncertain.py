"""Uncertainty-aware Algorithm 1 (:class:`UncertainAlgorithm1`): a capability beyond paper 004.

Algorithm 1 with online App. E estimates (:class:`~models.sim.policies.EstimatingAlgorithm1`)
that ranks pages by the *expected* crawl value under the estimate's uncertainty
(``"expected"``), or by the crawl value at a conservative (upper-quantile) change rate
(``"conservative"``, paper 003 Sec. 5.3).  Split out of :mod:`models.sim.variants`,
which re-exports every name.

Pure: numpy and scipy.

References
----------
[004] R. Busa-Fekete, J. Zimmert, A. György et al., "A Scalable Crawling Algorithm
Utilizing Noisy Change-Indicating Signals": Theorem 1, Algorithm 1, App. E (estimation).
[003] The change-rate estimation paper: Sec. 5.3 ("the chance of being very wrong about
Delta": very stale pages while the estimate converges).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import numpy as np
import numpy.typing as npt

from models.decision.pings import PingRule
from models.sim.policies import EstimatingAlgorithm1
from models.values import crawl_value

__all__ = [
    "UncertainAlgorithm1",
    "gauss_hermite_lognormal",
]

FloatArray = npt.NDArray[np.float64]
Eligible = Callable[[int], bool] | None


def gauss_hermite_lognormal(nodes: int) -> tuple[FloatArray, FloatArray]:
    """Standard-normal quadrature ``(z_k, w_k)``: ``E[g(Z)] ~ sum_k w_k g(z_k)``.

    Probabilists' Gauss-Hermite rule with the weights normalised to sum to 1 (exact for
    polynomials of degree ``< 2 nodes``).  A log-normal ``X = x0 exp(sigma Z)`` is then
    sampled at ``x0 exp(sigma z_k)``.
    """
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes!r}")
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    z = np.asarray(z, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64) / float(np.sum(w))
    if nodes % 2 == 1:
        z[nodes // 2] = 0.0  # exactly the point estimate
    return z, w


class UncertainAlgorithm1(EstimatingAlgorithm1):
    """Algorithm 1 with online estimates that accounts for the estimates' uncertainty.

    The App. E estimator (:class:`models.estimators.SignalEstimator`) gives, per page,
    ``(alpha_hat, beta_hat, gamma_hat)`` and the change rate ``Delta_hat`` with its
    standard error (Laplace posterior and the delta method, over ``alpha``, ``kappa =
    alpha beta`` and ``gamma``).  The uncertainty is modelled as one log-normal *rate
    scale* ``s``: the page's rates are ``(s alpha_hat, s gamma_hat)`` with ``kappa``
    (hence the pings' precision, ``1 - e^{-kappa}``) fixed, so ``Delta = s Delta_hat``,
    ``beta = beta_hat/s``, and ``log s ~ N(0, sigma^2)`` with ``sigma =
    se(Delta)/Delta_hat`` (the log-normal reading of
    :func:`models.estimators.conservative_change_rate`).  Scaling every rate by ``s``
    rescales time: ``V(tau; s alpha, beta/s, s gamma) = V(s tau; alpha, beta, gamma)/s``
    (Theorem 1 and Lemma 4 of paper 004: ``psi`` and ``w`` scale as ``1/s``).

    Modes
    -----
    ``"expected"`` (``greedy-ncis-uncertain``): crawl the page with the largest
        expected crawl value ``E_s[V(tau_elap + n beta_hat/s; s alpha_hat, beta_hat/s,
        s gamma_hat, mu)]`` (Theorem 1 inside the expectation), by Gauss-Hermite
        quadrature with ``nodes`` points.  Because ``V(inf) = mu/Delta`` is convex in the
        rate, ``E[V(inf)] = e^{sigma^2/2} mu/Delta_hat``: an uncertain page keeps more
        value when long uncrawled and is less likely to be abandoned on a wrong early
        estimate (the paper 003 Sec. 5.3 risk of very stale pages).  Near ``tau = 0``,
        ``V(x) ~ mu alpha x^2/2`` (from ``V' = mu alpha e^{-alpha x} psi``, Lemma 3), so
        ``V(s tau)/s`` is linear in ``s`` and its expectation is again the plug-in's
        times ``E[s] = e^{sigma^2/2}``: at both ends the rule is an importance bonus
        ``e^{sigma^2/2}`` for uncertain pages, exact in between by quadrature.  The
        argmax is a full scan (one vectorised value call over ``m * nodes`` points per
        slot), meant for simulator scale.
    ``"conservative"`` (``greedy-ncis-conservative``): rank with the ordinary value at
        the upper ``quantile`` of the rate, ``s_q = conservative_change_rate(Delta_hat,
        se, quantile)/Delta_hat`` (paper 003 Sec. 5.3: shorter intervals while the
        estimate converges), through the :class:`~models.index.CrawlIndex`.

    ``uncertainty_scale`` multiplies ``sigma``; with 0 (or ``quantile = 0.5`` in the
    conservative mode) both modes crawl exactly as :class:`EstimatingAlgorithm1`.  A
    heuristic, not the Bayes-optimal policy: it does not value what a crawl teaches.
    """

    def __init__(
        self,
        name: str,
        mu: FloatArray,
        *,
        mode: Literal["expected", "conservative"] = "expected",
        nodes: int = 5,
        quantile: float = 0.9,
        uncertainty_scale: float = 1.0,
        use_pings: bool = True,
        ping_rule: PingRule = "accept",
        t_delay: float = 0.0,
        refit_every: int = 1,
    ) -> None:
        if mode not in ("expected", "conservative"):
            raise ValueError(f"mode must be 'expected' or 'conservative', got {mode!r}")
        if not 0.0 < quantile < 1.0:
            raise ValueError(f"quantile must be in (0, 1), got {quantile!r}")
        if not (uncertainty_scale >= 0.0 and math.isfinite(uncertainty_scale)):
            raise ValueError(f"uncertainty_scale must be finite and >= 0, got "
                             f"{uncertainty_scale!r}")
        self._mode = mode
        self._quantile = float(quantile)
        self._scale = float(uncertainty_scale)
        self._z, self._w = gauss_hermite_lognormal(nodes)
        m = int(np.asarray(mu).size)
        # per page: point estimate (alpha, beta, gamma) and sigma of log s
        self._hat = np.zeros((m, 3))
        self._sigma = np.zeros(m)
        self._ready = False
        super().__init__(name, mu, use_pings=use_pings, ping_rule=ping_rule,
                         t_delay=t_delay, refit_every=refit_every)
        # every page starts from the prior's estimate (the parent copied page 0's)
        self._hat[:] = self._hat[0]
        self._sigma[:] = self._sigma[0]
        self._ready = True

    def _params(self, page: int) -> tuple[float, float, float]:
        """``(alpha, beta, gamma)`` the index ranks with; records the rate posterior."""
        from models.estimators import conservative_change_rate

        r = self._est.result(self._state[page])
        d, se = float(r.change_rate_per_s), float(r.change_rate_se_per_s)
        if self._use_pings:
            a, b, g = float(r.alpha_per_s), float(r.beta_s[0]), float(r.gamma_per_s[0])
        else:
            a, b, g = d, 0.0, 0.0
        sigma = self._scale * se / d if d > 0.0 else 0.0
        i = page if self._ready else 0
        self._hat[i] = (a, b, g)
        self._sigma[i] = sigma
        if self._mode == "conservative" and sigma > 0.0:
            s = float(conservative_change_rate(d, sigma * d, self._quantile)) / d
            a, g = a * s, g * s
            b = b / s
        return a, b, g

    def expected_values(self, t: float) -> FloatArray:
        """``E_s[V]`` of every page at time ``t`` (mode ``"expected"``'s ranking)."""
        tau0 = np.maximum(t - self.origin, 0.0)
        if not (self._sigma > 0.0).any():
            out: FloatArray = crawl_value(tau0, self.alpha, self.beta, self.gamma, self.mu)
            return out
        z, w = self._z, self._w
        m, k = self.mu.size, z.size
        s = np.exp(self._sigma[:, None] * z[None, :])
        a = self._hat[:, 0:1] * s
        g = self._hat[:, 2:3] * s
        b = self._hat[:, 1:2] / s
        n = self._n.astype(np.float64)[:, None]
        # pings move tau_eff only while the page's gamma estimate is > 0 (Algorithm1)
        moved = np.broadcast_to((n > 0.0) & (self.gamma[:, None] > 0.0), (m, k))
        with np.errstate(invalid="ignore"):
            extra = np.where(moved, b * n, 0.0)
        tau = np.maximum(t - self.last_crawl[:, None] + extra, 0.0)
        mid = np.nonzero(z == 0.0)[0]
        if mid.size:  # the node s = 1 is the point estimate: the policy's own state
            tau[:, mid[0]] = tau0
        vals = crawl_value(tau, a, b, g, self.mu[:, None])
        out = vals @ w
        exact = self._sigma == 0.0
        if exact.any():
            out[exact] = crawl_value(tau0[exact], self.alpha[exact], self.beta[exact],
                                     self.gamma[exact], self.mu[exact])
        return out

    def choose(self, t: float, eligible: Eligible) -> int | None:
        if self._mode == "conservative":
            return super().choose(t, eligible)
        v = self.expected_values(t)
        if eligible is None:
            return int(np.argmax(v))
        for p in np.argsort(-v, kind="stable").tolist():
            if eligible(p):
                return int(p)
        return None
