"""The demo's ``recrawl worker`` subprocesses: settings per worker, logs, start,
readiness, SIGKILL and stop.

Part of :mod:`streams.demo` (split by concern), which re-exports every name.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from streams.settings import Settings

__all__ = ["WorkerProcess", "settings_env", "worker_log", "worker_settings"]


def settings_env(s: Settings) -> dict[str, str]:
    """The environment that makes a ``recrawl`` subprocess use ``s``."""
    from streams.settings import UNUSED_SETTINGS

    env = {k: v for k, v in os.environ.items() if not k.startswith("RECRAWL_")}
    for name, value in s.model_dump(exclude=set(UNUSED_SETTINGS)).items():
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


def worker_log(home: Any, settings: Settings, i: int, restart: bool = False) -> Path:
    name = "worker.log" if i == 0 else f"worker{i}.log"
    if restart:
        name = name.replace(".log", ".restarted.log")
    return Path(home) / "demo" / settings.topic_prefix / name


class WorkerProcess:
    """The ``recrawl worker`` subprocess (the scheduler)."""

    def __init__(self, settings: Settings, log_path: Path) -> None:
        from infra.proc import spawn

        log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path = log_path
        self.settings = settings
        self.proc = spawn(
            [sys.executable, "-m", "streams.cli", "worker", "--loglevel", "info",
             "--web-port", str(settings.web_port)],
            log_path, env=settings_env(settings), tie_to_parent=True,
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
