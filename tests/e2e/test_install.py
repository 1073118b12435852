"""The package as a new user gets it: ``pip install`` (not editable) into a fresh virtualenv,
then ``recrawl infra up``, a ``recrawl worker``, ``recrawl pages load`` and ``recrawl ping``
run from a temporary folder outside the checkout; an order comes out, and nothing was
written under the virtualenv's site-packages."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from kafka_io import consume, wait_for

from infra.proc import free_port, spawn, stop_group
from infra.stack import default_cache
from streams.settings import Settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def _files(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime
            for p in root.rglob("*") if p.is_file() and p.suffix != ".pyc"}


def test_installed_package_runs_from_any_folder(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    # --no-compile: byte-compiling every dependency (scipy, numba, llvmlite, matplotlib ...)
    # at install time costs about 17 s of CPU and is not what this test checks; the modules
    # the commands import are compiled when imported (.pyc files are left out of the
    # comparison of site-packages below)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
         "--no-compile", "-c", str(REPO / "requirements.lock"), str(REPO)],
        capture_output=True, text=True, timeout=1800)
    assert pip.returncode == 0, pip.stderr[-3000:]
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert not (site / "streams.egg-link").exists() and (site / "streams").is_dir()
    before = _files(site)
    recrawl = str(venv / "bin" / "recrawl")
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RECRAWL_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(XDG_STATE_HOME=str(tmp_path / "state"), XDG_DATA_HOME=str(tmp_path / "data"),
               # Kafka's jars as fetched before (the per-user cache of this machine)
               RECRAWL_CACHE=str(default_cache()))

    def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([recrawl, *args], cwd=run_dir, env=env, capture_output=True,
                              text=True, timeout=300)
        assert not check or done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    version = cli("--version").stdout.strip()
    assert re.fullmatch(r"recrawl \d+\.\d+\.\d+", version), version
    worker = None
    try:
        up = cli("infra", "up", "--partitions", "2")
        exports = dict(re.findall(r"^export (RECRAWL_[A-Z_]+)=(\S+)$", up.stdout, re.M))
        assert set(exports) >= {"RECRAWL_KAFKA_BOOTSTRAP", "RECRAWL_REDIS_URL"}, up.stdout
        assert (tmp_path / "state" / "recrawl" / "stack.json").exists()
        port = free_port()
        worker = spawn([recrawl, "worker", "--web-port", str(port), "--budget-per-s", "5"],
                       tmp_path / "worker.log", env=env, cwd=run_dir, tie_to_parent=True)

        def ready() -> bool:
            assert worker is not None and worker.poll() is None, \
                (tmp_path / "worker.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5) as r:
                    return bool(json.loads(r.read())["status"] == "ready")
            except OSError:
                return False

        wait_for(ready, 180, "the installed worker ready")
        (run_dir / "pages.csv").write_text("url,importance\nhttps://installed.test/a,1\n")
        cli("pages", "load", "pages.csv")
        sent = cli("ping", "https://installed.test/a", "--source", "cdn")
        assert "sent {" in sent.stdout
        s = Settings(kafka_bootstrap=exports["RECRAWL_KAFKA_BOOTSTRAP"],
                     redis_url=exports["RECRAWL_REDIS_URL"], partitions=2,
                     data_dir=tmp_path / "unused")
        orders = consume(s, "orders", 1, timeout_s=60)
        assert orders and orders[0]["url"] == "https://installed.test/a"
        assert (tmp_path / "state" / "recrawl" / "worker").is_dir()  # the worker's data
    finally:
        if worker is not None:
            stop_group(worker)
        cli("infra", "down", check=False)
    after = _files(site)
    assert {k for k in after if k not in before or after[k] != before[k]} == set()
    assert not (site / "var").exists() and not (site / ".cache").exists()
    assert list(run_dir.iterdir()) == [run_dir / "pages.csv"]
