"""Per-page state in Redis.

Keys carry a ``{host}`` hash tag, so one host's keys live in one Redis Cluster slot:
``<prefix>:{<host>}:page:<url>``.  Each event's change is one atomic server-side step
(a Lua script) that also records the input offset per partition, so a redelivered event
(Faust is at-least-once) changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis.asyncio as aioredis

if TYPE_CHECKING:
    from streams.records import PageEvent

# KEYS[1] = page hash, KEYS[2] = offsets hash (per topic, host-tagged)
# ARGV[1] = partition field, ARGV[2] = offset, ARGV[3] = deleted (0/1), ARGV[4..] = field/values
_APPLY_PAGE = """
local last = redis.call('HGET', KEYS[2], ARGV[1])
if last and tonumber(last) >= tonumber(ARGV[2]) then return 0 end
if ARGV[3] == '1' then
  redis.call('DEL', KEYS[1])
else
  for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
"""


class Store:
    def __init__(self, client: aioredis.Redis, prefix: str) -> None:
        self.redis = client
        self.prefix = prefix
        self._apply_page = client.register_script(_APPLY_PAGE)

    @classmethod
    def from_url(cls, url: str, prefix: str) -> Store:
        return cls(aioredis.from_url(url, decode_responses=True), prefix)

    def page_key(self, host: str, url: str) -> str:
        return f"{self.prefix}:{{{host}}}:page:{url}"

    def offsets_key(self, host: str, topic: str) -> str:
        return f"{self.prefix}:{{{host}}}:offsets:{topic}"

    async def apply_page(self, page: PageEvent, topic: str, partition: int, offset: int) -> bool:
        """Apply a page event once; returns False when it was already applied."""
        fields: list[str] = ["url", page.url, "importance", repr(page.importance)]
        if page.change_rate_per_s is not None:
            fields += ["prior_change_rate_per_s", repr(page.change_rate_per_s)]
        done = await self._apply_page(
            keys=[self.page_key(page.host, page.url), self.offsets_key(page.host, topic)],
            args=[str(partition), str(offset), "1" if page.deleted else "0", *fields],
        )
        return bool(done)

    async def get_page(self, host: str, url: str) -> dict[str, str]:
        return dict(await self.redis.hgetall(self.page_key(host, url)))  # type: ignore[arg-type]
