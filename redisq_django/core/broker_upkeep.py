"""The broker's base: its Redis, the keys of its queues (a partitioned queue's too), the
objects it hands out (archives, task results, the operator's reads and actions, the
schedules' ledger), and its upkeep of what is stored: dead letters, retention, purge and
stats."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import redis

from redisq_django.core import dead_letters, named_archives, ordered, redelivery, retention
from redisq_django.core.asyncio_client import new_client
from redisq_django.core.config import CoreConfig
from redisq_django.core.dead_entry import DeadEntry, redrive_fields
from redisq_django.core.errors import RedisUnavailable, describe_client, translate_errors
from redisq_django.core.groups import group_names
from redisq_django.core.keys import GroupKeys, QueueKeys, queue_keys
from redisq_django.core.partition_stats import read_layouts
from redisq_django.core.partitions import Partitions, pick, retried
from redisq_django.core.queue_operator import QueueOperator
from redisq_django.core.schedule_ledger import ScheduleLedger
from redisq_django.core.scripts import Scripts
from redisq_django.core.stats import QueueStats
from redisq_django.core.task_store import TaskResultStore
from redisq_django.core.types import AsyncRedisClient, RedisClient, StreamEntries
from redisq_django.core.wire import to_bytes, to_str


class BrokerUpkeep:
    """What :class:`~redisq_django.core.Broker` is built on; use the ``Broker``.

    Args:
        client: a redis-py ``Redis`` or ``RedisCluster`` client (bytes responses).
        config: settings; defaults when omitted.
    """

    def __init__(self, client: RedisClient, config: CoreConfig | None = None) -> None:
        self.client = client
        self.config = config or CoreConfig()
        self.scripts = Scripts(client)
        self._keys: dict[str, QueueKeys] = {}
        self._partitioned: dict[str, Partitions] = {}

    @property
    def where(self) -> str:
        """Where its Redis is, for messages (``host:port/db``, never a password)."""
        return describe_client(self.client)

    def new_async_client(self) -> AsyncRedisClient:
        """A new ``redis.asyncio`` client of its Redis, with its client's connection
        settings (``core/asyncio_client.py``); the caller closes it."""
        return new_client(self.client)

    def keys(self, queue: str) -> QueueKeys:
        """The keys of ``queue`` (validates the name once)."""
        keys = self._keys.get(queue)
        if keys is None:
            keys = self._keys[queue] = queue_keys(self.config.prefix, queue)
        return keys

    def partition_count(self, queue: str) -> int:
        """How many partitions ``queue`` has in this process's config (1: none)."""
        return self.config.partitions.get(queue, 1)

    def partitions(self, queue: str) -> Partitions | None:
        """The partitions of ``queue`` (``core/partitions.py``), or None when it has one."""
        parts = self._partitioned.get(queue)
        if parts is None:
            count = self.partition_count(queue)
            if count == 1:
                return None
            parts = self._partitioned[queue] = Partitions(self.keys(queue), count)
        return parts

    def layout(self, queue: str) -> tuple[QueueKeys, ...]:
        """Where ``queue``'s messages live: its keys, or each of its partitions' keys."""
        parts = self.partitions(queue)
        return (self.keys(queue),) if parts is None else parts.keys

    # -- what it hands out -------------------------------------------------------------

    @property
    def archives(self) -> named_archives.Archives:
        """The queues' named archives: register, commit, list, remove, per partition of
        a partitioned queue (:class:`~redisq_django.core.named_archives.Archives`)."""
        return named_archives.Archives(self.client, self.scripts, self.keys, self.layout)

    @functools.cached_property
    def operator(self) -> QueueOperator:
        """An operator's reads and actions: the lists of a queue, one message, instances,
        figures and trends, the server's shortcomings, delivering now, purging
        (:class:`~redisq_django.core.queue_operator.QueueOperator`)."""
        return QueueOperator(self.client, self.scripts, self.config, self.keys, self.layout)

    @functools.cached_property
    def task_results(self) -> TaskResultStore:
        """The task queues' results (:class:`~redisq_django.core.task_store.TaskResultStore`),
        with this broker's history and trends settings."""
        return TaskResultStore(
            self.client,
            self.scripts,
            self.keys,
            history=self.config.history,
            trends_on=self.config.trends,
        )

    @functools.cached_property
    def schedule_ledger(self) -> ScheduleLedger:
        """The schedules' claimed and sent ticks, and Redis's clock
        (:class:`~redisq_django.core.schedule_ledger.ScheduleLedger`)."""
        return ScheduleLedger(self.client, self.scripts, self.config.prefix)

    # -- dead letters ------------------------------------------------------------------

    @translate_errors
    def dead_letters(
        self,
        queue: str,
        consumer: str,
        *,
        count: int = 100,
        after: str | None = None,
        partition: int | None = None,
    ) -> list[DeadEntry]:
        """Dead letters of ``consumer`` still in Redis, oldest first (at most ``count``,
        after dead-stream entry id ``after`` when paging).

        On a partitioned queue, those of partition ``partition``, or (None) those of
        every partition merged oldest first, each naming its
        :attr:`~redisq_django.core.dead_entry.DeadEntry.partition`. Entry ids repeat
        across partitions: page one partition at a time for exact paging.
        """
        layout = self.layout(queue)
        if partition is None and len(layout) > 1:
            return dead_letters.read_all(self.client, layout, consumer, count, after)
        keys = pick(layout, partition, "dead letters")
        return dead_letters.read(self.client, keys, consumer, count, after)

    @translate_errors
    def delete_dead(
        self,
        queue: str,
        consumer: str,
        entry_ids: Iterable[str],
        *,
        partition: int | None = None,
    ) -> int:
        """Remove dead letters from Redis (once stored elsewhere, or to discard them);
        on a partitioned queue, from partition ``partition`` (required there)."""
        ids = list(entry_ids)
        if not ids:
            return 0
        dead = pick(self.layout(queue), partition, "these dead letters").group(consumer).dead
        return int(self.client.xdel(dead, *ids))

    @translate_errors
    def redrive(
        self, queue: str, consumer: str, entry_id: str, *, partition: int | None = None
    ) -> str | None:
        """Deliver the dead letter ``entry_id`` again to logical consumer ``consumer`` only
        (on a partitioned queue: the one in partition ``partition``, required there, and
        to that partition).

        The attempt count starts again from zero; other consumers of the queue do not
        see the message again.

        Returns:
            The new delivery's entry id, or None when the dead letter is gone.

        Raises:
            NotRedrivable: the dead letter is undecodable (it would only die again).
            PartitionedQueueError: ``partition`` missing on a partitioned queue, given on
                another, or out of range.
        """
        gkeys = pick(self.layout(queue), partition, "the dead letter").group(consumer)
        entries = cast("StreamEntries", self.client.xrange(gkeys.dead, entry_id, entry_id))
        if not entries:
            return None
        fields = redrive_fields(dict(entries[0][1]))
        new_id = retried(
            self.client,
            self.scripts,
            gkeys.queue_keys,
            lambda: redelivery.redrive(self.scripts, gkeys, entry_id, fields, self.config.history),
        )
        return to_str(new_id) if new_id else None

    def _redrive_keys(
        self, queue: str, consumer: str, envelope: Mapping[bytes, bytes], partition: int | None
    ) -> GroupKeys:
        target = dead_letters.redrive_target(
            self.keys(queue), self.partitions(queue), envelope, partition
        )
        return target.group(consumer)

    @translate_errors
    def redrive_envelope(
        self,
        queue: str,
        consumer: str,
        fields: Mapping[str | bytes, Any],
        *,
        partition: int | None = None,
    ) -> str:
        """Deliver an envelope (e.g. a dead letter kept in a database) to ``consumer`` only.

        Args:
            fields: envelope fields; ``payload`` is required (else ``NotRedrivable``);
                ``id``, ``headers`` and ``published_at`` keep the message's identity.
            partition: the partition of a partitioned queue it died in: it goes back
                there, or, keyed, to its key's partition
                (:func:`~redisq_django.core.dead_letters.redrive_target`).

        Returns:
            The new delivery's entry id.
        """
        envelope = redrive_fields({to_bytes(k): to_bytes(v) for k, v in fields.items()})
        gkeys = self._redrive_keys(queue, consumer, envelope, partition)
        return to_str(
            retried(
                self.client,
                self.scripts,
                gkeys.queue_keys,
                lambda: redelivery.redrive(self.scripts, gkeys, "", envelope, self.config.history),
            )
        )

    def redrive_envelopes(
        self,
        targets: Sequence[tuple[str, str, Mapping[str | bytes, Any]]],
        *,
        partitions: Sequence[int | None] | None = None,
    ) -> list[object]:
        """Deliver each ``(queue, consumer, fields)`` envelope to its consumer only, as
        :meth:`redrive_envelope` does, all in one pipelined round trip (one call each on
        a Redis Cluster client); ``partitions``, when given, the partition each died in.

        Returns:
            Each new delivery's entry id, or the exception Redis answered for that one.

        Raises:
            NotRedrivable: an envelope has no ``payload`` (nothing is sent then).
            RedisUnavailable: Redis cannot be reached.
        """
        envelopes = [
            redrive_fields({to_bytes(k): to_bytes(v) for k, v in fields.items()})
            for _queue, _consumer, fields in targets
        ]
        died_in = list(partitions) if partitions is not None else [None] * len(targets)
        history = self.config.history
        try:
            if not isinstance(self.client, redis.Redis):  # Cluster: scripts one by one
                return [
                    self.redrive_envelope(q, c, cast("dict[str | bytes, Any]", e), partition=p)
                    for (q, c, _f), e, p in zip(targets, envelopes, died_in, strict=True)
                ]
            with self.client.pipeline(transaction=False) as pipe:
                for (queue, consumer, _f), fields, part in zip(
                    targets, envelopes, died_in, strict=True
                ):
                    gkeys = self._redrive_keys(queue, consumer, fields, part)
                    redelivery.redrive(self.scripts, gkeys, "", fields, history, client=pipe)
                replies = pipe.execute(raise_on_error=False)
            return [r if isinstance(r, Exception) else to_str(r) for r in replies]
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailable(self.where, exc) from exc

    # -- retention, purge, stats -------------------------------------------------------

    @translate_errors
    def trim(self, queue: str, *, now: int | None = None) -> tuple[int, int]:
        """Apply retention to ``queue``'s log (bounded work: call it periodically).

        Removes entries every logical consumer has acknowledged and that are outside
        the replay window; never one a consumer still needs, unless a hard cap
        (``max_len`` / ``max_age_ms``) is set, in which case the drops are counted.

        Returns:
            ``(removed, dropped)``: removed safely, and unacknowledged ones dropped by a
            cap (over every partition of a partitioned queue).
        """
        removed = dropped = 0
        for keys in self.layout(queue):
            r, d = retention.trim(self.scripts, keys, self.config, now=now)
            removed, dropped = removed + r, dropped + d
        return removed, dropped

    @translate_errors
    def purge(self, queue: str) -> None:
        """Delete every message of ``queue`` (log, delayed, retries, dead letters in Redis)
        while keeping its logical consumers registered at the end of the (empty) log (of
        every partition of a partitioned queue)."""
        for keys in self.layout(queue):
            groups = group_names(self.client, keys)
            retention.purge(self.client, keys, groups)
            for group in groups:  # ordered consumers: no key stays held by a deleted message
                ordered.after_purge(self.scripts, keys.group(group))

    @translate_errors
    def stats(self, queue: str) -> QueueStats:
        """Length, delayed, drops, archive lag, and per-consumer figures of ``queue`` (a
        partitioned queue's added up over its partitions: ``core/partition_stats.py``)."""
        layouts = [self.layout(queue)]
        return read_layouts(self.client, layouts, history=self.config.history)[0]
