"""The worker's split of its time between waiting for Kafka and handling what came
(``/stats/`` ``consumer``, ``/metrics/``): each handler's seconds are counted by topic, also
for a batch whose handler raises."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import pytest

from streams.telemetry.metrics import Metrics
from streams.worker.agents import _counted


def test_each_batch_counts_its_handlers_seconds_even_when_it_raises() -> None:
    m = Metrics()

    async def slow(events: Sequence[Any]) -> None:
        time.sleep(0.02)
        if not events:
            raise RuntimeError("boom")

    handler = _counted(slow, "pings", m)
    asyncio.run(handler([1]))
    with pytest.raises(RuntimeError):
        asyncio.run(handler([]))
    assert m.tally["batches.pings"] == 2
    assert m.seconds["handle.pings"] >= 0.04
    m.waited(0.5)
    m.waited(0.25)
    assert m.seconds["wait"] == 0.75
    text = m.exposition().decode()
    assert "recrawl_consumer_wait_seconds_total 0.75" in text
    assert 'recrawl_handler_seconds_total{topic="pings"}' in text
