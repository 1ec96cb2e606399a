"""Checks a job makes on the driver before Spark runs anything, without PySpark.

A wrong Redis URL should be one clear line at once, not a stack trace from inside a Spark
task after the JVM started; the CLI runs these before building the session.
"""

from __future__ import annotations

from typing import Any

import redis

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.keys import queue_keys
from redisq_django.pipeline.options import ArchiveOptions, JobError, one_line, redact_url


def redis_client(options: ArchiveOptions) -> Any:
    """A redis-py client for ``options.redis_url`` (a cluster client with ``cluster``)."""
    if options.cluster:
        return redis.RedisCluster.from_url(options.redis_url)
    return redis.Redis.from_url(options.redis_url)


def commit_positions(options: ArchiveOptions, table: str, offset: dict[str, str]) -> None:
    """Record in Redis that ``table`` is archived up to ``offset`` (``{queue: id}``), as
    the data source's ``commit()`` does; positions never move back."""
    with redis_client(options) as client:
        broker = Broker(client, CoreConfig(prefix=options.prefix))
        for queue, entry_id in sorted(offset.items()):
            if entry_id != "0-0":
                broker.commit_archive(queue, table, entry_id)


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
    events stream) of each of ``queues`` that has one; empty or missing streams are left
    out. One round trip."""
    with redis_client(options) as client:
        pipe = client.pipeline(transaction=False)
        for queue in queues:
            keys = queue_keys(options.prefix, queue)
            pipe.xrevrange(keys.log if table == "messages" else keys.events, count=1)
        replies = pipe.execute()
    return {
        queue: entry[0][0].decode() if isinstance(entry[0][0], bytes) else str(entry[0][0])
        for queue, entry in zip(queues, replies, strict=True)
        if entry
    }
