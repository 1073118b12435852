"""Redis from Debian's ``redis-server`` on 127.0.0.1, append-only, data in a given folder."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from infra.apt import ensure_program
from infra.errors import MissingToolError, ServiceStartError
from infra.proc import free_port, port_open, spawn, stop_group, tail


def ensure_redis_server() -> str:
    """Path of ``redis-server``; installs Debian's package when missing and running as root."""
    installed = shutil.which("redis-server") is None
    path = ensure_program(
        lambda: shutil.which("redis-server"), "redis-server",
        "redis-server is not on PATH. Install it: `sudo apt-get install -y redis-server` "
        "(Debian/Ubuntu), or point REDIS_URL at a running Redis 7.")
    if installed:  # Debian's package starts a system service on 6379; recrawl runs its own
        subprocess.run(["service", "redis-server", "stop"], capture_output=True, check=False)
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


#: A page record with its estimator record is 43 + 113 + 10 x ring bytes (version 3)
#: (streams/store/redis_store.py): over Redis's default ``hash-max-listpack-value 64``,
#: which would turn every host's page hash into a hashtable (304 instead of 248 B per page at
#: 10^5 pages: docs/benchmarks.md "Design decisions").  Users' own Redis should set the same.
LISTPACK_ARGS = ("--hash-max-listpack-value", "256")


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
        "--protected-mode", "yes", *LISTPACK_ARGS,
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


# -- Redis Cluster ---------------------------------------------------------------------------
#: scheme of a cluster address: ``redis+cluster://127.0.0.1:7000,127.0.0.1:7001`` (seed
#: nodes; the client discovers the rest).  Read by :mod:`streams.store.redis_conn`.
CLUSTER_SCHEME = "redis+cluster"


@dataclass(frozen=True)
class ClusterConfig:
    """A local Redis Cluster: one master per port, no replicas; node ``i`` keeps its data
    and ``nodes.conf`` in ``data_dir/<port>``."""

    data_dir: Path
    ports: tuple[int, ...]

    @property
    def url(self) -> str:
        return f"{CLUSTER_SCHEME}://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def node_dir(self, port: int) -> Path:
        return self.data_dir / str(port)


def _layout_file(data_dir: Path) -> Path:
    return data_dir / "cluster.json"


def _pick_free_ports(n: int) -> tuple[int, ...]:
    picked: set[int] = set()
    while len(picked) < n:
        picked.add(free_port())
    return tuple(sorted(picked))


def _cluster_ports(
    data_dir: Path, masters: int, base_port: int | None
) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """The nodes' client ports, their cluster-bus ports, and whether they are those of the
    cluster already in ``data_dir`` (its nodes restart from their ``nodes.conf`` and form
    the same cluster again).  Bus ports are chosen too (``--cluster-port``): Redis's default,
    port + 10000, does not exist for ports above 55535 (most free ports)."""
    try:
        layout = json.loads(_layout_file(data_dir).read_text())
        ports = tuple(int(p) for p in layout["ports"])
        bus = tuple(int(p) for p in layout["bus_ports"])
    except (OSError, ValueError, KeyError, TypeError):
        ports = bus = ()
    if base_port is not None and ports[:1] != (base_port,):
        ports = tuple(range(base_port, base_port + masters))
        bus = ()
    if len(ports) != masters or len(bus) != masters or any(
        port_open("127.0.0.1", p) for p in ports + bus
    ):
        if base_port is None:
            ports = ()
        bus = ()
    if not ports:
        ports = _pick_free_ports(masters)
    if not bus:
        bus = tuple(p for p in _pick_free_ports(masters + len(ports)) if p not in ports)[:masters]
    known = all((data_dir / str(p) / "nodes.conf").exists() for p in ports)
    return ports, bus, known


