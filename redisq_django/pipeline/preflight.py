"""Checks a job makes on the driver before Spark runs anything, without PySpark.

A wrong Redis URL should be one clear line at once, not a stack trace from inside a Spark
task after the JVM started; the CLI runs these before building the session.
"""

from __future__ import annotations

import redis

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.archives import (
    TRIMMED_FIELDS,
    ArchivedStream,
    Registered,
    parse_id,
    stream_key,
)
from redisq_django.core.errors import ArchiveNotRegistered, ArchiveOwned
from redisq_django.core.keys import readable_names
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str
from redisq_django.pipeline import owner, places
from redisq_django.pipeline.options import ArchiveOptions, JobError, one_line, redact_url


def redis_client(options: ArchiveOptions) -> RedisClient:
    """A redis-py client for ``options.redis_url`` (a cluster client with ``cluster``)."""
    if options.cluster:
        return redis.RedisCluster.from_url(options.redis_url)
    return redis.Redis.from_url(options.redis_url)


def commit_positions(
    options: ArchiveOptions, table: str, offset: dict[str, str], *, ran: bool = True
) -> None:
    """Record in Redis that ``table`` is archived up to ``offset`` (a checkpoint's:
    ``{place: id}``, a place a queue or ``queue#i`` for a partition, and its owner token),
    as the data source's ``commit()`` does; positions never move back. An offset without
    a token (logged by an earlier version) commits nothing: its query's next batch does.

    Args:
        ran: the table's query ran in this job (so registered each queue); else the
            queues the archive is not registered for (removed since) are left alone.

    Raises:
        ArchiveNotRegistered: ``ran``, and the archive was removed meanwhile.
        ArchiveOwned: another archive took the name over.
    """
    token, positions = owner.split(offset)
    if not token:
        return
    with redis_client(options) as client:
        archives = places.archives(client, options.prefix)
        for where, entry_id in sorted(positions.items()):
            if entry_id == "0-0":
                continue
            try:
                archives.commit(
                    where, options.name, table, entry_id, owner=token, take_over=options.take_over
                )
            except ArchiveNotRegistered:
                if ran:
                    raise


def queues_to_archive(options: ArchiveOptions) -> tuple[str, ...]:
    """The queues the archive run covers: ``options.queues``, else those in ``P:queues``
    now. Asks Redis either way, so it also proves Redis answers.

    Raises:
        JobError: Redis cannot be reached; the message names the URL (never its password).
    """
    try:
        with redis_client(options) as client:
            existing = Broker(client, CoreConfig(prefix=options.prefix)).queues()
    except Exception as exc:  # redis-py's errors or RedisUnavailable: all mean the same here
        raise JobError(
            f"cannot reach Redis at {redact_url(options.redis_url)}: {one_line(exc)}. "
            "Check the URL (--redis-url; for manage.py REDISQ['URL'] or the cache) and "
            "that Redis runs."
        ) from exc
    # A registry member that is no queue name (another client's) is no queue to archive.
    return options.queues or tuple(readable_names(existing)[0])


def queue_places(
    client: RedisClient, options: ArchiveOptions, queues: tuple[str, ...]
) -> list[str]:
    """The places of ``queues``: each queue, or each partition (``queue#i``) of a
    partitioned one, as Redis records it. One round trip."""
    return [
        name
        for name, _ in places.layouts(options.prefix, places.counts(client, options.prefix, queues))
    ]


def place_count(options: ArchiveOptions, queues: tuple[str, ...]) -> int:
    """How many streams of a table the archive of ``queues`` reads (a partitioned queue's
    partitions each count)."""
    with redis_client(options) as client:
        return len(queue_places(client, options, queues))


