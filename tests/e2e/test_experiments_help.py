"""``recrawl experiments NAME --help`` keeps the experiments table readable (it was reflowed
into one paragraph, reST rules and all)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from experiments import beyond, papers
from experiments._common import help_text


def recrawl_help(name: str) -> str:
    env = {**os.environ, "COLUMNS": "100"}
    return subprocess.run([sys.executable, "-m", "streams.cli", "experiments", name, "--help"],
                          capture_output=True, text=True, check=True, timeout=120,
                          env=env).stdout


@pytest.mark.parametrize(("module", "name"), [(papers, "fig3"), (beyond, "floor")])
def test_each_experiment_is_one_row_of_the_help_table(module: object, name: str) -> None:
    out = recrawl_help(name)
    lines = out.splitlines()
    doc = help_text(module.__doc__ or "")
    # every table row of the docstring is a line of the help, as written
    rows = [ln for ln in doc.splitlines() if ln[:1].isalnum() and "  " in ln
            and ln.split()[0] in ("fig3", "fig4", "fig6", "fig11", "fig12", "fig8", "peers",
                                  "est", "uncertainty", "sources", "floor")]
    assert len(rows) >= 3
    for row in rows:
        assert row in lines, row
    assert "=====" not in out and "``" not in out and ":mod:" not in out
    assert "--quick" in out and "options:" in out


def test_help_text_drops_rest_markup_only() -> None:
    doc = """Title (``x``).

    ====  =====
    a     one :func:`models.f`
    bb    two
    ====  =====
    """
    assert help_text(doc) == "Title (x).\n\n    a     one models.f\n    bb    two"
