"""``recrawl demo``: the whole loop on one machine, measured against the simulator.

Starts (or reuses) Kafka and Redis, a ``recrawl worker`` subprocess, and in this process:
the test web (:mod:`streams.testweb`), the IndexNow receiver and the sitemap poller (the
real producers, fed by the test web's announcements), and the reference fetcher.  Loads
the world's pages, host limits and the budget into the input topics, runs for
``duration_s`` with a live view, then reports the live accuracy (measured by the test
web after ``warmup_s``) next to the accuracy the models expect for the same world and
budget, and stops everything it started.

Everything runs on loopback: the fetcher's policy is ``loopback_only`` with
``.test -> 127.0.0.1``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from aiokafka import AIOKafkaProducer

from streams.edges.indexnow import IndexNowReceiver, KeyRegistry, start_receiver
from streams.edges.pings import Ping, PingProducer
from streams.edges.sitemaps import MAX_BYTES, SitemapPoller
from streams.fetcher.client import FetchLimits, SafeClient
from streams.fetcher.egress import EgressPolicy
from streams.fetcher.service import FetcherService
from streams.redis_conn import AsyncRedis
from streams.redis_conn import connect as connect_redis
from streams.settings import Settings
from streams.state import put_truth
from streams.testweb.expected import Loop, RunRecord, fresh_draws, replay
from streams.testweb.server import TestWeb
from streams.testweb.world import World, generate_world

__all__ = [
    "DEMO_POLICY",
    "DemoConfig",
    "LiveNumbers",
    "WorkerProcess",
    "continuous_optimum",
    "demo_settings",
    "expected_accuracy",
    "host_limit_of",
    "initial_crawl",
    "load_inputs",
    "print_summary",
    "run_demo",
    "run_loop",
    "simulate_run",
    "worker_settings",
]

DEMO_POLICY = EgressPolicy(loopback_only=True, overrides={".test": "127.0.0.1"})


@dataclass
class DemoConfig:
    duration_s: float = 120.0
    #: Accuracy is measured after this; default half the duration (the first crawl pass
    #: over all pages takes ``pages / budget`` seconds, and the live run starts with no
    #: page fetched while the simulator starts with every page fresh).
    warmup_s: float | None = None
    budget_per_s: float = 10.0
    hosts: int = 20
    pages_per_host: int = 20
    seed: int = 0
    time_unit_s: float = 10.0
    sitemap_share: float = 0.5
    poll_interval_s: float = 1.0
    #: Give the worker the true change rates as priors (``pages.change_rate_per_s``).
    give_rates: bool = True
    #: Per-host crawl limit; default ``4 * budget / hosts`` (rarely binding).
    host_limit_per_s: float | None = None
    live: bool = True
    #: The worker's App. C delay window (pings this soon after a crawl are dropped),
    #: scaled to the demo's time (the worker's default, 60 s, suits the real web).
    t_delay_s: float = 2.0
    #: Fresh draws of the world simulated for ``expected_accuracy_draws`` (0: none).
    sim_runs: int = 4
    #: ``recrawl worker`` processes (one consumer group: Kafka spreads the partitions)
    workers: int = 1
    #: SIGKILL the last worker this many seconds into the run (None: never), and start it
    #: again ``restart_after_s`` later
    kill_at_s: float | None = None
    restart_after_s: float = 10.0

    @property
    def warmup(self) -> float:
        return self.duration_s / 2 if self.warmup_s is None else self.warmup_s


def expected_accuracy(
    world: World,
    budget_per_s: float,
    *,
    kind: str = "greedy-ncis",
    t_delay_s: float = 0.0,
    horizon_s: float | None = None,
    runs: int = 1,
    seed: int = 0,
) -> tuple[float, str]:
    """What the simulator expects of this world at this budget, and which model said so.

    Runs helper C's simulator (:mod:`models.sim`: Algorithm 1 with the exact crawl value
    and the world's true parameters, pings delayed by about ``delay_s``) on the same
    pages, rates and budget, in real seconds, and averages the steady-state accuracy
    (the last two thirds of ``horizon_s``) over ``runs`` seeds.  Falls back to the
    optimal continuous policy with signals (Theorem 1 of Busa-Fekete et al.,
    :func:`models.policies.optimal_thresholds`) if the simulator is unavailable.
    """
    a = world.arrays()
    m = len(world.pages)
    try:
        from models import sim
    except ImportError:
        sim = None  # type: ignore[assignment]
    if sim is not None:
        sw = sim.World(
            mu=a["importance"], delta=a["change_rate_per_s"], lam=a["recall"],
            nu=a["false_rate_per_s"], host=np.zeros(m, dtype=np.int64),
            host_rate=np.array([np.inf]), top=np.zeros(m, dtype=bool),
        )  # fmt: skip
        horizon = horizon_s or max(300.0, 8.0 * m / budget_per_s)
        delay = float(np.mean(a["delay_s"]))
        accs = []
        for r in range(runs):
            rng = np.random.default_rng(seed + r)
            ev = sim.simulate_events(sw, horizon, rng, delay_mean=1.0 if delay > 0 else 0.0,
                                     delay_unit=delay)  # fmt: skip
            pol = sim.algorithm1(kind, sw.mu, sw.delta, sw.lam, sw.nu,
                                 ping_rule="tdelay" if t_delay_s > 0 else "accept",
                                 t_delay=t_delay_s)  # fmt: skip
            res = sim.run(sw, ev, pol, sim.Budget(budget_per_s))
            accs.append(sim.accuracy(sw, ev, res, start=horizon / 3))
        return float(np.mean(accs)), f"models.sim Algorithm 1 ({kind}, {runs} runs)"
    return continuous_optimum(world, budget_per_s)


def host_limit_of(cfg: DemoConfig, world: World) -> float:
    return cfg.host_limit_per_s or max(0.5, 4 * cfg.budget_per_s / max(1, len(world.hosts)))


def simulate_run(
    world: World, settings: Settings, cfg: DemoConfig, summary: dict[str, Any]
) -> dict[str, Any]:
    """The simulator's numbers for a finished live run (``summary`` from :func:`run_loop`).

    ``expected_accuracy``: Algorithm 1 with what the worker is given and learns (its own
    parameter code, :class:`streams.testweb.expected.WorkerMirror`) replaying the run's own
    changes, pings and order times; ``expected_accuracy_oracle``: the same with the true
    parameters; ``*_draws``: mean and standard deviation over ``cfg.sim_runs`` fresh draws
    of the world's processes at the achieved order rate (what another run would see).
    """
    record: RunRecord = summary.pop("record")
    lags = record.lags()
    loop = Loop(
        budget_per_s=max(summary["orders_per_s"], 1e-9), duration_s=summary["duration_s"],
        warmup_s=summary["duration_s"] - summary["window_s"], t_delay_s=cfg.t_delay_s,
        poll_interval_s=cfg.poll_interval_s, host_rate_per_s=host_limit_of(cfg, world),
        host_burst=settings.host_burst, host_max_in_flight=0, give_rates=cfg.give_rates,
        **lags,
    )  # fmt: skip
    out: dict[str, Any] = {"sim_loop": asdict(loop)}
    if record.orders and summary["window_s"] > 0:
        out["expected_accuracy"] = replay(world, settings, record, loop)
        out["expected_accuracy_oracle"] = replay(world, settings, record, loop, kind="oracle")
        out["expected_source"] = "models.sim Algorithm 1, worker's parameters, replaying the run"
    if cfg.sim_runs > 0:
        m, sd = fresh_draws(world, settings, loop, runs=cfg.sim_runs, seed=cfg.seed)
        om, osd = fresh_draws(world, settings, loop, kind="oracle", runs=cfg.sim_runs,
                              seed=cfg.seed)  # fmt: skip
        out.update({"expected_accuracy_draws": m, "expected_accuracy_draws_sd": sd,
                    "expected_accuracy_oracle_draws": om,
                    "expected_accuracy_oracle_draws_sd": osd})  # fmt: skip
        out.setdefault("expected_accuracy", m)
        out.setdefault("expected_accuracy_oracle", om)
        out.setdefault("expected_source", f"models.sim Algorithm 1, {cfg.sim_runs} fresh draws")
    acc = summary["accuracy"]
    if "expected_accuracy" in out:
        out["difference"] = None if acc is None else acc - out["expected_accuracy"]
    return out


def continuous_optimum(world: World, budget_per_s: float) -> tuple[float, str]:
    """The optimal continuous policy's accuracy (Theorem 1 of Busa-Fekete et al.): quick,
    shown during the run; Algorithm 1 tracks it closely (their Sec. 6.4)."""
    from models.policies import optimal_thresholds
    from models.values import signal_params

    a = world.arrays()
    sp = signal_params(a["change_rate_per_s"], a["recall"], a["false_rate_per_s"])
    sol = optimal_thresholds(a["importance"], sp.alpha, sp.beta, sp.gamma, budget_per_s)
    return float(sol.accuracy), "continuous optimum"


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


def _settings_env(s: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECRAWL_")}
    for name, value in s.model_dump().items():
        env[f"RECRAWL_{name.upper()}"] = (
            str(value).lower() if isinstance(value, bool) else str(value)
        )
    return env


def worker_settings(settings: Settings, i: int) -> Settings:
    """Worker ``i``'s settings: its own web port and data folder, the same group."""
    from infra.proc import free_port

    if i == 0:
        return settings
    return settings.model_copy(update={"web_port": free_port(),
                                       "data_dir": Path(settings.data_dir).parent / f"worker{i}"})


