"""The --quick reproductions run end to end and give sane numbers."""

from __future__ import annotations

import json
import pathlib

import pytest

from experiments.estimation import main, theoretical_cost_per_hour


def test_app_e_quick(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    assert (
        main(
            [
                "app-e",
                "--quick",
                "--seed",
                "1",
                "--out",
                str(out),
                "--json",
                str(tmp_path / "a.json"),
            ]
        )
        == 0
    )
    res = json.loads((tmp_path / "a.json").read_text())
    for f in res["files"]:
        assert (out / f).stat().st_size > 1000
    assert (out / "app_e.md").read_text().startswith("| estimator")
    for what in ("precision", "recall"):
        naive = res[f"naive_{what}"]
        mle = res[f"mle_{what}"]
        stream = res[f"str_{what}"]
        # Fig. 13: the naive estimator is biased (upwards here); Fig. 14: the MLE is not
        assert abs(naive["mean_error"]) > 0.1
        assert abs(mle["mean_error"]) < 0.2 * abs(naive["mean_error"])
        assert mle["mean_abs_error"] < 0.3 * naive["mean_abs_error"]
        # the bounded streaming state is close to the full-data MLE
        assert stream["mean_abs_error"] < 1.5 * mle["mean_abs_error"] + 0.01


def test_paper003_quick(tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    assert main(["paper003", "--quick", "--out", str(out), "--json", str(tmp_path / "p.json")]) == 0
    res = json.loads((tmp_path / "p.json").read_text())
    assert len(res["files"]) == 4
    for f in res["files"]:
        assert (out / f).stat().st_size > 1000
    theory = theoretical_cost_per_hour(1 / 3, 24.0, 1.0, 1.0)
    assert theory == pytest.approx(0.2746, abs=1e-4)
    for run in res["runs"]:
        known, unknown = run["known"], run["unknown"]
        # the known rate matches the cost model and P(change) = 1 - e^{-1/3}
        assert known["cost_per_hour"] == pytest.approx(
            theory, abs=4 * known["cost_per_hour_se"] + 0.005
        )
        assert known["changed_share"] == pytest.approx(0.2835, abs=0.02)
        assert known["very_stale_share"] == 0.0
        # estimating costs something, and creates very stale intervals
        assert unknown["cost_per_hour"] > known["cost_per_hour"] - 2 * known["cost_per_hour_se"]
        assert 0.0 < unknown["very_stale_share"] < 0.2
    # the very-stale share falls as the estimate converges over longer runs
    assert (
        res["runs"][1]["unknown"]["very_stale_share"]
        < res["runs"][0]["unknown"]["very_stale_share"]
    )
