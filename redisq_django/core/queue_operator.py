"""What an operator reads and does on one Redis, handed out by the broker
(``broker.operator``): the lists of a queue, one message, instances, an ordered
consumer's held-back keys, figures of many queues, trends, the server's shortcomings,
and delivering now, releasing a key or purging.

The admin, the management commands and the metrics read Redis through this object
and the broker (docs/layout.md, "the core's seam"), never through the broker's client:
what the core stores, and how, stays the core's. Each method is the core function it
names, with the broker's client, scripts, keys and configuration; errors are those of
that function (redis-py's: the caller decides what an outage means for it).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from redisq_django.core import actions, browse, ordered, trend_sampler, trends
from redisq_django.core.config import CoreConfig
from redisq_django.core.instances import Instance, read_instances
from redisq_django.core.keys import QueueKeys
from redisq_django.core.scripts import Scripts
from redisq_django.core.server import ServerProblem, server_problems, warn_server_problems
from redisq_django.core.stats import QueueStats, read_many
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str


class QueueOperator:
    """An operator's reads and actions on the queues of one broker.

    Args:
        client: the broker's redis-py client.
        scripts: its registered scripts.
        config: its configuration (history on or off, trends on or off).
        keys: builds a queue's keys (``Broker.keys``).
    """

    def __init__(
        self,
        client: RedisClient,
        scripts: Scripts,
        config: CoreConfig,
        keys: Callable[[str], QueueKeys],
    ) -> None:
        self._client = client
        self._scripts = scripts
        self._config = config
        self._keys = keys

    # -- the lists of a queue and of its consumers (core/browse.py) ----------------------

    def log(self, queue: str, cursor: str | None = None, n: int | None = None) -> browse.Page:
        """A page of the queue's log, the newest first."""
        return browse.log(self._client, self._keys(queue), cursor, n)

    def delayed(self, queue: str, cursor: str | None = None, n: int | None = None) -> browse.Page:
        """A page of the queue's delayed messages, the soonest due first."""
        return browse.delayed(self._client, self._keys(queue), cursor, n)

    def waiting(
        self, queue: str, consumer: str, cursor: str | None = None, n: int | None = None
    ) -> browse.Page:
        """A page of what logical consumer ``consumer`` receives next."""
        return browse.waiting(self._client, self._keys(queue).group(consumer), cursor, n)

    def retrying(
        self, queue: str, consumer: str, cursor: str | None = None, n: int | None = None
    ) -> browse.Page:
        """A page of ``consumer``'s failed messages waiting for their next attempt."""
        return browse.retrying(self._client, self._keys(queue).group(consumer), cursor, n)

    def in_flight(
        self, queue: str, consumer: str, cursor: str | None = None, n: int | None = None
    ) -> browse.Page:
        """A page of ``consumer``'s deliveries not yet acknowledged."""
        return browse.in_flight(self._client, self._keys(queue).group(consumer), cursor, n)

    def find(self, queue: str, consumer: str | None, ref: str) -> browse.Entry | None:
        """The entry ``ref`` names, or None when it is gone (``browse.find``).

        Raises:
            ValueError: ``ref`` is not a ref, or needs a ``consumer``.
        """
        return browse.find(self._client, self._keys(queue), consumer, ref)

    def instances(self, queue: str, consumer: str) -> list[Instance]:
        """The instances of logical consumer ``consumer``, by name."""
        return read_instances(self._client, self._keys(queue).group(consumer))

    def held_keys(
        self, queue: str, consumer: str, limit: int = ordered.HELD_LIMIT
    ) -> list[ordered.HeldKey]:
        """The ordering keys of ordered consumer ``consumer`` that hold back later
        messages, most waiting first, at most ``limit`` (``ordered.held_keys``)."""
        return ordered.held_keys(self._client, self._keys(queue).group(consumer), limit)

    # -- figures -----------------------------------------------------------------------

    def stats(self, queues: Sequence[str]) -> list[QueueStats]:
        """The stats of ``queues``, in that order, in two round trips whatever their
        number (``stats.read_many``)."""
        keys = [self._keys(q) for q in queues]
        return read_many(self._client, keys, history=self._config.history)

    def entries_added(self, queues: Sequence[str]) -> dict[str, int]:
        """Messages ever appended to each queue's log, in one round trip (Redis >= 7:
        ``XINFO STREAM``'s ``entries-added``; a queue without a log yet, or an older
        Redis, is left out)."""
        if not queues:
            return {}
        with self._client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.execute_command("XINFO", "STREAM", self._keys(queue).log)
            replies = pipe.execute(raise_on_error=False)
        out: dict[str, int] = {}
        for queue, reply in zip(queues, replies, strict=True):
            if isinstance(reply, Exception):  # no log yet (ERR no such key), or a wrong type
                continue
            added = _as_dict(reply).get("entries-added")
            if added is not None:
                out[queue] = int(added)
        return out

    def trends(self, queues: Sequence[str], minutes: int) -> list[trends.Trend]:
        """The last ``minutes`` minutes of each queue's trends, in one round trip."""
        return trends.read_trends(self._client, [self._keys(q) for q in queues], minutes)

    def sample_trends(self, queues: Sequence[str]) -> None:
        """Sample the queues' backlog figures into this minute's trends (a worker's job)."""
        trends.sample(self._client, [self._keys(q) for q in queues])

    def site_sampler(self) -> trend_sampler.SiteSampler:
        """What a worker ticks to sample every queue's backlog while it holds the lease."""
        return trend_sampler.SiteSampler(self._client, self._config.prefix, self._keys)

    def record_trend_samples(self, read: Sequence[QueueStats]) -> bool:
        """Record the figures just ``read`` as this minute's backlog samples, unless a
        worker samples every queue (``core/trend_sampler.py``); whether they were."""
        return trend_sampler.record(self._client, self._config.prefix, self._keys, read)

    # -- the server --------------------------------------------------------------------

    def ping(self) -> bool:
        """Whether Redis answers a PING.

        Raises:
            redis.RedisError: Redis cannot be reached (or refuses).
        """
        return bool(self._client.ping())

    def server_problems(self) -> list[ServerProblem]:
        """What the Redis server lacks for the guarantees (``core/server.py``).

        Raises:
            redis.RedisError: Redis cannot be reached.
        """
        return server_problems(self._client)

    def warn_server_problems(self) -> list[ServerProblem]:
        """Log each of :meth:`server_problems` as a WARNING; never raises."""
        return warn_server_problems(self._client)

    # -- actions (core/actions.py) -----------------------------------------------------

    def deliver_now(self, queue: str, consumer: str | None, ref: str) -> str | None:
        """Deliver one delayed message (``consumer`` None) or retry of ``consumer`` now.

        Returns:
            Its new entry id, or None when it is no longer waiting.
        """
        return actions.deliver_now(self._client, self._scripts, self._keys(queue), consumer, ref)

    def deliver_waiting(
        self, queue: str, consumer: str | None, ids: Collection[str] | None = None
    ) -> actions.Delivered:
        """Deliver now the queue's delayed messages (``consumer`` None) or ``consumer``'s
        retries: those with these message ids, or all (``ids`` None)."""
        return actions.deliver_waiting(
            self._client, self._scripts, self._keys(queue), consumer, ids
        )

    def release_key(self, queue: str, consumer: str, key: str) -> bool:
        """Free ordering ``key`` of ``consumer`` by hand: its first waiting message goes
        to the consumer's input now and holds it (``ordered.release_key``).

        Returns:
            False when nothing held the key.

        Raises:
            redis.WatchError: the key kept changing through every attempt.
        """
        return ordered.release_key(self._client, self._keys(queue).group(consumer), key)

    def purge_consumer(self, queue: str, consumer: str) -> tuple[int, int]:
        """Skip ``consumer``'s backlog, discard its retries and private input.

        Returns:
            ``(retries removed, private-input entries removed)``.

        Raises:
            redis.ResponseError: NOGROUP when ``consumer`` is not registered.
        """
        return actions.purge_consumer(
            self._client,
            self._scripts,
            self._keys(queue),
            consumer,
            history=self._config.history,
        )


def _as_dict(reply: Any) -> dict[str, Any]:
    # RESP2: a flat [name, value, ...] list; RESP3: a map.
    if isinstance(reply, dict):
        return {to_str(k): v for k, v in reply.items()}
    return {to_str(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}
