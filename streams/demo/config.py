"""The demo's configuration (:class:`DemoConfig`), its loopback-only fetch policy and
its fresh topics and keys per run (:func:`demo_settings`).

Part of :mod:`streams.demo` (split by concern), which re-exports every name.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streams.fetcher.egress import EgressPolicy
from streams.settings import Settings
from streams.testweb.world import World

__all__ = ["DEMO_POLICY", "DemoConfig", "demo_settings", "host_limit_of"]


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
    #: Give the worker the true change rates as priors (``pages.change_rate_per_s``;
    #: ``--true-rates``); by default it learns them from its crawls and pings.
    give_rates: bool = False
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
    #: Warm start: seconds of the test web's past (:func:`streams.testweb.world.past_changes`)
    #: written as a history file in the run's folder and imported into the worker
    #: (``recrawl import``) before the initial crawl; 0: a cold start (``--cold``)
    history_s: float = 600.0
    #: the history file's form: ``changes`` (a change log, complete) or ``cdx`` (an earlier
    #: crawler's captures, round robin at the budget: incomplete)
    history_format: str = "changes"
    #: import the history with its ping log (:func:`streams.testweb.world.past_pings`: the
    #: pings the test web sent for its past changes; ``recrawl import --ping-log``); false:
    #: the history alone (``--no-ping-log``), each interval's signals unknown
    history_pings: bool = True
    #: The seed of the test web's changes and pings, live and past (``--web-seed``); None:
    #: the world's (its past from ``seed``, its live processes from ``seed + 1``), so every
    #: run of one ``seed`` replays one realization of them
    web_seed: int | None = None

    @property
    def warmup(self) -> float:
        return self.duration_s / 2 if self.warmup_s is None else self.warmup_s


def host_limit_of(cfg: DemoConfig, world: World) -> float:
    return cfg.host_limit_per_s or max(0.5, 4 * cfg.budget_per_s / max(1, len(world.hosts)))


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
            # no order before the demo publishes its budget (after the catalogue and any
            # import: a live crawl of a page would make its older imported outcomes stale)
            "budget_per_s": 0.0,
            # absolute, under the home like the logs: the same for every current folder
            "data_dir": Path(default_home()) / "demo" / tag / "worker",
        }
    )  # fmt: skip
