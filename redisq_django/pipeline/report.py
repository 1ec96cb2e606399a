"""The ``report`` job: what the queues and their logical consumers did over a time range.

It reads the archive (``ROOT/messages`` and ``ROOT/events``, see :mod:`.archive`), keeps the
rows of the range (``[since, until)``, UTC) and of the queues asked for, and computes in
Spark, per queue, logical consumer and bucket (an hour; a minute when the range's data spans
at most six hours, so that a short incident in a long range is still drawn as a curve):

- ``counts``: published (messages; the same figure on every consumer of the queue, as each
  consumer gets every message), handled, failed (= retried + dead), retried, dead, redriven;
- ``latency``: publish → handled latency (handled events joined to their message on queue and
  message id) and the handler's ``duration_ms``, p50/p95/p99, in milliseconds;
- ``backlog``: what waits for each consumer at each bucket's end: published + re-driven
  - handled - dead, cumulated from the least start the events allow, never negative
  (:func:`.report_tables.backlog` says why and when it is exact);
- ``attempts``: how many handled and dead events had each attempt number;
- ``errors``: error classes of retried and dead events, with count, first and last seen
  and a sample message id;
- ``totals``: the range as a whole per queue and consumer (counts and percentiles).

The consumers are those with events in the range **or in the**
:data:`CONSUMER_LOOKBACK` **before it** (a consumer stalled the whole range has none in it,
but its messages wait all the same): each gets its queue's published messages, its backlog
and a row of the totals, zeros included. A consumer that has settled, released or reset
nothing in that time is in no event the report reads, so it cannot know it; the lookback
is bounded so that a week's report of a year's archive does not read the year.

Percentiles are ``percentile_approx`` with accuracy :data:`PERCENTILE_ACCURACY` (10000):
the value returned is one whose rank among the ``n`` values is within ``n / 10000`` of the
exact rank (for fewer than 10000 values, an exact one of them).

Only those small aggregates come back to the driver (as Arrow tables: one Spark job
each, the backlog computed from the counts in the driver); the driver writes each as a
Parquet dataset ``DIR/<name>.parquet`` and draws ``DIR/report.html`` from them
(:mod:`.report_html`).
``DIR`` defaults to ``ROOT/reports/<UTC time>/``, and ``ROOT/reports/latest`` then points
at it (a symlink, or a text file holding the directory's name where symlinks fail).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from redisq_django.core.errors import InvalidName
from redisq_django.core.keys import validate_name
from redisq_django.pipeline import gaps, report_tables
from redisq_django.pipeline.options import OptionError, join_path, normalize_root

__all__ = ["ReportOptions", "ReportSummary", "report"]

#: ``percentile_approx``'s accuracy: rank error at most n / PERCENTILE_ACCURACY.
PERCENTILE_ACCURACY = 10000
PERCENTILES = (0.5, 0.95, 0.99)
DEFAULT_DAYS = 7
#: Ranges up to this long get minute buckets, longer ones hour buckets.
MINUTE_BUCKETS_UP_TO = timedelta(hours=6)
#: Bucket sizes in seconds.
BUCKETS = {"minute": 60, "hour": 3600}
#: How long before ``since`` a handled message may have been published and still get its
#: latency measured (the join reads those messages' day directories too).
LATENCY_LOOKBACK = timedelta(days=1)
#: How long before ``since`` the report looks for consumers with no event in the range.
CONSUMER_LOOKBACK = timedelta(days=30)
AGGREGATES = ("counts", "latency", "backlog", "attempts", "errors", "totals")
#: The events' columns the aggregates read (the others are not cached).
EVENT_COLUMNS = (
    "queue",
    "consumer",
    "event",
    "time",
    "message_id",
    "attempt",
    "duration_ms",
    "error_class",
    "error_message",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportOptions:
    """The options of the ``report`` job.

    Attributes:
        root: the archive's root (a path or Hadoop URI).
        out: where the report goes (a local directory); None: ``ROOT/reports/<UTC time>``,
            and ``ROOT/reports/latest`` is moved to it.
        since, until: the range ``[since, until)``; default the last seven days.
        queues: the queues to report on; empty means every queue in the archive.
        bucket: ``"minute"`` or ``"hour"``; None chooses from the span of the range's data
            (minutes up to :data:`MINUTE_BUCKETS_UP_TO`).
    """

    root: str
    out: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    queues: tuple[str, ...] = ()
    bucket: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if not self.root:
            problems.append("the archive root is empty; give a directory or a Hadoop URI")
        for queue in self.queues:
            try:
                validate_name("queue", queue)
            except InvalidName as exc:
                problems.append(str(exc).rstrip("."))
        if self.bucket not in (None, *BUCKETS):
            problems.append(f"the bucket must be one of {', '.join(BUCKETS)}, not {self.bucket!r}")
        since, until = self.window()
        if since >= until:
            problems.append(f"--since ({since.isoformat()}) must be before --until")
        if problems:
            raise OptionError("; ".join(problems))

    def window(self) -> tuple[datetime, datetime]:
        """The range as aware UTC datetimes, defaults filled in."""
        until = self.until or datetime.now(UTC)
        return self.since or until - timedelta(days=DEFAULT_DAYS), until


@dataclass(frozen=True, slots=True)
class ReportSummary:
    """What a report run made: where, over what, and the grand totals."""

    out_dir: Path
    html: Path
    since: datetime
    until: datetime
    bucket: str
    queues: tuple[str, ...]
    consumers: int
    totals: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def line(self) -> str:
        """The one summary line the CLI prints."""
        counts = " ".join(f"{k}={v}" for k, v in self.totals.items())
        return (
            f"report {self.since:%Y-%m-%dT%H:%MZ}..{self.until:%Y-%m-%dT%H:%MZ} per "
            f"{self.bucket}, {len(self.queues)} queue(s), {self.consumers} consumer(s): "
            f"{counts} in {self.seconds:.1f} s -> {self.html}"
        )


def report(spark: SparkSession, options: ReportOptions) -> ReportSummary:
    """Aggregate the archive over ``options``' range and write the Parquet datasets and
    ``report.html``.

    Raises:
        JobError: the output directory is not local (the message says to pass --out).
        pyspark.errors.PySparkException: Spark failed (the CLI prints its first line).
    """
    from redisq_django.pipeline.report_html import ReportData, out_dir_for, point_latest, write_html

    started = time.monotonic()
    since, until = options.window()
    made_at = datetime.now(UTC)
    out_dir, is_default = out_dir_for(options.out, options.root, made_at)
    messages = _read(spark, options, "messages", "published_at", since - LATENCY_LOOKBACK, until)
    # Cached once for the aggregates: only the columns they read. Rows without a message
    # (a reset) still say that their consumer exists.
    raw = _read(spark, options, "events", "time", since, until).select(*EVENT_COLUMNS).persist()
    bucket = options.bucket or _choose_bucket(_data_span(raw, messages, since), since, until)
    events = raw.where(F.col("message_id").isNotNull()).withColumn(
        "bucket", _bucket(F.col("time"), bucket)
    )
    # Read by counts and totals: the scan of earlier events runs once.
    consumers = _consumers(spark, options, raw, since).persist()
    # The join is read twice (latency, totals). One Spark partition per core: each one's
    # percentile summaries (accuracy 10000) are merged per group, so 200 of them (Spark's
    # default shuffle partitions, which adaptive execution cannot coalesce for a cached
    # plan) made the report 3.5x slower on 2 cores.
    timed = _timed(messages, events).coalesce(spark.sparkContext.defaultParallelism).persist()
    try:
        # Fetched, not written by Spark and read back: a job per aggregate instead of
        # three (write, read, collect), and the files land on the driver, beside the HTML.
        tables = {
            name: frame.toArrow()
            for name, frame in _aggregates(
                messages, events, consumers, timed, since, bucket
            ).items()
        }
        tables["backlog"] = report_tables.backlog(tables["counts"])
        for name, table in tables.items():
            report_tables.write(table, out_dir, name)
        data = ReportData(
            since=since,
            until=until,
            bucket=bucket,
            made_at=made_at,
            queues=options.queues,
            accuracy=PERCENTILE_ACCURACY,
            gaps=gaps.lines(spark, options.root, since, until, options.queues),
            **{name: report_tables.rows(name, tables[name]) for name in AGGREGATES},
        )
    finally:
        timed.unpersist()
        consumers.unpersist()
        raw.unpersist()
    html = write_html(data, out_dir / "report.html")
    if is_default:
        point_latest(out_dir)
    totals = {
        key: sum(int(row[key] or 0) for row in data.totals)
        for key in ("handled", "failed", "dead", "redriven")
    }
    totals = {"published": sum(int(r["published"] or 0) for r in _queue_rows(data.totals))} | totals
    return ReportSummary(
        out_dir=out_dir,
        html=html,
        since=since,
        until=until,
        bucket=bucket,
        queues=data.queue_names(),
        consumers=len({(r["queue"], r["consumer"]) for r in data.totals if r["consumer"]}),
        totals=totals,
        seconds=time.monotonic() - started,
    )


def _queue_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per queue (``published`` repeats on each consumer of a queue)."""
    return list({row["queue"]: row for row in rows}.values())


