"""Redis from Debian's ``redis-server`` on 127.0.0.1, append-only, data in a given folder."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from infra.errors import MissingToolError, ServiceStartError
from infra.proc import free_port, spawn, tail


def ensure_redis_server() -> str:
    """Path of ``redis-server``; installs Debian's package when missing and running as root."""
    path = shutil.which("redis-server")
    if path:
        return path
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise MissingToolError(
            "redis-server is not on PATH. Install it: `sudo apt-get install -y redis-server` "
            "(Debian/Ubuntu), or point REDIS_URL at a running Redis 7."
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "redis-server"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise MissingToolError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr}")
    # Debian's package starts a system service on 6379; recrawl runs its own instance.
    subprocess.run(["service", "redis-server", "stop"], capture_output=True, check=False)
    path = shutil.which("redis-server")
    if not path:
        raise MissingToolError("apt-get installed redis-server but it is not on PATH")
    return path


@dataclass(frozen=True)
class RedisConfig:
    data_dir: Path
    port: int

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


def start(
    data_dir: Path, *, port: int | None = None, tie_to_parent: bool = False
) -> tuple[subprocess.Popen[bytes], RedisConfig]:
    server = ensure_redis_server()
    data_dir.mkdir(parents=True, exist_ok=True)
    cfg = RedisConfig(data_dir, port or free_port())
    argv = [
        server, "--bind", "127.0.0.1", "--port", str(cfg.port), "--dir", str(data_dir),
        "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
        "--daemonize", "no", "--logfile", str(data_dir / "redis.log"),
        "--protected-mode", "yes",
    ]  # fmt: skip
    proc = spawn(argv, data_dir / "stdout.log", tie_to_parent=tie_to_parent)
    return proc, cfg


def ping(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def wait_ready(proc: subprocess.Popen[bytes], cfg: RedisConfig, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceStartError(
                f"redis-server exited with {proc.returncode}:\n" + tail(cfg.data_dir / "redis.log")
            )
        if ping(cfg.port):
            return
        time.sleep(0.1)
    raise ServiceStartError(f"redis on port {cfg.port} did not answer PING; see {cfg.data_dir}")
