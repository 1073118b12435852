"""A token bucket per name in Redis, shared by every process that uses the same Redis and
key prefix (the IndexNow receivers' per-host request limit).

The rule is the engine's host bucket rule, :func:`models.decision.hosts.refill` (tokens
accrue at ``rate_per_s`` up to ``burst`` since the last use) and
:func:`models.decision.hosts.admit` (one token taken when there is one, no in-flight cap);
:data:`_TOKEN_BUCKET` is its Redis twin, so that the check and the take are one atomic step
for every receiver, and is tested against those two functions on generated inputs
(``tests/integration/test_producers.py``).
"""

from __future__ import annotations

from streams.store.redis_conn import AsyncRedis

__all__ = ["RedisTokenBucket"]

#: One token bucket in a Redis hash ``{tokens, ts}``: refill at ``rate`` up to ``burst``
#: since ``ts``, take one token if there is one.  The clock is Redis's ``TIME`` (one clock
#: for every receiver process), unless ARGV[4] gives the time (tests).  The key expires
#: once the bucket would be full again, so idle hosts cost nothing.
_TOKEN_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now
if ARGV[4] and ARGV[4] ~= '' then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local s = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(s[1])
local ts = tonumber(s[2])
if tokens == nil or ts == nil then
  tokens = burst
  ts = now
end
if now > ts then
  tokens = math.min(burst, tokens + (now - ts) * rate)
  ts = now
end
local ok = 0
if tokens >= 1 then
  tokens = tokens - 1
  ok = 1
end
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens),
           'ts', string.format('%.17g', ts))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]))
return ok
"""


class RedisTokenBucket:
    """A token bucket per host shared by every receiver process: one Lua script per
    request on ``<prefix>:indexnow:{<host>}:rate`` (hash ``tokens``, ``ts``), so the host's
    limit is ``rate_per_s`` (burst ``burst``) whatever the number of receivers behind a
    load balancer.  The time is Redis's clock unless ``allow`` is given one.
    """

    def __init__(
        self, client: AsyncRedis, prefix: str, rate_per_s: float, burst: float
    ) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        self.redis = client
        self.prefix = prefix
        self.rate_per_s = float(rate_per_s)
        self.burst = float(burst)
        self._script = client.register_script(_TOKEN_BUCKET)
        # the key lives until the bucket would be full again (plus a second)
        self._ttl_ms = int(min(self.burst / self.rate_per_s, 86400.0 * 30) * 1000) + 1000

    def key(self, host: str, bucket: str = "") -> str:
        return f"{self.prefix}:indexnow:{{{host.lower()}}}:rate" + (f":{bucket}" if bucket else "")

    async def allow(self, host: str, now_s: float | None = None, bucket: str = "") -> bool:
        """Take one token of ``host``'s bucket (``bucket``: a separate one of the same
        host, e.g. ``"unverified"``); False when empty (answer 429)."""
        args: list[str | int] = [repr(self.rate_per_s), repr(self.burst), self._ttl_ms,
                "" if now_s is None else repr(float(now_s))]  # fmt: skip
        return bool(await self._script(keys=[self.key(host, bucket)], args=args))
