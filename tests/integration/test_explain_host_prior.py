"""``recrawl explain`` and ``GET /pages/`` show a page's host prior: the Gamma its host's
stored sums fit, the pages counted, and whether the page's crawl-value ``alpha`` is its
posterior mean under it (and why not), through a real worker, Kafka and Redis."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import numpy as np
import pytest
from kafka_io import produce_json, wait_for
from test_scheduler import free_port, get, page_value
from worker_process import settings_env

from models.estimators.host_prior import host_priors
from streams.estimates.estimation import estimates_of
from streams.settings import Settings
from streams.store.page_record import PageState, estimator_part
from streams.store.redis_conn import connect_sync as connect_redis_sync

pytestmark = pytest.mark.integration

MIN_PAGES = 4


def _cli_explain(settings: Settings, url: str) -> dict[str, Any]:
    # the worker's settings, as an operator's environment gives them to both
    env = {**settings_env(settings), "RECRAWL_HOST_PRIOR_MIN_PAGES": str(MIN_PAGES)}
    cli = subprocess.run([sys.executable, "-m", "streams.cli", "explain", url],
                         env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    out: dict[str, Any] = json.loads(cli.stdout)
    return out


def _stored_gamma(settings: Settings, host: str) -> tuple[float, float, float]:
    """The host's prior sums as Redis holds them, and the Gamma they fit."""
    r = connect_redis_sync(settings.redis_url, decode_responses=True)
    n, m, lg = (float(x) for x in r.hmget(f"{settings.key_prefix}:{{{host}}}:prior",
                                          "n", "mean", "log"))
    (a,), (b,), (ok,) = host_priors(np.array([n]), np.array([m]), np.array([lg]))
    assert ok
    return n, float(a), float(b)


def test_explain_shows_the_host_prior_and_whether_the_page_uses_it(
        settings: Settings, start_worker: Any) -> None:
    port = free_port()
    start_worker(settings, {"RECRAWL_BUDGET_PER_S": "0", "RECRAWL_WEB_ENABLED": "true",
                            "RECRAWL_WEB_PORT": str(port),
                            "RECRAWL_HOST_PRIOR_MIN_PAGES": str(MIN_PAGES)})
    big, small = "hp-big.org", "hp-small.org"
    bigs = [f"https://{big}/p{i}" for i in range(6)]
    own = bigs[5]  # given its own prior change rate
    fresh = f"https://{big}/never-crawled"
    smalls = [f"https://{small}/q{i}" for i in range(2)]
    produce_json(settings, "pages",
                 [(big, {"url": u}) for u in bigs[:5]]
                 + [(big, {"url": own, "change_rate_per_s": 1e-4}), (big, {"url": fresh})]
                 + [(small, {"url": u}) for u in smalls])
    crawled = [(big, u) for u in bigs] + [(small, u) for u in smalls]
    wait_for(lambda: all(page_value(settings, h, u) for h, u in [*crawled, (big, fresh)]),
             30, "pages applied")
    t0 = time.time() - 10_000.0

    def crawl_round(k: int) -> None:
        fetched = t0 + 3000.0 * k
        produce_json(settings, "outcomes", [
            (h, {"url": u, "fetched_at": fetched, "status": 200,
                 "changed": (i + k) % 3 == 0})
            for i, (h, u) in enumerate(crawled)])

        def done() -> bool:
            values = [page_value(settings, h, u) for h, u in crawled]
            return all(v is not None and PageState.decode(v).last_crawl_s == pytest.approx(
                fetched, abs=1e-3) for v in values)
        wait_for(done, 30, f"outcomes of round {k} applied")

    crawl_round(0)  # first crawls: no interval observed yet
    out = _cli_explain(settings, bigs[0])
    assert out["host_prior"]["in_use"] is False and out["host_prior"]["shape"] is None
    assert out["host_prior"]["pages_counted"] == 0
    assert out["host_prior"]["summary"] == (
        "not in use: the page has no observed crawl interval yet")

    crawl_round(1)  # one interval each, under no host prior (the host had no page counted)
    n, a, b = _stored_gamma(settings, big)
    assert n == len(bigs)
    out = _cli_explain(settings, bigs[0])
    hp = out["host_prior"]
    assert (hp["pages_counted"], hp["min_pages"], hp["in_use"]) == (6, MIN_PAGES, False)
    assert hp["shape"] == pytest.approx(a, rel=1e-12)
    assert hp["rate_s"] == pytest.approx(b, rel=1e-12)
    assert hp["summary"].startswith("not in use yet: its host had fewer than 4 pages counted")
    assert out["parameters"]["alpha_per_s"] == pytest.approx(out["estimates"]["alpha_per_s"],
                                                             rel=1e-5)  # its own mode

    crawl_round(2)  # now under the host's Gamma of 6 pages
    n, a, b = _stored_gamma(settings, big)
    for u in bigs[:5]:
        out = _cli_explain(settings, u)
        web = get(port, f"/pages/?url={u}")
        hp = out["host_prior"]
        assert web["host_prior"] == hp
        assert hp["in_use"] is True and hp["pages_counted"] == 6
        assert (hp["shape"], hp["rate_s"]) == (pytest.approx(a, rel=1e-12),
                                               pytest.approx(b, rel=1e-12))
        assert hp["mean_per_s"] == pytest.approx(a / b, rel=1e-12)
        assert hp["summary"].startswith(
            f"in use: alpha is the page's posterior mean under its host's prior, now "
            f"Gamma(shape {a:.4g}, rate {b:.4g} s)")
        # the page's posterior mean is the crawl value's alpha (the record's, float32)
        est = estimates_of(estimator_part(page_value(settings, big, u)))
        assert est is not None
        assert hp["page_posterior"]["mean_per_s"] == pytest.approx(est.alpha_per_s, rel=1e-12)
        assert out["parameters"]["alpha_per_s"] == pytest.approx(est.alpha_per_s, rel=1e-12)
    out = _cli_explain(settings, own)
    assert out["host_prior"]["in_use"] is False and out["host_prior"]["pages_counted"] == 6
    assert out["host_prior"]["summary"] == "not in use: the page has its own prior change rate"
    out = _cli_explain(settings, fresh)
    assert out["host_prior"]["in_use"] is False and out["host_prior"]["page_posterior"] is None
    assert out["host_prior"]["summary"] == (
        "not in use: the page has no observed crawl interval yet")
    out = _cli_explain(settings, smalls[0])
    assert out["host_prior"]["in_use"] is False and out["host_prior"]["pages_counted"] == 2
    assert out["host_prior"]["summary"] == (
        f"not in use: its host has 2 pages counted, fewer than host_prior_min_pages = "
        f"{MIN_PAGES}")
