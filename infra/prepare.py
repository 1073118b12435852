"""``python -m infra.prepare``: fetch and install what the services need, start nothing.

Also Debian's ``chromium`` for the dashboard's browser test; only the tests need it, so a
failure to install it is reported and does not fail ``make services`` (nor ``make demo``).
"""

from __future__ import annotations

import sys

from infra import InfraError, chromium, kafka, redis, stack


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
