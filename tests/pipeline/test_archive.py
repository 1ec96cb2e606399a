"""The ``archive`` job: Parquet partitioned by queue and UTC date, exactly once, also
across a driver killed mid-stream, and the archive position in Redis never ahead of the
files."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F

from redisq_django.core import Broker
from redisq_django.pipeline.archive import archive
from redisq_django.pipeline.cli import main
from redisq_django.pipeline.options import ArchiveOptions
from redisq_django.pipeline.progress import OTHER_QUEUES, ArchiveSummary, TableSummary, TableTally
from tests.pipeline.archive_support import (
    REPO,
    Publisher,
    add_events,
    archive_cli,
    archive_running,
    cli_env,
    count_and_distinct,
    descendants,
    entry_key,
    max_entry_id,
    processes_gone,
    publish,
    read_table,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SUMMARY_RE = re.compile(
    r"^archived messages=\d+ events=\d+( \(.+\))? in \d+\.\d s, [\d,]+ rows/s$", re.M
)


# Archives every queue in Redis (no --queue): this test's must be the only ones.
@pytest.mark.usefixtures("empty_redis")
def test_once_twice_archives_everything_once_partitioned_by_queue_and_date(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    mail_queue = f"{queue_name}.mail"
    orders = publish(broker, queue_name, 1500)
    mail = publish(broker, mail_queue, 500, start=1500)
    n_events = add_events(broker, queue_name, orders)
    options = ArchiveOptions(redis_url=redis_url, root=str(tmp_path))

    first = archive(spark, options)

    assert (first.messages.rows, first.events.rows) == (2000, n_events)
    assert dict(first.messages.per_queue) == {queue_name: 1500, mail_queue: 500}
    assert dict(first.events.per_queue) == {queue_name: n_events}
    assert first.line().startswith(f"archived messages=2000 events={n_events} (")
    assert SUMMARY_RE.match(first.line())

    second = archive(spark, options)

    assert (second.messages.rows, second.events.rows) == (0, 0)

    messages = read_table(spark, tmp_path, "messages")
    assert count_and_distinct(messages, "message_id") == (2000, 2000)
    by_queue = {r["queue"]: r["count"] for r in messages.groupBy("queue").count().collect()}
    assert by_queue == {queue_name: 1500, mail_queue: 500}
    archived = {r[0] for r in messages.select("message_id").collect()}
    assert archived == set(orders) | set(mail)
    # Partitions: queue, then the UTC day of published_at (today: just published).
    today = dt.datetime.now(dt.UTC).date()
    days = {r[0] for r in messages.select("date").distinct().collect()}
    assert days <= {today, today - dt.timedelta(days=1)}  # a run across midnight
    assert list((tmp_path / "messages" / f"queue={queue_name}").glob("date=*/*.parquet"))
    assert messages.where(F.col("payload") == '{"n":0}').count() == 1

    events = read_table(spark, tmp_path, "events")
    assert count_and_distinct(events, "entry_id", "message_id", "event") == (
        n_events,
        n_events - 1,  # the reset's row has message_id null, left out of distinct
    )
    kinds = {r["event"]: r["count"] for r in events.groupBy("event").count().collect()}
    assert kinds == {"handled": 1500, "retried": 1, "dead": 1, "reset": 1}
    assert list((tmp_path / "events" / f"queue={queue_name}").glob("date=*/*.parquet"))

    # The archive's positions in Redis: the last entry of each stream, stored.
    last_event = broker.client.xrevrange(broker.keys(queue_name).events, count=1)[0][0].decode()
    assert broker.archives.positions(queue_name, "default") == {
        "messages": orders[-1],
        "events": last_event,
    }
    # (the events query archived every queue: registered for mail's events too)
    assert broker.archives.positions(mail_queue, "default") == {
        "messages": mail[-1],
        "events": "0-0",
    }


def test_new_messages_after_a_run_are_archived_by_the_next_run(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    options = ArchiveOptions(redis_url=redis_url, root=str(tmp_path), queues=(queue_name,))
    before = publish(broker, queue_name, 300)
    publish(broker, f"{queue_name}.other", 50)  # not archived: not in options.queues

    assert archive(spark, options).messages.rows == 300
    after = publish(broker, queue_name, 200, start=300)
    # A cap per micro-batch: --once still archives everything there, in several batches.
    summary = archive(spark, dataclasses.replace(options, max_entries_per_trigger=120))

    assert dict(summary.messages.per_queue) == {queue_name: 200}
    assert summary.messages.batches == 2
    messages = read_table(spark, tmp_path, "messages")
    assert count_and_distinct(messages, "message_id") == (500, 500)
    assert {r[0] for r in messages.select("message_id").collect()} == set(before + after)
    assert broker.archives.positions(f"{queue_name}.other", "default") == {}


def test_a_once_run_starts_no_query_for_a_table_with_nothing_new(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given a queue with messages and no events stream (history off)
    options = ArchiveOptions(redis_url=redis_url, root=str(tmp_path), queues=(queue_name,))
    first_ids = publish(broker, queue_name, 200)

    # When archiving twice, then once more after new messages and events
    first = archive(spark, options)
    events_checkpoint = Path(options.checkpoint_path("events"))
    messages_commits = Path(options.checkpoint_path("messages")) / "commits"
    commits_after_first = sorted(p.name for p in messages_commits.iterdir())
    second = archive(spark, options)
    events_query_started = events_checkpoint.exists()
    commits_after_second = sorted(p.name for p in messages_commits.iterdir())
    later_ids = publish(broker, queue_name, 100, start=200)
    n_events = add_events(broker, queue_name, later_ids)
    third = archive(spark, options)

    # Then the events query never started until there were events, the second run ran
    # no micro-batch at all, and the third archived exactly what was new
    assert (first.messages.rows, first.events.rows) == (200, 0)
    assert not events_query_started
    assert (second.messages.rows, second.events.rows, second.messages.batches) == (0, 0, 0)
    assert commits_after_second == commits_after_first
    assert (third.messages.rows, third.events.rows) == (100, n_events)
    messages = read_table(spark, tmp_path, "messages")
    assert count_and_distinct(messages, "message_id") == (300, 300)
    assert {r[0] for r in messages.select("message_id").collect()} == set(first_ids + later_ids)
    assert read_table(spark, tmp_path, "events").count() == n_events
    # And the archive position covers everything archived, for both streams
    assert broker.archives.positions(queue_name, "default") == {
        "messages": later_ids[-1],
        "events": broker.client.xrevrange(broker.keys(queue_name).events, count=1)[0][0].decode(),
    }


@pytest.mark.timeout(300)
def test_driver_killed_mid_stream_loses_and_duplicates_nothing(
    spark: SparkSession,
    broker: Broker,
    redis_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    queue_name: str,
) -> None:
    queue = queue_name
    root = tmp_path / "archive"
    publish(broker, queue, 500)
    publisher = Publisher(redis_url, queue, batch=10, pause=0.05, limit=20_000)
    publisher.start()
    stderr = (tmp_path / "archive-1.err").open("w")
    proc = subprocess.Popen(
        archive_cli(
            "--redis-url", redis_url, "--root", str(root), "--queue", queue, "--trigger", "1"
        ),
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
        start_new_session=True,  # its own process group: the JVM dies with it below
    )
    try:
        sink_log = root / "messages" / "_spark_metadata"
        wait_for(lambda: (sink_log / "0").exists(), 180, "the first committed files", proc)
        # Let a few more micro-batches run, then kill while one is most likely under way.
        wait_for(lambda: (sink_log / "2").exists(), 60, "the third micro-batch", proc)
        time.sleep(0.6)
        spark_processes = descendants(proc.pid)  # its JVM and Spark's Python workers
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the Python driver, no goodbye
        proc.wait(timeout=30)
        stderr.close()
    # Its JVM (in a session of its own) and the JVM's workers die with the driver
    assert spark_processes
    assert processes_gone(spark_processes, 60) == [], "the killed driver's JVM is still running"

    # What the killed run committed, and the positions Redis recorded meanwhile.
    committed = read_table(spark, root, "messages")
    n_committed, distinct = count_and_distinct(committed, "message_id")
    assert n_committed == distinct > 0
    stored = max_entry_id(committed)
    assert stored is not None
    position = broker.archives.positions(queue, "default").get("messages")
    seen = [*publisher.positions, *([position] if position else [])]
    assert seen, "the archive never committed a position in Redis"
    assert max(entry_key(p) for p in seen) <= entry_key(stored)

    publisher.halt.set()
    publisher.join(timeout=30)
    published = [*broker.client.xrange(broker.keys(queue).log)]
    ids = [entry_id.decode() for entry_id, _ in published]

    # Run --once again, through the CLI (in this process: it reuses the shared session).
    code = main(
        ["archive", "--redis-url", redis_url, "--root", str(root), "--queue", queue, "--once"]
    )

    assert code == 0
    line = capsys.readouterr().out
    assert SUMMARY_RE.search(line)
    # It redid the batch the kill interrupted, and nothing the killed run committed.
    assert f"archived messages={len(ids) - n_committed} events=0 " in line
    archived = read_table(spark, root, "messages")
    assert count_and_distinct(archived, "message_id") == (len(ids), len(ids))
    assert {r[0] for r in archived.select("message_id").collect()} == set(ids)
    assert broker.archives.positions(queue, "default")["messages"] == ids[-1]


@pytest.mark.timeout(300)
def test_sigterm_stops_a_continuous_archive_cleanly_with_everything_archived_once(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given a continuous archive run (a micro-batch a second) that has committed a batch
    root = tmp_path / "archive"
    ids = publish(broker, queue_name, 300)
    args = ("--redis-url", redis_url, "--queue", queue_name, "--trigger", "1")
    with archive_running(root, *args, timeout=180) as (proc, spark_processes):
        # When it gets SIGTERM (the handler may land anywhere in the driver's loop)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    # Then it stops between micro-batches, exits 0 and says what it archived
    assert proc.returncode == 0, err[-3000:]
    assert SUMMARY_RE.search(out), out
    # And every message is in the archive exactly once
    archived = read_table(spark, root, "messages")
    assert count_and_distinct(archived, "message_id") == (len(ids), len(ids))
    assert processes_gone(spark_processes, 30) == [], "the stopped driver's JVM is still running"


class FakeProgress:
    """The fields of ``StreamingQueryProgress`` a :class:`TableTally` reads."""

    def __init__(self, batch: int, ts: str, rows: int, ms: int, **counts: int) -> None:
        self.batchId, self.timestamp, self.numInputRows = batch, ts, rows
        self.durationMs = {"triggerExecution": ms}
        self.observedMetrics = {"m": Row(**counts)} if counts else {}


def test_the_tally_counts_each_report_once_and_by_queue() -> None:
    tally = TableTally("m", {"orders": "q0", "mail": "q1"})
    first = FakeProgress(0, "t0", 10, 100, q0=7, q1=3)
    idle = FakeProgress(0, "t1", 0, 5)
    second = FakeProgress(1, "t2", 6, 50, q0=2, q1=0)  # 4 rows of a queue born later

    tally.add([first, idle])
    tally.add([first, idle, second])  # recentProgress repeats what it returned before

    summary = tally.summary()
    assert (summary.rows, summary.batches, summary.busy_ms) == (16, 2, 150)
    assert dict(summary.per_queue) == {"orders": 9, "mail": 3, OTHER_QUEUES: 4}
    only = TableTally("m", {}, only_queue="orders")
    only.add([first, second])
    assert dict(only.summary().per_queue) == {"orders": 16}
    line = ArchiveSummary(summary, TableSummary(), seconds=2.0).line()
    assert line == (
        "archived messages=16 events=0 (mail: 3/0, orders: 9/0, new queues: 4/0) in 2.0 s, 8 rows/s"
    )


def test_the_archive_reads_each_queue_in_the_cores_shared_among_the_queues(
    spark: SparkSession,
) -> None:
    from redisq_django.pipeline.archive import slices_per_stream

    cores = spark.sparkContext.defaultParallelism  # 2 on the tests' local[2]
    assert slices_per_stream(spark, 1) == cores
    assert slices_per_stream(spark, 2) == max(1, cores // 2)
    assert slices_per_stream(spark, 50) == 1
    assert slices_per_stream(spark, 0) == cores
