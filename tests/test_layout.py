"""The repository's shape: generic top-level packages import from here, pins, compose file."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


def test_streams_models_infra_import_from_this_repository() -> None:
    # In a fresh interpreter started elsewhere: "streams" and "models" are generic names,
    # a same-named package from site-packages must not win.
    code = ("import streams, models, infra, experiments; "
            "print(streams.__file__, models.__file__, infra.__file__, experiments.__file__)")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/"
    ).stdout.split()
    assert [Path(p).resolve().parent.parent for p in out] == [REPO] * 4


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


def test_public_streams_modules_declare_all_and_errors_share_a_root() -> None:
    """Every public module of streams/ and experiments/ says what it exports
    (``__all__``, each name defined), and the exceptions recrawl raises on purpose derive
    from RecrawlError."""
    import ast
    import importlib
    from pathlib import Path

    from streams.errors import RecrawlError

    root = Path(__file__).resolve().parent.parent
    missing = []
    for p in sorted([*(root / "streams").rglob("*.py"), *(root / "experiments").rglob("*.py")]):
        rel = p.relative_to(root)
        if p.name.startswith("_"):
            continue
        tree = ast.parse(p.read_text())
        if not any(isinstance(n, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)
                for n in tree.body):
            missing.append(str(rel))
            continue
        mod = importlib.import_module(".".join(rel.with_suffix("").parts))
        for name in mod.__all__:
            assert hasattr(mod, name), (rel, name)
    assert missing == []
    for dotted in ("streams.worker.agents.RedisUnavailable", "streams.edges.indexnow.Rejection",
                   "streams.edges.sitemaps.SitemapRefused", "streams.edges.websub.WebSubError",
                   "streams.fetcher.client.BodyTooLarge",
                   "streams.fetcher.egress.RefusedTarget", "streams.reach.Unreachable",
                   "streams.settings.SettingsError"):
        mod_name, _, cls = dotted.rpartition(".")
        assert issubclass(getattr(importlib.import_module(mod_name), cls), RecrawlError)


def test_misplaced_unit_tests_are_named() -> None:
    """The collection hook's rule (tests/kinds.py) on items shaped like pytest's: a test
    under tests/unit/ that asks for Kafka, Redis or a worker, or is marked integration, is
    named with the reason; the same test elsewhere, or a pure one, is not."""
    from types import SimpleNamespace

    from kinds import TESTS, misplaced_unit_items

    def item(folder: str, fixtures: tuple[str, ...] = (), marks: tuple[str, ...] = ()) -> object:
        return SimpleNamespace(
            nodeid=f"{folder}/test_x.py::t", path=TESTS / folder / "test_x.py",
            fixturenames=("request", *fixtures),
            iter_markers=lambda: [SimpleNamespace(name=m) for m in marks],
        )

    got = misplaced_unit_items([
        item("unit", ("tmp_path",)),
        item("unit", ("redis_url", "services")),
        item("unit", (), ("integration",)),
        item("integration", ("redis_url", "services")),
        item("e2e", ("start_worker",)),
    ])
    assert got == ["unit/test_x.py::t: fixture redis_url, fixture services",
                   "unit/test_x.py::t: mark integration"]


def test_unit_tests_use_no_kafka_redis_or_subprocess(request: pytest.FixtureRequest) -> None:
    """Tests by kind: everything under tests/unit/ collects without asking for a
    service (the conftest hook refuses the run otherwise: exit code 4), and no unit test
    module imports the means to reach one."""
    import ast

    from kinds import UNIT_FILES_CHECKED

    unit = REPO / "tests" / "unit"
    files = sorted(unit.glob("test_*.py"))
    assert files, "tests/unit/ is empty"
    banned = ("subprocess", "aiokafka", "faust", "infra", "worker_process", "kafka_io",
              "edges_helpers", "testcontainers")
    found = []
    for p in files:
        for node in ast.walk(ast.parse(p.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{p.name}: {n}" for n in names if n.split(".")[0] in banned]
    assert found == []
    # a pytest run that collected every unit test file has had their items checked by the
    # conftest hook already (it would not have started otherwise); else they are collected
    # here, by a pytest subprocess
    if {p.resolve() for p in files} <= request.config.stash.get(UNIT_FILES_CHECKED,
                                                                  frozenset()):
        return
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         str(unit)], capture_output=True, text=True, cwd=REPO,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert " collected" in out.stdout or "tests collected" in out.stdout


def test_test_modules_have_distinct_names() -> None:
    # tests/ has no __init__.py: pytest imports each test file by its basename, so two files
    # of one name in different folders stop the whole run at collection.
    names: dict[str, list[str]] = {}
    for path in (REPO / "tests").rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    assert not {n: p for n, p in names.items() if len(p) > 1}


def test_record_layouts_are_imported_from_their_module_not_through_a_backend() -> None:
    """The page record's names (``streams.store.page_record.__all__``) are imported from
    ``streams.store.page_record`` everywhere, never through ``streams.store.redis_store``
    (whose ``__all__`` holds none of them)."""
    import ast

    from streams.store import page_record, redis_store

    record = set(page_record.__all__)
    assert not record & set(redis_store.__all__)
    through = []
    for top in ("streams", "models", "benchmarks", "experiments", "infra", "tests"):
        for p in sorted((REPO / top).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text())):
                if (isinstance(node, ast.ImportFrom) and node.module == "streams.store.redis_store"
                        and p.name != "redis_store.py"):
                    through += [(str(p.relative_to(REPO)), a.name) for a in node.names
                                if a.name in record]
    assert through == []


def test_modules_over_600_lines_give_the_reason_in_their_docstring() -> None:
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    unexplained = []
    for name in files:
        text = (REPO / name).read_text()
        if text.count("\n") > 600:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "Over 600 lines" not in doc:
                unexplained.append(name)
    assert not unexplained, unexplained
