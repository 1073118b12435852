"""Flags for the settings (:class:`streams.settings.Settings`), generated from the model.

``recrawl worker`` takes a flag for every setting; the commands that talk to Kafka or Redis
take the flags of :data:`CLIENT_SETTINGS`.  A flag wins over its ``RECRAWL_*`` environment
variable, which wins over the ``RECRAWL_CONFIG`` file; each flag's help names its
variable and its default.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["CLIENT_SETTINGS", "add_settings_args", "settings_from_args"]

#: the settings of a command that sends to Kafka or reads Redis
CLIENT_SETTINGS = ("kafka_bootstrap", "redis_url", "topic_prefix", "key_prefix",
                   "connect_timeout_s")

_PREFIX = "setting_"


def add_settings_args(p: argparse.ArgumentParser, names: Iterable[str] | None = None,
                      title: str = "settings") -> None:
    """Add ``--config`` and a flag per setting in ``names`` (default: all of them)."""
    from streams.settings import UNUSED_SETTINGS, Settings, _default_text, env_name

    g = p.add_argument_group(
        title, "each flag wins over its RECRAWL_* environment variable, which wins over "
        "the RECRAWL_CONFIG file (TOML); docs/operating.md lists them all")
    g.add_argument("--config", metavar="FILE",
                   help="TOML file of settings (name = value); default $RECRAWL_CONFIG")
    fields = Settings.model_fields
    for name in names if names is not None else fields:
        if name in UNUSED_SETTINGS:
            continue
        field = fields[name]
        doc = " ".join((field.description or "").split()).replace("``", "")
        doc = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", doc)  # reST roles: their text
        first = doc.split(". ")[0].rstrip(".")
        help_text = (f"{first} [{env_name(name)}; default {_default_text(name)}]"
                     .replace("%", "%%"))
        flag = f"--{name.replace('_', '-')}"
        if field.annotation is bool:
            g.add_argument(flag, dest=_PREFIX + name, default=None,
                           action=argparse.BooleanOptionalAction, help=help_text)
        else:
            g.add_argument(flag, dest=_PREFIX + name, default=None, metavar="VALUE",
                           help=help_text)


def settings_from_args(args: argparse.Namespace, **extra: Any):  # type: ignore[no-untyped-def]
    """The settings with the flags given in ``args`` (and ``extra``) on top."""
    from streams.settings import load_settings

    config = getattr(args, "config", None)
    if config is not None:
        os.environ["RECRAWL_CONFIG"] = config
    overrides = {k[len(_PREFIX):]: v for k, v in vars(args).items()
                 if k.startswith(_PREFIX) and v is not None}
    return load_settings(**{**overrides, **extra})
