"""The archive's gaps: entries removed before the archive stored them, kept in ``ROOT/_gaps``.

An archive run with ``failOnDataLoss`` false goes past a data loss; its reader records the
loss in Redis (``redisq:{q}:archive:<name>:gaps``). At the end of the run the job moves
those records here, one JSON object per line (Spark's JSON source, so any Hadoop file
system works), and the ``report`` job shows them: "entries … to … (N) never archived:
dropped by the hard cap" (or "removed by a purge at …")."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from redisq_django.pipeline import places
from redisq_django.pipeline.loss import Loss
from redisq_django.pipeline.options import ArchiveOptions, join_path
from redisq_django.pipeline.preflight import queue_places, redis_client

#: The columns of ``ROOT/_gaps`` (the fields of :class:`Loss`).
GAPS_SCHEMA = StructType(
    [
        StructField("queue", StringType()),
        StructField("table", StringType()),
        StructField("archive", StringType()),
        StructField("after", StringType()),
        StructField("first", StringType()),
        StructField("last", StringType()),
        StructField("before", StringType()),
        StructField("count", LongType()),
        StructField("at_most", BooleanType()),
        StructField("found_ms", LongType()),
        # Added with partitioned queues: the gaps written before read as null (none).
        StructField("partition", IntegerType()),
        # Added with purges recorded as gaps: the gaps written before read as null.
        StructField("purged_ms", LongType()),
        StructField("purged", LongType()),
    ]
)


def collect(spark: SparkSession, options: ArchiveOptions, queues: tuple[str, ...]) -> list[Loss]:
    """Move the losses the archive recorded in Redis for ``queues`` (in each partition
    of a partitioned one) to ``ROOT/_gaps``.

    Written before they are forgotten in Redis: a crash in between writes them again
    next run (a repeated line, never a lost one).

    Returns:
        The losses moved, oldest first per queue.
    """
    found: list[tuple[str, int, list[Loss]]] = []
    with redis_client(options) as client:
        archives = places.archives(client, options.prefix)
        for queue in queue_places(client, options, queues):  # "q", or "q#i"
            texts = archives.losses(queue, options.name)
            if texts:
                parsed = [x for t in texts if (x := Loss.from_json(t)) is not None]
                found.append((queue, len(texts), parsed))
        losses = [loss for _, _, parsed in found for loss in parsed]
        if losses:
            rows = [tuple(getattr(x, f.name) for f in GAPS_SCHEMA.fields) for x in losses]
            frame = spark.createDataFrame(rows, GAPS_SCHEMA).coalesce(1)
            frame.write.mode("append").json(options.gaps_path)
        for queue, count, _ in found:
            archives.forget_losses(queue, options.name, count)
    return losses


def read(spark: SparkSession, root: str) -> list[Loss]:
    """Every gap recorded under ``root`` (none when there is no ``ROOT/_gaps``), in the
    order they were found; a gap recorded twice (a crash between writing and forgetting
    it) is listed once."""
    path = join_path(root, "_gaps")
    jvm: Any = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(hadoop_path):
        return []
    rows = spark.read.schema(GAPS_SCHEMA).json(path).distinct().collect()
    losses = [Loss(**row.asDict()) for row in rows]
    return sorted(losses, key=lambda x: (x.found_ms, x.queue, x.table))


def lines(
    spark: SparkSession, root: str, since: dt.datetime, until: dt.datetime, queues: Sequence[str]
) -> list[str]:
    """The gaps of the archive under ``root`` whose entries fall in ``[since, until)``, of
    ``queues`` (all when empty), one line each for the report: ``orders messages:
    entries … to … (N) never archived: dropped by the hard cap`` (or ``removed by a purge
    at …``)."""
    lo, hi = since.timestamp() * 1000, until.timestamp() * 1000
    out = []
    for x in read(spark, root):
        start = int((x.first or x.after).split("-")[0])
        end = int((x.last or x.before or x.after).split("-")[0])
        if end >= lo and start < hi and (not queues or x.queue in queues):
            out.append(f"{x.where} {x.table}: {x.span()} never archived: {x.cause()}")
    return out
