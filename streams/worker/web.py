"""HTTP views of the worker (Faust web): explain a page, a host, stats, Prometheus metrics.

* ``GET /pages?url=URL``  state, parameters, tau_eff, value, threshold, next crawl, decisions
* ``GET /hosts/{host}/``  capacity (and who limits it: operator, robots.txt Crawl-delay,
  push-back), token bucket, pages, orders in flight, pages robots.txt disallows
* ``GET /stats/``         R, emitted rate, threshold, per-shard share and threshold, pings by
                          source, counters, the live accuracy when a test web publishes it
                          (``truth``); ``?hosts=N`` adds the N hosts with most orders in flight
* ``GET /metrics``        Prometheus text format (also ``/metrics/``)
* ``GET /healthz``        liveness: 200 while the worker's event loop answers
* ``GET /readyz``         readiness: 200 when every shard assigned to this worker is loaded
                          and Kafka and Redis answer, else 503; the body lists each check
                          (Kubernetes probe conventions; ``?verbose`` is accepted)
* ``GET /plan/?budget=10&budget=100``  expected accuracy per budget from the current
  estimates (:mod:`streams.worker.plan`, the same as ``recrawl plan``, in a child process);
  at most :data:`~streams.worker.plan.MAX_PLAN_BUDGETS` budgets, one computation at a time (503
  while another runs), answers cached for 30 s
* ``GET /dashboard/``     one self-contained HTML page that polls ``/stats/`` (no outside
                          fetches: inline JS and CSS, allowed by hash in its
                          Content-Security-Policy)

Every answer, Faust's own pages included, goes through :func:`guard_middleware`: a request
whose ``Host`` header names neither a loopback name, ``web_host`` nor one of
``web_allowed_hosts`` gets 421 (a DNS-rebinding page in a browser cannot read the
endpoints), and every answer carries ``X-Content-Type-Options: nosniff`` and forbids framing.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import ipaddress
import math
import re
import time
from collections.abc import Awaitable, Callable
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import faust
from aiohttp import web as aioweb
from faust.web import Request, Response, View

from streams.events.records import shard_of
from streams.reach import redis_address
from streams.scheduler import Scheduler
from streams.settings import Settings
from streams.store import AdminStore
from streams.telemetry.metrics import Metrics
from streams.worker.explain import explain
from streams.worker.plan import MAX_PLAN_BUDGETS, SingleFlight, plan_from_store, steady_threshold

__all__ = ["LOOPBACK_NAMES", "MAX_TOP_HOSTS", "READY_CHECK_S", "dashboard_csp", "dashboard_html",
           "guard_middleware", "host_allowed", "register_views"]

#: hosts listed by ``/stats/?hosts=N`` at most
MAX_TOP_HOSTS = 1000
#: ``/readyz`` checks Kafka and Redis within this many seconds (and reuses the answer as long)
READY_CHECK_S = 2.0
#: ``Host`` names always answered (with any port); besides them 127.0.0.0/8 and ::1
LOOPBACK_NAMES = frozenset({"localhost", "localhost.", "ip6-localhost"})


@cache
def dashboard_html() -> bytes:
    return (Path(__file__).with_name("dashboard.html")).read_bytes()


@cache
def dashboard_csp() -> str:
    """The dashboard's Content-Security-Policy: nothing but its own inline script and style
    (by their SHA-256) and requests to its own origin; no framing."""
    html = dashboard_html().decode()

    def hashes(tag: str) -> str:
        bodies = re.findall(rf"<{tag}>(.*?)</{tag}>", html, flags=re.S)
        return " ".join("'sha256-" + base64.b64encode(hashlib.sha256(b.encode()).digest())
                        .decode() + "'" for b in bodies)

    return (f"default-src 'none'; script-src {hashes('script')}; "
            f"style-src {hashes('style')}; style-src-attr 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'")


def host_allowed(host_header: str | None, allowed: frozenset[str]) -> bool:
    """Whether a request's ``Host`` header (``name[:port]``, ``[v6]:port``) names a
    loopback name or address or one of ``allowed``; a request without one (HTTP/1.0) is
    allowed (a browser always sends it)."""
    if not host_header:
        return True
    h = host_header.strip().lower()
    if h.startswith("["):
        name = h[1:].partition("]")[0]
    elif h.count(":") == 1:
        name = h.partition(":")[0]
    else:
        name = h
    if name in LOOPBACK_NAMES or name in allowed:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def guard_middleware(allowed: frozenset[str]) -> Callable[..., Awaitable[Any]]:
    """aiohttp middleware: the ``Host`` check and the headers of every answer (module
    docstring)."""

    @aioweb.middleware
    async def guard(request: aioweb.Request, handler: Callable[..., Awaitable[Any]]) -> Any:
        if not host_allowed(request.headers.get("Host"), allowed):
            resp: Any = aioweb.json_response(
                {"error": f"Host {request.headers.get('Host')!r} not served here; add it to "
                          "RECRAWL_WEB_ALLOWED_HOSTS to allow it"}, status=421)
        else:
            resp = await handler(request)
        resp.headers.setdefault("X-Content-Type-Options", "nosniff")
        resp.headers.setdefault("X-Frame-Options", "DENY")
        resp.headers.setdefault("Content-Security-Policy", "frame-ancestors 'none'")
        resp.headers.setdefault("Referrer-Policy", "no-referrer")
        return resp

    return guard


def register_views(
    app: faust.App, settings: Settings, store: AdminStore, scheduler: Scheduler, metrics: Metrics
) -> None:
    steady_cache: list[tuple[float, float | None]] = []
    allowed = frozenset(h.strip().lower() for h in settings.web_allowed_hosts.split(",")
                        if h.strip()) | {settings.web_host.lower()}
    # before the server starts (aiohttp freezes the list then); Faust's own pages included
    app.web.web_app.middlewares.append(guard_middleware(allowed))  # type: ignore[attr-defined]
    plans = SingleFlight()
    ready_cache: list[tuple[float, dict[str, Any]]] = []

    async def readiness() -> dict[str, Any]:
        """Each check of ``/readyz``: shards loaded, Kafka and Redis answering (those two
        asked within READY_CHECK_S, the answer reused for as long)."""
        from streams.reach import Unreachable, check_kafka

        now = time.monotonic()
        if ready_cache and now - ready_cache[0][0] < READY_CHECK_S:
            checks = dict(ready_cache[0][1])
        else:
            async def kafka() -> str:
                try:
                    await check_kafka(settings.kafka_bootstrap, READY_CHECK_S)
                    return "ok"
                except Unreachable as exc:
                    return str(exc)

            async def redis() -> str:
                try:
                    await asyncio.wait_for(store.server_time(), READY_CHECK_S)
                    return "ok"
                except Exception as exc:
                    return (f"redis at {redis_address(settings.redis_url)} did not answer "
                            f"in {READY_CHECK_S:g} s: {exc!r}")

            k, r = await asyncio.gather(kafka(), redis())
            checks = {"kafka": k, "redis": r}
            ready_cache[:] = [(now, checks)]
        loading = sorted(p for p, sh in scheduler.shards.items() if not sh.ready)
        checks["shards"] = ("ok" if not loading
                            else f"shards {loading} of {sorted(scheduler.shards)} loading")
        return checks

    @app.page("/healthz")
    class HealthView(View):
        async def get(self, request: Request) -> Response:
            return self.json({"status": "alive"})

    @app.page("/readyz")
    class ReadyView(View):
        async def get(self, request: Request) -> Response:
            checks = await readiness()
            ok = all(v == "ok" for v in checks.values())
            return self.json({"status": "ready" if ok else "not ready", "checks": checks},
                             status=200 if ok else 503)

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
            try:  # Redis busy (a long script) or away: the rest is the worker's own memory
                out["truth"] = await asyncio.wait_for(store.get_truth(), READY_CHECK_S)
            except Exception as exc:
                out["truth"] = None
                out["truth_error"] = f"redis: {exc!r}"
            return self.json(out)

    @app.page("/dashboard/")
    class DashboardView(View):
        async def get(self, request: Request) -> Response:
            return self.bytes(dashboard_html(), content_type="text/html",
                              headers={"Cache-Control": "no-store",
                                       "Content-Security-Policy": dashboard_csp()})

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

    # ``GET /metrics`` (what Prometheus scrapes by default) as well as ``/metrics/``
    app.page("/metrics")(type("MetricsViewNoSlash", (MetricsView,), {}))

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
            if len(budgets) > MAX_PLAN_BUDGETS:
                return self.json({"error": f"at most {MAX_PLAN_BUDGETS} budgets"}, status=400)
            key = tuple(sorted(set(budgets)))
            out = await plans.get(key, lambda: plan_from_store(store, settings, budgets))
            if out is None:
                return self.json({"error": "another plan is being computed; retry shortly"},
                                 status=503, headers={"Retry-After": "5"})
            return self.json(out)

    # ``GET /plan?budget=`` as well as ``/plan/?budget=``
    app.page("/plan")(type("PlanViewNoSlash", (PlanView,), {}))


def _limited_by(limits: dict[str, tuple[float | None, str | None]], rate: float | None
                ) -> str | None:
    """The source whose rate is the host's capacity (None: the default)."""
    if rate is None:
        return None
    return next((src for src, (r, _why) in limits.items() if r == rate), None)
