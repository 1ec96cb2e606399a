"""Helpers of the archive tests: publish messages, write lifecycle events by hand, read
the archive back (with Spark, which sees only committed files)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from redisq_django.core import Broker

#: Messages per publish round trip.
CHUNK = 100


def publish(broker: Broker, queue: str, n: int, *, start: int = 0) -> list[str]:
    """Publish ``n`` small messages to ``queue``; returns their ids (= entry ids).

    The chunks are a few milliseconds apart: the source splits a stream into partitions
    by time, and one batch can fit in a single millisecond."""
    ids: list[str] = []
    for lo in range(start, start + n, CHUNK):
        hi = min(lo + CHUNK, start + n)
        ids += broker.publish_many(queue, [{"n": i} for i in range(lo, hi)])
        time.sleep(0.002)
    return ids


def add_events(broker: Broker, queue: str, message_ids: list[str]) -> int:
    """Write lifecycle events for ``message_ids`` to ``queue``'s events stream in the
    spec's format, as a history-on worker would: one ``handled`` entry per 50 messages,
    a ``retried`` and a ``dead`` for the first message, and a ``reset``.

    Returns:
        The rows the archive's events table has for them (one per message of an entry,
        one for the ``reset``).
    """
    key = broker.keys(queue).events
    client = broker.client
    rows = 0
    first = message_ids[0]
    client.xadd(
        key,
        {
            "e": "retried",
            "g": "billing",
            "c": "host:1:ab",
            "m": json.dumps([[first, 1, 12]]),
            "error_class": "ValueError",
            "error_message": "bad",
            "next_due": "1700000000000",
        },
    )
    client.xadd(
        key,
        {
            "e": "dead",
            "g": "billing",
            "c": "host:1:ab",
            "m": json.dumps([[first, 2, 3]]),
            "error_class": "ValueError",
            "error_message": "bad again",
            "reason": "failed",
        },
    )
    rows += 2
    for lo in range(0, len(message_ids), 50):
        batch = [[mid, 1, 5] for mid in message_ids[lo : lo + 50]]
        client.xadd(key, {"e": "handled", "g": "mail", "c": "host:2:cd", "m": json.dumps(batch)})
        rows += len(batch)
    client.xadd(key, {"e": "reset", "g": "mail", "c": "", "m": "[]", "start": "0-0"})
    return rows + 1


def read_table(spark: SparkSession, root: Path | str, table: str) -> DataFrame:
    """The committed rows of one archived table (``_spark_metadata`` decides what is in)."""
    return spark.read.parquet(f"{root}/{table}")


def count_and_distinct(frame: DataFrame, *columns: str) -> tuple[int, int]:
    """(rows, distinct values of ``columns``) computed by Spark."""
    row = frame.agg(
        F.count(F.lit(1)).alias("n"), F.count_distinct(*[F.col(c) for c in columns]).alias("d")
    ).first()
    assert row is not None
    return int(row["n"]), int(row["d"])


def entry_key(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a comparable (ms, seq)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def max_entry_id(frame: DataFrame) -> str | None:
    """The greatest ``entry_id`` in ``frame`` (numerically, as Redis orders them)."""
    parts = F.split(F.col("entry_id"), "-")
    row = frame.agg(
        F.max(F.struct(parts[0].cast("long").alias("ms"), parts[1].cast("long").alias("seq")))
    ).first()
    if row is None or row[0] is None:
        return None
    top: Any = row[0]
    return f"{top['ms']}-{top['seq']}"
