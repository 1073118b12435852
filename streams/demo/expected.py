"""What the simulator (:mod:`models.sim`) expects of a finished demo run, and the
continuous optimum shown while it runs.

Part of :mod:`streams.demo` (split by concern), which re-exports every name.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from streams.demo.config import DemoConfig, host_limit_of
from streams.settings import Settings
from streams.testweb.expected import Loop, RunRecord, fresh_draws, replay
from streams.testweb.world import World

__all__ = ["continuous_optimum", "simulate_run"]


def simulate_run(
    world: World, settings: Settings, cfg: DemoConfig, summary: dict[str, Any]
) -> dict[str, Any]:
    """The simulator's numbers for a finished live run (``summary`` from :func:`run_loop`).

    ``expected_accuracy``: Algorithm 1 with what the worker is given and learns (its own
    parameter code, :class:`streams.testweb.expected.WorkerMirror`) replaying the run's own
    changes, pings and order times; ``expected_accuracy_oracle``: the same with the true
    parameters; ``*_draws``: mean and standard deviation over ``cfg.sim_runs`` fresh draws
    of the world's processes at the achieved order rate: other realizations of the world,
    not another run's (the test web draws its changes and announcements from a generator
    seeded by the world, :class:`streams.testweb.server.TestWeb`, so every run of one
    ``--seed`` replays the same realization; the replay is the like-for-like figure).
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
        m, sd = fresh_draws(world, settings, loop, runs=cfg.sim_runs, seed=cfg.seed,
                            history_s=cfg.history_s, history_format=cfg.history_format,
                            history_crawls_per_s=cfg.budget_per_s,
                            history_pings=cfg.history_pings)
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
