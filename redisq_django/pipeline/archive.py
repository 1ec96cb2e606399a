"""The ``archive`` job: the queues' messages and lifecycle events into Parquet, exactly once.

Two Structured Streaming queries read the ``redisq`` data source (``table=messages`` and
``table=events``) and write Parquet with Spark's file sink::

    ROOT/messages/queue=Q/date=YYYY-MM-DD/part-*.parquet   (date: UTC day of published_at)
    ROOT/events/queue=Q/date=YYYY-MM-DD/part-*.parquet     (date: UTC day of the event)
    ROOT/_checkpoints/messages, ROOT/_checkpoints/events

The archive has a name (``options.name``, ``default`` unless told otherwise): before its
queries start it registers under that name for each queue and table (at its checkpoint's
position, or from the earliest), so retention keeps everything it has not stored; any
other reader of the queues is read-only and holds nothing.

Exactly once, by Spark's own protocol: a micro-batch's offsets (entry ids per queue) are
logged in the checkpoint before it runs; its files become visible only when the sink's
``_spark_metadata`` log names them; only after that does Spark call the source's
``commit()``, which moves the archive's position in Redis (``Archives.commit``) and so
lets retention trim. A crash anywhere redoes the batch from the logged offsets; files
of a batch that never reached ``_spark_metadata`` are ignored by every Spark reader, and
by other engines reading the files :func:`~redisq_django.pipeline.files.archive_files`
lists (not a glob, which would see those orphans).

Entries a hard cap or a purge removed before the archive stored them stop the job
(``failOnDataLoss``, the message names them and why), or with ``fail_on_data_loss`` false
are skipped and recorded in ``ROOT/_gaps`` (:mod:`~redisq_django.pipeline.gaps`), which
the report shows.

Two modes: once (``trigger(availableNow=True)``: everything there now, then stop) and
continuous (a micro-batch every N seconds until :func:`archive` is told to stop; in the
main thread SIGTERM and SIGINT do that, letting a running micro-batch finish first).

A query that fails for a reason outside the data (a Python worker killed, a task Spark
lost, a Python worker that could not start on a busy host) starts again from its
checkpoint (exactly once) after a pause that grows with each restart in a row, up to
``options.restarts`` times within ``options.restart_budget_seconds``
(:mod:`~redisq_django.pipeline.restarts`); never one our source chose to fail
(:data:`FINAL_FAILURES`). A stop asked for during a pause ends the job at once, as a stop.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from redisq_django.core.errors import ArchiveNotRegistered, ArchiveOwned
from redisq_django.core.worker import StopSignal
from redisq_django.pipeline import gaps, jvm
from redisq_django.pipeline.checkpoint import last_committed_offset
from redisq_django.pipeline.loss import DataLossError
from redisq_django.pipeline.options import (
    ARCHIVED_TABLES,
    ArchiveOptions,
    JobError,
    OptionError,
    one_line,
)
from redisq_django.pipeline.outages import RedisOutage
from redisq_django.pipeline.preflight import (
    commit_positions,
    last_entry_ids,
    place_count,
    queues_to_archive,
    register,
)
from redisq_django.pipeline.progress import ArchiveSummary, TableSummary, TableTally
from redisq_django.pipeline.redis_io import parse_id
from redisq_django.pipeline.restarts import failure_line, restart_pause
from redisq_django.pipeline.schemas import PARQUET_OPTIONS

__all__ = ["ArchiveError", "ArchiveOptions", "ArchiveSummary", "archive"]

#: The event time of each table's rows, whose UTC day is the ``date`` directory.
TIME_COLUMNS = {"messages": "published_at", "events": "time"}
PARTITION_COLUMNS = ("queue", "date")

#: How often the driver looks at the queries (progress, failure, stop requests), seconds.
POLL_SECONDS = 0.25
_MICROS_PER_DAY = 86_400_000_000

#: Failures our data source raises on purpose: starting the query again would repeat them,
#: or (the archive removed while it ran) register the archive again, undoing the removal.
FINAL_FAILURES = (
    *(
        f"{e.__name__}: "
        for e in (DataLossError, RedisOutage, OptionError, ArchiveNotRegistered, ArchiveOwned)
    ),
    # Spark itself stopping (a signal to every process of the job reached its JVM too)
    "SparkContext was shut down",
    "stopped SparkContext",
)

logger = logging.getLogger("redisq.pipeline")


class ArchiveError(JobError):
    """The archive job could not start or a query failed; the message says why."""


@dataclass
class _Run:
    """One table's streaming query and the tally of its progress."""

    table: str
    query: StreamingQuery
    tally: TableTally
    restarts: int = 0  # in a row: since the query last archived a micro-batch
    batches_then: int = 0  # the tally's batches when it was last started again
    failing_since: float | None = None  # monotonic time of the run of restarts' first failure
    stopped_waiting: bool = False  # a stop came while it waited to start again

    def harvest(self) -> None:
        # lastProgress is one report; the list of recent ones (up to 100) crosses py4j
        # only when there is something new in it.
        last = self.query.lastProgress
        if last is not None and not self.tally.counted(last):
            self.tally.add(self.query.recentProgress)

    def failure(self) -> str | None:
        if self.stopped_waiting:  # a stop, not a failure: the next run redoes the batch
            return None
        exc = self.query.exception()
        return None if exc is None else one_line(exc)