def _worker_log(home: Any, settings: Settings, i: int, restart: bool = False) -> Path:
    name = "worker.log" if i == 0 else f"worker{i}.log"
    if restart:
        name = name.replace(".log", ".restarted.log")
    return Path(home) / "demo" / settings.topic_prefix / name


class WorkerProcess:
    """The ``recrawl worker`` subprocess (helper D's scheduler)."""

    def __init__(self, settings: Settings, log_path: Path) -> None:
        from infra.proc import spawn

        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self.settings = settings
        self.proc = spawn(
            [sys.executable, "-m", "streams.cli", "worker", "--loglevel", "info",
             "--web-port", str(settings.web_port)],
            log_path, env=_settings_env(settings), tie_to_parent=True,
        )  # fmt: skip

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            if self.proc.poll() is not None:
                raise RuntimeError(f"the worker exited early; see {self.log_path}:\n{text[-3000:]}")
            if "Worker]: Ready" in text:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the worker was not ready after {timeout_s:.0f} s; see {self.log_path}")

    def kill(self) -> None:
        """SIGKILL: a crash, as an operator's worst day has it."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except Exception:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


async def load_inputs(
    settings: Settings, web: TestWeb, cfg: DemoConfig
) -> None:
    """Publish the catalogue (pages), host limits and the budget."""
    world = web.world
    host_limit = host_limit_of(cfg, world)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    try:
        for host in world.hosts:
            # No cap on orders in flight per host: the fetcher already fetches one page
            # of a host at a time, and a cap of 1 holds a host's next order until the
            # worker has *applied* the previous outcome (Kafka + agent latency), which
            # starves the hosts with the most valuable pages (see docs/edges.md).
            v = {"host": host, "max_crawls_per_s": host_limit}
            await producer.send(settings.topic("hosts"), json.dumps(v).encode(), key=host.encode())
        for i, p in enumerate(world.pages):
            page: dict[str, Any] = {"url": web.url(i), "importance": p.importance}
            if cfg.give_rates:
                page["change_rate_per_s"] = p.change_rate_per_s
            await producer.send(
                settings.topic("pages"), json.dumps(page).encode(), key=p.host.encode()
            )
        ctl = {"budget_per_s": cfg.budget_per_s}
        for part in range(settings.partitions):
            # one control message per partition: every shard hears the budget
            await producer.send(
                settings.topic("control"), json.dumps(ctl).encode(), key=b"control",
                partition=part,
            )  # fmt: skip
        await producer.flush()
    finally:
        await producer.stop()


async def initial_crawl(
    settings: Settings, web: TestWeb, http: SafeClient, rclient: AsyncRedis
) -> list[float]:
    """Fetch every page once and report it, so the run starts with a full cache, as the
    simulator does (every page fresh at ``t = 0``); returns each page's fetch time."""
    from streams.fetcher.service import DigestStore, outcome_for

    digests = DigestStore(rclient, settings.key_prefix)
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap, acks="all")
    await producer.start()
    fetched: list[float] = []
    try:
        for i, page in enumerate(web.world.pages):
            result, _ = await http.get(web.url(i))
            fetched.append(result.fetched_at)
            prev = await digests.swap(result.url, result.digest) if result.digest else None
            out = outcome_for(result, prev, None)
            await producer.send(
                settings.topic("outcomes"), json.dumps(out).encode(), key=page.host.encode()
            )
        await producer.flush()
    finally:
        await producer.stop()
    return fetched


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
        )  # fmt: skip
        runner, rport = await start_receiver(receiver)
        web = TestWeb(world, indexnow_endpoint=f"http://127.0.0.1:{rport}/indexnow")
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
            await load_inputs(settings, web, cfg)
            await asyncio.sleep(2.0)  # let the worker apply the catalogue
            record.initial_fetch = await initial_crawl(settings, web, http, rclient)
            started = time.time()
            record.t0 = started
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
                "orders": st.orders,
                "orders_per_s": st.orders / max(end - started, 1e-9),
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
                "world": {
                    "pages": len(world.pages), "hosts": len(world.hosts), "seed": world.seed,
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


def demo_settings(
    base: Settings | None = None, *, web_port: int = 0, t_delay_s: float | None = None
) -> Settings:
    """Fresh topics, consumer groups and key prefix for one demo run."""
    from infra.proc import free_port
    from infra.stack import default_home
    from streams.settings import load_settings

    tag = f"demo{time.strftime('%Y%m%d%H%M%S')}{uuid.uuid4().hex[:4]}"
    s = base or load_settings()
    extra: dict[str, Any] = {}
    if t_delay_s is not None and "t_delay_s" in type(s).model_fields:
        extra["t_delay_s"] = t_delay_s
    return s.model_copy(
        update={**extra,
            "topic_prefix": tag, "app_id": tag, "key_prefix": tag,
            "web_enabled": True, "web_port": web_port or free_port(),
            # absolute, under RECRAWL_HOME like the logs (a relative var/ did not exist
            # when RECRAWL_HOME pointed outside the repository: the worker exited)
            "data_dir": Path(default_home()) / "demo" / tag / "worker",
        }
    )  # fmt: skip


def _num(x: Any) -> str:
    return "-" if x is None else f"{x:.3f}"


def print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="recrawl demo: summary")
    t.add_column("what")
    t.add_column("value", justify="right")
    acc = summary["accuracy"]
    s, w = summary, summary["world"]
    rows = [
        ("live accuracy", "-" if acc is None else f"{acc:.3f}"),
        ("expected accuracy", f"{summary['expected_accuracy']:.3f} ({summary['expected_source']})"),
        ("difference", "-" if acc is None else f"{100 * summary['difference']:+.1f} points"),
        ("expected, true parameters (oracle)", _num(summary.get("expected_accuracy_oracle"))),
        ("expected over fresh draws (sd)",
         f"{_num(summary.get('expected_accuracy_draws'))} "
         f"({_num(summary.get('expected_accuracy_draws_sd'))})"),
        ("oracle over fresh draws (sd)",
         f"{_num(summary.get('expected_accuracy_oracle_draws'))} "
         f"({_num(summary.get('expected_accuracy_oracle_draws_sd'))})"),
        ("continuous optimum (true parameters)", _num(summary.get("continuous_optimum"))),
        ("orders", f"{s['orders']} ({s['orders_per_s']:.2f}/s, budget {s['budget_per_s']:g}/s)"),
        ("outcomes ok / failed", f"{summary['outcomes_ok']} / {summary['outcomes_failed']}"),
        ("changed / unchanged / first",
         f"{s['changed']} / {s['unchanged']} / {s['first_fetches']}"),
        ("pings (indexnow + sitemap)",
         f"{s['pings']} ({s['pings_indexnow']} + {s['pings_sitemap']})"),
        ("world",
         f"{w['pages']} pages, {w['hosts']} hosts, {w['changes_per_s']:.1f} changes/s"),
        ("measured over", f"{summary['window_s']:.0f} s after {summary['warmup_s']:.0f} s warm-up"),
    ]  # fmt: skip
    rows.append(("workers", str(summary.get("workers", 1))))
    for kill in summary.get("worker_kills", []):
        again = kill.get("ready_again_at_s")
        rows.append((f"worker {kill['worker']:.0f} killed",
                     f"at {kill['killed_at_s']:.0f} s, ready again at "
                     + ("-" if again is None else f"{again:.0f} s")))
    for k, v in summary["worker_pings"].items():
        rows.append((f"worker {k}", f"{v:g}"))
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)


