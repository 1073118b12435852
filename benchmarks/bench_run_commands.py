"""Client CPU per command of a store batch: ``run_commands`` (the replies read straight off
the connection's hiredis reader) against redis-py's ``pipeline(transaction=False)``, the same
commands on the same client, alternated.

    .venv/bin/python benchmarks/bench_run_commands.py --redis redis://127.0.0.1:6399/0

Batches of ``--batch`` commands (``SET`` of a 50-byte value, or ``EVALSHA`` of a script
that returns its two arguments, the shape of the store's script calls) on the store's batch
client (decoded replies, ``surrogateescape``).  This process's CPU time apart from the wall
time: Redis runs on the same cores.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Sequence
from typing import Any

from streams.store.redis_conn import connect, run_commands


async def main(args: argparse.Namespace) -> None:
    client: Any = connect(args.redis, decode_responses=True, encoding_errors="surrogateescape",
                          socket_timeout=None)
    k = f"bench-rc:{uuid.uuid4().hex[:8]}"
    sha = await client.script_load("return {ARGV[1], ARGV[2]}")
    kinds: dict[str, list[tuple[Any, ...]]] = {
        "SET": [("SET", f"{k}:{i}", "x" * 50) for i in range(args.batch)],
        "EVALSHA": [("EVALSHA", sha, 1, f"{k}:{i}", "applied", "x" * 50)
                    for i in range(args.batch)],
    }

    async def pipeline(commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for c in commands:
            pipe.execute_command(*c)
        return list(await pipe.execute(raise_on_error=False))

    async def raw(commands: Sequence[tuple[Any, ...]]) -> list[Any]:
        return await run_commands(client, commands)

    for kind, commands in kinds.items():
        await raw(commands)
        await pipeline(commands)
        for label, fn in (("run_commands", raw), ("pipeline", pipeline)) * args.rounds:
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(args.batches):
                await fn(commands)
            dt, cpu = time.perf_counter() - t0, time.process_time() - c0
            n = args.batches * len(commands)
            print(f"{kind:8s} {label:12s} {n} commands: wall {1e6 * dt / n:5.2f} us, "
                  f"this process's CPU {1e6 * cpu / n:5.2f} us each")
    keys = [f"{k}:{i}" for i in range(args.batch)]
    await client.delete(*keys)
    await client.aclose()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    asyncio.run(main(ap.parse_args()))
