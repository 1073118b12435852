"""Installing a Debian package when a program the stack needs is missing (as root only)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable

from infra.errors import MissingToolError

__all__ = ["ensure_program"]


def ensure_program(find: Callable[[], str | None], package: str, how: str) -> str:
    """``find()``'s path; when it finds nothing and this runs as root with apt-get, installs
    Debian's ``package`` first.  ``how``: what to tell a user who must install it."""
    path = find()
    if path:
        return path
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise MissingToolError(how)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update"], ["apt-get", "install", "-y", package]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise MissingToolError(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}{proc.stderr}")
    path = find()
    if not path:
        raise MissingToolError(f"apt-get installed {package} but it is not on PATH")
    return path
