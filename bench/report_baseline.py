"""The baseline of the ``report`` job: a hand-written PySpark job computing the same aggregates
from the same archive, the way one would write it without our package.

``bench/history_speed.py --only report`` times the report (its command line, with the
CLI's defaults) against this, in the same run, on the same archive. Run alone::

    .venv/bin/python bench/report_baseline.py --root ARCHIVE --since T --until T --out DIR

It starts a plain session (``SparkSession.builder.master(M).getOrCreate()``: Spark's own
defaults, only the UI off and the session time zone UTC, as in every job of ours), reads
``ROOT/messages`` and ``ROOT/events`` with Spark's Parquet reader (the archive's
``_spark_metadata`` sink log decides which files, as for the report), and writes each
aggregate with ``df.write.parquet`` to ``DIR/<name>``. Hour buckets (the report's choice
for a range whose data spans more than six hours, as the bench's does). Nothing of
``redisq_django`` is imported: it is what a user would write instead of running the report.

The aggregates are the report's (``redisq_django/pipeline/report.py``): per queue, consumer
and hour the published, handled, failed, retried, dead and re-driven counts; the publish ->
handled latency and the handler's duration at p50/p95/p99 (``percentile_approx``,
accuracy 10,000); the backlog (cumulated, from the least start that keeps it >= 0); the
attempts of handled and dead events; the error classes with count, first and last seen, a
sample id and the last message; and the range's totals per queue and consumer. The
consumers are those with events in the range or in the 30 days before it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from typing import Any

LOOKBACK_LATENCY = dt.timedelta(days=1)
LOOKBACK_CONSUMERS = dt.timedelta(days=30)
ACCURACY = 10_000


def aggregates(spark: Any, root: str, since: dt.datetime, until: dt.datetime) -> dict[str, Any]:
    """The report's aggregates over ``[since, until)`` as lazy DataFrames."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def read(table: str, column: str, lo: dt.datetime, hi: dt.datetime) -> Any:
        frame = spark.read.parquet(f"{root}/{table}")
        return frame.where(
            F.col("date").between(F.lit(lo.date()), F.lit(hi.date()))
            & (F.col(column) >= F.lit(lo))
            & (F.col(column) < F.lit(hi))
        )

    hour = F.date_trunc("hour", F.col("time"))
    events = read("events", "time", since, until).where(F.col("message_id").isNotNull()).cache()
    messages = read("messages", "published_at", since - LOOKBACK_LATENCY, until)
    consumers = (
        read("events", "time", since - LOOKBACK_CONSUMERS, until)
        .where(F.col("consumer").isNotNull())
        .select("queue", "consumer")
        .distinct()
    )

    def n(*kinds: str) -> Any:
        return F.sum(F.col("event").isin(*kinds).cast("long"))

    event_counts = [
        n("handled").alias("handled"),
        n("retried", "dead").alias("failed"),
        n("retried").alias("retried"),
        n("dead").alias("dead"),
        n("redriven").alias("redriven"),
    ]

    def percentiles(column: str) -> list[Any]:
        p = F.percentile_approx(column, [0.5, 0.95, 0.99], ACCURACY)
        return [p[i].alias(f"{column[:-3]}_p{q}") for i, q in enumerate((50, 95, 99))]

    in_range = messages.where(F.col("published_at") >= F.lit(since))
    published = in_range.groupBy("queue", F.date_trunc("hour", "published_at").alias("bucket")).agg(
        F.count("*").alias("published")
    )
    keys = ["queue", "consumer", "bucket"]
    counts = (
        published.join(consumers, "queue", "left")
        .join(
            events.groupBy("queue", "consumer", hour.alias("bucket")).agg(*event_counts),
            keys,
            "full_outer",
        )
        .na.fill(0)
    )
    timed = (
        events.where(F.col("event") == "handled")
        .join(
            messages.select("queue", "message_id", "published_at"), ["queue", "message_id"], "left"
        )
        .select(
            "queue",
            "consumer",
            hour.alias("bucket"),
            "duration_ms",
            ((F.unix_micros("time") - F.unix_micros("published_at")) / 1000).alias("latency_ms"),
        )
    )
    timing = [
        F.count("*").alias("handled"),
        F.count("latency_ms").alias("latency_n"),
        *percentiles("latency_ms"),
        *percentiles("duration_ms"),
    ]
    latency = timed.groupBy(*keys).agg(*timing)
    by_consumer = Window.partitionBy("queue", "consumer").orderBy("bucket")
    cumulated = (
        counts.where(F.col("consumer").isNotNull())
        .withColumn("published_total", F.sum("published").over(by_consumer))
        .withColumn("redriven_total", F.sum("redriven").over(by_consumer))
        .withColumn("settled_total", F.sum(F.col("handled") + F.col("dead")).over(by_consumer))
    )
    start = F.greatest(
        F.lit(0),
        F.max(F.col("settled_total") - F.col("published_total") - F.col("redriven_total")).over(
            Window.partitionBy("queue", "consumer")
        ),
    )
    backlog = cumulated.withColumn("start", start).select(
        *keys,
        "start",
        "published_total",
        "redriven_total",
        "settled_total",
        (
            F.col("start")
            + F.col("published_total")
            + F.col("redriven_total")
            - F.col("settled_total")
        ).alias("backlog"),
    )
    attempts = (
        events.where(F.col("event").isin("handled", "dead"))
        .groupBy("queue", "consumer", "event", "attempt")
        .count()
    )
    errors = (
        events.where(F.col("event").isin("retried", "dead"))
        .na.fill({"error_class": "(none)"})
        .groupBy("queue", "consumer", "error_class")
        .agg(
            F.count("*").alias("count"),
            F.min("time").alias("first_seen"),
            F.max("time").alias("last_seen"),
            F.min_by("message_id", "time").alias("sample_message_id"),
            F.max_by("error_message", "time").alias("last_message"),
        )
    )
    totals = (
        in_range.groupBy("queue")
        .agg(F.count("*").alias("published"))
        .join(
            consumers.join(
                events.groupBy("queue", "consumer").agg(*event_counts),
                ["queue", "consumer"],
                "left",
            ),
            "queue",
            "full_outer",
        )
        .na.fill(0)
        .join(timed.groupBy("queue", "consumer").agg(*timing[1:]), ["queue", "consumer"], "left")
    )
    return {
        "counts": counts,
        "latency": latency,
        "backlog": backlog,
        "attempts": attempts,
        "errors": errors,
        "totals": totals,
    }


def run(spark: Any, root: str, since: dt.datetime, until: dt.datetime, out: str) -> float:
    """Compute and write every aggregate to ``out/<name>``; returns the seconds."""
    started = time.perf_counter()
    for name, frame in aggregates(spark, root, since, until).items():
        frame.write.mode("overwrite").parquet(f"{out}/{name}")
    spark.catalog.clearCache()
    return time.perf_counter() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", required=True)
    ap.add_argument("--since", required=True, type=dt.datetime.fromisoformat)
    ap.add_argument("--until", required=True, type=dt.datetime.fromisoformat)
    ap.add_argument("--out", required=True)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(args.master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    seconds = run(spark, args.root, args.since, args.until, args.out)
    spark.stop()
    print(f"baseline report in {seconds:.1f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
