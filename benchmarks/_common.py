"""What several benchmarks share: events shaped like Faust's (the agents' logic driven
without a broker) and Redis's listpack setting for page hashes."""

from __future__ import annotations

from dataclasses import dataclass

from streams.store.redis_store import Store

__all__ = ["Ev", "Msg", "set_listpack_value"]


@dataclass
class Msg:
    value: bytes
    key: bytes
    topic: str
    partition: int
    offset: int


@dataclass
class Ev:
    message: Msg


async def set_listpack_value(redis_url: str, value: int | None) -> None:
    """Records of crawled pages are ~200 B: above Redis's default of 64 B a hash is a
    hashtable (docs/benchmarks.md "Design decisions": the config recrawl's Redis
    should run with).  None or 0: leave Redis as it is."""
    if not value:
        return
    cfg = Store.from_url(redis_url, "cfg")
    await cfg.redis.config_set("hash-max-listpack-value", value)
    print(f"hash-max-listpack-value set to {value}")
    await cfg.close()