def start_cluster(
    data_dir: Path, masters: int, *, base_port: int | None = None, tie_to_parent: bool = False
) -> tuple[list[subprocess.Popen[bytes]], ClusterConfig]:
    """Start ``masters`` cluster-enabled ``redis-server`` processes on 127.0.0.1 (ports
    ``base_port`` .. ``base_port + masters - 1``, or the ones this folder's cluster used, or
    free ports).  :func:`wait_cluster_ready` then joins them (``redis-cli --cluster create``)
    unless they are an existing cluster restarting."""
    if masters < 1:
        raise ValueError(f"masters must be at least 1, got {masters}")
    server = ensure_redis_server()
    data_dir.mkdir(parents=True, exist_ok=True)
    ports, bus, known = _cluster_ports(data_dir, masters, base_port)
    if not known:  # a new cluster: no node may remember another one
        for p in ports:
            shutil.rmtree(data_dir / str(p), ignore_errors=True)
    cfg = ClusterConfig(data_dir, ports)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for p, b in zip(ports, bus, strict=True):
            d = cfg.node_dir(p)
            d.mkdir(parents=True, exist_ok=True)
            argv = [
                server, "--bind", "127.0.0.1", "--port", str(p), "--dir", str(d),
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-port", str(b),
                "--cluster-node-timeout", "5000", "--cluster-require-full-coverage", "yes",
                "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
                "--daemonize", "no", "--logfile", str(d / "redis.log"),
                "--protected-mode", "yes", *LISTPACK_ARGS,
            ]  # fmt: skip
            procs.append(spawn(argv, d / "stdout.log", tie_to_parent=tie_to_parent))
    except BaseException:
        for proc in procs:
            stop_group(proc)
        raise
    _layout_file(data_dir).write_text(json.dumps({"ports": list(ports), "bus_ports": list(bus)}))
    return procs, cfg


def cluster_info(port: int) -> dict[str, str]:
    """``CLUSTER INFO`` of the node on ``port`` ({} when it does not answer)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"CLUSTER INFO\r\n")
            buf = b""
            while b"cluster_state" not in buf or not buf.endswith(b"\r\n\r\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
    except OSError:
        return {}
    out = {}
    for line in buf.decode(errors="replace").splitlines():
        k, sep, v = line.partition(":")
        if sep:
            out[k.strip()] = v.strip()
    return out


def cluster_ok(ports: tuple[int, ...] | list[int]) -> bool:
    """Every node answers and sees the cluster ``ok`` with all 16384 slots assigned."""
    for p in ports:
        info = cluster_info(p)
        if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != "16384":
            return False
    return True


def wait_cluster_ready(
    procs: list[subprocess.Popen[bytes]], cfg: ClusterConfig, timeout_s: float = 30.0
) -> None:
    """Wait for every node, join them into one cluster when new, wait for ``ok`` everywhere."""
    for proc, p in zip(procs, cfg.ports, strict=True):
        wait_ready(proc, RedisConfig(cfg.node_dir(p), p), timeout_s)
    info = cluster_info(cfg.ports[0])
    if info.get("cluster_known_nodes") == "1" and info.get("cluster_slots_assigned") == "0":
        cli = shutil.which("redis-cli")
        if cli is None:
            raise MissingToolError("redis-cli is not on PATH (Debian: apt-get install redis-tools)")
        argv = [cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in cfg.ports),
                "--cluster-replicas", "0", "--cluster-yes"]
        res = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
        (cfg.data_dir / "create.log").write_text(res.stdout + res.stderr)
        if res.returncode != 0:
            raise ServiceStartError(
                f"redis-cli --cluster create failed ({res.returncode}); see "
                f"{cfg.data_dir / 'create.log'}:\n{(res.stdout + res.stderr)[-2000:]}"
            )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc, p in zip(procs, cfg.ports, strict=True):
            if proc.poll() is not None:
                raise ServiceStartError(
                    f"redis-server on {p} exited with {proc.returncode}:\n"
                    + tail(cfg.node_dir(p) / "redis.log")
                )
        if cluster_ok(cfg.ports):
            return
        time.sleep(0.2)
    raise ServiceStartError(
        f"redis cluster on ports {', '.join(map(str, cfg.ports))} not ok after {timeout_s}s; "
        f"see {cfg.data_dir}/<port>/redis.log"
    )
