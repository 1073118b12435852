"""The ``recrawl worker`` subprocess of the tests, and the CI switch.

A module of its own (not ``conftest``): test modules import it by name, and with a
sub-folder ``conftest.py`` (there was one) ``conftest`` names more than one module, so
``from conftest import ...`` picked whichever was imported first.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

from infra.proc import spawn
from streams.demo.workers import settings_env
from streams.settings import Settings

__all__ = ["IN_CI", "REPO", "Worker", "settings_env"]

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
REPO = Path(__file__).resolve().parent.parent


class Worker:
    """A ``recrawl worker`` subprocess (the real thing, as an operator runs it)."""

    def __init__(self, s: Settings, log_path: Path, extra_env: dict[str, str] | None = None):
        self.settings = s
        self.log_path = log_path
        env = {**settings_env(s), **(extra_env or {})}
        self.proc = spawn(
            [sys.executable, "-m", "streams.cli", "worker", "--loglevel", "info"],
            log_path,
            env=env,
            cwd=REPO,
            tie_to_parent=True,
        )

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited early:\n{self.log()}")
            if "Worker]: Ready" in self.log():
                return
            time.sleep(0.2)
        raise AssertionError(f"worker not ready after {timeout_s}s:\n{self.log()[-4000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 9)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, 15)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()
