"""Process helpers shared by the Kafka and Redis launchers.

Every service runs in its own process group (``start_new_session``) so that stopping it
also stops anything it forked.  Services started for a test session are additionally tied
to their parent with ``PR_SET_PDEATHSIG``: if the test runner dies, even by SIGKILL, the
kernel sends them SIGTERM, so an interrupted run leaves no orphans.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def spawn(
    argv: Sequence[str],
    log_path: Path,
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    tie_to_parent: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new process group, stdout and stderr appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(argv),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent if tie_to_parent else None,
        )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def stop_group(target: int | subprocess.Popen[Any], timeout_s: float = 20.0) -> None:
    """SIGTERM the process group led by ``target`` (a pid, or the ``Popen`` that started it),
    then SIGKILL it if it lingers.  Given the ``Popen``, the exit is reaped through it, so
    its ``returncode`` is set (a ``Popen`` dropped with ``returncode`` None warns "still
    running" when it is collected, whichever code runs at that moment)."""
    proc = target if isinstance(target, subprocess.Popen) else None
    pid = target.pid if isinstance(target, subprocess.Popen) else target
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        _reap(pid, proc)
        if not pid_alive(pid):
            break
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    _reap(pid, proc)
    if proc is not None and proc.returncode is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def _reap(pid: int, proc: subprocess.Popen[Any] | None = None) -> None:
    if proc is not None:
        proc.poll()  # sets returncode (0 if someone else reaped it)
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def wait_until(
    check: Callable[[], bool], *, timeout_s: float, interval_s: float = 0.2
) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval_s)
    return check()


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
