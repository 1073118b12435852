"""Liveness of a worker's shards in ``P:sched:shards``: the heartbeat thread and the
times it works to (on Redis's clock, not the workers')."""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from typing import Any

from streams.store.redis_conn import connect_sync

__all__ = ["HEARTBEAT_S", "LOOP_HUNG_S", "LOOP_STALL_S", "RESPLIT_S", "SHARD_ALIVE_S",
           "Heartbeat"]

log = logging.getLogger(__name__)

#: a shard entry older than this (on Redis's clock) is a dead worker's: its share is spent
#: by the live shards.  Entries are re-stamped every ``HEARTBEAT_S`` by a thread of their
#: worker (:class:`Heartbeat`) that the event loop's stalls (a shard rebuild, a large agent
#: batch) do not hold, so a live worker is never this late, and a killed one's share goes
#: to the others about 1 s after its death.  Four heartbeats: a stamp written by the
#: event loop instead could be held back seconds by a stall, so the bound would have to
#: be seconds long and a killed worker's share would be lost for that long.
SHARD_ALIVE_S = 0.8
#: how often a worker re-reads every shard's entry and re-splits R (and publishes its own)
RESPLIT_S = 0.25
#: how often the heartbeat thread re-stamps this worker's shard entries (Redis's ``TIME``)
HEARTBEAT_S = 0.2
#: a scheduler loop that made no progress for this long is stalled (a rebuild or a large
#: agent batch holding the event loop): the heartbeat publishes its shards as not ready, so
#: the others spend its share meanwhile; once the loop runs again its shards spend from its
#: second resplit (the others shrink first)
LOOP_STALL_S = 0.5
#: a loop that made no progress for this long is hung: its heartbeat stops (entries age)
LOOP_HUNG_S = 10.0


class Heartbeat:
    """This worker's shard entries in ``P:sched:shards``, written from a thread of their
    own: every ``period_s`` (and at once after :meth:`publish`) the thread reads Redis's
    ``TIME`` and writes the entries the loop last published with that ``ts``.  The loop's
    stalls do not delay it (the thread needs only the GIL, which CPython hands over every
    5 ms), so the liveness window can be short.  A loop that made no progress for
    ``stall_s`` (:meth:`loop_alive` not called) is stalled: its entries are written with
    ``ready`` false (weight 0: the others spend its share) and :attr:`stalled_flag` is set
    for the loop to see; after ``hung_s`` it is hung, and its entries are left to age.
    The only writer of the entries while it runs (no older copy overwrites a newer)."""

    def __init__(self, redis_url: str, key: str, *, period_s: float = HEARTBEAT_S,
                 stall_s: float = LOOP_STALL_S, hung_s: float = LOOP_HUNG_S) -> None:
        self.redis_url = redis_url
        self.key = key
        self.period_s = period_s
        self.stall_s = stall_s
        self.hung_s = hung_s
        #: set when entries went out as stalled; the loop clears it (:meth:`take_stalled`)
        self.stalled_flag = False
        self._entries: dict[int, dict[str, Any]] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._loop_mono = time.monotonic()
        self._thread: threading.Thread | None = None
        #: beats written, failed writes, and the longest time between two writes (s)
        self.beats = 0
        self.failures = 0
        self.max_gap_s = 0.0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def publish(self, entries: dict[int, dict[str, Any]]) -> None:
        """The entries to stamp from now on (a new dict: the thread reads it unlocked)."""
        self._entries = dict(entries)
        self._wake.set()

    def drop(self, partitions: set[int]) -> None:
        """Stop stamping these (revoked) shards' entries: they age and drop out."""
        if partitions & set(self._entries):
            self._entries = {p: e for p, e in self._entries.items() if p not in partitions}

    def loop_alive(self) -> None:
        self._loop_mono = time.monotonic()

    def take_stalled(self) -> bool:
        """Whether entries went out as stalled since the last call (then cleared)."""
        was, self.stalled_flag = self.stalled_flag, False
        return was

    def start(self) -> None:
        if self.running:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="recrawl-heartbeat",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop beating (a worker that stops: its entries age and its share moves)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        r = None
        last = time.monotonic()
        while not self._stop.is_set():
            self._wake.wait(self.period_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            entries = self._entries
            idle = time.monotonic() - self._loop_mono
            if not entries or idle > self.hung_s:
                continue
            stalled = idle > self.stall_s
            if stalled:
                self.stalled_flag = True
                entries = {p: {**e, "ready": False, "stalled": True}
                           for p, e in entries.items()}
            try:
                if r is None:
                    # a connection that hangs must not hold the beats: time out, retry
                    r = connect_sync(self.redis_url, decode_responses=True,
                                     socket_timeout=2.0, socket_connect_timeout=2.0)
                sec, usec = r.time()
                ts = float(sec) + float(usec) / 1e6
                r.hset(self.key, mapping={str(p): json.dumps({**e, "ts": ts})
                                          for p, e in entries.items()})
            except Exception as exc:  # Redis away: try again (the entries age meanwhile)
                self.failures += 1
                log.warning("heartbeat failed (%r)", exc)
                r = None
                self._stop.wait(self.period_s)
                continue
            self.beats += 1
            mono = time.monotonic()
            self.max_gap_s = max(self.max_gap_s, mono - last)
            last = mono
        if r is not None:
            with contextlib.suppress(Exception):
                r.close()


