"""``python -m infra.prepare``: fetch and install what the services need, start nothing.

Also Debian's ``chromium`` for the dashboard's browser test and ``kcat`` (librdkafka's
client, the users' producer and consumer in the tests); only the tests need them, so a
failure to install them is reported and does not fail ``make services`` (nor ``make demo``).
"""

from __future__ import annotations

import shutil
import sys

from infra import InfraError, chromium, kafka, redis, stack
from infra.apt import ensure_program


def main() -> int:
    try:
        lib = kafka.ensure_jars(stack.default_cache())
        server = redis.ensure_redis_server()
    except InfraError as exc:
        print(f"infra.prepare: {exc}", file=sys.stderr)
        return 2
    print(f"kafka jars: {lib}\nredis-server: {server}")
    try:
        print(f"chromium: {chromium.ensure_chromium()}")
    except InfraError as exc:
        print(f"chromium: not installed ({exc}); the dashboard's browser test will fail",
              file=sys.stderr)
    try:
        print("kcat: " + ensure_program(
            lambda: shutil.which("kcat"), "kcat",
            "kcat is not on PATH (tests read and write topics with it). Install it: "
            "`sudo apt-get install -y kcat`."))
    except InfraError as exc:
        print(f"kcat: not installed ({exc}); the tests that use it will fail", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
