"""The order in which a replay publishes: what the writer's tasks get, sorted and shuffled
so that each ordering key's messages are published by one task, in their order."""

from __future__ import annotations

from typing import Any

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
    ``…-5``: a batch published in one millisecond would be replayed out of order."""
    ms, seq = (F.split(F.col("entry_id"), "-").getItem(i).try_cast("long") for i in (0, 1))
    return [F.col("published_at"), ms, seq, F.col("entry_id")]


def _has_keys(days: DataFrame) -> bool:
    """Whether ``days`` (the directories the selection reads) hold a message with an
    ordering key: a small job that reads the ``key`` column only, and Parquet's
    statistics skip the row groups where it has no value (an archive without keys costs
    the files' footers). Not the selection's exact range: its time bounds would read
    ``published_at`` of every row of those days, as much as counting the selection
    (bench/RESULTS.md, issue 37); a key outside the range on the same days only costs
    a shuffle that was not needed."""
    # isEmpty takes one row (a partition first, then the others), cheaper than counting
    # a limit of one (measured: 1.4 s against 1.9 s of JVM time on a week's files).
    return not days.where(F.col("key").isNotNull()).select("key").isEmpty()


def publish_frame(
    frame: DataFrame, days: DataFrame, options: ReplayOptions, partitioned: bool = False
) -> DataFrame:
    """``frame`` as the writer's input: ordered, with the columns the writer reads, and
    with ``once`` the derived ids (original id kept in column ``original_id``).
    ``days``: the directories ``frame`` was selected from (:func:`_has_keys`).
    ``partitioned``: the target queue has partitions (each key's messages from one task)."""
    if options.ordered:
        ordered = frame.orderBy(*publish_order()).coalesce(1)
    elif options.where or partitioned or _has_keys(days):
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
