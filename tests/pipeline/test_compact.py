"""The ``compact`` job: fewer files, the same rows, each seen once by Spark readers of the
archive (which honour the sink's ``_spark_metadata``), idempotent, and the archive job
keeps working on the same root afterwards."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.testing import assertDataFrameEqual

from redisq_django.core import Broker
from redisq_django.pipeline.archive import archive
from redisq_django.pipeline.compact import compact
from redisq_django.pipeline.job_options import CompactOptions
from redisq_django.pipeline.options import ArchiveOptions, OptionError
from tests.pipeline.archive_support import add_events, publish, read_table

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOMORROW = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)


def parquet_files(root: Path, table: str) -> list[Path]:
    """The data files on disk (whether the log names them or not)."""
    return sorted(p for p in (root / table).rglob("*.parquet") if "_compaction" not in p.parts)


def named_files(spark: SparkSession, root: Path, table: str) -> list[Path]:
    """The data files Spark readers see: those the sink log names now."""
    from urllib.parse import urlparse

    from redisq_django.pipeline.sink_log import HadoopFs, current_files, read_entries

    fs = HadoopFs(spark, str(root))
    return [
        Path(urlparse(e["path"]).path)
        for f in current_files(fs, str(root / table))
        for e in read_entries(fs, f)
    ]


def test_compaction_keeps_every_row_once_in_fewer_files_and_is_idempotent(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given an archive of two queues whose day directories have several files each (each
    # queue read in 4 slices: one file per task and directory)
    other = f"{queue_name}.mail"
    ids = publish(broker, queue_name, 600)
    publish(broker, other, 200)
    n_events = add_events(broker, queue_name, ids)
    archive_options = ArchiveOptions(
        redis_url=redis_url,
        root=str(tmp_path),
        queues=(queue_name, other),
        extra={"slicesPerStream": "4"},
    )
    archive(spark, archive_options)
    before = {t: read_table(spark, tmp_path, t).cache() for t in ("messages", "events")}
    assert before["messages"].count() == 800
    assert before["events"].count() == n_events
    files_before = {t: len(parquet_files(tmp_path, t)) for t in before}
    assert files_before["messages"] > 2

    # When the dates up to today are compacted ("today" moved to tomorrow)
    options = CompactOptions(root=str(tmp_path), today=TOMORROW)
    summary = compact(spark, options)

    # Then readers see exactly the same rows, from one file per directory
    for table, frame in before.items():
        assertDataFrameEqual(read_table(spark, tmp_path, table), frame)
    messages = summary.tables["messages"]
    assert (messages.rows_before, messages.rows_after) == (800, 800)
    assert messages.files_before == files_before["messages"]
    assert messages.files_after == messages.directories == 2
    assert len(named_files(spark, tmp_path, "messages")) == 2
    # the old files are retired: on disk until the archive has moved on (step 5)
    assert len(parquet_files(tmp_path, "messages")) == 2 + files_before["messages"]
    assert messages.retired == files_before["messages"]
    assert summary.tables["events"].rows_after == n_events
    assert "compacted messages: 2 directories" in summary.line()

    # And a second run changes nothing
    again = compact(spark, options)
    assert all(t.directories == 0 for t in again.tables.values())
    assert len(named_files(spark, tmp_path, "messages")) == 2
    assert again.tables["messages"].deleted == 0  # the archive has not moved on yet

    # And the archive goes on on the same root: new rows added, none lost or doubled
    more = publish(broker, queue_name, 50, start=600)
    second = archive(spark, archive_options)
    assert second.messages.rows == 50
    rows = read_table(spark, tmp_path, "messages")
    assert rows.count() == 850
    assert rows.select("message_id").distinct().count() == 850
    assert set(more) <= {r.message_id for r in rows.select("message_id").collect()}

    # And once it has committed two more micro-batches, the old files are deleted
    publish(broker, queue_name, 10, start=650)
    archive(spark, archive_options)
    third = compact(spark, options)
    assert third.tables["messages"].deleted == files_before["messages"]
    assert third.tables["messages"].retired == 0
    on_disk = {p.resolve() for p in parquet_files(tmp_path, "messages")}
    assert on_disk == {p.resolve() for p in named_files(spark, tmp_path, "messages")}
    assert read_table(spark, tmp_path, "messages").count() == 860
    for frame in before.values():
        frame.unpersist()


def test_today_is_never_compacted(spark: SparkSession, tmp_path: Path) -> None:
    # The archive may still be writing today's directories: the default range ends before.
    options = CompactOptions(root=str(tmp_path), until=TOMORROW + dt.timedelta(days=5))
    assert options.end_date() == dt.datetime.now(dt.UTC).date()
    summary = compact(spark, options)  # nothing archived: nothing to do
    assert all(t.directories == 0 for t in summary.tables.values())
    with pytest.raises(OptionError, match="must not be after --until"):
        CompactOptions(root="/r", since=TOMORROW, until=TOMORROW - dt.timedelta(days=1))


def test_cli_compact(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from redisq_django.pipeline.cli import main

    assert main(["compact", "--root", str(tmp_path), "--until", "2026-01-01"]) == 0
    assert capsys.readouterr().out.startswith("compacted messages: 0 directories")
    with pytest.raises(SystemExit) as exit_info:
        main(["compact", "--root", str(tmp_path), "--target-file-mb", "0"])
    assert exit_info.value.code == 2


def test_manage_py_compact_uses_the_archive_root_of_settings(
    spark: SparkSession, tmp_path: Path, redisq_settings: object
) -> None:
    from io import StringIO

    from django.core.management import call_command

    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "ARCHIVE_ROOT": str(tmp_path)}  # type: ignore[attr-defined]
    out = StringIO()
    call_command("redisq_pipeline", "compact", "--until", "2026-01-01", stdout=out)
    assert out.getvalue().startswith("compacted messages: 0 directories")


def test_rows_stored_twice_are_stored_once_after_compaction(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    import shutil

    from redisq_django.pipeline.sink_log import HadoopFs, current_files, entry_for, rewrite_entries

    # Given an archive where one file's rows are stored twice (a copy named in the log,
    # as a batch redone by a file sink that lost its log entry would leave them)
    publish(broker, queue_name, 300)
    archive(spark, ArchiveOptions(redis_url=redis_url, root=str(tmp_path), queues=(queue_name,)))
    original = parquet_files(tmp_path, "messages")[0]
    copy = original.with_name("part-copy-" + original.name)
    shutil.copy(original, copy)
    fs = HadoopFs(spark, str(tmp_path))
    log_file = current_files(fs, str(tmp_path / "messages"))[-1]
    status = fs.fs.getFileStatus(fs.path(str(copy)))
    assert rewrite_entries(fs, log_file, set(), [entry_for(status)])
    doubled = read_table(spark, tmp_path, "messages").count()
    assert doubled > 300

    # When compacted
    summary = compact(spark, CompactOptions(root=str(tmp_path), today=TOMORROW))

    # Then every message is there once
    rows = read_table(spark, tmp_path, "messages")
    assert (summary.tables["messages"].rows_before, summary.tables["messages"].rows_after) == (
        doubled,
        300,
    )
    assert rows.count() == rows.select("message_id").distinct().count() == 300


def test_compaction_while_the_archive_runs_never_shows_a_row_twice_or_loses_one(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    import threading
    import time

    from tests.pipeline.archive_support import count_and_distinct

    # Given the archive running with a short trigger, its sink compacting its log every
    # 3rd batch (10th by default: the race with our log rewrite comes round more often)
    key = "spark.sql.streaming.fileSink.log.compactInterval"
    spark.conf.set(key, "3")
    stop = threading.Event()
    options = ArchiveOptions(
        redis_url=redis_url, root=str(tmp_path), queues=(queue_name,), trigger_seconds=0.3
    )
    failures: list[BaseException] = []

    def run_archive() -> None:
        try:
            archive(spark, options, stop=stop)
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    runner = threading.Thread(target=run_archive, name="archive-under-test")
    runner.start()
    published: list[str] = []
    compactions = []
    try:
        # When messages keep coming while we compact (today included) again and again,
        # reading the archive in between
        deadline = time.monotonic() + 90
        published += publish(broker, queue_name, 100)
        while not (tmp_path / "messages" / "_spark_metadata" / "0").exists():
            assert time.monotonic() < deadline and not failures  # the query's first batch
            time.sleep(0.2)
        # 8 rounds, or up to 16 until it compacted twice (a loaded machine's archive may
        # add no file between two rounds)
        for round_ in range(1, 17):
            if round_ > 8 and sum(c.directories for c in compactions) >= 2:
                break
            published += publish(broker, queue_name, 100, start=100 * round_)
            time.sleep(0.4)
            summary = compact(spark, CompactOptions(root=str(tmp_path), today=TOMORROW))
            compactions.append(summary.tables["messages"])
            rows, distinct = count_and_distinct(
                read_table(spark, tmp_path, "messages"), "message_id"
            )
            assert rows == distinct <= len(published)  # never a row twice, never a lost file
            assert time.monotonic() < deadline and not failures
        # Then, once the archive has caught up, every message is there exactly once
        for _ in range(100):
            rows, distinct = count_and_distinct(
                read_table(spark, tmp_path, "messages"), "message_id"
            )
            if rows >= len(published) or time.monotonic() > deadline:
                break
            time.sleep(0.3)
    finally:
        stop.set()
        runner.join(timeout=60)
        spark.conf.unset(key)
    assert not failures
    assert not runner.is_alive()
    assert (rows, distinct) == (len(published), len(published))
    assert sum(c.directories for c in compactions) >= 2  # it did compact, more than once
    # And the retired files go once the log has moved on two batches, leaving what readers
    # list. A run that compacts again (the sink's own log compaction may just have gathered
    # the directory) retires files of its own, which the next round deletes: up to 4 rounds
    once = ArchiveOptions(redis_url=redis_url, root=str(tmp_path), queues=(queue_name,))
    for round_ in range(4):
        publish(broker, queue_name, 10, start=2000 + 20 * round_)
        archive(spark, once)
        publish(broker, queue_name, 10, start=2010 + 20 * round_)
        archive(spark, once)
        extra = 20 * (round_ + 1)
        last = compact(spark, CompactOptions(root=str(tmp_path), today=TOMORROW))
        if not last.tables["messages"].directories:
            break
    assert last.tables["messages"].retired == 0
    on_disk = {p.resolve() for p in parquet_files(tmp_path, "messages")}
    assert on_disk == {p.resolve() for p in named_files(spark, tmp_path, "messages")}
    final = read_table(spark, tmp_path, "messages")
    assert count_and_distinct(final, "message_id") == (len(published) + extra,) * 2


@pytest.mark.timeout(400)  # several Spark jobs in a row on shared cores
def test_files_of_batches_that_never_committed_are_removed_once_older_than_a_commit(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    import os
    import shutil
    import uuid

    # Given an archive compacted once (its old files retired, on disk until the archive
    # has committed two more batches), then one more batch committed
    options = ArchiveOptions(redis_url=redis_url, root=str(tmp_path), queues=(queue_name,))
    publish(broker, queue_name, 300)
    archive(spark, options)
    first = compact(spark, CompactOptions(root=str(tmp_path), today=TOMORROW))
    retired = set(parquet_files(tmp_path, "messages")) - set(
        named_files(spark, tmp_path, "messages")
    )
    assert len(retired) == first.tables["messages"].retired > 0
    publish(broker, queue_name, 50, start=300)
    archive(spark, options)
    committed = parquet_files(tmp_path, "messages")
    newest = max(named_files(spark, tmp_path, "messages"), key=lambda p: p.stat().st_mtime)
    # And the files a driver killed mid-batch leaves where the batch writes (a complete
    # one and one cut short), from before that commit; and a file of a batch being
    # written now
    directory = newest.parent
    killed = [directory / f"part-0000{i}-{uuid.uuid4()}.c000.snappy.parquet" for i in (0, 1)]
    shutil.copy(newest, killed[0])
    killed[1].write_bytes(newest.read_bytes()[:-100])
    an_hour_before = newest.stat().st_mtime - 3600
    for path in killed:
        os.utime(path, (an_hour_before, an_hour_before))
    writing = directory / f"part-00000-{uuid.uuid4()}.c000.snappy.parquet"
    shutil.copy(newest, writing)
    before = read_table(spark, tmp_path, "messages").cache()
    assert before.count() == 350

    # When compact runs
    summary = compact(spark, CompactOptions(root=str(tmp_path), today=TOMORROW))

    # Then the killed batch's files are gone and it says so; the file being written, the
    # committed files and the retired ones waiting for their turn are all still there
    assert summary.tables["messages"].unlogged == 2
    assert "removed 2 files of batches that never committed" in summary.line()
    on_disk = set(parquet_files(tmp_path, "messages"))
    assert not on_disk & set(killed)
    assert on_disk == set(committed) | {writing}
    assert retired <= on_disk
    # And readers see the same rows
    assertDataFrameEqual(read_table(spark, tmp_path, "messages"), before)
    before.unpersist()
