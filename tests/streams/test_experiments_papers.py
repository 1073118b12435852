"""`recrawl experiments fig3 --quick` end to end: table, plot, JSON rows."""

from __future__ import annotations

import json
from pathlib import Path

from streams.commands.experiments import EXPERIMENTS
from streams.experiments import papers


def test_registry_has_simulator_experiments() -> None:
    for name in ("fig3", "fig4", "fig6", "fig8", "fig11", "fig12", "peers", "est"):
        assert EXPERIMENTS[name] == "streams.experiments.papers"
    assert "app-e" in EXPERIMENTS and "paper003" in EXPERIMENTS


def test_fig3_quick_writes_outputs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    rc = papers.main(["fig3", "--quick", "--jobs", "1", "--no-progress", "--out", str(out),
                      "--json", str(tmp_path / "fig3.json")])
    assert rc == 0
    assert (out / "fig3.png").stat().st_size > 1000
    doc = json.loads((tmp_path / "fig3.json").read_text())
    assert doc["experiment"] == "fig3"
    rows = {(r["m"], r["policy"]): r for r in doc["rows"]}
    assert {p for _, p in rows} == {"greedy", "lds", "baseline"}
    for m in (100, 200):
        # Sec. 6.4: Greedy and LDS are close to the continuous optimum
        assert abs(rows[(m, "greedy")]["accuracy"] - rows[(m, "baseline")]["accuracy"]) < 0.05
        assert rows[(m, "greedy")]["stderr"] >= 0.0
    assert "| m | policy | accuracy |" in (out / "fig3.md").read_text()
