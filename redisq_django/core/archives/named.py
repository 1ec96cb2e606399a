"""Named archives: how far each archive of the history has stored a queue's streams.

An archive registers per queue under a name (like a logical consumer) for each stream it
keeps: ``messages`` (the log) and ``events`` (lifecycle events, history on). Retention
(``trim.lua``) never removes what a registered archive has not stored yet; a hard cap that
does is written to the archive's gap record, which its reader checks (``failOnDataLoss``).
Only a registered archive holds retention: every other reader is read-only. Removing an
archive is explicit (:meth:`Archives.remove`: ``manage.py redisq archives remove`` and the
admin).

A partitioned queue's partitions are full queues of their own (``{q#i}``): an archive
registers, commits and is trimmed behind per partition, and its positions are per
partition (entry ids of different partitions are not comparable). Every call that names
one position takes ``partition=`` on such a queue (:func:`~redisq_django.core.partitions.pick`).

Upgrading: the position the one unnamed archive of earlier versions recorded (``meta``
fields ``archive:messages`` / ``archive:events``) keeps holding retention, and becomes the
archive named :data:`DEFAULT_ARCHIVE` when that one registers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any

import redis

from redisq_django.core.errors import (
    ArchiveNotRegistered,
    ArchiveOwned,
    error_code,
    translate_errors,
)
from redisq_django.core.keys import QueueKeys, validate_name
from redisq_django.core.partitions import Place, pick, place_of
from redisq_django.core.scripts import Scripts
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str

#: The name of the archive job's archive unless told otherwise; it takes over the
#: position an earlier version's unnamed archive recorded.
DEFAULT_ARCHIVE = "default"
#: Above this many entries, a lag is shown as this cap (here and in ``core.stats``).
LAG_COUNT_CAP = 10_000


class ArchivedStream(StrEnum):
    """The streams of a queue an archive keeps (the data source's tables)."""

    MESSAGES = "messages"  # the log
    EVENTS = "events"  # lifecycle events


#: Per stream, the ``meta`` field holding the greatest entry id retention ever removed.
TRIMMED_FIELDS = {
    ArchivedStream.MESSAGES: "last_trimmed",
    ArchivedStream.EVENTS: "events_last_trimmed",
}


def legacy_field(stream: ArchivedStream | str) -> str:
    """The ``meta`` field where an earlier version's unnamed archive kept its position."""
    return f"archive:{ArchivedStream(stream).value}"


def stream_key(keys: QueueKeys, stream: ArchivedStream | str) -> str:
    """The key of ``stream``: the log or the events stream."""
    return keys.log if ArchivedStream(stream) is ArchivedStream.MESSAGES else keys.events


def parse_id(entry_id: str) -> tuple[int, int]:
    """``"1700000000000-3"`` as ``(1700000000000, 3)``, for comparing ids."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class Registered(IntEnum):
    """What registering found (``archive_register.lua``'s status)."""

    ALREADY = 0
    NOW = 1
    ADOPTED = 2  # registered now at an earlier version's unnamed archive's position


@dataclass(frozen=True)
class ArchiveRegistration:
    """The answer of :meth:`Archives.register`: what happened and the position.

    Attributes:
        taken_from_ms: this registration took the name over (``take_over``) from an
            owner that last committed then (ms); None: it took nothing over.
    """

    status: Registered
    position: str
    taken_from_ms: int | None = None


# The numbers after OWNED / FENCED in archive_register.lua's and archive_commit.lua's
# refusals, wherever the server put the code (Redis 6.2 wraps a script's error).
_OWNED = re.compile(r"OWNED (\d+) (\d+) (\S+)")
_FENCED = re.compile(r"FENCED (\d+) (\S+)")


def _owned(exc: redis.ResponseError, place: Place, name: str, table: str) -> ArchiveOwned | None:
    """The :class:`ArchiveOwned` a script's refusal stands for, or None (another error)."""
    code, where = error_code(exc), str(place)
    if code == "OWNED" and (m := _OWNED.search(str(exc))):
        since, committed, owner = int(m[1]), int(m[2]), m[3]
        return ArchiveOwned(
            where, name, table, since_ms=since, committed_ms=committed, owner=owner, fenced=False
        )
    if code == "FENCED" and (m := _FENCED.search(str(exc))):
        return ArchiveOwned(
            where, name, table, since_ms=int(m[1]), committed_ms=None, owner=m[2], fenced=True
        )
    return None


@dataclass(frozen=True)
class Purge:
    """The part of an archive's gap that purges removed (``purge.lua``'s purge record
    ``"first last count at_ms"``): from ``first`` to ``last``, ``count`` entries, the last
    purge at ``at_ms`` (ms since the epoch, Redis's clock)."""

    first: str
    last: str
    count: int
    at_ms: int

    @classmethod
    def parse(cls, text: Any) -> Purge | None:
        """A purge record (None for a missing or odd one)."""
        if text is None:
            return None
        parts = to_str(text).split()
        if len(parts) != 4 or not (parts[2].isdigit() and parts[3].isdigit()):
            return None
        return cls(parts[0], parts[1], int(parts[2]), int(parts[3]))


@dataclass(frozen=True)
class Gap:
    """Entries a hard cap or a purge removed after an archive's position: from ``first``
    to ``last`` (both removed), ``count`` of them (the gap record ``trim.lua`` and
    ``purge.lua`` write); ``purge``: the part of it purges removed, if any."""

    first: str
    last: str
    count: int
    purge: Purge | None = None

    @classmethod
    def parse(cls, text: Any, purge: Any = None) -> Gap | None:
        """A gap record ``"first last count"`` and the purge record beside it (None for
        a missing or odd gap record; a purge record from before the gap's first id is
        an old one an earlier version did not delete, and left out)."""
        if text is None:
            return None
        parts = to_str(text).split()
        if len(parts) != 3 or not parts[2].isdigit():
            return None
        purged = Purge.parse(purge)
        if purged is not None and _before(purged.last, parts[0]):
            purged = None
        return cls(parts[0], parts[1], int(parts[2]), purged)


def _before(a: str, b: str) -> bool:
    try:
        return parse_id(a) < parse_id(b)
    except ValueError:
        return True


@dataclass(frozen=True)
class Unarchived:
    """Messages of a queue a registered archive has not stored yet: what a purge of the
    queue would make it lose (over every partition of a partitioned queue).

    Attributes:
        name: the archive.
        count: how many (the lags of :meth:`Archives.states`, added up).
        capped: at least ``count``: a partition's lag reached ``LAG_COUNT_CAP``.
    """

    name: str
    count: int
    capped: bool

    @property
    def shown(self) -> str:
        """The number as the console shows a lag: ``10000+`` when capped."""
        return f"{self.count}+" if self.capped else str(self.count)


@dataclass(frozen=True)
class ArchiveState:
    """One archive of one stream of a queue, as the admin and ``redisq archives`` show it.

    Attributes:
        queue: the queue.
        name: the archive (``default`` for an earlier version's unnamed one).
        table: ``messages`` (the log) or ``events``.
        position: the last entry id it has stored (or starts after).
        since_ms: when it registered (ms); None for an earlier version's archive.
        lag: entries after its position still in Redis (capped at ``LAG_COUNT_CAP``).
        gap: entries a hard cap removed before it stored them, not yet seen by it.
        partition: the partition of a partitioned queue this position is in (None: the
            queue has none).
    """

    queue: str
    name: str
    table: str
    position: str
    since_ms: int | None
    lag: int
    gap: Gap | None = None
    partition: int | None = None

    @property
    def legacy(self) -> bool:
        """Recorded by an earlier version's unnamed archive, not registered since."""
        return self.since_ms is None


class Archives:
    """Registration, positions, removal and gaps of named archives (one Redis).

    Args:
        client: a redis-py client (bytes replies).
        scripts: the client's scripts.
        keys: the keys of a queue by name (``Broker.keys``).
        layout: where a queue's messages live, its keys or each of its partitions'
            (``Broker.layout``; default: its keys).
    """

    def __init__(
        self,
        client: RedisClient,
        scripts: Scripts,
        keys: Callable[[str], QueueKeys],
        layout: Callable[[str], Sequence[QueueKeys]] | None = None,
    ) -> None:
        self.client = client
        self.scripts = scripts
        self.keys = keys
        self.layout = layout or (lambda queue: (keys(queue),))

    def at(self, place: Place) -> QueueKeys:
        """The keys of ``place``: a queue, or one partition of a partitioned queue
        (required there, refused elsewhere: ``PartitionedQueueError``)."""
        return pick(self.layout(place.queue), place.partition, "an archive position")

    @translate_errors
    def register(
        self,
        where: str | Place,
        name: str,
        stream: ArchivedStream | str,
        start: str = "earliest",
        *,
        partition: int | None = None,
        owner: str = "",
        take_over: bool = False,
    ) -> ArchiveRegistration:
        """Register archive ``name`` for the ``stream`` of ``where`` (a queue, or on a
        partitioned queue one of its partitions, a ``Place``: :meth:`register_all`
        registers every one) unless it is already. ``partition``: deprecated, the
        place's.

        Args:
            start: where a new registration starts: ``earliest`` (everything still in
                Redis), ``latest`` (what comes next) or an entry id (it has everything
                up to that id). An archive registered already keeps its position.
            owner: the reader's token, or "" (a reader whose checkpoint holds none yet).
            take_over: take the name from its owner (with a token: now; without: at the
                reader's first commit), whose next commit is then refused.

        A name is owned by one reader, fenced as Kafka fences a second producer with the
        same ``transactional.id``: the reader claims it with its first commit, by a
        token its checkpoint holds; registering claims nothing but is refused while
        another token owns the name.

        Raises:
            ArchiveOwned: another reader owns the name (and ``take_over`` is false).
        """
        place = place_of(where, partition, caller="broker.archives.register")
        keys = self.at(place)
        table = ArchivedStream(stream)
        try:
            status, position, taken = self.scripts(
                "archive_register",
                [keys.archives, keys.meta, stream_key(keys, table)],
                [
                    validate_name("archive", name),
                    table.value,
                    start,
                    owner,
                    "1" if take_over else "",
                ],
            )
        except redis.ResponseError as exc:
            raise _owned(exc, place, name, table.value) or exc from None
        taken_ms = int(to_str(taken)) if taken else None
        return ArchiveRegistration(Registered(int(status)), to_str(position), taken_ms)

    def register_all(
        self, queue: str, name: str, stream: ArchivedStream | str, start: str = "earliest"
    ) -> list[ArchiveRegistration]:
        """:meth:`register` on every partition of ``queue`` (its only keys when it has
        none): each partition's log is then kept until the archive has stored it.

        Returns:
            Each partition's registration, by partition (one for an unpartitioned queue).
        """
        layout = self.layout(queue)
        return [self.register(Place(queue, keys.part), name, stream, start) for keys in layout]

    @translate_errors
    def commit(
        self,
        where: str | Place,
        name: str,
        stream: ArchivedStream | str,
        entry_id: str,
        *,
        partition: int | None = None,
        owner: str = "",
        take_over: bool = False,
    ) -> str:
        """Record that archive ``name`` stored the ``stream`` of ``where`` (a queue, or a
        partition of one) up to ``entry_id`` (never moves back); retention may then trim
        that place behind it. ``partition``: deprecated, the place's.

        Args:
            owner: the reader's token (see :meth:`register`): a commit by another than
                the name's owner is refused; one with a token claims a name nobody owns.
            take_over: a commit with a token takes the name from its owner.

        Returns:
            The position now recorded.

        Raises:
            ArchiveNotRegistered: it is not registered (never, or removed since).
            ArchiveOwned: another reader owns the name (this one was fenced off).
        """
        place = place_of(where, partition, caller="broker.archives.commit")
        table = ArchivedStream(stream)
        try:
            reply = self.scripts(
                "archive_commit",
                [self.at(place).archives],
                [
                    validate_name("archive", name),
                    table.value,
                    entry_id,
                    owner,
                    "1" if take_over else "",
                ],
            )
        except redis.ResponseError as exc:
            if error_code(exc) == "NOARCHIVE":
                raise ArchiveNotRegistered(place.queue, name, table.value) from None
            raise _owned(exc, place, name, table.value) or exc from None
        return to_str(reply)

    @translate_errors
    def remove(self, queue: str, name: str) -> int:
        """Remove archive ``name`` of ``queue`` (both streams, its unreported gaps; for
        ``default`` also an earlier version's position), of every partition of a
        partitioned queue (and of its base keys: a registration from before it had
        partitions). Retention no longer waits for it.

        Returns:
            How many streams it was registered for (0: it was not), on the partition
            registered for the most.
        """
        validate_name("archive", name)
        places = dict.fromkeys([self.keys(queue), *self.layout(queue)])
        return max(
            int(
                self.scripts(
                    "archive_remove",
                    [keys.archives, keys.meta, keys.archive_gaps(name)],
                    [name],
                )
            )
            for keys in places
        )

    @translate_errors
    def positions(
        self, where: str | Place, name: str, *, partition: int | None = None
    ) -> dict[str, str]:
        """``{"messages": id, "events": id}`` for the streams archive ``name`` is
        registered for (of the place's partition)."""
        place = place_of(where, partition, caller="broker.archives.positions")
        raw = self.client.hgetall(self.at(place).archives)
        return {
            s.value: to_str(raw[f"{name}:{s.value}".encode()])
            for s in ArchivedStream
            if f"{name}:{s.value}".encode() in raw
        }

    @translate_errors
    def trimmed(self, where: str | Place, *, partition: int | None = None) -> dict[str, str]:
        """Per stream, the greatest entry id retention has removed (``0-0``: none), of
        ``where`` (a partition keeps its own in its ``{q#i}:meta``)."""
        place = place_of(where, partition, caller="broker.archives.trimmed")
        raw = self.client.hmget(self.at(place).meta, list(TRIMMED_FIELDS.values()))
        pairs = zip(TRIMMED_FIELDS, raw, strict=True)
        return {s.value: to_str(v) if v else "0-0" for s, v in pairs}

    @translate_errors
    def gap(
        self,
        where: str | Place,
        name: str,
        stream: ArchivedStream | str,
        *,
        partition: int | None = None,
    ) -> Gap | None:
        """The gap record of archive ``name`` in ``stream`` (of the place's partition;
        None: no loss recorded)."""
        place = place_of(where, partition, caller="broker.archives.gap")
        field = f"{name}:{ArchivedStream(stream).value}"
        gap, purge = self.client.hmget(self.at(place).archives, [f"{field}:gap", f"{field}:purged"])
        return Gap.parse(gap, purge)

    def settle(
        self,
        where: str | Place,
        name: str,
        stream: ArchivedStream | str,
        upto: str,
        loss: str = "",
        *,
        partition: int | None = None,
    ) -> bool:
        """Archive ``name`` has read (or records as lost) the ``stream`` of ``where`` up
        to ``upto``: forget its gap record if that covers it, and
        record ``loss`` (text) for its job.

        Returns:
            True when the gap record was forgotten.
        """
        place = place_of(where, partition, caller="broker.archives.settle")
        keys = self.at(place)
        table = ArchivedStream(stream).value
        args = [validate_name("archive", name), table, upto, loss]
        return bool(self.scripts("archive_gap", [keys.archives, keys.archive_gaps(name)], args))

    @translate_errors
    def losses(self, where: str | Place, name: str, *, partition: int | None = None) -> list[str]:
        """The data losses archive ``name`` went past (oldest first), not yet reported
        (of the place's partition)."""
        place = place_of(where, partition, caller="broker.archives.losses")
        gaps = self.at(place).archive_gaps(name)
        return [to_str(x) for x in self.client.lrange(gaps, 0, -1)]

    @translate_errors
    def forget_losses(
        self, where: str | Place, name: str, count: int, *, partition: int | None = None
    ) -> None:
        """Forget the ``count`` oldest losses (once its job has reported them)."""
        place = place_of(where, partition, caller="broker.archives.forget_losses")
        if count > 0:
            self.client.ltrim(self.at(place).archive_gaps(name), count, -1)

    @translate_errors
    def states(self, queue: str) -> list[ArchiveState]:
        """Every archive of ``queue`` (registered, or an earlier version's), by name and
        stream, with its lag; of a partitioned queue, one per partition too (by
        partition); two round trips."""
        layout = self.layout(queue)
        with self.client.pipeline(transaction=False) as pipe:
            for keys in layout:
                pipe.hgetall(keys.archives)
                pipe.hmget(keys.meta, [legacy_field(s) for s in ArchivedStream])
            replies = pipe.execute()
        found: list[tuple[QueueKeys, str, ArchivedStream, str, int | None, Gap | None]] = []
        for index, keys in enumerate(layout):
            registry, legacy = replies[2 * index], replies[2 * index + 1]
            found += [(keys, *f) for f in _registered(registry, legacy)]
        with self.client.pipeline(transaction=False) as pipe:
            for keys, _, stream, position, _, _ in found:
                key = stream_key(keys, stream)
                pipe.execute_command("XRANGE", key, f"({position}", "+", "COUNT", LAG_COUNT_CAP)
            after = pipe.execute(raise_on_error=False)
        return [
            ArchiveState(
                queue=queue,
                name=name,
                table=stream.value,
                position=position,
                since_ms=since,
                lag=len(entries) if isinstance(entries, list) else 0,
                gap=gap,
                partition=keys.part,
            )
            for (keys, name, stream, position, since, gap), entries in zip(
                found, after, strict=True
            )
        ]

    def unarchived(self, queue: str) -> list[Unarchived]:
        """The archives of ``queue``'s messages that have not stored all of them yet,
        with how many (by name): what :meth:`Broker.purge` would make each lose. An
        earlier version's unnamed archive counts as ``default``."""
        lags: dict[str, list[int]] = {}
        for state in self.states(queue):
            if state.table == ArchivedStream.MESSAGES.value:
                lags.setdefault(state.name, []).append(state.lag)
        return [
            Unarchived(name, sum(lag), any(n >= LAG_COUNT_CAP for n in lag))
            for name, lag in sorted(lags.items())
            if sum(lag) > 0
        ]


def _registered(
    registry: dict[bytes, bytes], legacy: list[bytes | None]
) -> list[tuple[str, ArchivedStream, str, int | None, Gap | None]]:
    """The archives one ``archives`` hash (and an earlier version's ``meta`` fields)
    records: (name, stream, position, registered at, gap), by name and stream."""
    found: list[tuple[str, ArchivedStream, str, int | None, Gap | None]] = []
    fields = {to_str(k): v for k, v in registry.items()}
    for field, value in sorted(fields.items()):
        name, _, table = field.partition(":")
        if table in {s.value for s in ArchivedStream}:
            since = fields.get(f"{field}:since")
            gap = Gap.parse(fields.get(f"{field}:gap"), fields.get(f"{field}:purged"))
            found.append((name, ArchivedStream(table), to_str(value), int(since or 0) or None, gap))
    for stream, old in zip(ArchivedStream, legacy, strict=True):
        if old is not None and not any(f[0] == DEFAULT_ARCHIVE and f[1] is stream for f in found):
            found.append((DEFAULT_ARCHIVE, stream, to_str(old), None, None))
    return found
