"""``GET /plan`` of a real ``recrawl worker`` and ``recrawl plan`` (the command) against the
same real Kafka and Redis: both give the continuous optimum of eq. 5 of paper 004 (the
pages have priors only), computed independently here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from kafka_io import produce_json, wait_for
from test_plan import eq5_by_hand
from test_scheduler import free_port, get
from worker_process import settings_env

from streams.settings import Settings
from streams.store.redis_conn import connect_sync as connect_redis_sync

pytestmark = pytest.mark.integration


def test_plan_endpoint_and_command_agree_with_eq5(settings: Settings, start_worker,
                                                  tmp_path: Path) -> None:
    port = free_port()
    start_worker(settings, {"RECRAWL_BUDGET_PER_S": "0.05", "RECRAWL_WEB_ENABLED": "true",
                            "RECRAWL_WEB_PORT": str(port)})
    pages = [(f"h{i % 5}.org", f"https://h{i % 5}.org/{i}", 1.0 + i % 4, 1 / (600.0 * (1 + i)))
             for i in range(30)]
    produce_json(settings, "pages", [(h, {"url": u, "importance": imp, "change_rate_per_s": d})
                                     for h, u, imp, d in pages])
    r = connect_redis_sync(settings.redis_url, decode_responses=True)

    def applied() -> bool:
        return sum(int(r.hlen(f"{settings.key_prefix}:{{h{i}.org}}:pages")) for i in range(5)) == 30

    wait_for(applied, 30, "pages applied")
    # the page record keeps importance and prior change rate as float32
    # (streams/store/page_record.py,
    # PAGE_FORMAT): eq. 5 by hand on what is stored, to the solver's precision
    mu = [float(np.float32(p[2])) for p in pages]
    delta = [float(np.float32(p[3])) for p in pages]

    web = get(port, "/plan?budget=0.01&budget=0.2")
    assert get(port, "/plan/?budget=0.2,0.01") == web
    assert web["pages"] == 30 and web["pages_estimated"] == 0
    assert [row["budget_per_s"] for row in web["rows"]] == [0.01, 0.05, 0.2]
    # no control event yet: the operating point is the budget the worker was started with
    assert web["current"]["budget_per_s"] == 0.05
    assert web["budget_source"].startswith("the live workers")
    for row in web["rows"]:
        acc, lam = eq5_by_hand(mu, delta, row["budget_per_s"])
        assert row["optimum_accuracy"] == pytest.approx(acc, rel=1e-9)
        assert row["multiplier"] == pytest.approx(lam, rel=1e-7)

    out_json, png = tmp_path / "plan.json", tmp_path / "plan.png"
    cli = subprocess.run([sys.executable, "-m", "streams.cli", "plan", "--budget", "0.01", "0.2",
                          "--json", str(out_json), "--png", str(png)],
                         env={**settings_env(settings), "COLUMNS": "120"}, capture_output=True,
                         text=True, timeout=120, check=True)
    assert json.loads(out_json.read_text()) == web
    assert "<- current" in cli.stdout and f"{web['current']['accuracy']:.3f}" in cli.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000

    import urllib.error
    with pytest.raises(urllib.error.HTTPError) as bad:
        get(port, "/plan?budget=-1")
    assert bad.value.code == 400
