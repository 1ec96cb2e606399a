"""The broker's logical consumers: registering, listing, moving and removing them, and
subscribing instances; the first use of a queue in a process (its name recorded, its
number of partitions compared with Redis's record)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import redis

from redisq_django.core import partitions, redelivery
from redisq_django.core import repartition as repartitioning
from redisq_django.core.broker_upkeep import BrokerUpkeep
from redisq_django.core.config import CoreConfig
from redisq_django.core.errors import (
    ConfigurationError,
    ConsumerNotFound,
    PartitionedQueueError,
    is_nogroup,
    translate_errors,
)
from redisq_django.core.groups import (
    default_instance_name,
    ensure_call,
    group_names,
    register,
    remove_group,
)
from redisq_django.core.keys import registry_key
from redisq_django.core.replica_wait import ReplicaWait
from redisq_django.core.retry import RetryPolicy
from redisq_django.core.scripts import ScriptCall
from redisq_django.core.start import StartPoint
from redisq_django.core.subscription import Subscription
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str


class BrokerConsumers(BrokerUpkeep):
    """What :class:`~redisq_django.core.Broker` is built on; use the ``Broker``."""

    def __init__(self, client: RedisClient, config: CoreConfig | None = None) -> None:
        super().__init__(client, config)
        #: Queues recorded in Redis by this process, their partitions checked.
        self._registered: set[str] = set()
        #: Queues whose number of partitions this process compared with Redis's record.
        self._checked: set[str] = set()

    @translate_errors
    def check_partitions(self, queue: str) -> None:
        """On the first use of ``queue`` in this process, compare its number of partitions
        with the one Redis records, and record it when there is none yet
        (:func:`~redisq_django.core.partitions.recorded`); later calls do nothing.

        Raises:
            PartitionsMismatch: Redis records another number.
        """
        if queue in self._checked:
            return
        count = self.partition_count(queue)
        partitions.recorded(self.client, self.scripts, self.keys(queue), count)
        self.checked_partitions(queue)

    def checked_partitions(self, queue: str) -> None:
        """``queue``'s partitions match Redis's record (checked by an asyncio client)."""
        self.partitions(queue)  # built before the queue is used: the fast publish reads it
        self._checked.add(queue)

    def partitions_checked(self, queue: str) -> bool:
        """Whether :meth:`check_partitions` was done for ``queue`` in this process."""
        return queue in self._checked

    def _register(self, queue: str) -> None:
        # Queue names are recorded once per process: the operator views list them.
        if queue not in self._registered:
            self.check_partitions(queue)
            self.client.sadd(registry_key(self.config.prefix), queue)
            self._registered.add(queue)

    def _record(self, queue: str) -> tuple[str, str, str]:
        return ("SADD", registry_key(self.config.prefix), queue)

    def recorded(self, queue: str) -> None:
        """``queue`` is recorded in Redis (a send planned with ``register`` went through,
        after :meth:`check_partitions`)."""
        self._registered.add(queue)

    @translate_errors
    def recorded_partitions(self, queue: str) -> int:
        """How many partitions Redis records for ``queue`` (1 when none is)."""
        return repartitioning.recorded_count(self.client, self.keys(queue))

    @translate_errors
    def repartition(self, queue: str, count: int) -> repartitioning.Repartitioned:
        """Give drained ``queue`` ``count`` partitions in Redis (``core/repartition.py``);
        every process must then be restarted with that setting.

        Raises:
            ValueError: ``count`` out of range, or the queue is not drained (what remains
                is listed; nothing is changed).
        """
        return repartitioning.repartition(self.client, self.scripts, self.keys(queue), count)

    # -- logical consumers -------------------------------------------------------------

    @translate_errors
    def ensure_consumer(
        self, queue: str, consumer: str, start: str | dt.datetime | StartPoint = "latest"
    ) -> bool:
        """Register logical consumer ``consumer`` on ``queue`` unless it exists.

        From then on it receives every message published (also while none of its
        instances runs). ``start`` says where a *new* consumer begins: ``"latest"``
        (only what comes next), ``"earliest"`` (everything still in the log), an aware
        datetime or a message id (inclusive; not on a partitioned queue). An existing
        consumer keeps its position; use :meth:`reset` to move it. On a partitioned
        queue, it is registered on every partition.

        Returns:
            True when it was created (on some partition), False when it already existed.

        Raises:
            PartitionedQueueError: a message id as ``start`` on a partitioned queue.
            PartitionsMismatch: Redis records another number of partitions.
        """
        point = self._start_point(queue, start)
        self._register(queue)
        created = False
        for keys in self.layout(queue):
            created = register(self.client, self.scripts, keys.group(consumer), point) or created
        return created

    def _start_point(self, queue: str, start: str | dt.datetime | StartPoint) -> StartPoint:
        point = StartPoint.parse(start)
        if point.kind == "id" and self.partition_count(queue) > 1:
            raise PartitionedQueueError(
                f"Queue {queue!r} is partitioned: a message id ({point.value!r}) is no "
                "position in its partitions' logs, whose ids are not comparable. Use "
                "'earliest', 'latest' or a time."
            )
        return point

    def ensure_consumer_call(
        self, queue: str, consumer: str, start: str | dt.datetime | StartPoint = "latest"
    ) -> ScriptCall:
        """The script call of :meth:`ensure_consumer`, the queue's name recorded in the
        same round trip (a quiet ``SADD``), for a client of its own to run (an asyncio
        one: ``core.asyncio_client.run_call``). Unpartitioned queues only (the Tasks
        backend's).

        Raises:
            PartitionedQueueError: ``queue`` is partitioned.
        """
        if self.partition_count(queue) > 1:
            raise PartitionedQueueError(
                f"Queue {queue!r} is partitioned (REDISQ['PARTITIONS']): register its "
                "consumers with Broker.ensure_consumer, which acts on every partition."
            )
        call = ensure_call(self.keys(queue).group(consumer), StartPoint.parse(start))
        return replace(call, quiet=[*call.quiet, self._record(queue)])

    @translate_errors
    def reset(self, queue: str, consumer: str, start: str | dt.datetime | StartPoint) -> None:
        """Move logical consumer ``consumer`` to ``start`` to receive messages again (replay).

        Messages from the start point onwards that are still in the log (see the replay
        window) are delivered again, in order. Older history is replayed from the archive
        by the pipeline. On a partitioned queue every partition moves (to a time,
        ``"earliest"`` or ``"latest"``; a message id is refused).

        Raises:
            ConsumerNotFound: ``consumer`` is not registered on ``queue`` (on one of its
                partitions: the others moved).
            PartitionedQueueError: a message id as ``start`` on a partitioned queue.
        """
        self.keys(queue).group(consumer)
        target = self._start_point(queue, start).to_last_delivered_id()
        missing = False
        for keys in self.layout(queue):
            try:
                redelivery.reset(self.client, keys.group(consumer), target, self.config.history)
            except redis.ResponseError as exc:
                if not is_nogroup(exc):
                    raise
                missing = True
        if missing:
            raise ConsumerNotFound(queue, consumer)

    @translate_errors
    def consumers(self, queue: str) -> list[str]:
        """Names of the logical consumers registered on ``queue`` (on any partition)."""
        found: set[str] = set()
        for keys in self.layout(queue):
            found.update(group_names(self.client, keys))
        return sorted(found)

    @translate_errors
    def remove_consumer(self, queue: str, consumer: str) -> None:
        """Unregister logical consumer ``consumer`` and delete its private keys (on every
        partition of a partitioned queue).

        Its retries, dead letters still in Redis and in-flight state are discarded.
        """
        for keys in self.layout(queue):
            remove_group(self.client, keys.group(consumer))

    @translate_errors
    def queues(self) -> list[str]:
        """Every queue name published to or consumed from (sorted)."""
        return sorted(to_str(q) for q in self.client.smembers(registry_key(self.config.prefix)))

    def subscribe(
        self,
        queue: str,
        consumer: str,
        instance: str | None = None,
        *,
        policy: RetryPolicy | None = None,
        ordered: bool = False,
        partition: int | None = None,
        wait_replicas: int | None = None,
        **overrides: Any,
    ) -> Subscription:
        """An instance of logical consumer ``consumer``: fetches, acks and fails messages.

        Args:
            queue, consumer: what it consumes; ``consumer`` must be registered
                (:meth:`ensure_consumer`).
            instance: the instance name, unique per running instance (default
                ``host:pid:random``); the consumer's instances share its messages.
            policy: its retry policy (default: the config's).
            ordered: the consumer is ordered (``core/ordered.py``): give it to every
                instance of the consumer, or none.
            partition: on a partitioned queue (required there, refused elsewhere), the
                partition this instance consumes, 0 to K - 1: run instances on each.
            wait_replicas: an ordered consumer's reads wait (``WAIT``, at most the
                config's ``ordered_wait_timeout_ms``) until this many replicas have them,
                before their messages run (default: the config's
                ``ordered_wait_replicas``; 0: no wait). See ``core/ordered.py``.
            **overrides: fields of the policy to change (``max_retries``, ``backoff_s``,
                ``max_backoff_s``, ``visibility_timeout_ms``).

        Raises:
            PartitionedQueueError: ``partition`` missing on a partitioned queue, given on
                another, or out of range.
            PartitionsMismatch: Redis records another number of partitions.
            ConfigurationError: ``wait_replicas`` for a consumer that is not ordered.
        """
        replica_wait = self._replica_wait(consumer, ordered, wait_replicas)
        count = self.partition_count(queue)
        if count == 1 and partition is not None:
            raise PartitionedQueueError(
                f"Queue {queue!r} is not partitioned (REDISQ['PARTITIONS'] gives it none): "
                f"subscribe without partition= (got {partition!r})."
            )
        if count > 1 and (
            not isinstance(partition, int)
            or isinstance(partition, bool)
            or partition < 0
            or partition >= count
        ):
            raise PartitionedQueueError(
                f"Queue {queue!r} has {count} partitions: subscribe each instance to one, "
                f"partition=0 to {count - 1} (got {partition!r})."
            )
        self.check_partitions(queue)
        return Subscription(
            client=self.client,
            scripts=self.scripts,
            config=self.config,
            keys=self.layout(queue)[partition or 0],
            consumer=consumer,
            instance=instance or default_instance_name(),
            policy=(policy or self.config.retry).evolve(**overrides),
            ordered=ordered,
            replica_wait=replica_wait,
        )

    def _replica_wait(
        self, consumer: str, ordered: bool, wait_replicas: int | None
    ) -> ReplicaWait | None:
        """The replica wait of a subscription's reads (None: none)."""
        if not ordered:
            if wait_replicas:
                raise ConfigurationError(
                    f"wait_replicas={wait_replicas!r} for consumer {consumer!r}: only an "
                    "ordered consumer waits for replicas (declare it ordered=True)."
                )
            return None
        replicas = self.config.ordered_wait_replicas if wait_replicas is None else wait_replicas
        if replicas <= 0:
            return None
        return ReplicaWait(replicas, self.config.ordered_wait_timeout_ms)
