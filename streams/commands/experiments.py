"""``recrawl experiments NAME``: the papers' experiments and ours (see docs/results.md)."""

from __future__ import annotations

import argparse
import importlib

__all__ = ["EXPERIMENTS", "register", "run"]

#: experiment name -> module with ``main(argv) -> int`` taking the name as first argument.
EXPERIMENTS: dict[str, str] = {
    "app-e": "experiments.estimation",
    "paper003": "experiments.estimation",
    # simulator experiments of paper 004 Sec. 6 and the peers comparison
    **{name: "experiments.papers" for name in (
        "fig3", "fig4", "fig6", "fig8", "fig11", "fig12", "peers", "est")},
    **{name: "experiments.beyond" for name in ("uncertainty", "sources", "floor")},
    # replay of a recorded change history (docs/results.md, "Real change histories")
    "trace": "experiments.trace",
}


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("experiments", help="run an experiment: " + ", ".join(EXPERIMENTS))
    p.add_argument("name", choices=sorted(EXPERIMENTS))
    p.add_argument("rest", nargs=argparse.REMAINDER, help="options of the experiment")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(EXPERIMENTS[args.name])
    return int(module.main([args.name, *args.rest]))
