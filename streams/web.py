"""HTTP views of the worker (Faust web): explain a page, a host, stats, Prometheus metrics.

* ``GET /pages?url=URL``  state, parameters, tau_eff, value, threshold, next crawl, decisions
* ``GET /hosts/{host}/``  capacity, token bucket, pages, orders in flight
* ``GET /stats/``         R, emitted rate, threshold, per-shard share and threshold, pings by
                          source, counters, the live accuracy when a test web publishes it
                          (``truth``); ``?hosts=N`` adds the N hosts with most orders in flight
* ``GET /metrics/``       Prometheus text format
* ``GET /dashboard/``     one self-contained HTML page that polls ``/stats/`` (no outside
                          fetches: inline JS and CSS)
"""

from __future__ import annotations

import time
from functools import cache
from pathlib import Path
from typing import Any

import faust
from faust.web import Request, Response, View

from streams.explain import explain
from streams.metrics import Metrics
from streams.records import shard_of
from streams.scheduler import Scheduler
from streams.settings import Settings
from streams.state import Store

#: hosts listed by ``/stats/?hosts=N`` at most
MAX_TOP_HOSTS = 1000


@cache
def dashboard_html() -> bytes:
    return (Path(__file__).with_name("dashboard.html")).read_bytes()


def register_views(
    app: faust.App, settings: Settings, store: Store, scheduler: Scheduler, metrics: Metrics
) -> None:
    @app.page("/pages/")
    class PagesView(View):
        async def get(self, request: Request) -> Response:
            url = request.query.get("url")
            if not url:
                return self.json({"error": "missing ?url="}, status=400)
            return self.json(await explain(store, settings, url, time.time(),
                                           scheduler.decisions.get(url)))

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
