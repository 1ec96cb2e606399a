"""The ``replay`` job: archived messages selected by queue, time and a Spark SQL predicate,
published again with the ``redisq`` data source's writer.

Selection: ``ROOT/messages`` of one queue, ``published_at`` in ``[since, until)``, and an
optional ``where`` predicate over the messages table (``get_json_object(payload,
'$.total') > 1000``). The ``date`` directories are filtered too, so Spark lists and reads
only the days in range.

Order: every task publishes its rows in publish order (``published_at``, then the entry
id's milliseconds and sequence as numbers: ``replay_order.publish_order``);
tasks run in parallel, so two messages of different tasks may be republished in either
order — but never two of one ordering key: when the selection holds keyed messages,
they are spread over the tasks by key (a shuffle), so each key's messages are published
by one task, in their order, as an ordered consumer needs them. ``ordered`` sorts
globally and publishes from one task (``coalesce(1)``): one order for everything, at the
speed of one core.

All or nothing for the predicate: ``where`` is evaluated on every selected row before
the first message is published (a shuffle between the selection and the writer, which
Spark completes before any writing task starts; ``ordered``'s sort is one already). A
predicate that fails on some value (Spark 4's ANSI mode: ``'1499.00'`` compared with
``1000`` cannot be cast to BIGINT) so publishes nothing, and :class:`ReplayError` says
which value and how to compare typed instead (``try_cast``).

Publishing: on a local master (``local``, ``local[N]``) the driver hands the rows, a
Spark partition at a time, to the writer's ``publish_rows`` itself: no Python worker
starts, which is most of a one-off replay's time otherwise (bench/RESULTS.md). On a cluster, and
with ``rate``, each task hands its rows, as Arrow batches (``mapInArrow``), to
``publish_rows`` and yields how many it published; the job sums them. Either way the
writer's code of ``df.write.format("redisq")``, without a data source write's planning
and commit steps, each a Python process of its own.

Rate: ``rate`` messages/s for the whole job. It is enforced per task, before the writer:
the task's batches are handed on in small slices, with sleeps so that each of the P
tasks passes at most ``rate / P`` per second. P tasks at once then stay under ``rate``
together; tasks that run one after the other (fewer cores than tasks) go slower than
the cap, never faster. The Arrow batches are made as small as a slice for the run, so
rows reach Redis at that pace rather than in one burst at the end of a task.

Idempotence (``once``): each replayed message gets the id
``sha256("queue|consumer|where|since|until|original id")[:32]`` and is written with
``once=true``: Redis remembers a published id for a day, so re-running the same replay
publishes nothing twice. The original id travels in header ``redisq-original-id`` in
every mode.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from redisq_django.pipeline.job_options import DRY_RUN_SAMPLE, ReplayOptions
from redisq_django.pipeline.options import JobError, one_line
from redisq_django.pipeline.replay_order import publish_frame, publish_order, target_partitioned
from redisq_django.pipeline.schemas import Table, archive_schema
from redisq_django.pipeline.session import runs_in_driver
from redisq_django.pipeline.source_options import SourceOptions
from redisq_django.pipeline.writer import RowLayout, batch_rows, publish_rows

__all__ = ["ReplayError", "ReplayOptions", "ReplaySummary", "replay", "select_messages"]

#: Seconds between progress lines.
PROGRESS_SECONDS = 10.0
#: Spark's ``maxPartitionBytes`` for the rows a driver publishes itself: a Spark
#: partition (files' bytes plus 4 MB per file) is read and sorted whole before its
#: first row comes, so the first one should be small; much smaller ones cost a job each.
FIRST_SPLIT_BYTES = "32m"
SPLIT_SETTING = "spark.sql.files.maxPartitionBytes"
#: Spark's error conditions for a value an expression cannot take (ANSI mode).
VALUE_ERRORS = (
    "CAST_INVALID_INPUT",
    "CAST_OVERFLOW",
    "DIVIDE_BY_ZERO",
    "ARITHMETIC_OVERFLOW",
    "NUMERIC_VALUE_OUT_OF_RANGE",
    "INVALID_ARRAY_INDEX",
    "DATETIME_FIELD_OUT_OF_BOUNDS",
)
#: What to write instead, in the message about such a failure.
TYPED_EXAMPLE = "try_cast(get_json_object(payload, '$.total') AS DECIMAL(12,2)) > 1000"
_CONDITION = re.compile(r"\[([A-Z_]+)(?:\.[A-Z_]+)?\] ([^\n]*?\.)(?=\s|$)")


class ReplayError(JobError):
    """The replay could not select or publish; the message says why."""


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """What a replay run did.

    Attributes:
        selected: archived messages that matched.
        published: messages handed to Redis (0 on a dry run; with ``once`` a message
            published by an earlier run of the same replay is counted but is a no-op).
        seconds: wall time of the run.
        dry_run: nothing was published.
        sample: a few selected rows (``message_id``, ``published_at``, ``payload``) on a
            dry run.
    """

    selected: int
    published: int
    seconds: float
    dry_run: bool = False
    sample: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rate(self) -> float:
        """Published messages per second."""
        return self.published / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        """The summary line the CLI prints."""
        if self.dry_run:
            return f"replay dry run: selected={self.selected} published=0 in {self.seconds:.1f} s"
        return (
            f"replayed selected={self.selected} published={self.published} "
            f"in {self.seconds:.1f} s, {self.rate:,.0f} messages/s"
        )


def selected_days(spark: SparkSession, options: ReplayOptions) -> DataFrame:
    """The archived messages of the queue and the days the replay selects from: the
    ``queue`` and ``date`` directories it reads (nothing else filtered).

    Raises:
        ReplayError: the archive has no messages table.
    """
    try:
        frame = spark.read.schema(archive_schema(Table.MESSAGES)).parquet(options.messages_path)
    except Exception as exc:  # AnalysisException: PATH_NOT_FOUND and the like
        raise ReplayError(
            f"cannot read the archived messages at {options.messages_path} ({one_line(exc)}); "
            "check --root, and run the archive job first"
        ) from exc
    condition: Column = F.col("queue") == F.lit(options.queue)
    if options.since is not None:
        condition &= F.col("date") >= F.lit(options.since.date())
    if options.until is not None:
        condition &= F.col("date") <= F.lit(options.until.date())
    return frame.where(condition)


def select_messages(spark: SparkSession, options: ReplayOptions) -> DataFrame:
    """The archived messages the replay selects, unordered.

    Raises:
        ReplayError: the archive has no messages table, or ``where`` is not valid SQL
            over its columns.
    """
    return _select(selected_days(spark, options), options)


def _select(days: DataFrame, options: ReplayOptions) -> DataFrame:
    """The messages of ``days`` (:func:`selected_days`) the replay selects."""
    frame = days
    # The date bounds prune directories; the time bounds are the exact range.
    if options.since is not None:
        frame = frame.where(F.col("published_at") >= F.lit(options.since))
    if options.until is not None:
        frame = frame.where(F.col("published_at") < F.lit(options.until))
    if options.where:
        try:
            # Analysed at once (classic Spark): a bad column or syntax error surfaces here.
            frame = frame.where(F.expr(options.where))
        except Exception as exc:
            raise ReplayError(
                f"--where {options.where!r} is not a valid predicate over the messages "
                f"table ({one_line(exc)}); columns: {', '.join(frame.columns)}"
            ) from exc
    return frame


def replay(
    spark: SparkSession,
    options: ReplayOptions,
    *,
    progress: Callable[[str], None] | None = None,
) -> ReplaySummary:
    """Publish the archived messages ``options`` selects again.

    Args:
        spark: a session with the ``redisq`` data source registered (``build_session``).
        options: what to select and where to publish.
        progress: called with a progress line every :data:`PROGRESS_SECONDS` while
            publishing (default: print to stderr).

    Returns:
        What was selected and published.

    Raises:
        ReplayError: the selection or the publishing failed (with ``once``, running the
            same replay again is safe; without, messages published before the failure
            are published again).
    """
    started = time.monotonic()
    # Read once: each read of the archive reads its sink log (bench/RESULTS.md, issue 37).
    days = selected_days(spark, options)
    frame = _select(days, options)
    try:
        if options.dry_run:
            sample = [
                row.asDict()
                for row in frame.orderBy(*publish_order())
                .select("message_id", "published_at", "payload")
                .limit(DRY_RUN_SAMPLE)
                .collect()
            ]
            return ReplaySummary(frame.count(), 0, time.monotonic() - started, True, sample)
        with _progress_lines(spark, progress or _to_stderr, started):
            selected = _publish(spark, frame, days, options)
    except ReplayError:
        raise
    except Exception as exc:
        raise ReplayError(_failure(options, exc)) from exc
    return ReplaySummary(selected, selected, time.monotonic() - started)


def _failure(options: ReplayOptions, exc: Exception) -> str:
    """What went wrong, in one line: for a value ``where`` cannot take, which one and
    how to write the predicate instead (nothing was published: see the docstring)."""
    found = _CONDITION.search(str(exc))
    if options.where and found and found[1] in VALUE_ERRORS:
        return (
            f"--where {options.where!r} fails on an archived message: [{found[1]}] "
            f"{found[2]} Nothing was published; compare typed, e.g. {TYPED_EXAMPLE}"
        )
    return f"replay failed: {one_line(exc)}"


def writer_options(options: ReplayOptions, batch_size: int) -> dict[str, str]:
    """The ``redisq`` data source's write options for this replay."""
    out = {
        "url": options.redis_url,
        "prefix": options.prefix,
        "queue": options.queue,
        "batchSize": str(batch_size),
    }
    if options.cluster:
        out["cluster"] = "true"
    if options.consumer:
        out["consumer"] = options.consumer
    if options.once:
        out["once"] = "true"
    return out