def archive(
    spark: SparkSession, options: ArchiveOptions, *, stop: threading.Event | None = None
) -> ArchiveSummary:
    """Archive the queues' messages and events to Parquet under ``options.root``.

    Args:
        spark: a session with the ``redisq`` data source registered (``build_session``).
        options: what to archive, where, and when to stop (``options.once``).
        stop: set it to stop a continuous run (as SIGTERM does); the running micro-batch
            gets ``options.grace_seconds`` to finish.

    Returns:
        The rows archived by this run, per table and queue, and the time taken.

    Raises:
        ArchiveError: Redis cannot be reached, or a query failed (the message is Spark's
            first line; what was committed before stays committed, and the next run
            continues from there).
    """
    queues = queues_to_archive(options)
    stop = stop or threading.Event()
    started = time.monotonic()
    tables = [
        t for t in ARCHIVED_TABLES if not options.once or _has_news(spark, options, t, queues)
    ]
    notes = [
        note
        for table in tables
        for note in register(
            options, table, queues, last_committed_offset(spark, options.checkpoint_path(table))
        )
    ]
    runs: list[_Run] = []
    with _stop_on_signals() as signals:
        try:
            for table in tables:
                runs.append(_start(spark, options, table, queues))
            pause = lambda seconds: _pause(seconds, stop, signals)  # noqa: E731
            _watch(
                runs,
                options,
                stop,
                signals,
                lambda run: _restart(spark, options, queues, run, pause),
            )
        finally:
            for run in runs:
                if run.query.isActive:
                    run.query.stop()
    for run in runs:
        run.harvest()
    for table in ARCHIVED_TABLES:
        _commit_last_batch(spark, options, table, ran=table in tables)
    failures = [f"{run.table}: {msg}" for run in runs if (msg := run.failure())]
    losses = gaps.collect(spark, options, queues)
    if failures:
        stops = [line for msg in failures if (line := loss_line(msg))]
        raise ArchiveError(stops[0] if stops else failure_line(failures))
    tallies = {table: TableSummary() for table in ARCHIVED_TABLES}
    tallies.update({run.table: run.tally.summary() for run in runs})
    return ArchiveSummary(
        messages=tallies["messages"],
        events=tallies["events"],
        seconds=time.monotonic() - started,
        notes=tuple(notes),
        gaps=tuple(
            f"{x.where} {x.table}: {x.span()}" + ("" if x.purged_ms is None else f", {x.cause()}")
            for x in losses
        ),
    )


def loss_line(failure: str) -> str | None:
    """The message of a query's failure our source chose (a data loss, the archive's name
    taken over), one line, or None when it is neither: Spark's own words around it say
    nothing the user needs."""
    for error in (DataLossError, ArchiveOwned):
        marker = f"{error.__name__}: "
        if marker in failure:
            return "archive stopped: " + failure.split(marker, 1)[1].strip()
    return None


def _has_news(
    spark: SparkSession, options: ArchiveOptions, table: str, queues: tuple[str, ...]
) -> bool:
    """Whether a ``--once`` run has anything of ``table`` to archive: an entry after the
    offset of the query's last committed batch in some queue (any entry, without a
    checkpoint). A query with nothing to do still costs seconds to start and competes with
    the other table's for the cores (with history off the events stream never exists), so
    it is not started; the next run starts it from its checkpoint as usual."""
    last = last_entry_ids(options, table, queues)
    if not last:
        return False
    done = last_committed_offset(spark, options.checkpoint_path(table)) or {}
    return any(
        queue not in done or parse_id(entry_id) > parse_id(done[queue])
        for queue, entry_id in last.items()
    )