def last_entry_ids(options: ArchiveOptions, table: str, queues: tuple[str, ...]) -> dict[str, str]:
    """The last entry id of ``table``'s stream (``messages``: the log, ``events``: the
    events stream) of each of ``queues`` (each partition's, keyed ``queue#i``), or the
    last id retention removed from it when that is later (entries gone still make news:
    a loss to find); streams with neither are left out. Two round trips."""
    field = TRIMMED_FIELDS[ArchivedStream(table)]
    with redis_client(options) as client:
        wheres = queue_places(client, options, queues)
        pipe = client.pipeline(transaction=False)
        for where in wheres:
            keys = places.keys_of(options.prefix, where)
            pipe.xrevrange(stream_key(keys, table), count=1)
            pipe.hget(keys.meta, field)
        replies = pipe.execute()
    out = {}
    for where, entry, gone in zip(wheres, replies[::2], replies[1::2], strict=True):
        last = to_str(entry[0][0]) if entry else None
        if gone is not None:
            _check_trimmed(places.keys_of(options.prefix, where).meta, field, to_str(gone))
        if gone is not None and (last is None or parse_id(to_str(gone)) > parse_id(last)):
            last = to_str(gone)
        if last is not None:
            out[where] = last
    return out


def _check_trimmed(meta: str, field: str, value: str) -> None:
    """Refuse a retention mark that is no entry id (another client wrote it): the job
    cannot tell what retention removed, so it says what to repair instead of guessing."""
    ms, dash, seq = value.partition("-")
    if ms.isascii() and ms.isdigit() and (not dash or (seq.isascii() and seq.isdigit())):
        return
    raise JobError(
        f"{meta} field {field!r} holds {value[:60]!r}, which is no entry id: another client "
        "wrote it, and the archive cannot tell what retention removed. Delete the field "
        f"(HDEL {meta} {field}) or set it to the last entry id retention removed, then run "
        "the job again."
    )


def register(
    options: ArchiveOptions, table: str, queues: tuple[str, ...], offset: dict[str, str] | None
) -> list[str]:
    """Register the archive for ``table`` of ``queues`` (of each partition of a
    partitioned one) before its query starts: at the checkpoint's ``offset`` where it
    has one for the queue or partition (a query that goes on), else at the earliest (a
    new one). The query registers them too (and queues that appear
    later); doing it here first lets the job say when one was not registered.

    The name must be this archive's (its checkpoint's owner token, which a new archive
    has not made yet): another archive's is refused unless ``options.take_over``.

    Returns:
        One line per queue where the archive was not registered although its checkpoint
        has a position there (removed, or a new Redis: registered again there), or was
        registered although it has no checkpoint (an archive of an earlier version), or
        was taken over.

    Raises:
        JobError: another archive owns the name (its message says what to do).
    """
    notes = []
    token, positions = owner.split(offset)
    with redis_client(options) as client:
        archives = places.archives(client, options.prefix)
        for queue in queue_places(client, options, queues):  # "q", or "q#i"
            start = positions.get(queue)
            try:
                got = archives.register(
                    queue,
                    options.name,
                    table,
                    start or "earliest",
                    owner=token,
                    take_over=options.take_over,
                )
            except ArchiveOwned as exc:
                raise JobError(str(exc)) from None
            taking = options.take_over and not start and got.status is Registered.ALREADY
            if got.taken_from_ms is not None or taking:
                notes.append(
                    f"archive {options.name!r} of the {table} of queue {queue!r}: taken over "
                    f"(--take-over) at {got.position}; an archive that owned the name stops "
                    "at its next commit"
                )
            elif start and got.status is Registered.NOW:
                notes.append(
                    f"archive {options.name!r} was not registered for the {table} of queue "
                    f"{queue!r} (removed, or a new Redis): registered again at {start}, "
                    "where its checkpoint is"
                )
            elif not start and got.status is Registered.ALREADY:
                notes.append(
                    f"archive {options.name!r} is registered for the {table} of queue "
                    f"{queue!r} already (at {got.position}) but has no checkpoint here: it "
                    "goes on from there. If another archive uses this name, give this one a "
                    "name of its own (--name)"
                )
    return notes
