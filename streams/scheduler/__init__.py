"""The scheduler's I/O: per shard (an input partition this worker owns) a decision book
(:class:`models.decision.core.ShardBook`) rebuilt from Redis, and one loop that emits
orders.  What to order is decided in :mod:`models.decision` (pure, time passed in); this
module keeps Redis (Lua), Kafka and the clock.

Loop (twice per ``tick_s``, default 50 ms)
------------------------------------------
The shards of one worker are scheduled as ONE scheduler (paper 004 Sec. 5.2 with the
shares following demand exactly): the credit pacer (:mod:`models.decision.pacer`) accrues
``S`` per second, ``S`` the sum of the local shards' shares, capped at ``S * tick + 1``;
``n = floor(credit)`` orders are chosen by :func:`models.decision.core.choose`: first pages
past the floor (longest interval ``max_interval_s``, earliest due first), then the highest
crawl values among all local shards' pages whose host has room (each shard's crawl index
and never-crawled pages, merged by value: Algorithm 1 of paper 004 over the worker's
pages).  Each order is one Lua script in Redis that checks the page exists and has no
order in flight, takes a token from the host's bucket (and respects max in flight) and
marks the page in flight; only then the order is sent.  In any window of ``L`` seconds a
worker emits at most ``S * (L + tick) + 1`` orders (no spikes), unspent credit is never
banked beyond one tick, and while the loop wakes up at least once per tick the emitted
rate is ``S`` within one order (the pacer's docstring).  Decisions go to an in-memory ring
(:mod:`streams.telemetry.decisions`) for explain.

Budget
------
``R`` and the switches come from ``P:control`` (written by the control agent), read every
0.25 s.  Every 0.25 s each worker publishes its shards' thresholds and weights to Redis and
re-reads everyone's; shares are ``R * w_p / sum w`` (:mod:`models.decision.budget`).  All shards
of a worker publish the worker's threshold (an EWMA of the log-values it ordered), so their
weights move together and the controller only splits R between workers.  A worker whose
share gave it no credit in an interval publishes the value it would order at now (its best
page) when that is higher: otherwise its stale threshold would hold its share at nothing
while its pages' values grow (measured with per-shard picks: a 1-host shard's weight fell
to the 1e-3 clamp within 8 s and stayed there, its 20 of 100 pages never crawled again).
"""

from __future__ import annotations

from streams.scheduler.core import (
    EWMA_S,
    RATE_WINDOW_S,
    BatchSink,
    OrderSink,
    Scheduler,
    cancel,
    dumps,
)
from streams.scheduler.heartbeat import (
    HEARTBEAT_S,
    LOOP_HUNG_S,
    LOOP_STALL_S,
    RESPLIT_S,
    SHARD_ALIVE_S,
    Heartbeat,
)
from streams.scheduler.shard import KEEP, NOT_IN_FLIGHT, Control, Shard

__all__ = [
    "EWMA_S",
    "HEARTBEAT_S",
    "KEEP",
    "LOOP_HUNG_S",
    "LOOP_STALL_S",
    "NOT_IN_FLIGHT",
    "RATE_WINDOW_S",
    "RESPLIT_S",
    "SHARD_ALIVE_S",
    "BatchSink",
    "Control",
    "Heartbeat",
    "OrderSink",
    "Scheduler",
    "Shard",
    "cancel",
    "dumps",
]
