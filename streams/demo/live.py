"""The demo's run in this process: test web, producers, fetcher and the live view
(:func:`run_loop`).

Part of :mod:`streams.demo` (split by concern), which re-exports every name.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from streams.demo.config import DEMO_POLICY, DemoConfig
from streams.demo.inputs import import_history, initial_crawl, load_inputs
from streams.edges.indexnow import IndexNowReceiver, KeyRegistry, start_receiver
from streams.edges.pings import Ping, PingProducer
from streams.edges.sitemaps import MAX_BYTES, SitemapPoller
from streams.fetcher.client import FetchLimits, SafeClient
from streams.fetcher.service import FetcherService
from streams.settings import Settings
from streams.store.redis_conn import connect as connect_redis
from streams.store.redis_store import put_truth
from streams.testweb.expected import RunRecord
from streams.testweb.server import TestWeb
from streams.testweb.world import World, past_changes

__all__ = ["LiveNumbers", "run_loop"]


@dataclass
class LiveNumbers:
    t_s: float = 0.0
    orders: int = 0
    orders_per_s: float = 0.0
    threshold: float | None = None
    outcomes_ok: int = 0
    outcomes_failed: int = 0
    changed: int = 0
    unchanged: int = 0
    pings_published: int = 0
    worker_pings: dict[str, float] = field(default_factory=dict)
    accuracy: float | None = None
    fresh_now: float = 0.0


async def _worker_pings(session: aiohttp.ClientSession, port: int) -> dict[str, float]:
    """Ping counters from the worker's ``/stats`` (whatever it calls them)."""
    for path in ("/stats", "/stats/"):
        try:
            async with session.get(f"http://127.0.0.1:{port}{path}") as resp:
                if resp.status != 200:
                    continue
                data = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            continue
        flat: dict[str, float] = {}
        _flatten(data, "", flat)
        return {k: v for k, v in flat.items()
                if "ping" in k.lower() and not k.startswith("pings_by_source")}
    return {}


async def _all_worker_pings(session: aiohttp.ClientSession,
                            ports: int | list[int] | None) -> dict[str, float]:
    """:func:`_worker_pings` summed over the workers (a killed one counts nothing)."""
    total: dict[str, float] = {}
    for port in [ports] if isinstance(ports, int) else ports or []:
        for k, v in (await _worker_pings(session, port)).items():
            total[k] = total.get(k, 0.0) + v
    return total


def _flatten(obj: Any, prefix: str, out: dict[str, float]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, int | float) and not isinstance(obj, bool):
        out[prefix] = float(obj)


def _table(n: LiveNumbers, cfg: DemoConfig, expected: float, source: str) -> Any:
    from rich.table import Table

    t = Table(title=f"recrawl demo — {n.t_s:5.1f} / {cfg.duration_s:.0f} s", min_width=60)
    t.add_column("what")
    t.add_column("value", justify="right")
    t.add_row("orders (total, per s over 10 s)", f"{n.orders}  ({n.orders_per_s:.2f}/s)")
    t.add_row("budget", f"{cfg.budget_per_s:.2f}/s")
    t.add_row("threshold (last order)", "-" if n.threshold is None else f"{n.threshold:.4g}")
    t.add_row("outcomes ok / failed", f"{n.outcomes_ok} / {n.outcomes_failed}")
    t.add_row("changed / unchanged", f"{n.changed} / {n.unchanged}")
    t.add_row("pings published", str(n.pings_published))
    for k, v in sorted(n.worker_pings.items()):
        t.add_row(f"worker {k}", f"{v:g}")
    phase = "warm-up" if n.t_s < cfg.warmup else "measuring"
    acc = "-" if n.accuracy is None or n.t_s < cfg.warmup else f"{n.accuracy:.3f}"
    t.add_row(f"live accuracy ({phase})", acc)
    t.add_row("fresh now", f"{n.fresh_now:.3f}")
    t.add_row(f"expected ({source})", f"{expected:.3f}")
    return t


