"""Settings sources: RECRAWL_CONFIG is read when settings are built."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.settings import Settings


def test_config_file_named_after_import_is_read(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RECRAWL_BUDGET_PER_S", raising=False)
    monkeypatch.delenv("RECRAWL_TICK_S", raising=False)
    cfg = tmp_path / "recrawl.toml"
    cfg.write_text("budget_per_s = 7.5\ntick_s = 0.3\n")
    monkeypatch.setenv("RECRAWL_CONFIG", str(cfg))
    s = Settings()
    assert (s.budget_per_s, s.tick_s) == (7.5, 0.3)
    monkeypatch.setenv("RECRAWL_TICK_S", "0.2")  # the environment wins over the file
    assert Settings().tick_s == 0.2
    assert Settings(tick_s=0.1).tick_s == 0.1  # and arguments over both
    monkeypatch.delenv("RECRAWL_CONFIG")
    assert Settings().budget_per_s != 7.5


def test_the_fetch_size_per_partition_is_in_the_apps_options(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``RECRAWL_FETCH_PARTITION_BYTES`` is the Faust app's ``consumer_max_fetch_size``
    (8 MiB unless set; Faust's own default is 1 MiB; that Faust hands it to aiokafka:
    tests/integration/test_batch_consumer.py)."""
    from streams.worker.app import app_options

    assert Settings().fetch_partition_bytes == 8 * 1024**2
    monkeypatch.setenv("RECRAWL_FETCH_PARTITION_BYTES", str(3 * 1024**2))
    s = Settings(data_dir=tmp_path, web_enabled=False)
    assert s.fetch_partition_bytes == 3 * 1024**2
    assert app_options(s)["consumer_max_fetch_size"] == 3 * 1024**2
    with pytest.raises(ValueError, match="fetch_partition_bytes"):
        Settings(fetch_partition_bytes=1000)


def test_a_setting_no_longer_used_is_said_so(monkeypatch: pytest.MonkeyPatch,
                                             caplog: pytest.LogCaptureFixture) -> None:
    from streams.settings import load_settings

    monkeypatch.setenv("RECRAWL_PING_DEDUP_WINDOW_S", "3600")
    with caplog.at_level("WARNING", logger="streams.settings"):
        s = load_settings()
    assert s.ping_dedup_window_s == 3600.0
    assert "RECRAWL_PING_DEDUP_WINDOW_S no longer used" in caplog.text
    monkeypatch.delenv("RECRAWL_PING_DEDUP_WINDOW_S")
    caplog.clear()
    with caplog.at_level("WARNING", logger="streams.settings"):
        load_settings()
    assert "no longer used" not in caplog.text


def test_malloc_thresholds_are_fixed_on_glibc_and_left_alone_at_zero() -> None:
    import ctypes.util
    import platform

    from streams.commands.worker import fix_malloc_thresholds

    assert Settings().malloc_mmap_threshold == 1024**2
    assert fix_malloc_thresholds(0) is False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc only")
    assert ctypes.util.find_library("c")
    assert fix_malloc_thresholds(1024**2) is True