def run_demo(cfg: DemoConfig, json_path: str | None = None) -> dict[str, Any]:
    """The whole thing: stack, worker, edges, summary; stops what it started."""
    from infra import stack
    from streams.settings import load_settings

    world = generate_world(
        cfg.seed, n_hosts=cfg.hosts, pages_per_host=cfg.pages_per_host,
        time_unit_s=cfg.time_unit_s, sitemap_share=cfg.sitemap_share,
    )  # fmt: skip
    expected = continuous_optimum(world, cfg.budget_per_s)
    was_running = bool(stack.status()["running"])
    base = load_settings()
    if not was_running:
        print("starting Kafka and Redis ...", flush=True)
    info = stack.up(base.topic_names(), base.partitions)
    base = base.model_copy(
        update={"kafka_bootstrap": info.kafka_bootstrap, "redis_url": info.redis_url,
                "partitions": info.partitions}
    )  # fmt: skip
    settings = demo_settings(base, t_delay_s=cfg.t_delay_s)
    workers: list[WorkerProcess] = []
    kills: list[dict[str, float]] = []
    killer: threading.Thread | None = None
    stop_killer = threading.Event()
    try:
        from infra.kafka import create_topics

        asyncio.run(
            create_topics(settings.kafka_bootstrap, settings.topic_names(), settings.partitions)
        )
        own = [worker_settings(settings, i) for i in range(cfg.workers)]
        for i, ws in enumerate(own):
            log_path = _worker_log(stack.default_home(), settings, i)
            print(f"starting worker {i} (log {log_path}) ...", flush=True)
            workers.append(WorkerProcess(ws, log_path))
        for w in workers:
            w.wait_ready()
        for i, ws in enumerate(own):
            print(f"worker {i} dashboard: http://{ws.web_host}:{ws.web_port}/dashboard/",
                  flush=True)
        print(
            f"running {cfg.duration_s:.0f} s: {len(world.pages)} pages on {len(world.hosts)} "
            f"hosts, budget {cfg.budget_per_s:g}/s, {cfg.workers} worker(s), expected "
            f"accuracy {expected[0]:.3f}",
            flush=True,
        )
        if cfg.kill_at_s is not None:
            started = time.monotonic()

            def kill_and_restart() -> None:
                if stop_killer.wait(cfg.kill_at_s):
                    return
                i = len(workers) - 1
                workers[i].kill()
                event = {"worker": float(i), "killed_at_s": time.monotonic() - started}
                kills.append(event)
                print(f"worker {i} killed (SIGKILL) at {event['killed_at_s']:.0f} s", flush=True)
                if stop_killer.wait(cfg.restart_after_s):
                    return
                workers[i] = WorkerProcess(own[i], _worker_log(stack.default_home(), settings,
                                                               i, restart=True))
                workers[i].wait_ready()
                event["ready_again_at_s"] = time.monotonic() - started
                print(f"worker {i} ready again at {event['ready_again_at_s']:.0f} s", flush=True)

            killer = threading.Thread(target=kill_and_restart, daemon=True)
            killer.start()
        summary = asyncio.run(
            run_loop(settings, cfg, world, expected=expected,
                     worker_web_port=[ws.web_port for ws in own])
        )
    finally:
        stop_killer.set()
        if killer is not None:
            killer.join(timeout=120)
        for w in workers:
            w.stop()
        if not was_running:
            stack.down()
    summary["workers"] = cfg.workers
    summary["worker_kills"] = kills
    print("simulating the same world and budget (models.sim) ...", flush=True)
    summary["continuous_optimum"] = expected[0]
    summary.update(simulate_run(world, settings, cfg, summary))
    print_summary(summary)
    if json_path:
        Path(json_path).write_text(json.dumps(_jsonable(summary), indent=2) + "\n")
    return summary


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, np.generic):
        return obj.item()
    return obj
