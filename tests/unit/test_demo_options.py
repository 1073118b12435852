"""``recrawl demo``'s options: the worker learns the change rates unless ``--true-rates``."""

from __future__ import annotations

from typing import Any

import pytest

import streams.demo
from streams.cli import build_parser


def _config(monkeypatch: pytest.MonkeyPatch, *argv: str) -> Any:
    got: list[Any] = []
    monkeypatch.setattr(streams.demo, "run_demo", lambda cfg, path: got.append(cfg))
    args = build_parser().parse_args(["demo", *argv])
    assert args.func(args) == 0
    (cfg,) = got
    return cfg


def test_the_demo_learns_the_rates_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _config(monkeypatch).give_rates is False
    assert _config(monkeypatch, "--true-rates").give_rates is True
    with pytest.raises(SystemExit):  # the old negative flag is gone
        build_parser().parse_args(["demo", "--no-rates"])


def test_the_demo_warm_starts_unless_cold(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _config(monkeypatch)
    assert cfg.history_s > 0 and cfg.history_format == "changes"
    assert _config(monkeypatch, "--cold").history_s == 0
    assert _config(monkeypatch, "--history", "60").history_s == 60
    assert _config(monkeypatch, "--history-format", "cdx").history_format == "cdx"
    args = build_parser().parse_args(["demo", "--history", "-5"])
    assert args.func(args) == 2
