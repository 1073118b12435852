"""Simulated webs: per-page importance, change rate and ping quality (paper 004 Sec. 6.1, 6.7).

A :class:`World` holds the *true* parameters of ``m`` pages: importance ``mu``, Poisson
change rate ``Delta``, ping recall ``lam`` (probability a change is signalled) and false
ping rate ``nu``, plus a host per page and a crawl-rate limit per host.  Everything is
drawn from a :class:`numpy.random.Generator` passed in.

* :func:`synthetic_world` - Sec. 6.1 / 6.3 of paper 004: ``mu, Delta ~ U(0, 1)``,
  ``lam ~ Beta(a, b)``, ``nu ~ U(nu_min, nu_max)``.
* :func:`semi_synthetic_world` - the documented stand-in for the Kolobov et al. (2019)
  data set of Sec. 6.7 (which cannot be downloaded here); see its docstring.
* :func:`assign_hosts` - heavy-tailed host sizes (Zipf) and per-host crawl-rate limits,
  for the ``lambda_i + lambda_0`` behaviour of the blog (paper 001).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from models.values import SignalParams, signal_params

__all__ = [
    "World",
    "assign_hosts",
    "corrupt",
    "semi_synthetic_world",
    "synthetic_world",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class World:
    """True parameters of a simulated web (rates per unit time).

    Attributes
    ----------
    mu, delta, lam, nu : ndarray
        Importance, change rate, ping recall, false-ping rate per page.
    host : ndarray of int
        Host of each page (``0`` for all by default).
    host_rate : ndarray
        Maximum crawls per unit time of each host (``inf`` = unlimited).
    top : ndarray of bool
        Pages labelled as having good pings (Sec. 6.7's "top URLs"); all False by default.
    """

    mu: FloatArray
    delta: FloatArray
    lam: FloatArray
    nu: FloatArray
    host: IntArray
    host_rate: FloatArray
    top: npt.NDArray[np.bool_]

    @property
    def m(self) -> int:
        return int(self.mu.size)

    @property
    def precision(self) -> FloatArray:
        """``lam Delta / (lam Delta + nu)`` (Sec. 3 of paper 004; 0 without pings)."""
        s = self.lam * self.delta
        g = s + self.nu
        with np.errstate(divide="ignore", invalid="ignore"):
            out: FloatArray = np.where(g > 0, s / g, 0.0)
        return out

    def signal_params(self) -> SignalParams:
        """``(alpha, beta, gamma)`` of the true parameters (Sec. 3 of paper 004)."""
        return signal_params(self.delta, self.lam, self.nu)

    def with_hosts(self, host: IntArray, host_rate: FloatArray) -> World:
        return replace(self, host=host, host_rate=host_rate)


def _world(
    mu: FloatArray, delta: FloatArray, lam: FloatArray, nu: FloatArray,
    top: npt.NDArray[np.bool_] | None = None,
) -> World:
    m = mu.size
    return World(
        mu=mu, delta=delta, lam=lam, nu=nu,
        host=np.zeros(m, dtype=np.int64), host_rate=np.array([np.inf]),
        top=np.zeros(m, dtype=bool) if top is None else top,
    )


def synthetic_world(
    m: int,
    rng: np.random.Generator,
    *,
    lam_beta: tuple[float, float] | None = (0.25, 0.25),
    nu_range: tuple[float, float] | None = (0.1, 0.6),
) -> World:
    """Problem instance of Sec. 6.1 of paper 004.

    ``mu_i, Delta_i ~ U(0, 1)`` (Sec. 6.3); ``lam_i ~ Beta(*lam_beta)`` (no pings if
    None); ``nu_i ~ U(*nu_range)`` (no false pings if None).
    """
    if m < 1:
        raise ValueError(f"m must be >= 1, got {m!r}")
    mu = rng.uniform(0.0, 1.0, m)
    delta = rng.uniform(0.0, 1.0, m)
    lam = rng.beta(*lam_beta, m) if lam_beta is not None else np.zeros(m)
    nu = rng.uniform(*nu_range, m) if nu_range is not None else np.zeros(m)
    if lam_beta is None:
        nu = np.zeros(m)
    return _world(mu, delta, lam, nu)


#: The stand-in precision / recall distributions: ``Beta(a, b)`` given as ``(a, q95)``,
#: ``b`` solved so that the 95% quantile is ``q95`` (:func:`stand_in_beta`).  Sec. 6.7 of
#: paper 004 defines Greedy-CIS+'s high-quality pages as precision > 0.7 and recall > 0.6
#: "to match all top URLs without corruption", and its top URLs draw from the upper 5% of
#: the Sec. 2 histograms, so 0.7 and 0.6 are those histograms' 95% quantiles.
PRECISION_SHAPE_Q95 = (1.1, 0.7)
RECALL_SHAPE_Q95 = (1.6, 0.6)


@functools.cache
def stand_in_beta(a: float, q95: float) -> tuple[float, float]:
    """``(a, b)`` of the Beta distribution with shape ``a`` whose 95% quantile is ``q95``.

    ``b`` by Brent's method on the Beta quantile (``scipy.special.betaincinv``), which
    falls monotonically in ``b``.
    """
    from scipy import optimize, special

    b = optimize.brentq(lambda b: float(special.betaincinv(a, b, 0.95)) - q95, 1e-3, 1e3,
                        xtol=1e-14, rtol=1e-14)
    return a, float(b)


def semi_synthetic_world(m: int, rng: np.random.Generator, *, top_share: float = 0.05) -> World:
    """Stand-in for the Kolobov et al. (2019) data set of Sec. 6.7 of paper 004.

    The data set (18.5M URLs, two weeks of intensive crawls) cannot be downloaded here.
    The stand-in keeps what the experiment uses, one time unit being one day:

    * change rate: log-normal, median 0.1 changes/day (a change every ten days),
      ``sigma = 1.6``, clipped to ``[1/365, 24]``: about a quarter of pages change at
      least every two days and a third less than monthly, in line with Cho and
      Garcia-Molina (2000) and Brewington and Cybenko (2000);
    * importance: Pareto with tail index 1.1 (PageRank-like power law, exponent ~2.1);
    * "top" URLs (pages with side information in Kolobov et al., ~5%): drawn with
      probability proportional to ``mu**0.5`` so that they hold more than their share of
      importance (Sec. 2: 4% of URLs with 26% of the weight);
    * precision ~ Beta(1.1, 2.60) and recall ~ Beta(1.6, 4.19) stand in for the Sec. 2
      histograms (whose data are not in the text): their 95% quantiles are 0.7 and 0.6,
      the thresholds of Sec. 6.7 that "match all top URLs" (:data:`PRECISION_SHAPE_Q95`);
      81% and 88% of pages lie below 0.5 and 1.8% and 0.3% above 0.8 ("very few pages"
      above 0.8, Sec. 2).  As in Sec. 6.7 the top URLs draw from the upper 5% tail of both
      and every other URL from the lower 95%, so the top URLs are exactly the pages with
      precision > 0.7 and recall > 0.6;
    * ``lam = recall``, ``nu = lam Delta (1 - precision) / precision``.
    """
    if not 0 < top_share < 1:
        raise ValueError(f"top_share must be in (0, 1), got {top_share!r}")
    delta = np.clip(np.exp(rng.normal(np.log(0.1), 1.6, m)), 1 / 365, 24.0)
    mu = rng.pareto(1.1, m) + 1.0
    w = np.sqrt(mu)
    n_top = max(1, round(top_share * m))
    top_idx = rng.choice(m, size=n_top, replace=False, p=w / w.sum())
    top = np.zeros(m, dtype=bool)
    top[top_idx] = True
    q = 1.0 - top_share
    precision = _split_beta(rng, stand_in_beta(*PRECISION_SHAPE_Q95), q, top)
    recall = _split_beta(rng, stand_in_beta(*RECALL_SHAPE_Q95), q, top)
    lam = recall
    nu = lam * delta * (1.0 - precision) / precision
    return _world(mu, delta, lam, nu, top)


def _split_beta(
    rng: np.random.Generator, ab: tuple[float, float], q: float, top: npt.NDArray[np.bool_]
) -> FloatArray:
    """Beta(a, b) draws restricted to the upper ``1-q`` tail for ``top``, lower ``q`` else."""
    from scipy import stats

    dist = stats.beta(*ab)
    u = rng.uniform(0.0, 1.0, top.size)
    u = np.where(top, q + (1.0 - q) * u, q * u)
    out: FloatArray = np.clip(np.asarray(dist.ppf(u), dtype=np.float64), 1e-3, 1 - 1e-6)
    return out


def corrupt(
    precision: FloatArray, recall: FloatArray, p: float, rng: np.random.Generator
) -> tuple[FloatArray, FloatArray]:
    """Sec. 6.7's corruption of estimates: ``x <- (1 - p) x + p xi``, ``xi ~ U(0, 1)``.

    (The paper's recall formula omits the ``p`` in front of ``xi``; we read it as for
    precision.)
    """
    xi1 = rng.uniform(0.0, 1.0, precision.size)
    xi2 = rng.uniform(0.0, 1.0, recall.size)
    return (1 - p) * precision + p * xi1, (1 - p) * recall + p * xi2


def assign_hosts(
    world: World,
    rng: np.random.Generator,
    *,
    n_hosts: int,
    zipf_s: float = 1.2,
    limited_share: float = 0.1,
    limit_per_page: float = 0.2,
) -> World:
    """Spread pages over hosts with Zipf sizes and cap the largest hosts' crawl rate.

    Host ``h`` gets weight ``(h + 1)**-zipf_s``; pages are assigned by that weight (a
    heavy tail: the first hosts hold most pages).  The ``limited_share`` largest hosts
    get a maximum crawl rate of ``limit_per_page`` times their page count (per unit
    time), the others are unlimited (blog, paper 001: per-host limits ``k_i``).
    """
    if n_hosts < 1:
        raise ValueError(f"n_hosts must be >= 1, got {n_hosts!r}")
    w = (np.arange(n_hosts) + 1.0) ** -zipf_s
    host = rng.choice(n_hosts, size=world.m, p=w / w.sum()).astype(np.int64)
    sizes = np.bincount(host, minlength=n_hosts).astype(np.float64)
    rate = np.full(n_hosts, np.inf)
    n_lim = max(1, round(limited_share * n_hosts))
    big = np.argsort(-sizes)[:n_lim]
    rate[big] = np.maximum(limit_per_page * sizes[big], 1e-9)
    return world.with_hosts(host, rate)
