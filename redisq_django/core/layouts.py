"""``broker.partitions``: how many partitions each queue has, where its messages live, and
the record Redis keeps of it (``core/partitions/`` routes and checks;
``core/repartition.py`` changes the number)."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

from redisq_django.core import repartition
from redisq_django.core.config import CoreConfig
from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import PartitionedQueueError, translate_errors
from redisq_django.core.keys import QueueKeys
from redisq_django.core.partitions import Partitions, Place, pick, recorded, route
from redisq_django.core.scripts import Scripts
from redisq_django.core.types import RedisClient


class PartitionLayouts:
    """The queues' partitions, as this process is configured and as Redis records them.

    A queue's number of partitions comes from the config (``REDISQ["PARTITIONS"]``);
    Redis records it too, and every write into a partition is checked against that
    record where it happens (``core/partitions/``), so this object's view is a cache
    that is never trusted for a write. Thread-safe (its caches fill idempotently).
    """

    def __init__(
        self,
        client: RedisClient,
        scripts: Scripts,
        config: CoreConfig,
        keys: Callable[[str], QueueKeys],
    ) -> None:
        self.client = client
        self._scripts = scripts
        self._config = config
        self._keys = keys
        self._parts: dict[str, Partitions] = {}
        self._checked: set[str] = set()

    def count(self, queue: str) -> int:
        """How many partitions ``queue`` has in this process's config (1: none)."""
        return self._config.partitions.get(queue, 1)

    def of(self, queue: str) -> Partitions | None:
        """The partitions of ``queue`` (``core/partitions/``), or None when it has one."""
        parts = self._parts.get(queue)
        if parts is None:
            count = self.count(queue)
            if count == 1:
                return None
            parts = self._parts[queue] = Partitions(self._keys(queue), count)
        return parts

    def base(self, queue: str) -> QueueKeys:
        """The keys of ``queue`` itself (its partitions' are built from them)."""
        return self._keys(queue)

    def layout(self, queue: str) -> tuple[QueueKeys, ...]:
        """Where ``queue``'s messages live: its keys, or each of its partitions' keys."""
        parts = self.of(queue)
        return (self._keys(queue),) if parts is None else parts.keys

    def at(self, place: Place, what: str) -> QueueKeys:
        """The keys of ``place``: a queue of one partition, or one partition (required on a
        partitioned queue) of another.

        Args:
            what: what is asked, for the error (e.g. "a dead letter").

        Raises:
            PartitionedQueueError: no partition named on a partitioned queue, one named
                on another, or out of range.
        """
        return pick(self.layout(place.queue), place.partition, what)

    def places(self, queue: str) -> list[Place]:
        """Each place of ``queue``: the queue, or each of its partitions."""
        count = self.count(queue)
        return [Place(queue)] if count == 1 else [Place(queue, i) for i in range(count)]

    def route(
        self, queue: str, envelopes: Sequence[Envelope], once: bool, batch: str | None
    ) -> list[tuple[QueueKeys, list[int]]]:
        """Where ``queue``'s envelopes go: its keys, or its partitions'
        (``partitions.route``), with the indexes into ``envelopes`` of each's."""
        parts = self.of(queue)
        if parts is None:
            return [(self._keys(queue), list(range(len(envelopes))))]
        return route(parts, envelopes, once=once, batch=batch)

    @translate_errors
    def check(self, queue: str) -> None:
        """On the first use of ``queue`` by a reader in this process, compare its number of
        partitions with the one Redis records (and record it when there is none yet:
        :func:`~redisq_django.core.partitions.recorded`); later calls do nothing.
        Writers need not call it: each write is checked where it happens.

        Raises:
            PartitionsMismatch: Redis records another number.
        """
        if queue in self._checked:
            return
        recorded(self.client, self._scripts, self._keys(queue), self.count(queue))
        self._checked.add(queue)

    def mark_checked(self, queue: str) -> None:
        """``queue``'s number of partitions matched Redis's record (a send's check)."""
        self._checked.add(queue)

    @translate_errors
    def recorded(self, queue: str) -> int:
        """How many partitions Redis records for ``queue`` (1 when none is).

        Raises:
            ConfigurationError: the record is not a whole number from 1 to 64.
        """
        return repartition.recorded_count(self.client, self._keys(queue))

    @translate_errors
    def change(self, queue: str, count: int) -> repartition.Repartitioned:
        """Give drained ``queue`` ``count`` partitions in Redis
        (``core/repartition.py``); every process must then be restarted with that setting.

        Raises:
            ValueError: ``count`` out of range, or the queue is not drained (what remains
                is listed; nothing is changed).
        """
        return repartition.repartition(self.client, self._scripts, self._keys(queue), count)

    def refuse_ids(self, queue: str, what: str) -> None:
        """Refuse a message id as a position on a partitioned queue (``what``: the id)."""
        if self.count(queue) > 1:
            raise PartitionedQueueError(
                f"Queue {queue!r} is partitioned: a message id ({what!r}) is no position in "
                "its partitions' logs, whose ids are not comparable. Use 'earliest', "
                "'latest' or a time."
            )

    def __call__(self, queue: str) -> Partitions | None:
        """Deprecated (0.9's ``broker.partitions(queue)``): :meth:`of`."""
        warnings.warn(
            "broker.partitions(queue) is deprecated and removed in the next minor version: "
            "use broker.partitions.of(queue)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.of(queue)
