"""``broker.consumers``: the logical consumers of the queues — registering, listing,
moving (replay) and removing them, and delivering to one of them only (targeted
replay); on every partition of a partitioned queue."""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Callable, Sequence
from dataclasses import replace

import redis

from redisq_django.core import redelivery
from redisq_django.core.config import CoreConfig
from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import (
    ConsumerNotFound,
    PartitionedQueueError,
    is_nogroup,
    translate_errors,
)
from redisq_django.core.groups import ensure_call, group_names, register, remove_group
from redisq_django.core.keys import QueueKeys
from redisq_django.core.layouts import PartitionLayouts
from redisq_django.core.partitions import retried
from redisq_django.core.scripts import ScriptCall, Scripts
from redisq_django.core.sending import send_direct, send_once
from redisq_django.core.start import StartPoint
from redisq_django.core.types import RedisClient

Start = str | dt.datetime | StartPoint


class Consumers:
    """The logical consumers of a broker's queues.

    Args:
        record: records a queue's name in Redis's registry, once per process (the
            broker's), before a consumer is registered on it.
    """

    def __init__(
        self,
        client: RedisClient,
        scripts: Scripts,
        config: CoreConfig,
        keys: Callable[[str], QueueKeys],
        partitions: PartitionLayouts,
        record: Callable[[str], None],
        record_call: Callable[[str], tuple[str, str, str]],
    ) -> None:
        self.client = client
        self._scripts = scripts
        self._config = config
        self._keys = keys
        self._partitions = partitions
        self._record = record
        self._record_call = record_call

    @translate_errors
    def ensure(self, queue: str, consumer: str, start: Start = "latest") -> bool:
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
        self._record(queue)
        created = False
        for keys in self._partitions.layout(queue):
            created = register(self.client, self._scripts, keys.group(consumer), point) or created
        return created

    def _start_point(self, queue: str, start: Start) -> StartPoint:
        point = StartPoint.parse(start)
        if point.kind == "id":
            self._partitions.refuse_ids(queue, str(point.value))
        return point

    def ensure_call(self, queue: str, consumer: str, start: Start = "latest") -> ScriptCall:
        """The script call of :meth:`ensure`, the queue's name recorded in the same round
        trip (a quiet ``SADD``), for a client of its own to run (an asyncio one:
        ``core.asyncio_client.run_call``). Unpartitioned queues only (the Tasks
        backend's).

        Raises:
            PartitionedQueueError: ``queue`` is partitioned.
        """
        if self._partitions.count(queue) > 1:
            raise PartitionedQueueError(
                f"Queue {queue!r} is partitioned (REDISQ['PARTITIONS']): register its "
                "consumers with broker.consumers.ensure, which acts on every partition."
            )
        call = ensure_call(self._keys(queue).group(consumer), StartPoint.parse(start))
        return replace(call, quiet=[*call.quiet, self._record_call(queue)])

    @translate_errors
    def reset(self, queue: str, consumer: str, start: Start) -> None:
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
        self._keys(queue).group(consumer)
        target = self._start_point(queue, start).to_last_delivered_id()
        missing = False
        for keys in self._partitions.layout(queue):
            try:
                redelivery.reset(self.client, keys.group(consumer), target, self._config.history)
            except redis.ResponseError as exc:
                if not is_nogroup(exc):
                    raise
                missing = True
        if missing:
            raise ConsumerNotFound(queue, consumer)

    @translate_errors
    def names(self, queue: str) -> list[str]:
        """Names of the logical consumers registered on ``queue`` (on any partition)."""
        found: set[str] = set()
        for keys in self._partitions.layout(queue):
            found.update(group_names(self.client, keys))
        return sorted(found)

    @translate_errors
    def remove(self, queue: str, consumer: str) -> None:
        """Unregister logical consumer ``consumer`` and delete its private keys (on every
        partition of a partitioned queue).

        Its retries, dead letters still in Redis and in-flight state are discarded.
        """
        for keys in self._partitions.layout(queue):
            remove_group(self.client, keys.group(consumer))

    @translate_errors
    def deliver(
        self, consumer: str, envelopes: Sequence[Envelope], *, once: bool = False
    ) -> list[str]:
        """Deliver envelopes at once to one logical consumer only (its private input), one
        round trip per queue (targeted replay); ``once``: at most once per message id and
        consumer. Returns the new entry ids (with ``once``: the message ids)."""
        out: list[str] = [""] * len(envelopes)
        prepared = [e.with_id() for e in envelopes] if once else list(envelopes)
        by_queue: dict[str, list[int]] = {}
        for index, envelope in enumerate(prepared):
            by_queue.setdefault(envelope.queue, []).append(index)
        for queue, indexes in by_queue.items():
            mine = [prepared[i] for i in indexes]
            for keys, routed in self._partitions.route(queue, mine, once, None):
                batch = [mine[i] for i in routed]
                replies = retried(
                    self.client, self._scripts, keys, self._sender(keys, consumer, batch, once)
                )
                for i, reply in zip(routed, replies, strict=True):
                    out[indexes[i]] = reply
        return out

    def _sender(
        self, keys: QueueKeys, consumer: str, batch: list[Envelope], once: bool
    ) -> Callable[[], list[str]]:
        to = keys.group(consumer)
        if once:
            return lambda: send_once(self.client, self._scripts, keys, batch, to=to)
        return lambda: send_direct(self.client, self._scripts, to, batch)

    def __call__(self, queue: str) -> list[str]:
        """Deprecated (0.9's ``broker.consumers(queue)``): :meth:`names`."""
        warnings.warn(
            "broker.consumers(queue) is deprecated and removed in the next minor version: "
            "use broker.consumers.names(queue)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.names(queue)
