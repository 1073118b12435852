"""``python -m infra.prepare``: fetch and install what the services need, start nothing."""

from __future__ import annotations

import sys

from infra import InfraError, kafka, redis, stack


def main() -> int:
    try:
        lib = kafka.ensure_jars(stack.default_cache())
        server = redis.ensure_redis_server()
    except InfraError as exc:
        print(f"infra.prepare: {exc}", file=sys.stderr)
        return 2
    print(f"kafka jars: {lib}\nredis-server: {server}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
