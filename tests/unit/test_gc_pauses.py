"""The worker's garbage-collector policy (:class:`streams.telemetry.metrics.GcPauses`): what
is alive at a refreeze is skipped by later collections, and a cycle frozen then dropped
is freed at the next refreeze (nothing leaks for longer than one)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from streams.telemetry.metrics import GcPauses


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


def test_refreeze_skips_what_is_alive_and_frees_dead_frozen_cycles() -> None:
    pauses = GcPauses()
    pauses.install()
    try:
        node = _Node()
        ref = weakref.ref(node)
        pauses.refreeze()
        assert gc.get_freeze_count() > 0 and pauses.refreezes == 1
        del node
        gc.collect()
        assert ref() is not None  # frozen: the collector does not look at it
        pauses.refreeze()
        assert ref() is None  # the refreeze's own collection freed it
        summary = pauses.summary()
        # the count of the last refreeze, kept: /stats does not walk the frozen objects
        assert summary["frozen_objects"] == gc.get_freeze_count() > 0
        assert summary["refreezes"]["count"] == 2
        assert summary["gen2"]["collections"] >= 3  # timed through gc.callbacks
        assert summary["gen2"]["max_s"] <= summary["gen2"]["seconds"]
    finally:
        gc.unfreeze()
        gc.callbacks.remove(pauses._callback)


def test_a_long_full_collection_asks_for_a_freeze(monkeypatch: Any) -> None:
    """A full collection over :data:`FREEZE_AFTER_S` sets ``wants_freeze``; a freeze (no
    collection) clears it and takes what is alive out of the next collections' walk."""
    from streams.telemetry import metrics

    pauses = GcPauses()
    pauses.install()
    try:
        gc.collect(0)
        assert not pauses.wants_freeze  # young collections do not count
        monkeypatch.setattr(metrics, "FREEZE_AFTER_S", float("inf"))
        gc.collect()
        assert not pauses.wants_freeze
        monkeypatch.setattr(metrics, "FREEZE_AFTER_S", 0.0)
        gc.collect()
        assert pauses.wants_freeze
        before = gc.get_freeze_count()
        pauses.freeze()
        assert not pauses.wants_freeze and pauses.freezes == 1
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
        gc.callbacks.remove(pauses._callback)


def test_worker_app_sets_the_collectors_first_threshold_with_gc_freeze_only() -> None:
    """``create_app`` sets ``gc_gen0_threshold`` as the collector's first threshold when
    the worker manages the collector (``gc_freeze``), and leaves the interpreter's
    thresholds alone when it does not."""
    from streams.settings import Settings
    from streams.worker.app import create_app

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        create_app(Settings(gc_gen0_threshold=12_345))
        assert gc.get_threshold() == (12_345, 10, 10)
        gc.set_threshold(700, 10, 10)
        create_app(Settings(gc_freeze=False, gc_gen0_threshold=555))
        assert gc.get_threshold() == (700, 10, 10)
        assert Settings().gc_gen0_threshold == 20_000
    finally:
        gc.set_threshold(*before)
