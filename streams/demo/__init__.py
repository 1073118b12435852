"""``recrawl demo``: the whole loop on one machine, measured against the simulator.

Starts (or reuses) Kafka and Redis, a ``recrawl worker`` subprocess, and in this process:
the test web (:mod:`streams.testweb`), the IndexNow receiver and the sitemap poller (the
real producers, fed by the test web's announcements), and the reference fetcher.  Unless
``history_s`` is 0 (``--cold``), writes the test web's past (``history_s`` seconds of each
page's changes before the start) into the run's folder as a history file, with the ping
log of the pings the test web sent for them, and imports both
into the worker with ``recrawl import``'s code (warm start, :func:`.inputs.import_history`)
before anything else reaches it.  Loads
the world's pages, host limits and the budget into the input topics, runs for
``duration_s`` with a live view, then reports the live accuracy (measured by the test
web after ``warmup_s``) next to the accuracy the models expect for the same world and
budget, and stops everything it started.

Everything runs on loopback: the fetcher's policy is ``loopback_only`` with
``.test -> 127.0.0.1``.

Split by concern: :mod:`.config` (options, settings per run), :mod:`.workers`
(the worker subprocesses), :mod:`.inputs` (what is published first), :mod:`.live` (the
run and its live view), :mod:`.expected` (the simulator's numbers), :mod:`.summary`;
this module runs them in order (:func:`run_demo`) and re-exports their names.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

from streams.demo.config import DEMO_POLICY, DemoConfig, demo_settings, host_limit_of
from streams.demo.expected import continuous_optimum, simulate_run
from streams.demo.inputs import import_history, initial_crawl, load_inputs
from streams.demo.live import LiveNumbers, run_loop
from streams.demo.summary import jsonable, print_summary
from streams.demo.workers import WorkerProcess, settings_env, worker_log, worker_settings
from streams.testweb.world import generate_world

__all__ = [
    "DEMO_POLICY",
    "DemoConfig",
    "LiveNumbers",
    "WorkerProcess",
    "continuous_optimum",
    "demo_settings",
    "host_limit_of",
    "import_history",
    "initial_crawl",
    "jsonable",
    "load_inputs",
    "print_summary",
    "run_demo",
    "run_loop",
    "settings_env",
    "simulate_run",
    "worker_log",
    "worker_settings",
]


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
            log_path = worker_log(stack.default_home(), settings, i)
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
                workers[i] = WorkerProcess(own[i], worker_log(stack.default_home(), settings,
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
        Path(json_path).write_text(json.dumps(jsonable(summary), indent=2) + "\n")
    return summary
