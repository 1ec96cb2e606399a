"""Dead letters in Redis on every partition of a queue: reading them (one partition, or
all merged oldest first), removing them, and delivering them again (``broker.dead_letters``,
:class:`DeadLetters`)."""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

import redis

from redisq_django.core import envelope as env
from redisq_django.core import redelivery
from redisq_django.core.batch import run_scripts
from redisq_django.core.config import CoreConfig
from redisq_django.core.dead_entry import DeadEntry, redrive_fields
from redisq_django.core.errors import RedisqError, translate_errors
from redisq_django.core.keys import GroupKeys, QueueKeys
from redisq_django.core.layouts import PartitionLayouts
from redisq_django.core.partitions import (
    Partitions,
    Place,
    pick,
    place_of,
    recorded,
    refused,
    retried,
)
from redisq_django.core.scripts import Scripts
from redisq_django.core.types import RedisClient, StreamEntries
from redisq_django.core.wire import to_bytes, to_str


def _order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return (int(ms), int(seq or 0)) if ms.isdigit() and (seq or "0").isdigit() else (0, 0)


def read(
    client: RedisClient, keys: QueueKeys, consumer: str, count: int, after: str | None
) -> list[DeadEntry]:
    """The dead letters of ``consumer`` in ``keys``' dead stream (a queue's or one
    partition's), oldest first, at most ``count``, after entry id ``after``."""
    after_id = f"({after}" if after else "-"
    dead = keys.group(consumer).dead
    entries = cast("StreamEntries", client.xrange(dead, after_id, "+", count=count))
    return [DeadEntry.from_entry(keys.queue, eid, dict(f), keys.part) for eid, f in entries]


def read_all(
    client: RedisClient,
    layout: Sequence[QueueKeys],
    consumer: str,
    count: int,
    after: str | None,
) -> list[DeadEntry]:
    """The dead letters of ``consumer`` on every partition of ``layout`` (one pipelined
    round trip; one call per partition's node on a Cluster), merged oldest first by entry
    id, then partition, at most ``count``; ``after`` applies to each partition."""
    after_id = f"({after}" if after else "-"
    with client.pipeline(transaction=False) as pipe:
        for keys in layout:
            pipe.xrange(keys.group(consumer).dead, after_id, "+", count=count)
        replies = cast("list[StreamEntries]", pipe.execute())
    merged = [
        DeadEntry.from_entry(keys.queue, eid, dict(f), keys.part)
        for keys, entries in zip(layout, replies, strict=True)
        for eid, f in entries
    ]
    merged.sort(key=lambda d: (_order(d.entry_id), d.partition or 0))
    return merged[:count]


def redrive_target(
    base: QueueKeys,
    parts: Partitions | None,
    envelope: Mapping[bytes, bytes],
    partition: int | None,
) -> QueueKeys:
    """Where a dead letter kept elsewhere (e.g. a database row) is delivered again.

    An unpartitioned queue: its keys, whatever partition the letter died in (the queue
    may have had partitions then). A partitioned one: a keyed message goes to its key's
    partition (PROTOCOL.md, "Partitions: the key hash") — the one it died in, unless the
    queue was repartitioned since, and in any case the one its key's next messages go
    to, so that an ordered consumer keeps the key's order; another goes back to
    ``partition``, the one it died in, while the queue has it, else to its id's.
    """
    if parts is None:
        return base
    key = envelope.get(env.F_KEY)
    if key is not None:
        # The CRC-32 of the key's UTF-8 bytes: the bytes on the wire, as routing hashes.
        return parts.keys[zlib.crc32(key) % parts.count]
    if isinstance(partition, int) and 0 <= partition < parts.count:
        return parts.keys[partition]
    message_id = envelope.get(env.F_ID)
    if message_id:
        return parts.keys[zlib.crc32(message_id) % parts.count]
    return parts.next()


