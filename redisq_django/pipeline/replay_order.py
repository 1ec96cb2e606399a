"""The order in which a replay publishes: what the writer's tasks get, sorted and shuffled
so that each ordering key's messages are published by one task, in their order."""

from __future__ import annotations

from typing import Any

import redis
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from redisq_django.pipeline import places
from redisq_django.pipeline.job_options import ReplayOptions

#: The columns the writer reads (``df.write.format("redisq")``).
WRITTEN_COLUMNS = ("payload", "headers", "message_id", "key")


def _has_keys(frame: DataFrame) -> bool:
    """Whether the selection holds a message with an ordering key: a small job that
    reads the ``key`` column only (Parquet statistics skip the row groups without one)."""
    return bool(frame.where(F.col("key").isNotNull()).select("key").limit(1).count())


def publish_frame(frame: DataFrame, options: ReplayOptions, partitioned: bool = False) -> DataFrame:
    """``frame`` as the writer's input: ordered, with the columns the writer reads, and
    with ``once`` the derived ids (original id kept in column ``original_id``).
    ``partitioned``: the target queue has partitions (each key's messages from one task)."""
    if options.ordered:
        ordered = frame.orderBy("published_at", "entry_id").coalesce(1)
    elif options.where or partitioned or _has_keys(frame):
        # The shuffle evaluates the predicate on every row before any task publishes; by
        # ordering key, so that one task publishes all of a key's messages, in order (the
        # writer's broker routes them to their key's partition: per-key order kept).
        parallelism = frame.sparkSession.sparkContext.defaultParallelism
        by_key = F.coalesce(F.col("key"), F.col("message_id"))
        ordered = frame.repartition(parallelism, by_key).sortWithinPartitions(
            "published_at", "entry_id"
        )
    else:
        ordered = frame.sortWithinPartitions("published_at", "entry_id")
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
