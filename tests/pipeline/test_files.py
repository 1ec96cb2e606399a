"""Reading the archive without Spark: ``archive_files`` / ``archive_dataset`` give pyarrow
and DuckDB every archived row exactly once, where a plain glob of ``*.parquet`` also
reads the files of batches that never committed (a driver killed mid-batch) and the
files a compaction replaced."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import duckdb
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from redisq_django.core import Broker
from redisq_django.pipeline import archive_dataset, archive_files
from redisq_django.pipeline.archive import archive
from redisq_django.pipeline.cli import main
from redisq_django.pipeline.compact import compact
from redisq_django.pipeline.files import ArchiveLogError, current_log_files
from redisq_django.pipeline.job_options import CompactOptions
from redisq_django.pipeline.options import ArchiveOptions
from tests.pipeline.archive_support import (
    REPO,
    Publisher,
    add_events,
    archive_cli,
    cli_env,
    descendants,
    processes_gone,
    publish,
)

TOMORROW = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)


def on_disk(root: Path, table: str = "messages") -> set[str]:
    """Every Parquet file under the table, as a plain glob finds them."""
    return {str(p) for p in (root / table).rglob("*.parquet")}


def naive_read(root: Path, table: str = "messages") -> tuple[list[str], int]:
    """What a plain glob gives a Parquet reader: the message ids of the files it can
    read, and how many files it cannot (cut short: no footer)."""
    ids: list[str] = []
    broken = 0
    for path in sorted(on_disk(root, table)):
        try:
            ids += pq.read_table(path, columns=["message_id"])["message_id"].to_pylist()
        except Exception:  # pyarrow.ArrowInvalid: "Parquet magic bytes not found" and kin
            broken += 1
    return ids, broken


def pyarrow_ids(root: Path, table: str = "messages") -> list[str]:
    return (
        archive_dataset(str(root), table).to_table(columns=["message_id"])["message_id"].to_pylist()
    )


def duckdb_ids(root: Path, table: str = "messages") -> list[str]:
    with duckdb.connect() as con:
        rows = con.execute(
            "SELECT message_id FROM read_parquet($files, hive_partitioning = true)",
            {"files": archive_files(str(root), table)},
        ).fetchall()
    return [r[0] for r in rows]


@pytest.mark.spark
@pytest.mark.slow
def test_orphans_and_compacted_files_are_read_once_by_pyarrow_and_duckdb(
    spark: SparkSession,
    broker: Broker,
    redis_url: str,
    tmp_path: Path,
    queue_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given an archive of one run, compacted (the replaced files stay on disk, retired,
    # until a later run deletes them), then a second run with events
    ids = publish(broker, queue_name, 300)
    options = ArchiveOptions(redis_url=redis_url, root=str(tmp_path), queues=(queue_name,))
    archive(spark, options)
    summary = compact(spark, CompactOptions(root=str(tmp_path), today=TOMORROW))
    assert summary.tables["messages"].directories == 1
    assert summary.tables["messages"].retired > 0
    ids += publish(broker, queue_name, 200, start=300)
    n_events = add_events(broker, queue_name, ids)
    archive(spark, options)
    committed = archive_files(str(tmp_path), "messages")
    assert len(committed) < len(on_disk(tmp_path))
    # And the files a killed batch leaves, as Spark leaves them: a complete file of a
    # batch that is then redone under new names, and one cut short mid-write
    partition = Path(committed[-1]).parent
    shutil.copy(committed[-1], partition / f"part-00000-{uuid.uuid4()}.c000.snappy.parquet")
    cut = Path(committed[-1]).read_bytes()[:-100]
    (partition / f"part-00001-{uuid.uuid4()}.c000.snappy.parquet").write_bytes(cut)

    # When a plain glob reads the table, it sees rows twice and a file it cannot read
    naive, broken = naive_read(tmp_path)
    assert broken == 1
    assert len(naive) > len(set(naive)) == len(ids)

    # Then archive_files gives pyarrow and DuckDB every message once, nothing else
    assert sorted(pyarrow_ids(tmp_path)) == sorted(ids)
    assert sorted(duckdb_ids(tmp_path)) == sorted(ids)
    assert len(archive_files(str(tmp_path), "events")) >= 1
    assert len(pyarrow_ids(tmp_path, "events")) == n_events
    # With the partition columns typed, and timestamps readable
    table = archive_dataset(f"file://{tmp_path}", "messages").to_table(
        filter=ds.field("queue") == queue_name
    )
    assert table.num_rows == len(ids)
    assert set(table["date"].to_pylist()) <= {TOMORROW - dt.timedelta(days=d) for d in (1, 2)}
    assert table.schema.field("published_at").type.unit == "us"
    with duckdb.connect() as con:
        (n, days) = con.execute(
            "SELECT count(*), count(DISTINCT date) FROM read_parquet($f, hive_partitioning = true)"
            " WHERE queue = $q AND date <= current_date",
            {"f": archive_files(str(tmp_path)), "q": queue_name},
        ).fetchone()  # type: ignore[misc]
    assert (n, days) in {(len(ids), 1), (len(ids), 2)}

    # And the command line lists the same files, and writes manifests that name them
    capsys.readouterr()
    assert main(["files", "--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out.split() == archive_files(str(tmp_path))
    out = tmp_path / "manifests"
    assert main(["files", "--root", str(tmp_path), "--manifest", str(out)]) == 0
    assert f"messages {len(archive_files(str(tmp_path)))}" in capsys.readouterr().out
    for table in ("messages", "events"):
        listed = [p for m in (out / table).rglob("manifest") for p in m.read_text().split()]
        assert sorted(listed) == sorted(archive_files(str(tmp_path), table))
    assert (out / "messages" / f"queue={queue_name}").is_dir()
    # A root that is none says so (exit 2, as any bad argument), the table's own
    # directory included: listing nothing with exit 0 would hide the mistake
    for wrong, says in (
        (tmp_path / "nowhere", "is not a directory"),
        (
            tmp_path / "messages",
            f"is the archive's messages table: give the archive's root, {tmp_path}",
        ),
    ):
        with pytest.raises(SystemExit) as exited:
            main(["files", "--root", str(wrong)])
        assert exited.value.code == 2
        assert says in capsys.readouterr().err


def _wait_uncommitted(root: Path, proc: subprocess.Popen[str], timeout: float) -> bool:
    """Poll until a Parquet file is on disk that the sink log does not name (a batch
    being written); False if the process died or the time ran out first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        disk = on_disk(root)  # listed before the log is read: see the docstring
        try:
            named = set(archive_files(str(root))) if (root / "messages").exists() else set()
        except (ArchiveLogError, FileNotFoundError):
            named = set()
        if disk - named:
            return True
        time.sleep(0.01)
    return False


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_after_sigkills_mid_batch_pyarrow_and_duckdb_read_every_message_once(
    spark: SparkSession,
    broker: Broker,
    redis_url: str,
    tmp_path: Path,
    queue_name: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a continuous archive run fed by a publisher, killed (SIGKILL, the driver and
    # its JVM) while a micro-batch's files are on disk but not yet committed, restarted,
    # and killed the same way again
    root = tmp_path / "archive"
    publish(broker, queue_name, 300)
    publisher = Publisher(redis_url, queue_name, batch=10, pause=0.05, limit=20_000)
    publisher.start()
    rounds_with_orphans = 0
    try:
        for attempt in range(6):
            log = (tmp_path / f"archive-{attempt}.err").open("w")
            argv = archive_cli("--redis-url", redis_url, "--root", str(root), "--queue", queue_name)
            proc = subprocess.Popen(
                [*argv, "--trigger", "0.5"],
                cwd=REPO,
                env=cli_env(),
                stdout=subprocess.DEVNULL,
                stderr=log,
                text=True,
                start_new_session=True,
            )
            spark_processes = []
            try:
                caught = _wait_uncommitted(root, proc, 180)
                spark_processes = descendants(proc.pid)  # its JVM and Spark's workers
            finally:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
                log.close()
            gone = processes_gone(spark_processes, 60)
            assert gone == [], "the killed driver's JVM is still running"
            assert caught, (tmp_path / f"archive-{attempt}.err").read_text()[-3000:]
            # The kill may land just after the commit: count the rounds that left files.
            if on_disk(root) - set(archive_files(str(root))):
                rounds_with_orphans += 1
            if rounds_with_orphans >= 2:
                break
    finally:
        publisher.halt.set()
        publisher.join(timeout=30)
    assert rounds_with_orphans >= 1, "no kill landed mid-batch in 6 rounds"
    ids = [entry_id.decode() for entry_id, _ in broker.client.xrange(broker.keys(queue_name).log)]

    # When the archive runs once more to the end (the killed batches are redone)
    code = main(
        ["archive", "--redis-url", redis_url, "--root", str(root), "--queue", queue_name, "--once"]
    )
    assert code == 0, capsys.readouterr().err

    # Then a plain glob sees some messages twice or a file it cannot read
    naive, broken = naive_read(root)
    assert broken > 0 or len(naive) > len(set(naive))
    # And pyarrow and DuckDB, given archive_files, see every message exactly once
    assert sorted(pyarrow_ids(root)) == sorted(ids)
    assert sorted(duckdb_ids(root)) == sorted(ids)


def test_the_reader_uses_the_latest_compaction_and_the_batches_after_it(tmp_path: Path) -> None:
    # Given a sink log as Spark leaves it: old batches a compaction covers (deleted
    # later), checksums and a temporary file, the compaction, and two batches after it
    names = ["0", "8", "9", "9.compact", ".10.crc", ".11.3f2a.tmp", "10", "11", "19.tmp"]
    assert [(f.batch, f.compact) for f in current_log_files(names)] == [
        (9, True),
        (10, False),
        (11, False),
    ]
    assert [f.batch for f in current_log_files(["1", "0", "2"])] == [0, 1, 2]
    assert current_log_files([]) == []
    # And files of the layout: a delete cancels an earlier add; paths resolve under the
    # table as the reader was given it (an archive copied elsewhere still reads)
    log = tmp_path / "messages" / "_spark_metadata"
    log.mkdir(parents=True)
    old = "file:/elsewhere/messages/queue=orders/date=2026-11-01/part-0.parquet"
    new = "file:/elsewhere/messages/queue=orders/date=2026-11-01/part-1.parquet"
    entry = '{"path":"%s","size":1,"isDir":false,"modificationTime":1,"action":"%s"}'
    (log / "0").write_text("v1\n" + entry % (old, "add") + "\n" + entry % (new, "add"))
    (log / "1").write_text("v1\n" + entry % (old, "delete"))
    assert archive_files(str(tmp_path)) == [
        f"{tmp_path}/messages/queue=orders/date=2026-11-01/part-1.parquet"
    ]
    assert archive_files(str(tmp_path), "events") == []  # no log: nothing committed
    # And what it cannot read, it says
    (log / "2").write_text("v2\n{}")
    with pytest.raises(ArchiveLogError, match="not a version 1"):
        archive_files(str(tmp_path))
    (log / "2").unlink()
    (log / "4").write_text("v1\n")
    with pytest.raises(ArchiveLogError, match=r"lacks batch file\(s\) \[2, 3\]"):
        archive_files(str(tmp_path))
    with pytest.raises(ValueError, match="messages, events"):
        archive_files(str(tmp_path), "dead")


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_archive_without_rows_reads_as_the_tables_columns_and_no_row(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given an archive of one message, a root created for an archive that has not run
    # yet, and one whose tables' sink logs are there but name no file yet (as the file
    # sink leaves them when its query starts)
    full, unused, empty = tmp_path / "full", tmp_path / "unused", tmp_path / "empty"
    add_events(broker, queue_name, publish(broker, queue_name, 1))
    archive(spark, ArchiveOptions(redis_url=redis_url, root=str(full), queues=(queue_name,)))
    unused.mkdir()
    for table in ("messages", "events"):
        (empty / table / "_spark_metadata").mkdir(parents=True)

    for table in ("messages", "events"):
        columns = archive_dataset(str(full), table).schema
        assert archive_dataset(str(full), table).count_rows() >= 1
        for root in (empty, unused):
            # When pyarrow reads the archive without rows, then it has every column of
            # the table, typed as in an archive with rows, and no row
            dataset = archive_dataset(str(root), table)
            assert dataset.schema == columns, (root.name, table)
            assert dataset.to_table().num_rows == 0
            # And DuckDB queries it by column, getting no row
            with duckdb.connect() as con:
                con.register("archived", dataset)
                got = con.execute(
                    "SELECT queue, date, count(*) FROM archived WHERE entry_id IS NOT NULL "
                    "GROUP BY ALL"
                ).fetchall()
            assert got == [], (root.name, table)


def test_the_file_columns_are_the_archived_tables_less_their_directories() -> None:
    from redisq_django.pipeline.files import FILE_COLUMNS
    from redisq_django.pipeline.schemas import Table, archive_schema

    for table, columns in FILE_COLUMNS.items():
        names = [f.name for f in archive_schema(Table(table)).fields]
        assert [name for name, _ in columns] == [n for n in names if n not in ("queue", "date")]
