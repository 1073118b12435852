"""Tests by kind: where a test lives says what it needs.

- ``tests/unit/``: no Kafka, no Redis, no subprocess: pure logic, in this process.
- ``tests/integration/``: the real Redis and/or Kafka of the session, a worker subprocess.
- ``tests/e2e/``: the whole stack from the users' side (the demo, the fetcher, Scrapy, the
  dashboard in a browser, kcat, the command line).
- ``tests/test_layout.py``, ``tests/test_purity.py``: the repository's shape.

``tests/conftest.py`` calls :func:`misplaced_unit_items` on every collection and refuses a
run in which a test under ``tests/unit/`` asks for a service, and marks each item with
its kind (``pytest -m unit``, ``-m "not e2e"``).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["KINDS", "SERVICE_FIXTURES", "TESTS", "UNIT_FILES_CHECKED", "kind_of",
           "misplaced_unit_items"]

TESTS = Path(__file__).resolve().parent
KINDS = ("unit", "integration", "e2e")
#: fixtures that start or reach Kafka, Redis or a worker subprocess (``item.fixturenames``
#: is the closure, so a fixture built on one of these is caught too)
SERVICE_FIXTURES = frozenset({
    "services", "kafka_bootstrap", "redis_url", "redis_cluster_url", "settings",
    "start_worker", "rclient",
})
#: markers that say a test needs the services
SERVICE_MARKERS = frozenset({"integration"})
#: the test files under ``tests/unit/`` whose items the collection of this pytest run checked (and
#: found free of services), on ``config.stash``
UNIT_FILES_CHECKED = pytest.StashKey[frozenset[Path]]()


def kind_of(path: Path | str) -> str | None:
    """``unit``, ``integration`` or ``e2e`` for a test file under that folder, else None."""
    try:
        rel = Path(path).resolve().relative_to(TESTS)
    except ValueError:
        return None
    return rel.parts[0] if len(rel.parts) > 1 and rel.parts[0] in KINDS else None


def misplaced_unit_items(items: Iterable[Any]) -> list[str]:
    """One line per collected item under ``tests/unit/`` that requests a service fixture
    or carries a service marker (each item: ``nodeid``, ``path``, ``fixturenames``,
    ``iter_markers()``, as pytest's items have)."""
    out = []
    for item in items:
        if kind_of(item.path) != "unit":
            continue
        fixtures = sorted(set(getattr(item, "fixturenames", ())) & SERVICE_FIXTURES)
        marks = sorted({m.name for m in item.iter_markers()} & SERVICE_MARKERS)
        if fixtures or marks:
            why = ", ".join([f"fixture {f}" for f in fixtures] + [f"mark {m}" for m in marks])
            out.append(f"{item.nodeid}: {why}")
    return out
