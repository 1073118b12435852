"""Explain one page: its state, parameters, tau_eff, crawl value, its shard's threshold, when
it will be crawled next and the last decisions about it (why it was or wasn't crawled).

The state comes from Redis, so ``recrawl explain URL`` and ``GET /pages?url=`` give the same
answer from any worker or none; the decisions come from the worker that made them (its
:class:`streams.telemetry.decisions.DecisionRing`), which ``recrawl explain`` asks over HTTP.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np

from models.estimators.host_prior import host_priors
from models.values import crawl_value, time_to_value
from streams.estimates.estimation import GROUP_NAMES, GROUPS, full_estimates
from streams.estimates.params import page_params
from streams.estimates.record import EstimatorRecord, value_alpha
from streams.events.records import SOURCES, check_url, host_of, shard_of
from streams.scheduler import Control
from streams.settings import Settings
from streams.store import AdminStore

__all__ = ["estimates_view", "explain", "host_prior_view"]


def _num(x: float | None) -> float | None:
    if x is None or not math.isfinite(x):
        return None
    return x


def estimates_view(record: str | None,
                   prior_rate_per_s: float | None = None) -> dict[str, Any] | None:
    """A page's estimates with their standard errors (None before its first interval; the
    record's state solved again, under the page's own prior rate as its updates were: a
    stored record keeps only what the crawl value needs)."""
    est = full_estimates(record, prior_rate_per_s)
    if est is None:
        return None
    return {
        "intervals_observed": est.n_intervals,
        "change_rate_per_s": est.change_rate_per_s,
        "change_rate_se_per_s": est.change_rate_se_per_s,
        "alpha_per_s": est.alpha_per_s,
        "alpha_se_per_s": est.alpha_se_per_s,
        "sources": {
            name: {
                "members": list(GROUPS[i][1]),
                "gamma_per_s": est.gamma_per_s[i],
                "precision": est.precision[i],
                "precision_se": est.precision_se[i],
                "recall": est.recall[i],
                "recall_se": est.recall_se[i],
                "beta_s": est.kappa[i] / est.alpha_per_s if est.alpha_per_s > 0 else None,
            }
            for i, name in enumerate(GROUP_NAMES)
        },
    }


def host_prior_view(sums: tuple[float, float, float], record: str | None,
                    own_prior_per_s: float | None, min_pages: int) -> dict[str, Any]:
    """The page's host prior (``streams/store/host_prior.py``): the Gamma its host's sums fit
    now (``host_priors``; None while they hold no page), the pages they count, and whether
    the page's crawl-value ``alpha`` is its posterior mean under it, as its record says (the
    record's ``host`` mean stored positive: decided at its last update, with the host's
    pages counted then), with the reason in ``summary``."""
    n, sum_mean, sum_log = sums
    shape, rate, fitted = host_priors(np.array([n]), np.array([sum_mean]), np.array([sum_log]))
    ok = bool(fitted[0])
    a, b = float(shape[0]), float(rate[0])
    host: tuple[float, float] | None = None
    if record:
        try:
            host = EstimatorRecord.decode(record).host
        except ValueError:
            host = None
    in_use = host is not None and value_alpha(host[0]) is not None
    posterior = None
    if host is not None and host[0] != 0.0:
        posterior = {"mean_per_s": abs(host[0]), "mean_log": host[1]}
    counted = round(n)
    gamma = f"Gamma(shape {a:.4g}, rate {b:.4g} s) (mean {a / b:.4g}/s)" if ok else ""
    if in_use:
        summary = (f"in use: alpha is the page's posterior mean under its host's prior, now "
                   f"{gamma} over {counted} pages")
    elif own_prior_per_s is not None and own_prior_per_s > 0.0:
        summary = "not in use: the page has its own prior change rate"
    elif host is None:
        summary = "not in use: the page has no observed crawl interval yet"
    elif counted < min_pages:
        summary = (f"not in use: its host has {counted} pages counted, fewer than "
                   f"host_prior_min_pages = {min_pages}")
    else:
        summary = (f"not in use yet: its host had fewer than {min_pages} pages counted at "
                   f"the page's last crawl; its next crawl uses {gamma} over {counted} pages")
    return {
        "pages_counted": counted,
        "shape": a if ok else None,
        "rate_s": b if ok else None,
        "mean_per_s": a / b if ok else None,
        "min_pages": min_pages,
        "in_use": in_use,
        "page_posterior": posterior,
        "summary": summary,
    }


async def explain(store: AdminStore, settings: Settings, url: str, now_s: float,
                  decisions: Sequence[str] | None = None,
                  steady: Callable[[], Awaitable[float | None]] | None = None,
                  ) -> dict[str, Any]:
    """The page's state, value and threshold from Redis; ``decisions`` are the deciding
    worker's recent ones about it (:class:`streams.telemetry.decisions.DecisionRing`: no decision
    text is stored in Redis).

    ``steady``: gives ``Lambda`` of the continuous optimum at the current budget
    (:func:`streams.worker.plan.steady_threshold`), asked only for a page whose largest value
    ``mu/Delta`` is below the current threshold: the threshold is not fixed (it falls as
    the pages above it are crawled, e.g. a fresh catalogue's never-crawled pages all start
    at their ``mu/Delta``), so whether such a page will be crawled depends on where it
    settles."""
    try:
        url = check_url(url)  # the canonical form, as stored
    except ValueError as exc:
        return {"url": url, "error": str(exc)}
    host = host_of(url)
    data = await store.explain_data(host, url)
    control = Control.from_redis(await store.get_control(), settings)
    shard = shard_of(host, settings.partitions)
    entry = (await store.get_shards()).get(shard, {})
    log_thr = entry.get("log_threshold")
    threshold = math.exp(log_thr) if log_thr is not None else None
    out: dict[str, Any] = {"url": url, "host": host, "shard": shard, "now": now_s}
    state = data["page"]
    if state is None:
        out.update(known=False, status="unknown page (not in the catalogue)",
                   decisions=list(decisions or []))
        return out
    params = page_params(state, data["estimator"], settings)
    tau = params.tau_eff_s(now_s)
    value = float(crawl_value(tau, params.alpha_per_s, params.beta_s, params.gamma_per_s,
                              params.mu))
    cap = params.max_value()
    out.update(
        known=True,
        state={
            "importance": state.importance,
            "prior_change_rate_per_s": state.prior_change_rate_per_s,
            "last_crawl_s": state.last_crawl_s if state.crawled else None,
            "signals_since_crawl": dict(zip(SOURCES, state.signals, strict=True)),
        },
        parameters=params.as_dict(),
        estimates=estimates_view(data["estimator"], state.prior_change_rate_per_s),
        host_prior=host_prior_view(data["host_prior"], data["estimator"],
                                   state.prior_change_rate_per_s,
                                   settings.host_prior_min_pages),
        tau_eff_s=_num(tau),
        crawl_value=value,
        max_value=cap,
        threshold=threshold,
        shard_share_per_s=entry.get("share_per_s"),
        budget_per_s=control.budget_per_s,
        decisions=list(decisions or []),
    )
    floor_at = None
    if control.max_interval_s > 0 and state.crawled:
        floor_at = state.last_crawl_s + control.max_interval_s
    out["floor_at_s"] = floor_at
    out["blocked_by_robots"] = bool(data.get("blocked"))
    fl = data["in_flight"]
    if fl is not None:
        oid, at = fl
        out["in_flight"] = {"order_id": oid, "issued_at": at,
                            "times_out_at": at + control.order_timeout_s}
        out["status"] = f"in flight: order {oid} issued at {at:.3f}, waiting for its outcome"
        out["next_crawl_s"] = None
        return out
    value_at = None
    if threshold is not None and threshold > 0:
        iota = float(time_to_value(threshold, params.alpha_per_s, params.beta_s,
                                   params.gamma_per_s, params.mu))
        value_at = params.origin_s + iota if math.isfinite(iota) else None
    if control.paused:
        status = "scheduling is paused"
    elif threshold is None:
        status = f"value {value:.4g}; its shard has no threshold yet (no greedy orders)"
    elif value >= threshold:
        status = (f"value {value:.4g} >= threshold {threshold:.4g}: among the next orders "
                  "when its host has a token")
    elif cap <= threshold:
        # even a page never crawled has at most mu/Delta: it waits for the threshold to fall
        out["ordered_when_threshold_below"] = cap
        lam = await steady() if steady is not None else None
        out["steady_threshold"] = lam
        status = (f"value {value:.4g} < threshold {threshold:.4g}, which is above even its "
                  f"largest value mu/Delta = {cap:.4g}: it waits until the threshold falls "
                  f"below {cap:.4g}")
        if lam is None:
            status += (" (the threshold falls as the pages above it are crawled; "
                       "`recrawl plan` shows where it settles for a budget)")
        elif cap > lam:
            status += (f"; at this budget the threshold settles at {lam:.4g} (continuous "
                       "optimum, Theorem 1 of paper 004) once the pages above it are "
                       "crawled, so it will be")
        else:
            status += (f"; but at this budget the threshold settles at {lam:.4g} >= "
                       f"{cap:.4g} (continuous optimum, Theorem 1 of paper 004): not worth "
                       "a crawl at this budget, only the floor orders it")
    else:
        status = f"value {value:.4g} < threshold {threshold:.4g}: not worth a crawl yet"
    candidates = [t for t in (value_at, floor_at) if t is not None]
    out["value_reaches_threshold_at_s"] = value_at
    out["next_crawl_s"] = max(now_s, min(candidates)) if candidates else None
    if data.get("blocked"):
        status = "its host's robots.txt disallows it: not ordered until the robots.txt changes"
        out["next_crawl_s"] = None
    out["status"] = status
    host_info = data["host"]
    out["host_capacity"] = {
        "max_crawls_per_s": host_info.rate_per_s or settings.default_host_crawls_per_s,
        "max_in_flight": host_info.max_in_flight,
        "limited_by": {src: why for src, (r, why) in (host_info.limits or {}).items()
                       if r == host_info.rate_per_s} or None,
    }
    return out
