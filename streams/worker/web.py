"""HTTP views of the worker (Faust web): explain a page, a host, stats, Prometheus metrics.

* ``GET /pages?url=URL``  state, parameters, tau_eff, value, threshold, next crawl, decisions
* ``GET /hosts/{host}/``  capacity (and who limits it: operator, robots.txt Crawl-delay,
  push-back), token bucket, pages, orders in flight, pages robots.txt disallows
* ``GET /stats/``         R, emitted rate, threshold, per-shard share and threshold, pings by
                          source, counters, the live accuracy when a test web publishes it
                          (``truth``); ``?hosts=N`` adds the N hosts with most orders in flight
* ``GET /metrics/``       Prometheus text format
* ``GET /plan/?budget=10&budget=100``  expected accuracy per budget from the current
  estimates (:mod:`streams.worker.plan`, the same as ``recrawl plan``)
* ``GET /dashboard/``     one self-contained HTML page that polls ``/stats/`` (no outside
                          fetches: inline JS and CSS)
"""

from __future__ import annotations

import math
import time
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import faust
from faust.web import Request, Response, View

from streams.events.records import shard_of
from streams.scheduler import Scheduler
from streams.settings import Settings
from streams.store.redis_store import Store
from streams.worker.explain import explain
from streams.worker.metrics import Metrics
from streams.worker.plan import plan_from_store, steady_threshold

__all__ = ["MAX_TOP_HOSTS", "dashboard_html", "register_views"]

#: hosts listed by ``/stats/?hosts=N`` at most
MAX_TOP_HOSTS = 1000


@cache
def dashboard_html() -> bytes:
    return (Path(__file__).with_name("dashboard.html")).read_bytes()


def register_views(
    app: faust.App, settings: Settings, store: Store, scheduler: Scheduler, metrics: Metrics
) -> None:
    steady_cache: list[tuple[float, float | None]] = []

    async def steady() -> float | None:
        """:func:`streams.worker.plan.steady_threshold`, reused for 30 s (it reads every page)."""
        now = time.monotonic()
        if not steady_cache or now - steady_cache[0][0] > 30.0:
            steady_cache[:] = [(now, await steady_threshold(store, settings))]
        return steady_cache[0][1]

    @app.page("/pages/")
    class PagesView(View):
        async def get(self, request: Request) -> Response:
            url = request.query.get("url")
            if not url:
                return self.json({"error": "missing ?url="}, status=400)
            return self.json(await explain(store, settings, url, time.time(),
                                           scheduler.decisions.get(url), steady=steady))

    @app.page("/hosts/{host}/")
    class HostView(View):
        async def get(self, request: Request, host: str) -> Response:
            host = host.lower()
            info = await store.host_stats(host)
            p = shard_of(host, settings.partitions)
            local: dict[str, Any] | None = None
            shard = scheduler.shards.get(p)
            if shard is not None and host in shard.hosts:
                local = {"tokens": shard.hosts.tokens(host, time.time()),
                         "in_flight": shard.hosts.in_flight(host)}
            hi = info["info"]
            return self.json({
                "host": host,
                "shard": p,
                "max_crawls_per_s": hi.rate_per_s,
                "effective_max_crawls_per_s": hi.rate_per_s or settings.default_host_crawls_per_s,
                "max_in_flight": hi.max_in_flight,
                # who limits the host (operator, robots = Crawl-delay, pushback = 429/503)
                # and why; the capacity above is the smallest of these
                "limits": {src: {"max_crawls_per_s": r, "reason": why}
                           for src, (r, why) in (hi.limits or {}).items()},
                "limited_by": _limited_by(hi.limits or {}, hi.rate_per_s),
                "robots_digest": hi.robots_digest,
                "blocked_by_robots": info["blocked"],
                "tokens": hi.tokens,
                "tokens_updated_at": hi.updated_s,
                "pages": info["pages"],
                "in_flight": info["in_flight"],
                "worker_view": local,
            })

    @app.page("/stats/")
    class StatsView(View):
        async def get(self, request: Request) -> Response:
            out = scheduler.stats()
            raw = request.query.get("hosts")
            if raw is not None:
                try:
                    n = int(raw)
                except ValueError:
                    n = -1
                if not 0 <= n <= MAX_TOP_HOSTS:
                    return self.json({"error": f"hosts must be 0..{MAX_TOP_HOSTS}, got {raw!r}"},
                                     status=400)
                out["hosts"] = scheduler.top_hosts(n)
            out["truth"] = await store.get_truth()
            return self.json(out)

    @app.page("/dashboard/")
    class DashboardView(View):
        async def get(self, request: Request) -> Response:
            return self.bytes(dashboard_html(), content_type="text/html",
                              headers={"Cache-Control": "no-store"})

    @app.page("/dashboard")
    class DashboardNoSlash(View):
        async def get(self, request: Request) -> Response:
            # one address for the page: its polling URL is relative to it
            return self.bytes(b"", status=308, headers={"Location": "/dashboard/"})

    @app.page("/metrics/")
    class MetricsView(View):
        async def get(self, request: Request) -> Response:
            return self.bytes(metrics.exposition(),
                              content_type="text/plain")

    @app.page("/plan/")
    class PlanView(View):
        async def get(self, request: Request) -> Response:
            raw = parse_qs(request.query_string).get("budget", [])
            try:
                budgets = [float(x) for v in raw for x in v.split(",") if x.strip()]
            except ValueError:
                return self.json({"error": f"budget must be numbers, got {raw}"}, status=400)
            if not budgets or not all(b > 0 and math.isfinite(b) for b in budgets):
                return self.json({"error": "give ?budget=R (orders/s > 0), repeatable"},
                                 status=400)
            if len(budgets) > 100:
                return self.json({"error": "at most 100 budgets"}, status=400)
            return self.json(await plan_from_store(store, settings, budgets))

    # ``GET /plan?budget=`` as well as ``/plan/?budget=``
    app.page("/plan")(type("PlanViewNoSlash", (PlanView,), {}))


def _limited_by(limits: dict[str, tuple[float | None, str | None]], rate: float | None
                ) -> str | None:
    """The source whose rate is the host's capacity (None: the default)."""
    if rate is None:
        return None
    return next((src for src, (r, _why) in limits.items() if r == rate), None)