class DeadLetters:
    """``broker.dead_letters``: the dead letters still in Redis (the database keeps them
    after the sink moves them: ``redisq_django.deadletters``), read, removed and
    delivered again, on any place of a queue (:class:`~redisq_django.core.partitions.place.Place`:
    a queue, or one partition of a partitioned one)."""

    def __init__(
        self,
        client: RedisClient,
        scripts: Scripts,
        config: CoreConfig,
        partitions: PartitionLayouts,
    ) -> None:
        self.client = client
        self._scripts = scripts
        self._config = config
        self._partitions = partitions

    @translate_errors
    def read(
        self,
        where: str | Place,
        consumer: str,
        *,
        count: int = 100,
        after: str | None = None,
        partition: int | None = None,
    ) -> list[DeadEntry]:
        """Dead letters of ``consumer`` still in Redis, oldest first (at most ``count``,
        after dead-stream entry id ``after`` when paging).

        On a partitioned queue, those of the place's partition, or (a queue) those of
        every partition merged oldest first, each naming its
        :attr:`~redisq_django.core.dead_entry.DeadEntry.partition`. Entry ids repeat
        across partitions: page one partition at a time for exact paging.
        ``partition``: deprecated, the place's.
        """
        place = place_of(where, partition, caller="broker.dead_letters.read")
        layout = self._partitions.layout(place.queue)
        if place.partition is None and len(layout) > 1:
            return read_all(self.client, layout, consumer, count, after)
        keys = pick(layout, place.partition, "dead letters")
        return read(self.client, keys, consumer, count, after)

    @translate_errors
    def delete(
        self,
        where: str | Place,
        consumer: str,
        entry_ids: Iterable[str],
        *,
        partition: int | None = None,
    ) -> int:
        """Remove dead letters from Redis (once stored elsewhere, or to discard them);
        on a partitioned queue, from the place's partition (required there)."""
        place = place_of(where, partition, caller="broker.dead_letters.delete")
        ids = list(entry_ids)
        if not ids:
            return 0
        dead = self._partitions.at(place, "these dead letters").group(consumer).dead
        return int(cast("Any", self.client.xdel(dead, *ids)))

    @translate_errors
    def redrive(
        self,
        where: str | Place,
        consumer: str,
        entry_id: str,
        *,
        partition: int | None = None,
    ) -> str | None:
        """Deliver the dead letter ``entry_id`` again to logical consumer ``consumer`` only
        (on a partitioned queue: the one in the place's partition, required there, and
        to that partition).

        The attempt count starts again from zero; other consumers of the queue do not
        see the message again.

        Returns:
            The new delivery's entry id, or None when the dead letter is gone.

        Raises:
            NotRedrivable: the dead letter is undecodable (it would only die again).
            PartitionedQueueError: no partition on a partitioned queue, one on another,
                or out of range.
        """
        place = place_of(where, partition, caller="broker.dead_letters.redrive")
        gkeys = self._partitions.at(place, "the dead letter").group(consumer)
        entries = cast("StreamEntries", self.client.xrange(gkeys.dead, entry_id, entry_id))
        if not entries:
            return None
        fields = redrive_fields(dict(entries[0][1]))
        history = self._config.history
        new_id = retried(
            self.client,
            self._scripts,
            gkeys.queue_keys,
            lambda: redelivery.redrive(self._scripts, gkeys, entry_id, fields, history),
        )
        return to_str(new_id) if new_id else None

    def _target(self, place: Place, consumer: str, envelope: Mapping[bytes, bytes]) -> GroupKeys:
        layouts = self._partitions
        base, parts = layouts.base(place.queue), layouts.of(place.queue)
        return redrive_target(base, parts, envelope, place.partition).group(consumer)

    @translate_errors
    def redrive_envelope(
        self,
        where: str | Place,
        consumer: str,
        fields: Mapping[str | bytes, Any],
        *,
        partition: int | None = None,
    ) -> str:
        """Deliver an envelope (e.g. a dead letter kept in a database) to ``consumer`` only.

        Args:
            where: its queue, or the partition of a partitioned queue it died in: it goes
                back there, or, keyed, to its key's partition (:func:`redrive_target`).
            fields: envelope fields; ``payload`` is required (else ``NotRedrivable``);
                ``id``, ``headers`` and ``published_at`` keep the message's identity.
            partition: deprecated, the place's.

        Returns:
            The new delivery's entry id.
        """
        place = place_of(where, partition, caller="broker.dead_letters.redrive_envelope")
        envelope = redrive_fields({to_bytes(k): to_bytes(v) for k, v in fields.items()})
        gkeys = self._target(place, consumer, envelope)
        history = self._config.history
        return to_str(
            retried(
                self.client,
                self._scripts,
                gkeys.queue_keys,
                lambda: redelivery.redrive(self._scripts, gkeys, "", envelope, history),
            )
        )

    @translate_errors
    def redrive_envelopes(
        self,
        targets: Sequence[tuple[str | Place, str, Mapping[str | bytes, Any]]],
        *,
        partitions: Sequence[int | None] | None = None,
    ) -> list[object]:
        """Deliver each ``(place, consumer, fields)`` envelope to its consumer only, as
        :meth:`redrive_envelope` does, all in one write (on a Redis Cluster client, one
        pipeline routed by slot); the place: its queue, or the partition it died in.
        ``partitions``: deprecated, the places' partitions.

        Each call is ``redrive.lua`` on its own: one refused for its layout (the queue was
        repartitioned, or Redis lost its record) is sent once more after the record is
        read again, as :meth:`redrive_envelope` does; another refusal is that one's
        reply.

        Returns:
            Each new delivery's entry id, or the exception Redis answered for that one.

        Raises:
            NotRedrivable: an envelope has no ``payload`` (nothing is sent then).
            RedisUnavailable: Redis cannot be reached; whether the calls ran is unknown.
        """
        died_in = list(partitions) if partitions is not None else [None] * len(targets)
        history = self._config.history
        calls = []
        places: list[QueueKeys] = []
        groups: dict[tuple[QueueKeys, str], GroupKeys] = {}  # validated once each
        for (where, consumer, fields), partition in zip(targets, died_in, strict=True):
            place = place_of(where, partition, caller="broker.dead_letters.redrive_envelopes")
            envelope = redrive_fields({to_bytes(k): to_bytes(v) for k, v in fields.items()})
            layouts = self._partitions
            base, parts = layouts.base(place.queue), layouts.of(place.queue)
            qkeys = redrive_target(base, parts, envelope, place.partition)
            gkeys = groups.get((qkeys, consumer))
            if gkeys is None:
                gkeys = groups[(qkeys, consumer)] = qkeys.group(consumer)
            calls.append(redelivery.redrive_call(gkeys, "", envelope, history))
            places.append(qkeys)
        replies = run_scripts(self.client, self._scripts, "redrive", calls)
        again = [i for i, r in enumerate(replies) if self._refused(r, places[i])]
        if again:
            for i, reply in zip(again, self._once_more(calls, places, again), strict=True):
                replies[i] = reply
        return [r if isinstance(r, Exception) else to_str(r) for r in replies]

    @staticmethod
    def _refused(reply: object, keys: QueueKeys) -> bool:
        return isinstance(reply, redis.ResponseError) and refused(reply, keys)

    def _once_more(
        self,
        calls: list[tuple[list[str], list[Any]]],
        places: list[QueueKeys],
        again: list[int],
    ) -> list[Any]:
        """The calls ``again`` (refused for their layout, so they wrote nothing) sent once
        more, after each place's record is read again; a place whose record cannot be
        read (this process's number of partitions is stale) answers that error."""
        read: dict[QueueKeys, Exception | None] = {}
        for keys in {places[i] for i in again}:
            try:
                recorded(self.client, self._scripts, keys.base, keys.of or 1)
                read[keys] = None
            except (redis.ResponseError, RedisqError) as exc:
                read[keys] = exc
        send = [calls[i] for i in again if read[places[i]] is None]
        sent = iter(run_scripts(self.client, self._scripts, "redrive", send))
        return [read[places[i]] or next(sent) for i in again]

    def __call__(self, queue: str, consumer: str, **options: Any) -> list[DeadEntry]:
        """Deprecated (0.9's ``broker.dead_letters(queue, consumer)``): :meth:`read`."""
        warnings.warn(
            "broker.dead_letters(queue, consumer) is deprecated and removed in the next minor "
            "version: use broker.dead_letters.read(queue, consumer)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.read(queue, consumer, **options)
