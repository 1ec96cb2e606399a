"""Checks a job makes on the driver before Spark runs anything, without PySpark.

A wrong Redis URL should be one clear line at once, not a stack trace from inside a Spark
task after the JVM started; the CLI runs these before building the session.
"""

from __future__ import annotations

import redis

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.errors import ArchiveNotRegistered
from redisq_django.core.keys import queue_keys
from redisq_django.core.named_archives import (
    TRIMMED_FIELDS,
    ArchivedStream,
    Registered,
    parse_id,
    stream_key,
)
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str
from redisq_django.pipeline.options import ArchiveOptions, JobError, one_line, redact_url


def redis_client(options: ArchiveOptions) -> RedisClient:
    """A redis-py client for ``options.redis_url`` (a cluster client with ``cluster``)."""
    if options.cluster:
        return redis.RedisCluster.from_url(options.redis_url)
    return redis.Redis.from_url(options.redis_url)


def commit_positions(
    options: ArchiveOptions, table: str, offset: dict[str, str], *, ran: bool = True
) -> None:
    """Record in Redis that ``table`` is archived up to ``offset`` (``{queue: id}``), as
    the data source's ``commit()`` does; positions never move back.

    Args:
        ran: the table's query ran in this job (so registered each queue); else the
            queues the archive is not registered for (removed since) are left alone.

    Raises:
        ArchiveNotRegistered: ``ran``, and the archive was removed meanwhile.
    """
    with redis_client(options) as client:
        archives = Broker(client, CoreConfig(prefix=options.prefix)).archives
        for queue, entry_id in sorted(offset.items()):
            if entry_id == "0-0":
                continue
            try:
                archives.commit(queue, options.name, table, entry_id)
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
    return options.queues or tuple(existing)


def last_entry_ids(options: ArchiveOptions, table: str, queues: tuple[str, ...]) -> dict[str, str]:
    """The last entry id of ``table``'s stream (``messages``: the log, ``events``: the
    events stream) of each of ``queues``, or the last id retention removed from it when
    that is later (entries gone still make news: a loss to find); streams with neither
    are left out. One round trip."""
    field = TRIMMED_FIELDS[ArchivedStream(table)]
    with redis_client(options) as client:
        pipe = client.pipeline(transaction=False)
        for queue in queues:
            keys = queue_keys(options.prefix, queue)
            pipe.xrevrange(stream_key(keys, table), count=1)
            pipe.hget(keys.meta, field)
        replies = pipe.execute()
    out = {}
    for queue, entry, gone in zip(queues, replies[::2], replies[1::2], strict=True):
        last = to_str(entry[0][0]) if entry else None
        if gone is not None and (last is None or parse_id(to_str(gone)) > parse_id(last)):
            last = to_str(gone)
        if last is not None:
            out[queue] = last
    return out


def register(
    options: ArchiveOptions, table: str, queues: tuple[str, ...], offset: dict[str, str] | None
) -> list[str]:
    """Register the archive for ``table`` of ``queues`` before its query starts: at the
    checkpoint's ``offset`` where it has one for the queue (a query that goes on), else
    at the earliest (a new one). The query registers them too (and queues that appear
    later); doing it here first lets the job say when one was not registered.

    Returns:
        One line per queue where the archive was not registered although its checkpoint
        has a position there (removed, or a new Redis: registered again there), or was
        registered although it has no checkpoint (a second archive of that name?).
    """
    notes = []
    with redis_client(options) as client:
        archives = Broker(client, CoreConfig(prefix=options.prefix)).archives
        for queue in queues:
            start = (offset or {}).get(queue)
            got = archives.register(queue, options.name, table, start or "earliest")
            if start and got.status is Registered.NOW:
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