def _publish(spark: SparkSession, frame: DataFrame, days: DataFrame, options: ReplayOptions) -> int:
    """Publish ``frame``'s rows; returns how many (each task counts what it published)."""
    rows = publish_frame(frame, days, options, partitioned=target_partitioned(options))
    batch_size = options.batch_size
    throttle = None
    if options.rate is not None:
        per_task = options.rate / rows.rdd.getNumPartitions()
        batch_size = max(1, min(batch_size, int(per_task / 4)))
        throttle = _throttle(per_task, batch_size)
    source = writer_options(options, batch_size)
    layout = RowLayout.of(rows.schema, SourceOptions.parse(source))  # bad options: fail now
    if throttle is None and runs_in_driver(spark.sparkContext.master or "local"):
        return _publish_in_driver(rows, layout, SourceOptions.parse(source))
    publish = _publisher(source, rows.schema, throttle)
    with _arrow_batch_rows(spark, batch_size if throttle is not None else None):
        counts = rows.mapInArrow(publish, "published long").collect()
    return sum(int(row["published"]) for row in counts)


def _publish_in_driver(rows: DataFrame, layout: RowLayout, options: SourceOptions) -> int:
    """Publish ``rows`` from this process, a Spark partition at a time: on a local
    master the executors share this machine, and the Python workers a ``mapInArrow``
    starts cost a one-off replay most of its time (bench/RESULTS.md); the rows come from
    the JVM directly, one Spark partition (and the next, prefetched) in memory at once.
    ``where`` stays all or nothing: the shuffle before the first Spark partition arrives
    evaluates it on every row."""
    return publish_rows(options, layout, batch_rows(local_arrow_batches(rows)))