def _read(
    spark: SparkSession,
    options: ReportOptions,
    table: str,
    time_column: str,
    since: datetime,
    until: datetime,
) -> DataFrame:
    """``table``'s archived rows of the queues in ``[since, until)``; the ``date``
    directories outside are pruned before any file is opened."""
    from redisq_django.pipeline.schemas import Table, archive_schema, spark_schema

    path = join_path(normalize_root(options.root), table)
    try:
        frame = spark.read.schema(archive_schema(Table(table))).parquet(path)
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" not in str(exc) and "UNABLE_TO_INFER_SCHEMA" not in str(exc):
            raise
        return spark.createDataFrame([], spark_schema(Table(table)))
    frame = frame.where(F.col("date").between(F.lit(since.date()), F.lit(until.date())))
    if options.queues:
        frame = frame.where(F.col("queue").isin(list(options.queues)))
    frame = frame.where((F.col(time_column) >= F.lit(since)) & (F.col(time_column) < F.lit(until)))
    return frame.drop("date")


def _data_span(events: DataFrame, messages: DataFrame, since: datetime) -> tuple[int, int] | None:
    """The first and last time (epoch microseconds) of the range's events and published
    messages, or None when it has none: one small job, which also fills ``events``' cache."""
    times = events.select(F.col("time").alias("t")).unionByName(
        messages.where(F.col("published_at") >= F.lit(since)).select(
            F.col("published_at").alias("t")
        )
    )
    row = times.agg(F.unix_micros(F.min("t")), F.unix_micros(F.max("t"))).first()
    if row is None or row[0] is None:
        return None
    return int(row[0]), int(row[1])