def _commit_last_batch(
    spark: SparkSession, options: ArchiveOptions, table: str, *, ran: bool
) -> None:
    """Move the archive position to the query's last committed batch (see
    :mod:`~redisq_django.pipeline.checkpoint`: Spark itself would only do it when it
    plans the next batch). Safe after a failure too: the commit log names only batches
    whose files the sink committed. ``ran``: the table's query ran in this run (a
    table that did not leaves the queues it is not registered for alone)."""
    offset = last_committed_offset(spark, options.checkpoint_path(table))
    if not offset:
        return
    try:
        commit_positions(options, table, offset, ran=ran)
    except ArchiveOwned as exc:
        raise ArchiveError(f"archive stopped: {exc}") from None
    except Exception as exc:  # redis-py's errors: Redis went away during the run
        raise ArchiveError(
            f"the {table} were archived, but their position could not be recorded in Redis "
            f"({one_line(exc)}); the next run records it"
        ) from exc


def slices_per_stream(spark: SparkSession, streams: int) -> int:
    """Slices per stream (a queue's partitions each a stream) in each micro-batch:
    Spark's cores shared among ``streams``, at least one each. One wave of tasks: a task
    costs a Python worker's turn, a connection, a Parquet file per directory it writes."""
    return max(1, spark.sparkContext.defaultParallelism // max(1, streams))


def archive_frame(frame: DataFrame, table: str) -> DataFrame:
    """``frame`` (rows of ``table`` from the data source) with its ``date`` column (a
    directory level of the archive): the UTC day of the row's time, whatever the session
    time zone."""
    micros = F.unix_micros(F.col(TIME_COLUMNS[table]))
    day = F.floor(micros / _MICROS_PER_DAY).cast("int")
    return frame.withColumn("date", F.date_from_unix_date(day))


def _start(
    spark: SparkSession, options: ArchiveOptions, table: str, queues: tuple[str, ...]
) -> _Run:
    try:
        return _start_query(spark, options, table, queues)
    except Exception as exc:  # Spark's AnalysisException and the like, raised by start()
        raise ArchiveError(f"cannot start the {table} query: {one_line(exc)}") from exc


def _start_query(
    spark: SparkSession, options: ArchiveOptions, table: str, queues: tuple[str, ...]
) -> _Run:
    source_options = options.source_options(table)
    given = {name.lower() for name in source_options}
    if not {"slicesperstream", "partitions"} & given:  # (its name of 0.9 still works)
        streams = place_count(options, queues)  # a partitioned queue's partitions each count
        source_options["slicesPerStream"] = str(slices_per_stream(spark, streams))
    source = spark.readStream.format("redisq").options(**source_options).load()
    metric = f"redisq_archive_{table}"
    frame = archive_frame(source, table)
    if len(options.queues) == 1:
        # One queue named: every row is its own; counting by queue would only cost time.
        tally = TableTally(metric, {}, only_queue=options.queues[0])
    else:
        # Per-queue counts travel with each batch's progress report (DataFrame.observe),
        # so the summary never reads the archive back. Columns are q0, q1...: queue names
        # may hold characters a column name cannot.
        columns = {queue: f"q{i}" for i, queue in enumerate(queues)}
        counts = [F.count_if(F.col("queue") == q).alias(c) for q, c in columns.items()]
        if counts:
            frame = frame.observe(metric, *counts)
        tally = TableTally(metric, columns)
    writer = (
        frame.writeStream.format("parquet")
        .queryName(f"redisq-archive-{table}")
        .outputMode("append")
        .partitionBy(*PARTITION_COLUMNS)
        .options(**PARQUET_OPTIONS[table])
        .option("path", options.table_path(table))
        .option("checkpointLocation", options.checkpoint_path(table))
    )
    if options.once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{options.trigger_seconds} seconds")
    return _Run(table, writer.start(), tally)


def _watch(
    runs: list[_Run],
    options: ArchiveOptions,
    stop: threading.Event,
    signals: StopSignal,
    restart: Callable[[_Run], bool],
) -> None:
    """Follow the queries until they end (once), one fails for good, or a stop is asked
    for; ``restart`` starts a failed one again, or says it may not."""
    while True:
        for run in runs:
            run.harvest()
        failed = [run for run in runs if run.failure()]
        stopping = stop.is_set() or signals.is_set() or jvm.has_exited()
        given_up = failed and (stopping or not all(restart(run) for run in failed))
        # (unless a stop came while a query waited to start again: then stop as for any)
        if given_up and (any(run.failure() for run in runs) or not _asked_to_stop(stop, signals)):
            return  # archive() stops the others and reports
        if not any(run.query.isActive for run in runs):
            return
        if _asked_to_stop(stop, signals):
            _stop_gracefully(runs, options.grace_seconds, signals)
            return
        stop.wait(POLL_SECONDS)


def _asked_to_stop(stop: threading.Event, signals: StopSignal) -> bool:
    return stop.is_set() or signals.is_set()


def restartable(failure: str, restarts: int, limit: int) -> bool:
    """Whether a query that failed with ``failure`` (its first line), after ``restarts``
    restarts in a row, is started again: not past ``limit``, not a :data:`FINAL_FAILURES`."""
    return restarts < limit and not any(marker in failure for marker in FINAL_FAILURES)


def _restart(
    spark: SparkSession,
    options: ArchiveOptions,
    queues: tuple[str, ...],
    run: _Run,
    pause: Callable[[float], bool],
) -> bool:
    """Start ``run``'s failed query again from its checkpoint, if :func:`restartable`,
    after the pause of :func:`~redisq_django.pipeline.restarts.restart_pause`, and
    within ``options.restart_budget_seconds`` of the run of restarts' first failure.
    ``pause(seconds)`` waits, and says False when a stop came meanwhile.

    Raises:
        ArchiveError: the query could not be started again within the restarts left.
    """
    failure = run.failure() or ""
    if run.tally.batches > run.batches_then:  # it archived since: a new failure, not a loop
        run.restarts = 0
        run.failing_since = None
    if run.failing_since is None:
        run.failing_since = time.monotonic()
    started_again: ArchiveError | None = None  # the last restart's own failure to start
    while restartable(failure, run.restarts, options.restarts) and not jvm.has_exited():
        wait = restart_pause(run.restarts + 1)
        if time.monotonic() - run.failing_since + wait > options.restart_budget_seconds:
            logger.warning(
                "redisq archive: the %s query failed (%s); not starting it again: its "
                "restarts in a row would outlast --restart-budget (%g s)",
                *(run.table, failure[:500], options.restart_budget_seconds),
            )
            break
        run.restarts += 1
        logger.warning(
            "redisq archive: the %s query failed (%s); starting it again from its "
            "checkpoint in %g s (%d of at most %d in a row)",
            *(run.table, failure[:500], wait, run.restarts, options.restarts),
        )
        if not pause(wait):
            # Asked to stop: a stop, which the next run takes up from the checkpoint; a
            # JVM gone meanwhile stays this query's failure
            run.stopped_waiting = not jvm.has_exited()
            return False
        run.batches_then = run.tally.batches
        try:
            # The tally goes on: a restarted query continues the batch ids (and times).
            run.query = _start(spark, options, run.table, queues).query
            return True
        except ArchiveError as exc:
            # What killed the query may still be in the way for a while (Spark finds a
            # dead Python worker when it next asks one to plan, then starts a new one).
            started_again = exc
            failure = str(exc)
    if started_again is not None:
        raise started_again
    return False


def _pause(seconds: float, stop: threading.Event, signals: StopSignal) -> bool:
    """Wait ``seconds``; False as soon as a stop is asked for (``stop``, a signal) or
    the JVM has gone, True after the whole pause."""
    deadline = time.monotonic() + seconds
    while not (stop.is_set() or signals.is_set() or jvm.has_exited()):
        left = deadline - time.monotonic()
        if left <= 0:
            return True
        stop.wait(min(POLL_SECONDS, left))
    return False


def _stop_gracefully(runs: list[_Run], grace: float, signals: StopSignal) -> None:
    """Stop each query between micro-batches, waiting at most ``grace`` seconds for the
    one running now (interrupting it is safe, only slower: the next run redoes it). Only
    that one: an ``availableNow`` query starts its next micro-batch at once, so "a trigger
    is active" alone would wait for the whole backlog."""
    deadline = time.monotonic() + grace
    running = {run.table: _last_report(run) for run in runs}
    for run in runs:
        while (
            run.query.isActive
            and run.query.status.get("isTriggerActive")
            and _last_report(run) == running[run.table]
            and time.monotonic() < deadline
            and not signals.cold
        ):
            time.sleep(POLL_SECONDS)
        run.harvest()
        run.query.stop()


def _last_report(run: _Run) -> tuple[str, int] | None:
    """The trigger time and batch id of the query's newest progress report (None before
    the first); the time tells a finished micro-batch from an idle trigger's report of the
    same id."""
    last = run.query.lastProgress
    return None if last is None else (str(last.timestamp), int(last.batchId))


@contextmanager
def _stop_on_signals() -> Iterator[StopSignal]:
    """In the main thread, SIGTERM/SIGINT request a stop of the yielded signal; a second
    one makes it cold (do not wait for the running micro-batch). The previous handlers
    (PySpark's SIGINT handler among them) are restored at the end."""
    signals = StopSignal()  # not an Event: see StopSignal on locks in signal handlers
    if threading.current_thread() is not threading.main_thread():
        yield signals
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        signals.request(cold=signals.is_set())

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield signals
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
