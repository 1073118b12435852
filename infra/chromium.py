"""Debian's ``chromium`` for the dashboard's browser test (tests/e2e/test_dashboard.py):
a real headless browser loads ``/dashboard/`` of a real worker."""

from __future__ import annotations

import asyncio
import base64
import re
import shutil
import sys
import tempfile
from pathlib import Path

from infra.apt import ensure_program
from infra.errors import MissingToolError

NAMES = ("chromium", "chromium-browser")


def find_chromium() -> str | None:
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def ensure_chromium() -> str:
    """Path of ``chromium``; installs Debian's package when missing and running as root."""
    return ensure_program(
        find_chromium, "chromium",
        "chromium is not on PATH (the dashboard's browser test needs it). Install it: "
        "`sudo apt-get install -y chromium` (Debian) or `chromium-browser` (Ubuntu).")


HEADLESS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run")


def screenshot(url: str, png: Path, *, wait_s: float, width: int = 1400,
               height: int = 1300) -> None:
    """Load ``url`` in headless chromium, let it run ``wait_s`` real seconds (a page that
    keeps history while it polls, like ``/dashboard/``), and save a PNG of the page.

    ``--screenshot`` with ``--virtual-time-budget`` runs timers in virtual time, which a
    chart of the last minutes cannot show; this drives the browser over the DevTools
    protocol on loopback instead (``Page.captureScreenshot``)."""
    asyncio.run(_screenshot(url, png, wait_s, width, height))


async def _screenshot(url: str, png: Path, wait_s: float, width: int, height: int) -> None:
    import aiohttp

    with tempfile.TemporaryDirectory() as profile:
        proc = await asyncio.create_subprocess_exec(
            ensure_chromium(), *HEADLESS, "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0", f"--user-data-dir={profile}",
            f"--window-size={width},{height}", url,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        try:
            assert proc.stderr is not None
            port = None
            while port is None:
                line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
                if not line:
                    raise MissingToolError("chromium exited before its DevTools port was open")
                m = re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line)
                port = int(m.group(1)) if m else None
            await asyncio.sleep(wait_s)
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
                    pages = [t for t in await resp.json() if t.get("type") == "page"]
                async with http.ws_connect(pages[0]["webSocketDebuggerUrl"],
                                           max_msg_size=0) as ws:
                    await ws.send_json({"id": 1, "method": "Page.captureScreenshot",
                                        "params": {"format": "png"}})
                    async for msg in ws:
                        data = msg.json()
                        if data.get("id") == 1:
                            png.write_bytes(base64.b64decode(data["result"]["data"]))
                            break
        finally:
            proc.kill()
            await proc.wait()


def main(argv: list[str] | None = None) -> int:
    """``python -m infra.chromium screenshot URL PNG --wait SECONDS``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m infra.chromium")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("screenshot", help="a PNG of a page after it ran for --wait seconds")
    s.add_argument("url")
    s.add_argument("png", type=Path)
    s.add_argument("--wait", type=float, default=60.0)
    s.add_argument("--width", type=int, default=1400)
    s.add_argument("--height", type=int, default=1300)
    args = p.parse_args(argv)
    screenshot(args.url, args.png, wait_s=args.wait, width=args.width, height=args.height)
    print(f"{args.png}: {args.png.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