def _choose_bucket(span: tuple[int, int] | None, since: datetime, until: datetime) -> str:
    """Minutes when the data (else the range) spans at most :data:`MINUTE_BUCKETS_UP_TO`:
    a 20-minute incident in a week's report is 20 points, not one hour's."""
    length = timedelta(microseconds=span[1] - span[0]) if span else until - since
    return "minute" if length <= MINUTE_BUCKETS_UP_TO else "hour"


def _consumers(
    spark: SparkSession, options: ReportOptions, events: DataFrame, since: datetime
) -> DataFrame:
    """The (queue, consumer) pairs the report covers: those with events in the range or
    the :data:`CONSUMER_LOOKBACK` before it. A consumer stalled the whole range has none
    in it; its earlier events (reading only the ``queue`` and ``consumer`` columns) still
    say that it exists."""
    earlier = _read(spark, options, "events", "time", since - CONSUMER_LOOKBACK, since)
    pairs = events.select("queue", "consumer").unionByName(earlier.select("queue", "consumer"))
    return pairs.where(F.col("consumer").isNotNull()).distinct()


def _bucket(moment: Column, bucket: str) -> Column:
    """The start of ``moment``'s bucket, computed on epoch seconds so that it does not
    depend on the session time zone."""
    step = BUCKETS[bucket]
    return F.timestamp_seconds(F.floor(F.unix_seconds(moment) / step) * step)


