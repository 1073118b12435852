"""Operating a worker and the commands against real services: unreachable Kafka and Redis
(refused ports and ports that accept but are not the service) give one line naming the
address within ``connect_timeout_s``; a worker rides out a stalled Redis with a periodic
report and a failing ``/readyz``; probes, metrics, the Host check and the dashboard's
headers; ``recrawl plan`` with no pages writes no plot."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kafka_io import wait_for
from test_scheduler import free_port, get
from worker_process import Worker, settings_env

from infra import redis as infra_redis
from infra.proc import stop_group
from streams.settings import Settings

pytestmark = pytest.mark.integration

#: the bound the commands are given here (``connect_timeout_s``)
BOUND_S = 2.0
#: the commands' own start-up on a loaded 2-core machine (imports take seconds there)
START_SLACK_S = 30.0


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (not Kafka, not Redis)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(5)
    for c in held:
        c.close()
    srv.close()


def _run(args: list[str], env: dict[str, str], cwd: Path
         ) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "streams.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - t0


def _assert_one_line(done: subprocess.CompletedProcess[str], elapsed: float, address: str,
                     service: str) -> None:
    err = done.stderr.strip()
    assert done.returncode == 3, (done.returncode, done.stdout, err)
    assert err.count("\n") == 0, err
    assert f"cannot reach {service} at {address}" in err and "tried" in err, err
    assert "Traceback" not in done.stdout + done.stderr
    assert "Unclosed" not in done.stdout + done.stderr
    assert elapsed < BOUND_S + START_SLACK_S, elapsed


KAFKA_COMMANDS = [["ping", "https://a.org/x"], ["budget", "set", "5"],
                  ["pages", "load", "pages.csv"]]
REDIS_COMMANDS = [["explain", "https://a.org/x"], ["plan"], ["budget", "show"]]


@pytest.mark.parametrize("fault", ["accepts-but-silent", "refused"])
def test_commands_name_the_unreachable_address_in_bounded_time(
        settings: Settings, tmp_path: Path, silent_port: int, fault: str) -> None:
    port = silent_port if fault == "accepts-but-silent" else free_port()
    (tmp_path / "pages.csv").write_text("url\nhttps://a.org/x\n")
    base = {**settings_env(settings), "RECRAWL_CONNECT_TIMEOUT_S": str(BOUND_S)}
    kafka = f"127.0.0.1:{port}"
    redis = f"redis://127.0.0.1:{port}/0"
    runs = [(args, {**base, "RECRAWL_KAFKA_BOOTSTRAP": kafka}, kafka, "Kafka")
            for args in KAFKA_COMMANDS]
    runs += [(args, {**base, "RECRAWL_REDIS_URL": redis}, redis, "Redis")
             for args in REDIS_COMMANDS]
    # the commands run at once (each waits out its own connect bound), each timed alone
    with ThreadPoolExecutor(len(runs)) as pool:
        results = list(pool.map(lambda run: _run(run[0], run[1], tmp_path), runs))
    for (_args, _env, address, service), (done, elapsed) in zip(runs, results, strict=True):
        _assert_one_line(done, elapsed, address, service)


def test_a_worker_that_cannot_reach_kafka_or_redis_exits_with_one_line(
        settings: Settings, tmp_path: Path, silent_port: int) -> None:
    base = {**settings_env(settings), "RECRAWL_CONNECT_TIMEOUT_S": str(BOUND_S)}
    kafka = f"127.0.0.1:{silent_port}"
    redis = f"redis://127.0.0.1:{free_port()}/0"
    # both workers at once, each timed alone; the second with a longer bound: the real
    # Kafka must answer it on a loaded machine
    with ThreadPoolExecutor(2) as pool:
        no_kafka = pool.submit(_run, ["worker"], {**base, "RECRAWL_KAFKA_BOOTSTRAP": kafka},
                               tmp_path)
        no_redis = pool.submit(_run, ["worker"], {**base, "RECRAWL_REDIS_URL": redis,
                                                  "RECRAWL_CONNECT_TIMEOUT_S": "10"}, tmp_path)
        _assert_one_line(*no_kafka.result(), kafka, "Kafka")
        _assert_one_line(*no_redis.result(), redis, "Redis")


def _status(port: int, path: str, host: str | None = None) -> tuple[int, dict[str, str], str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    headers = {"Host": host} if host else {}
    conn.request("GET", path, headers=headers)
    resp = conn.getresponse()
    body = resp.read().decode(errors="replace")
    conn.close()
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, body


def test_a_stalled_redis_is_reported_periodically_and_fails_readiness(
        settings: Settings, tmp_path: Path) -> None:
    """Redis stopped (SIGSTOP) under a running worker: one report with the address every
    ``outage_report_s`` (not one per retry), ``/readyz`` 503 naming Redis, ``/stats/`` still
    200, ``/healthz`` 200; after SIGCONT, "reachable again" and ``/readyz`` 200."""
    proc, cfg = infra_redis.start(tmp_path / "redis", tie_to_parent=True)
    worker = None
    try:
        infra_redis.wait_ready(proc, cfg)
        port = free_port()
        s = settings.model_copy(update={"redis_url": cfg.url, "web_enabled": True,
                                        "web_port": port, "outage_report_s": 3.0})
        worker = Worker(s, tmp_path / "worker.log")
        worker.wait_ready()
        wait_for(lambda: _status(port, "/readyz")[0] == 200, 60, "ready")
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: _status(port, "/readyz")[0] == 503, 30, "not ready")
            code, _, body = _status(port, "/readyz")
            assert json.loads(body)["checks"]["redis"].startswith(
                f"redis at {cfg.url} did not answer")
            assert _status(port, "/healthz")[0] == 200
            code, _, body = _status(port, "/stats/")
            assert code == 200 and json.loads(body)["truth"] is None
            time.sleep(10)  # ~3 reports at outage_report_s = 3 s, against ~50 retries
            reports = [ln for ln in worker.log().splitlines()
                       if f"redis at {cfg.url} unreachable" in ln]
            assert 2 <= len(reports) <= 8, reports
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        wait_for(lambda: f"redis at {cfg.url} reachable again" in worker.log(), 30,
                 "reachable again")
        wait_for(lambda: _status(port, "/readyz")[0] == 200, 30, "ready again")
        assert "Traceback" not in worker.log()
    finally:
        if worker is not None:
            worker.stop()
        stop_group(proc)


def test_probes_metrics_host_check_and_dashboard_headers(settings: Settings,
                                                         start_worker) -> None:
    port = free_port()
    start_worker(settings.model_copy(update={"web_enabled": True, "web_port": port,
                                             "web_allowed_hosts": "crawler.internal"}))
    assert _status(port, "/healthz")[0] == 200
    wait_for(lambda: _status(port, "/readyz")[0] == 200, 60, "ready")
    code, _, body = _status(port, "/readyz")
    assert json.loads(body) == {"status": "ready",
                                "checks": {"kafka": "ok", "redis": "ok", "shards": "ok"}}
    for path in ("/metrics", "/metrics/"):
        code, _, text = _status(port, path)
        assert code == 200
        for name in ("recrawl_orders_total", "process_resident_memory_bytes",
                     "process_cpu_seconds_total", "python_gc_objects_collected_total",
                     "python_info"):
            assert name in text, (path, name)
        assert "_per_s_total" not in text
    # the Host header, on the worker's pages and on Faust's own
    for path in ("/stats/", "/", "/metrics", "/dashboard/"):
        assert _status(port, path, host=f"evil.example:{port}")[0] == 421, path
        assert _status(port, path, host=f"localhost:{port}")[0] in (200, 308), path
    assert _status(port, "/stats/", host="crawler.internal")[0] == 200
    code, headers, _ = _status(port, "/dashboard/")
    assert code == 200
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert "script-src 'sha256-" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert _status(port, "/stats/")[1]["x-content-type-options"] == "nosniff"
    with pytest.raises(urllib.error.HTTPError) as too_many:
        get(port, "/plan?" + "&".join(f"budget={i + 1}" for i in range(21)))
    assert too_many.value.code == 400


def test_plan_with_no_pages_writes_no_plot(settings: Settings, tmp_path: Path) -> None:
    png = tmp_path / "plan.png"
    done = subprocess.run([sys.executable, "-m", "streams.cli", "plan", "--png", str(png)],
                          env=settings_env(settings), cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "no pages in Redis" in done.stdout
    assert f"no plot written to {png}" in done.stdout and "plot written to" not in \
        done.stdout.replace(f"no plot written to {png}", "")
    assert not png.exists()


def test_budget_and_ping_say_what_was_sent(settings: Settings, tmp_path: Path) -> None:
    env = settings_env(settings)
    done, _ = _run(["budget", "set", "7.5"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (f'sent {{"budget_per_s": 7.5}} to {settings.topic("control")} at '
            f"{settings.kafka_bootstrap}") in done.stdout
    done, _ = _run(["ping", "https://a.org/x", "--source", "cdn"], env, tmp_path)
    assert done.returncode == 0, done.stderr
    sent = json.loads(done.stdout.split("sent ", 1)[1].rsplit(" to ", 1)[0])
    assert (sent["url"], sent["source"]) == ("https://a.org/x", "cdn")


def test_a_command_whose_reader_is_gone_stops_quietly(tmp_path: Path) -> None:
    """``recrawl ... | head``: output into a pipe nobody reads any more ends the command
    with status 1 and nothing on stderr (no BrokenPipeError traceback); ``infra status``
    of a home with no stack prints its JSON without any service."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write gets EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "streams.cli", "infra", "status", "--home",
                               str(tmp_path / "none")],
                              stdout=write_end, stderr=subprocess.PIPE, text=True,
                              timeout=120, check=False)
    finally:
        os.close(write_end)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == ""