def local_arrow_batches(frame: DataFrame) -> Iterator[Any]:
    """``frame``'s rows in this process as Arrow record batches, in order, a Spark
    partition at a time with the next one computed meanwhile (``toLocalIterator``'s
    bound on memory, and its protocol).

    ``toLocalIterator`` itself sends pickled rows and builds a ``Row`` per message, most
    of a warm replay's time in the driver (bench/RESULTS.md, issue 37); ``toArrow`` sends
    Arrow but holds the whole selection. So this asks the JVM for the Arrow batches of
    each partition (``Dataset.toArrowBatchRdd``, what ``toArrow`` collects) through the
    local iterator's server (``PythonRDD.toLocalIteratorAndServe``): PySpark internals,
    classic sessions only, covered by the replay tests on every PySpark we support."""
    import pyarrow as pa  # type: ignore[import-untyped]
    from pyspark.serializers import NoOpSerializer
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.util import _local_iterator_from_socket

    spark = frame.sparkSession
    large = spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true"
    # The JVM sends record batch messages without their schema: it is this one.
    schema = to_arrow_schema(frame.schema, timezone="UTC", prefers_large_types=large)
    jvm: Any = spark.sparkContext._jvm
    # Planned with smaller file splits than Spark's 128 MB (unless the session sets its
    # own): nothing is published before the first partition is read and sorted whole,
    # and at 128 MB that was a third of a day's selection (1 s of a 300,000-message
    # replay; bench/RESULTS.md, issue 37).
    split = spark.conf.get(SPLIT_SETTING, None) or FIRST_SPLIT_BYTES
    with _session_conf(spark, SPLIT_SETTING, split):
        served = jvm.PythonRDD.toLocalIteratorAndServe(frame._jdf.toArrowBatchRdd(), True)
    for message in _local_iterator_from_socket(served, NoOpSerializer()):
        yield pa.ipc.read_record_batch(pa.py_buffer(message), schema)


