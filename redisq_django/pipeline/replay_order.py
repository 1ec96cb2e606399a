"""The order in which a replay publishes: what the writer's tasks get, sorted and shuffled
so that each ordering key's messages are published by one task, in their order."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from redisq_django.pipeline import places
from redisq_django.pipeline.job_options import ReplayOptions

#: The columns the writer reads (``df.write.format("redisq")``).
WRITTEN_COLUMNS = ("payload", "headers", "message_id", "key")


def publish_order() -> list[Column]:
    """The order messages were published in: ``published_at``, then the entry id's two
    numbers (milliseconds, then sequence). As text the id would put ``…-18`` before
    ``…-5``: a batch published in one millisecond would be replayed out of order.
    ``substring_index`` rather than ``split``: no array per row to sort by (a tenth of
    the JVM's CPU in a replay's sort, bench/RESULTS.md, issue 37)."""
    ms, seq = (F.substring_index(F.col("entry_id"), "-", n).try_cast("long") for n in (1, -1))
    return [F.col("published_at"), ms, seq, F.col("entry_id")]


def _has_keys(days: DataFrame, options: ReplayOptions) -> bool:
    """Whether ``days`` (the directories the selection reads) hold a message with an
    ordering key. Not the selection's exact range: its time bounds would read
    ``published_at`` of every row of those days, as much as counting the selection
    (bench/RESULTS.md, issue 37); a key outside the range on the same days only costs
    a shuffle that was not needed.

    Answered from the files' Parquet footers when they are local (the ``key`` column's
    null count in each row group: milliseconds, where a Spark job takes half a second
    before the first message goes out), else by a small job that reads the ``key``
    column only (Parquet's statistics skip the row groups where it has no value)."""
    found = _keys_in_footers(days, options)
    if found is not None:
        return found
    # isEmpty takes one row (a partition first, then the others), cheaper than counting
    # a limit of one (measured: 1.4 s against 1.9 s of JVM time on a week's files).
    return not days.where(F.col("key").isNotNull()).select("key").isEmpty()


#: A file's directories below the table: ``queue=Q/date=D`` (values as Spark escapes them).
_DIRECTORIES = re.compile(r"/queue=([^/]+)/date=(\d{4}-\d{2}-\d{2})/[^/]+$")


def _keys_in_footers(days: DataFrame, options: ReplayOptions) -> bool | None:
    """Whether a file of the queue's selected days has a row group with a key, read
    from the footers of the files Spark would read (``inputFiles``: the archive's
    committed files); None when that cannot be told so (a file that is not local, a
    footer without the column's null count, a file that cannot be read): the caller
    then asks Spark."""
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    first = options.since.date() if options.since is not None else None
    last = options.until.date() if options.until is not None else None
    try:
        for uri in days.inputFiles():
            parts = urlsplit(uri)
            path = unquote(parts.path)  # the file's name on disk
            found = _DIRECTORIES.search(path)
            if parts.scheme != "file" or found is None:
                return None
            queue, day = unquote(found[1]), dt.date.fromisoformat(found[2])
            if queue != options.queue or (first and day < first) or (last and day > last):
                continue
            if _file_has_keys(pq.read_metadata(path)):
                return True
    except (OSError, ValueError):  # gone meanwhile (compact), unreadable: Spark decides
        return None
    return False


def _file_has_keys(footer: Any) -> bool:
    """Whether a row group of a Parquet file (its ``footer``) has a non-null ``key``.

    Raises:
        ValueError: a row group's ``key`` column has no null count.
    """
    for g in range(footer.num_row_groups):
        group = footer.row_group(g)
        for c in range(group.num_columns):
            column = group.column(c)
            if column.path_in_schema != "key":
                continue
            stats = column.statistics
            if stats is None or not stats.has_null_count:
                raise ValueError("no null count for column key")
            if stats.null_count < group.num_rows:
                return True
    return False  # no row group with a key (files written before the column: none)


def publish_frame(
    frame: DataFrame, days: DataFrame, options: ReplayOptions, partitioned: bool = False
) -> DataFrame:
    """``frame`` as the writer's input: ordered, with the columns the writer reads, and
    with ``once`` the derived ids (original id kept in column ``original_id``).
    ``days``: the directories ``frame`` was selected from (:func:`_has_keys`).
    ``partitioned``: the target queue has partitions (each key's messages from one task)."""
    if options.ordered:
        ordered = frame.orderBy(*publish_order()).coalesce(1)
    elif options.where or partitioned or _has_keys(days, options):
        # The shuffle evaluates the predicate on every row before any task publishes; by
        # ordering key, so that one task publishes all of a key's messages, in order (the
        # writer's broker routes them to their key's partition: per-key order kept).
        parallelism = frame.sparkSession.sparkContext.defaultParallelism
        by_key = F.coalesce(F.col("key"), F.col("message_id"))
        ordered = frame.repartition(parallelism, by_key).sortWithinPartitions(*publish_order())
    else:
        ordered = frame.sortWithinPartitions(*publish_order())
    if not options.once:
        return ordered.select(*WRITTEN_COLUMNS)
    key = F.concat(F.lit(options.run_key() + "|"), F.col("message_id"))
    return ordered.select(
        "payload",
        "headers",
        "key",
        F.substring(F.sha2(key, 256), 1, 32).alias("message_id"),
        F.col("message_id").alias("original_id"),
    )


def target_partitioned(options: ReplayOptions) -> bool:
    """Whether Redis records partitions for the target queue (one round trip)."""
    conn: Any = (redis.RedisCluster if options.cluster else redis.Redis).from_url(options.redis_url)
    with conn:
        return places.counts(conn, options.prefix, [options.queue])[options.queue] > 1
