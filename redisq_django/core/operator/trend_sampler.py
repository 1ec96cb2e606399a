"""One sampler of the backlog for a whole site: every consumer of every queue, whatever runs.

The backlog chart of a consumer needs samples most when nothing consumes it (a stalled
consumer), so no worker samples only its own queues. Every worker runs
:meth:`SiteSampler.tick` every :data:`~redisq_django.core.trends.SAMPLE_INTERVAL_S`
seconds; the one holding the lease ``redisq:trends:sampler`` (``SET NX PX``, renewed by
its holder each tick, given back by a holder that stops, or lost :data:`LEASE_MS` after a
holder died) samples every queue of the registry, so N workers write one sample per
tick, not N. With no worker at all, the console records what it has just read
(:func:`record`), as long as nobody holds the lease.

A tick's work is bounded: one round trip for the lease and the registry, two to read at
most :data:`MAX_QUEUES` queues (``XINFO GROUPS`` and a few counts each,
:func:`~redisq_django.core.stats.read_many`), one to write.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable, Sequence

import redis

from redisq_django.core.batch import Command, run_batch
from redisq_django.core.errors import InvalidName
from redisq_django.core.keys import QueueKeys, readable_names, registry_key, sampler_key
from redisq_django.core.stats import QueueStats, read_many
from redisq_django.core.trends import SAMPLE_INTERVAL_S, sample_commands
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str

logger = logging.getLogger("redisq.trends")

#: How long the lease outlives its holder's last tick, ms: two ticks.
LEASE_MS = int(2 * SAMPLE_INTERVAL_S * 1000)
#: At most this many queues are sampled per tick (the first, by name).
MAX_QUEUES = 1000


class SiteSampler:
    """Samples the backlog of every queue of the site while this process holds the lease.

    Args:
        client: the worker's Redis client.
        prefix: the key prefix.
        keys: builds a queue's keys (``Broker.keys``).
        holder: who this process is in the lease (default ``host:pid:random``).
        read: reads the stats of queues by name, in order (``QueueOperator.stats``: a
            partitioned queue's added up, sampled into its base keys); default
            :func:`~redisq_django.core.stats.read_many` of their keys.
    """

    def __init__(
        self,
        client: RedisClient,
        prefix: str,
        keys: Callable[[str], QueueKeys],
        holder: str | None = None,
        read: Callable[[Sequence[str]], list[QueueStats]] | None = None,
    ) -> None:
        self.client, self.keys = client, keys
        self.read = read or (lambda queues: read_many(client, [keys(q) for q in queues]))
        self.lease, self.registry = sampler_key(prefix), registry_key(prefix)
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def tick(self, now: int | None = None) -> list[str]:
        """Take or renew the lease and sample every queue; the queues sampled (none:
        another process holds the lease).

        Raises:
            redis.ConnectionError, redis.TimeoutError: Redis cannot be reached.
        """
        with self.client.pipeline(transaction=False) as pipe:
            pipe.set(self.lease, self.holder, nx=True, px=LEASE_MS)
            pipe.get(self.lease)
            pipe.smembers(self.registry)
            won, holder, members = pipe.execute()
        if not won and (holder is None or to_str(holder) != self.holder):
            return []
        keys = [self.keys(q) for q in readable_names(sorted(to_str(m) for m in members))[0]]
        if len(keys) > MAX_QUEUES:
            logger.warning(
                "Trends: %d queues, only the first %d (by name) get backlog samples.",
                len(keys),
                MAX_QUEUES,
            )
            keys = keys[:MAX_QUEUES]
        commands: list[Command] = []
        if keys:
            read = self.read([k.queue for k in keys])
            for k, stats in zip(keys, read, strict=True):
                commands += sample_commands(k, stats, now)
        commands.append(("PEXPIRE", self.lease, LEASE_MS))
        run_batch(self.client, commands, transaction=False)
        return [k.queue for k in keys]

    def release(self) -> bool:
        """Give the lease back if this process holds it, so that another worker samples
        from its next tick instead of :data:`LEASE_MS` later (a worker's warm stop);
        whether it held it. Best effort: the lease expires by itself anyway."""
        try:
            with self.client.pipeline(transaction=True) as pipe:
                pipe.watch(self.lease)  # a holder that took it meanwhile keeps it
                holder = pipe.get(self.lease)
                if holder is None or to_str(holder) != self.holder:
                    return False
                pipe.multi()
                pipe.delete(self.lease)
                return bool(pipe.execute()[0])
        except redis.RedisError as exc:
            logger.debug("Trends: the sampling lease was not given back (%s)", exc)
            return False


def record(
    client: RedisClient,
    prefix: str,
    keys: Callable[[str], QueueKeys],
    read: Sequence[QueueStats],
    now: int | None = None,
) -> bool:
    """Write the figures just ``read`` as this minute's samples, unless a worker holds the
    sampling lease (it samples them itself); whether they were written. One round trip,
    and one more to write.

    Raises:
        redis.ConnectionError, redis.TimeoutError: Redis cannot be reached.
    """
    if not read or client.exists(sampler_key(prefix)):
        return False
    commands: list[Command] = []
    for stats in read:
        try:
            commands += sample_commands(keys(stats.name), stats, now)
        except InvalidName:
            continue
    if commands:
        run_batch(client, commands, transaction=False)
    return bool(commands)
