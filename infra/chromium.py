"""Debian's ``chromium`` for the dashboard's browser test (tests/integration/test_dashboard.py):
a real headless browser loads ``/dashboard/`` of a real worker."""

from __future__ import annotations

import os
import shutil
import subprocess

from infra.errors import MissingToolError

NAMES = ("chromium", "chromium-browser")


def find_chromium() -> str | None:
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def ensure_chromium() -> str:
    """Path of ``chromium``; installs Debian's package when missing and running as root."""
    path = find_chromium()
    if path:
        return path
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise MissingToolError(
            "chromium is not on PATH (the dashboard's browser test needs it). Install it: "
            "`sudo apt-get install -y chromium` (Debian) or `chromium-browser` (Ubuntu)."
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise MissingToolError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr}")
    path = find_chromium()
    if not path:
        raise MissingToolError("apt-get installed chromium but it is not on PATH")
    return path
