"""The root of the service's own exceptions: ``except RecrawlError`` catches every error
recrawl raises on purpose (a refused input, an unreachable dependency it reports), and
nothing else (a bug stays a bug)."""

from __future__ import annotations

__all__ = ["RecrawlError"]


class RecrawlError(Exception):
    """Base class of every exception recrawl raises on purpose."""
