"""The repository's shape: generic top-level packages import from here, pins, compose file."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def test_streams_models_infra_import_from_this_repository() -> None:
    # In a fresh interpreter started elsewhere: "streams" and "models" are generic names,
    # a same-named package from site-packages must not win.
    code = "import streams, models, infra; print(streams.__file__, models.__file__, infra.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    ).stdout.split()
    assert [Path(p).resolve().parent.parent for p in out] == [REPO] * 3


def test_dependencies_are_pinned_exactly_and_faust_avoids_broken_releases() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + project["optional-dependencies"]["dev"]
    assert all("==" in d for d in deps), [d for d in deps if "==" not in d]
    pins = {d.split("==")[0].split("[")[0]: d.split("==")[1] for d in deps}
    faust = tuple(int(x) for x in pins["faust-streaming"].split("."))
    assert faust >= (0, 15, 2)
    assert pins["aiokafka"].startswith("0.14.")
    assert project["scripts"]["recrawl"] == "streams.cli:main"
    lock = (REPO / "requirements.lock").read_text()
    for name in ("faust-streaming", "aiokafka", "mode-streaming"):
        assert f"{name}=={pins[name]}" in lock


def test_docker_compose_is_valid_and_complete() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"kafka", "redis", "worker"}
    assert services["kafka"]["image"].startswith("apache/kafka:3.9")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert services["redis"]["image"] == "redis:7"
    for name in ("kafka", "redis"):
        assert "test" in services[name]["healthcheck"]
        for port in services[name]["ports"]:
            host, container = str(port).split(":")
            assert 0 < int(host) < 65536 and 0 < int(container) < 65536
    deps = services["worker"]["depends_on"]
    assert deps == {
        "kafka": {"condition": "service_healthy"},
        "redis": {"condition": "service_healthy"},
    }
    env = services["worker"]["environment"]
    assert env["RECRAWL_KAFKA_BOOTSTRAP"] == "kafka:9092"
    assert env["RECRAWL_REDIS_URL"].startswith("redis://redis:6379")
    assert "recrawl worker" in services["worker"]["command"]