def _percentiles(column: str, prefix: str) -> list[Column]:
    values = F.percentile_approx(F.col(column), list(PERCENTILES), PERCENTILE_ACCURACY)
    return [values[i].alias(f"{prefix}_p{round(p * 100)}") for i, p in enumerate(PERCENTILES)]


def _event_counts() -> list[Column]:
    def n(*kinds: str) -> Column:
        return F.sum(F.col("event").isin(list(kinds)).cast("long"))

    return [
        n("handled").alias("handled"),
        n("retried", "dead").alias("failed"),
        n("retried").alias("retried"),
        n("dead").alias("dead"),
        n("redriven").alias("redriven"),
    ]


def _timed(messages: DataFrame, events: DataFrame) -> DataFrame:
    """Handled events with their publish -> handled latency (ms; null when the message
    was published before the lookback): what the latency and totals percentiles read."""
    handled = events.where(F.col("event") == "handled")
    return handled.join(
        messages.select("queue", "message_id", "published_at"), ["queue", "message_id"], "left"
    ).select(
        "queue",
        "consumer",
        "bucket",
        "duration_ms",
        ((F.unix_micros(F.col("time")) - F.unix_micros(F.col("published_at"))) / 1000).alias(
            "latency_ms"
        ),
    )


def _aggregates(
    messages: DataFrame,
    events: DataFrame,
    consumers: DataFrame,
    timed: DataFrame,
    since: datetime,
    bucket: str,
) -> dict[str, DataFrame]:
    """The report's aggregates as lazy frames (nothing runs until they are written)."""
    in_range = messages.where(F.col("published_at") >= F.lit(since))
    published = in_range.groupBy("queue", _bucket(F.col("published_at"), bucket).alias("bucket"))
    published_counts = published.agg(F.count(F.lit(1)).alias("published"))
    keys = ["queue", "consumer", "bucket"]
    counts = (
        published_counts.join(consumers, "queue", "left")
        .join(events.groupBy(*keys).agg(*_event_counts()), keys, "full_outer")
        .na.fill(0)
    )
    timing = [
        F.count(F.lit(1)).alias("handled"),
        # Handled messages published before the lookback have no latency (null, skipped).
        F.count("latency_ms").alias("latency_n"),
        *_percentiles("latency_ms", "latency"),
        *_percentiles("duration_ms", "duration"),
    ]
    latency = timed.groupBy(*keys).agg(*timing)
    attempts = (
        events.where(F.col("event").isin("handled", "dead"))
        .groupBy("queue", "consumer", "event", "attempt")
        .agg(F.count(F.lit(1)).alias("count"))
    )
    errors = (
        events.where(F.col("event").isin("retried", "dead"))
        .na.fill({"error_class": "(none)"})
        .groupBy("queue", "consumer", "error_class")
        .agg(
            F.count(F.lit(1)).alias("count"),
            F.min("time").alias("first_seen"),
            F.max("time").alias("last_seen"),
            F.min_by("message_id", "time").alias("sample_message_id"),
            F.max_by("error_message", "time").alias("last_message"),
        )
    )
    queue_published = in_range.groupBy("queue").agg(F.count(F.lit(1)).alias("published"))
    per_consumer = consumers.join(
        events.groupBy("queue", "consumer").agg(*_event_counts()), ["queue", "consumer"], "left"
    )
    # Full outer on the queue: a consumer of a queue with nothing published in the range
    # keeps its row, and a queue without any consumer keeps one (consumer null).
    totals = (
        queue_published.join(per_consumer, "queue", "full_outer")
        .na.fill(0)
        .join(timed.groupBy("queue", "consumer").agg(*timing[1:]), ["queue", "consumer"], "left")
    )
    return {
        "counts": counts,
        "latency": latency,
        "attempts": attempts,
        "errors": errors,
        "totals": totals,
    }
