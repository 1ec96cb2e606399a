"""The schedules' records in Redis: Redis's clock, and per schedule name the latest tick
claimed (``schedule_claim.lua``) and the latest tick sent (``core.keys.schedule_keys``).

The broker hands it out (``broker.schedule_ledger``); the schedules' evaluation and
listing read and write these records through it, not through the broker's client.
"""

from __future__ import annotations

from collections.abc import Iterable

from redisq_django.core.errors import translate_errors
from redisq_django.core.keys import schedule_keys
from redisq_django.core.scripts import Scripts
from redisq_django.core.types import RedisClient


class ScheduleLedger:
    """The claimed and sent ticks of every schedule of one Redis.

    Args:
        client: the broker's redis-py client.
        scripts: its registered scripts.
        prefix: the keys' prefix (``CoreConfig.prefix``).
    """

    def __init__(self, client: RedisClient, scripts: Scripts, prefix: str) -> None:
        # ``client``: the attribute translate_errors reads to say where Redis is.
        self.client = client
        self._scripts = scripts
        self.keys = schedule_keys(prefix)

    @translate_errors
    def redis_time(self) -> int:
        """Redis's clock (``TIME``), ms since the epoch; on a cluster, any node's.

        Raises:
            RedisUnavailable: Redis cannot be reached.
        """
        reply = self.client.time()
        if isinstance(reply, dict):  # RedisCluster answers per node: any one will do
            reply = next(iter(reply.values()))
        seconds, micros = reply
        return int(seconds) * 1000 + int(micros) // 1000

    @translate_errors
    def ticks(self, names: Iterable[str]) -> dict[str, tuple[int, int]]:
        """The latest claimed and sent tick of each schedule (0: none), in one round trip.

        Raises:
            RedisUnavailable: Redis cannot be reached.
        """
        names = list(names)
        if not names:
            return {}
        pipe = self.client.pipeline(transaction=False)
        pipe.zmscore(self.keys.claimed, names)
        pipe.zmscore(self.keys.sent, names)
        claimed, sent = pipe.execute()
        return {n: (int(c or 0), int(s or 0)) for n, c, s in zip(names, claimed, sent, strict=True)}

    @translate_errors
    def claim(self, name: str, tick: int) -> tuple[bool | None, int]:
        """Claim ``tick`` of schedule ``name`` (``schedule_claim.lua``).

        Returns:
            (True: the caller publishes it, False: claimed already, None: not due yet by
            Redis's clock), and Redis's clock (ms) as the script read it.

        Raises:
            RedisUnavailable: Redis cannot be reached.
        """
        answer, redis_now = self._scripts("schedule_claim", [self.keys.claimed], [name, tick])
        answer = int(answer)
        return (None if answer < 0 else bool(answer)), int(redis_now)

    @translate_errors
    def mark_sent(self, name: str, tick: int) -> None:
        """Record that ``tick`` of schedule ``name`` went out (only ever forwards)."""
        self.client.zadd(self.keys.sent, {name: tick}, gt=True)