async def run_loop(
    settings: Settings,
    cfg: DemoConfig,
    world: World,
    *,
    expected: tuple[float, str],
    worker_web_port: int | list[int] | None = None,
) -> dict[str, Any]:
    """Run the edges against an already running worker; returns the summary."""
    from rich.console import Console
    from rich.live import Live

    console = Console()
    rclient = connect_redis(settings.redis_url)
    record = RunRecord()
    page_of: dict[str, int] = {}

    def on_outcome(order: dict[str, Any], outcome: dict[str, Any]) -> None:
        issued = order.get("issued_at")
        if isinstance(issued, int | float) and record.t0 and issued >= record.t0:
            record.orders.append((float(issued), float(outcome["fetched_at"]), time.time()))

    def on_ping(ping: Ping) -> None:
        i = page_of.get(ping.url)
        if i is not None:
            record.pings.append((i, ping.received_at, ping.changed_at))

    fetcher = FetcherService(
        settings, DEMO_POLICY, FetchLimits(total_timeout_s=10),
        group_id=f"{settings.app_id}-fetch", on_outcome=on_outcome,
    )  # fmt: skip
    stop = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = []
    async with PingProducer(settings) as producer, SafeClient(
        DEMO_POLICY, FetchLimits(total_timeout_s=10, max_body_bytes=MAX_BYTES)
    ) as http:
        receiver = IndexNowReceiver(
            producer, KeyRegistry(rclient, settings.key_prefix), verifier=http,
            rate_per_s=50, burst=100,
            # the test web's pages change within seconds of each other and the simulator
            # counts every change's ping: no repeat window
            dedup_window_s=0.0,
        )  # fmt: skip
        runner, rport = await start_receiver(receiver)
        from infra.proc import free_port

        warm = cfg.history_s > 0
        web = TestWeb(world, indexnow_endpoint=f"http://127.0.0.1:{rport}/indexnow",
                      port=free_port(), seed=cfg.web_seed,
                      past=past_changes(world, cfg.history_s, seed=cfg.web_seed)
                      if warm else None)
        history: dict[str, Any] | None = None
        if warm:
            # before the test web starts: no ping reaches the worker while it applies the
            # history (a live ping would count in an imported interval)
            await load_inputs(settings, web, cfg, budget=False)
            history, record.history = await import_history(
                settings, web, cfg, Path(settings.data_dir).parent)
        await web.start()
        page_of.update({u: i for i, u in enumerate(web.urls())})
        producer.on_send = on_ping
        poller = SitemapPoller(http, rclient, settings.key_prefix, producer)
        try:
            tasks.append(asyncio.create_task(fetcher.run()))
            await asyncio.wait_for(fetcher.ready.wait(), 30)
            for u in web.sitemap_urls():  # baseline before anything is announced
                await poller.poll(u)
            polling = poller.run(web.sitemap_urls(), cfg.poll_interval_s, stop)
            tasks.append(asyncio.create_task(polling))
            # the catalogue (again after an import: a history without importance, a CDX,
            # declares its pages at importance 1), the host limits and the budget
            await load_inputs(settings, web, cfg)
            await asyncio.sleep(2.0)  # let the worker apply the catalogue
            record.initial_fetch = await initial_crawl(settings, web, http, rclient)
            started = time.time()
            record.t0 = started
            # orders the worker sent while the demo loaded its inputs are not the run's:
            # the rate (and the replay's budget, expected.py) counts from t0
            orders_before = fetcher.stats.orders
            window_started = False
            numbers = LiveNumbers()
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
                live_cm: Any = (
                    Live(console=console, refresh_per_second=2)
                    if cfg.live and console.is_terminal
                    else contextlib.nullcontext()
                )
                with live_cm as live:
                    last_print = 0.0
                    while True:
                        now = time.time()
                        t = now - started
                        if not window_started and t >= cfg.warmup:
                            web.truth.start_window(now)
                            window_started = True
                        st = fetcher.stats
                        numbers = LiveNumbers(
                            t_s=t, orders=st.orders, orders_per_s=st.orders_per_s(10.0, now),
                            threshold=st.last_threshold, outcomes_ok=st.fetched_ok,
                            outcomes_failed=st.failed, changed=st.changed,
                            unchanged=st.unchanged,
                            pings_published=receiver.stats["pings"] + poller.stats["pings"],
                            worker_pings=await _all_worker_pings(session, worker_web_port),
                            accuracy=web.truth.accuracy(now) if window_started else None,
                            fresh_now=web.truth.fresh_now(),
                        )  # fmt: skip
                        await put_truth(rclient, settings.key_prefix, {
                            "accuracy": numbers.accuracy, "fresh_now": numbers.fresh_now,
                            "t_s": t, "measuring": window_started, "warmup_s": cfg.warmup,
                            "window_start_s": web.truth.window_start if window_started
                            else None, "source": "the demo's test web"})
                        if live is not None:
                            live.update(_table(numbers, cfg, *expected))
                        elif cfg.live and t - last_print >= 10:
                            last_print = t
                            console.print(_table(numbers, cfg, *expected))
                        if t >= cfg.duration_s:
                            break
                        for task in tasks:
                            if task.done() and task.exception() is not None:
                                raise RuntimeError("a demo component failed") from task.exception()
                        await asyncio.sleep(min(1.0, cfg.duration_s - t))
            end = time.time()
            accuracy = web.truth.accuracy(end)
            record.window_start, record.end = web.truth.window_start, end
            record.changes = [list(c) for c in web.change_log]
            window_s = end - web.truth.window_start
            st = fetcher.stats
            summary: dict[str, Any] = {
                "accuracy": accuracy,
                "expected_accuracy": expected[0],
                "expected_source": expected[1],
                "difference": None if accuracy is None else accuracy - expected[0],
                "orders": st.orders - orders_before,
                "orders_per_s": (st.orders - orders_before) / max(end - started, 1e-9),
                "orders_before_t0": orders_before,
                "budget_per_s": cfg.budget_per_s,
                "pings": receiver.stats["pings"] + poller.stats["pings"],
                "pings_indexnow": receiver.stats["pings"],
                "pings_sitemap": poller.stats["pings"],
                "worker_pings": numbers.worker_pings,
                "outcomes_ok": st.fetched_ok,
                "outcomes_failed": st.failed,
                "changed": st.changed,
                "unchanged": st.unchanged,
                "first_fetches": st.first_seen,
                "duration_s": end - started,
                "window_s": window_s,
                "warmup_s": cfg.warmup,
                "history": history,
                "world": {
                    "pages": len(world.pages), "hosts": len(world.hosts), "seed": world.seed,
                    "web_seed": cfg.web_seed,
                    "time_unit_s": world.time_unit_s,
                    "changes_per_s": float(world.arrays()["change_rate_per_s"].sum()),
                },
                "testweb": dict(web.stats),
                "indexnow": dict(receiver.stats),
                "sitemaps": dict(poller.stats),
                "config": asdict(cfg),
                "record": record,
            }
            return summary
        finally:
            stop.set()
            fetcher.stop()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.wait_for(task, 10)
            await web.stop()
            await runner.cleanup()
            await rclient.aclose()
