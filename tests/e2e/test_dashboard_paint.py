"""The dashboard's charts in a real headless Chromium, fed by a plain HTTP server with fixed
``/stats/`` answers: the first paint draws the axes ("no data yet") before any answer, one
sample is drawn (a dot per series), and the threshold axis leaves room for a long label
such as 0.003557 (11 px text: at least ~6 px per character left of the anchor)."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from infra import InfraError
from infra.chromium import ensure_chromium
from streams.worker.web import dashboard_html

#: a digit of the dashboard's 11 px sans-serif axis text is ~6.1 px wide
PX_PER_CHAR = 6.0

STATS = {"worker": "w1", "budget_per_s": 2.0, "emitted_per_s": 1.5, "threshold": 0.003557,
         "all_shards": {"0": {"threshold": 0.003557}, "1": {"threshold": 0.0041}},
         "shards": {}, "counters": {}, "pings": {}, "truth": None}


@pytest.fixture
def server() -> Iterator[tuple[str, dict[str, int]]]:
    state = {"stats_status": 200}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/dashboard/"):
                body, ctype, code = dashboard_html(), "text/html", 200
            elif self.path.startswith("/stats/"):
                code = state["stats_status"]
                body, ctype = json.dumps(STATS).encode(), "application/json"
            else:
                body, ctype, code = b"", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    httpd.shutdown()
    t.join(5)


def _svg(chromium: str, url: str, tmp: Path, ident: str) -> str:
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", f"--user-data-dir={tmp}", "--virtual-time-budget=3000",
         "--dump-dom", url], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = re.search(rf'<svg id="{ident}"[^>]*>(.*?)</svg>', proc.stdout, re.S)
    assert m is not None, proc.stdout[-2000:]
    return m.group(1)


def test_first_paint_and_axis_labels(server: tuple[str, dict[str, int]], tmp_path: Path) -> None:
    try:
        chromium = ensure_chromium()
    except InfraError as exc:
        pytest.fail(f"no chromium for the dashboard test: {exc}", pytrace=False)
    base, state = server
    state["stats_status"] = 500  # no answer yet: the charts still have axes
    for ident in ("chart-threshold", "chart-rate"):
        svg = _svg(chromium, f"{base}/dashboard/?interval_ms=60000", tmp_path / "a", ident)
        assert "no data yet" in svg and "<line" in svg, svg
    state["stats_status"] = 200  # one answer (the poll every 60 s): one sample, drawn
    svg = _svg(chromium, f"{base}/dashboard/?interval_ms=60000", tmp_path / "b",
               "chart-threshold")
    assert svg.count("<circle") == 2, svg  # a dot per shard
    labels = re.findall(r'<text x="([0-9.]+)" y="[0-9.]+" text-anchor="end">([0-9.e+-]+)</text>',
                        svg)
    assert labels, svg
    for x, text in labels:  # anchored at its right end: its width fits left of x
        assert float(x) >= PX_PER_CHAR * len(text), (x, text)
    assert any(text.startswith("0.00") for _, text in labels), labels
