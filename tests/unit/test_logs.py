"""The repeat filter of library log lines (:mod:`streams.telemetry.logs`)."""

from __future__ import annotations

import logging

import pytest

from streams.telemetry.logs import RepeatFilter, quiet_library_logs


def record(msg: str, *args: object, name: str = "aiokafka.client",
           level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


def test_one_line_per_kind_per_window_then_the_count() -> None:
    now = [0.0]
    f = RepeatFilter(10.0, clock=lambda: now[0])
    first = record("Unable connect to node with id %s: %s", 1, "refused")
    assert f.filter(first)
    assert first.getMessage() == "Unable connect to node with id 1: refused"
    for i in range(500):
        now[0] = i * 0.01
        assert not f.filter(record("Unable connect to node with id %s: %s", 1, "refused"))
    # another kind (format string, level or logger) is not held back by the first
    assert f.filter(record("Unable to update metadata from %s", [1]))
    assert f.filter(record("Unable connect to node with id %s: %s", 1, "x",
                           level=logging.WARNING))
    assert f.filter(record("Unable connect to node with id %s: %s", 1, "x",
                           name="aiokafka.conn"))
    now[0] = 10.5
    nxt = record("Unable connect to node with id %s: %s", 2, "refused")
    assert f.filter(nxt)
    assert nxt.getMessage() == ("Unable connect to node with id 2: refused "
                                "(and 500 more like it in the last 10 s)")
    assert f.dropped == 500
    # nothing dropped in the next window: the next line carries no count
    now[0] = 21.0
    again = record("Unable connect to node with id %s: %s", 2, "refused")
    assert f.filter(again)
    assert again.getMessage() == "Unable connect to node with id 2: refused"


def test_installed_once_on_the_library_loggers() -> None:
    logging.getLogger("aiokafka.producer.sender")  # a library module's logger exists
    logging.getLogger("aiokafkax")  # another library whose name starts the same

    a = quiet_library_logs(10.0)
    b = quiet_library_logs(5.0)
    assert a is b and a.window_s == 5.0
    for name in ("aiokafka", "aiokafka.producer.sender"):
        assert logging.getLogger(name).filters.count(a) == 1
    for name in ("streams", "aiokafkax"):
        assert a not in logging.getLogger(name).filters
    with pytest.raises(ValueError, match="positive"):
        RepeatFilter(0.0)