def _publisher(
    source: dict[str, str],
    schema: StructType,
    throttle: Callable[[Iterator[Any]], Iterator[Any]] | None,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A ``mapInArrow`` function publishing a task's rows with the ``redisq`` writer's
    code (it runs on the executors: only its closure travels) and yielding their count.

    Not ``df.write.format("redisq")``: a data source write also runs the writer's
    planning and its commit in Python processes of their own, seconds of a short replay
    (bench/RESULTS.md); the rows are published by the same function either way."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from redisq_django.pipeline.source_options import SourceOptions
        from redisq_django.pipeline.writer import RowLayout, batch_rows, publish_rows

        options = SourceOptions.parse(source)
        layout = RowLayout.of(schema, options)
        published = publish_rows(
            options, layout, batch_rows(throttle(batches) if throttle else batches)
        )
        yield pa.record_batch([pa.array([published], pa.int64())], names=["published"])

    return run


def _throttle(per_second: float, slice_rows: int) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """Arrow batches passed on at most ``per_second`` rows per second, in slices of
    ``slice_rows`` (it runs on the executors: only its closure travels)."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import time as _time

        start = _time.monotonic()
        passed = 0
        for batch in batches:
            for offset in range(0, batch.num_rows, slice_rows):
                piece = batch.slice(offset, slice_rows)
                # Row number `passed` may go at start + passed / rate, not before.
                delay = start + passed / per_second - _time.monotonic()
                if delay > 0:
                    _time.sleep(delay)
                passed += piece.num_rows
                yield piece

    return run


@contextmanager
def _arrow_batch_rows(spark: SparkSession, rows: int | None) -> Iterator[None]:
    """Make Arrow batches (what a Python writer is fed) at most ``rows`` long for the
    duration, so throttled rows reach Redis as they are released."""
    if rows is None:
        yield
        return
    with _session_conf(spark, "spark.sql.execution.arrow.maxRecordsPerBatch", str(rows)):
        yield


@contextmanager
def _session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """Spark setting ``key`` at ``value`` for the duration (for the queries planned
    meanwhile), then as it was."""
    previous = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@contextmanager
def _progress_lines(
    spark: SparkSession, emit: Callable[[str], None], started: float
) -> Iterator[None]:
    """Emit a line with the running stages' finished tasks every PROGRESS_SECONDS."""
    done = threading.Event()
    tracker = spark.sparkContext.statusTracker()

    def loop() -> None:
        while not done.wait(PROGRESS_SECONDS):
            try:
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
                finished = sum(s.numCompletedTasks for s in stages if s)
                total = sum(s.numTasks for s in stages if s)
            except Exception:  # the session is stopping: no more lines
                return
            emit(
                f"replay: {time.monotonic() - started:.0f} s, "
                f"tasks {finished}/{total} of the publishing stage done"
            )

    thread = threading.Thread(target=loop, name="redisq-replay-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)
