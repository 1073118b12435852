"""Which ping moves a page's origin: the one ping rule of the simulator and the service.

A ping (change-indicating signal) of a page counts, i.e. adds ``beta_s`` to the page's
effective elapsed time ``tau_eff`` (paper 004 Sec. 3, eq. 1), unless a rule of App. C of
paper 004 discards it:

``"accept"``
    every ping counts (the paper's main model: signals arrive without delay).
``"tdelay"``
    App. C's first rule: a ping arriving within ``T_DELAY`` after the page's last crawl is
    discarded (``received - last_crawl <= t_delay``).
``"strict"``
    App. C's second rule, when the change time is known: a ping announcing a change that
    precedes the last crawl is discarded (``changed < last_crawl``).
``"live"``
    the service's rule: ``strict`` (a ping received before the last crawl also counts as
    announcing an earlier change), then ``tdelay``.  It is what ``recrawl worker`` applies
    (its Lua mirror in :mod:`streams.store.redis_store` is checked against this function in the
    tests).

A page never crawled has ``last_crawl = -inf`` (the service stores 0 and converts): no
rule discards its pings.  An unknown change time is ``nan``.

Verdicts are small integers so that arrays of pings are judged in one call:
:data:`APPLIED`, :data:`BEFORE_CRAWL`, :data:`WITHIN_DELAY`; :data:`VERDICTS` maps them
to the service's counter names.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "APPLIED",
    "BEFORE_CRAWL",
    "PING_RULES",
    "VERDICTS",
    "WITHIN_DELAY",
    "PingRule",
    "ping_ok",
    "ping_verdict",
    "ping_verdicts",
]

PingRule = Literal["accept", "tdelay", "strict", "live"]
PING_RULES: tuple[str, ...] = ("accept", "tdelay", "strict", "live")

APPLIED = 0
BEFORE_CRAWL = 1
WITHIN_DELAY = 2
#: verdict -> the service's counter name (``pings.<name>``)
VERDICTS: tuple[str, ...] = ("applied", "before-crawl", "within-delay")


def ping_verdict(rule: PingRule, t_delay_s: float, last_crawl_s: float, received_s: float,
                 changed_s: float = float("nan")) -> int:
    """The verdict on one ping (module docstring); scalar twin of :func:`ping_verdicts`."""
    if rule == "accept" or last_crawl_s == -np.inf:
        return APPLIED
    if rule in ("strict", "live") and changed_s < last_crawl_s:  # nan: unknown, passes
        return BEFORE_CRAWL
    if rule == "live" and received_s < last_crawl_s:
        return BEFORE_CRAWL
    if rule in ("tdelay", "live") and received_s - last_crawl_s <= t_delay_s:
        return WITHIN_DELAY
    if rule not in PING_RULES:
        raise ValueError(f"rule must be one of {PING_RULES}, got {rule!r}")
    return APPLIED


def ping_verdicts(rule: PingRule, t_delay_s: float, last_crawl_s: npt.ArrayLike,
                  received_s: npt.ArrayLike,
                  changed_s: npt.ArrayLike | None = None) -> npt.NDArray[np.int8]:
    """Verdicts on many pings at once (arrays broadcast; ``changed_s`` None: unknown)."""
    if rule not in PING_RULES:
        raise ValueError(f"rule must be one of {PING_RULES}, got {rule!r}")
    last = np.asarray(last_crawl_s, dtype=np.float64)
    recv = np.asarray(received_s, dtype=np.float64)
    chg = (np.full(np.broadcast(last, recv).shape, np.nan) if changed_s is None
           else np.asarray(changed_s, dtype=np.float64))
    shape = np.broadcast(last, recv, chg).shape
    out = np.zeros(shape, dtype=np.int8)
    if rule == "accept":
        return out
    crawled = last != -np.inf
    with np.errstate(invalid="ignore"):
        if rule in ("tdelay", "live"):
            out[crawled & (recv - last <= t_delay_s)] = WITHIN_DELAY
        if rule in ("strict", "live"):
            before = chg < last  # nan compares False: unknown change time passes
            if rule == "live":
                before = before | (recv < last)
            out[crawled & before] = BEFORE_CRAWL
    return out


def ping_ok(rule: PingRule, t_delay_s: float, last_crawl_s: npt.ArrayLike,
            received_s: npt.ArrayLike,
            changed_s: npt.ArrayLike | None = None) -> npt.NDArray[np.bool_]:
    """``True`` where a ping counts (verdict :data:`APPLIED`)."""
    ok: npt.NDArray[np.bool_] = ping_verdicts(rule, t_delay_s, last_crawl_s, received_s,
                                              changed_s) == APPLIED
    return ok
