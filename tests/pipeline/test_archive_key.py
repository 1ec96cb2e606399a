"""The archive's ``messages.key`` column (issue 25, step 1) in an archive written partly
before it existed: the files an older version wrote have no ``key`` column, the newer
ones have it, and every reader — Spark with the archive's schema, ``report``,
``replay``, ``compact`` and ``archive_files``/``archive_dataset`` — sees every row, with
``key`` null in the old files, whichever file it opens first."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from pyspark.sql import SparkSession

from redisq_django.core import Broker, Envelope
from redisq_django.pipeline.archive import archive
from redisq_django.pipeline.compact import compact
from redisq_django.pipeline.files import archive_dataset, archive_files
from redisq_django.pipeline.job_options import CompactOptions, ReplayOptions
from redisq_django.pipeline.options import ArchiveOptions
from redisq_django.pipeline.replay import replay
from redisq_django.pipeline.report import ReportOptions, report
from redisq_django.pipeline.schemas import Table, archive_schema
from redisq_django.pipeline.sink_log import (
    HadoopFs,
    current_files,
    entry_for,
    read_entries,
    rewrite_entries,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOMORROW = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)
OLD, NEW = 30, 20
#: Where Spark keeps a Parquet file's Spark schema (a footer key-value).
SPARK_SCHEMA = b"org.apache.spark.sql.parquet.row.metadata"


def as_written_before_the_key(spark: SparkSession, root: Path) -> int:
    """Rewrite every committed ``messages`` file without its ``key`` column, as a version
    before it wrote them, under a new name the sink log names instead. Returns how many."""
    fs = HadoopFs(spark, str(root))
    table = str(root / "messages")
    rewritten = 0
    for log_file in current_files(fs, table):
        for entry in read_entries(fs, log_file):
            path = Path(urlparse(entry["path"]).path)
            data = pq.ParquetFile(path).read()  # the file's columns only, no partitions
            assert "key" in data.column_names  # written by this version...
            old = path.with_name("part-before-the-key-" + path.name.removeprefix("part-"))
            # ...as an older one wrote it: no key column, nor in the schema Spark keeps
            # in the footer (which readers take before the file's own), timestamps INT96
            older = data.drop_columns(["key"])
            meta = dict(older.schema.metadata)
            spark_schema = json.loads(meta[SPARK_SCHEMA])
            spark_schema["fields"] = [f for f in spark_schema["fields"] if f["name"] != "key"]
            meta[SPARK_SCHEMA] = json.dumps(spark_schema).encode()
            older = older.replace_schema_metadata(meta)
            pq.write_table(older, old, use_deprecated_int96_timestamps=True)
            status = fs.fs.getFileStatus(fs.path(str(old)))
            assert rewrite_entries(fs, log_file, {entry["path"]}, [entry_for(status)])
            path.unlink()
            rewritten += 1
    return rewritten


def keys_by_id(rows: list[dict[str, Any]]) -> dict[str, str | None]:
    return {r["message_id"]: r["key"] for r in rows}


def test_an_archive_of_files_before_and_after_the_key_column_reads_whole_everywhere(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given an archive whose first files, of yesterday's messages, were written before
    # the key column existed...
    options = ArchiveOptions(redis_url=redis_url, root=str(tmp_path), queues=(queue_name,))
    yesterday_ms = int((dt.datetime.now(dt.UTC) - dt.timedelta(days=1)).timestamp() * 1000)
    old = [
        Envelope(queue=queue_name, id=f"old-{n}", payload_json=b"{}", published_at_ms=yesterday_ms)
        for n in range(OLD)
    ]
    old_ids = broker.send(old)
    archive(spark, options)
    assert as_written_before_the_key(spark, tmp_path) >= 1
    # ...and later ones with keyed messages (and one without a key)
    new_ids = [
        broker.publish(queue_name, {"n": OLD + n}, key=f"order-{n % 3}") for n in range(NEW - 1)
    ]
    unkeyed = broker.publish(queue_name, {"n": OLD + NEW})
    archive(spark, options)
    expected = {
        **dict.fromkeys([*old_ids, unkeyed]),
        **{mid: f"order-{n % 3}" for n, mid in enumerate(new_ids)},
    }
    assert len(expected) == OLD + NEW

    # Then archive_files lists the old files first, and archive_dataset still has the key
    files = archive_files(str(tmp_path), "messages")
    assert "key" not in pq.read_schema(files[0]).names
    assert "key" in pq.read_schema(files[-1]).names
    assert keys_by_id(archive_dataset(str(tmp_path), "messages").to_table().to_pylist()) == (
        expected
    )
    # And Spark with the archive's schema reads every row, the old ones' key null
    frame = spark.read.schema(archive_schema(Table.MESSAGES)).parquet(str(tmp_path / "messages"))
    assert keys_by_id([r.asDict() for r in frame.collect()]) == expected

    # And the report counts every message published
    summary = report(spark, ReportOptions(root=str(tmp_path), out=str(tmp_path / "report")))
    assert summary.totals["published"] == OLD + NEW

    # And a replay publishes them again with their keys (none for the old ones)
    broker.consumers.ensure(queue_name, "audit")  # from now: only the replayed messages
    replayed = replay(
        spark, ReplayOptions(redis_url=redis_url, root=str(tmp_path), queue=queue_name)
    )
    assert replayed.published == OLD + NEW
    got: dict[str, str | None] = {}
    with broker.subscribe(queue_name, "audit") as sub:
        for _ in range(100):
            batch = sub.fetch(count=100, block_ms=50)
            if not batch and len(got) >= OLD + NEW:
                break
            got.update({m.headers["redisq-original-id"]: m.key for m in batch})
            sub.ack(batch)
    assert got == expected

    # And compaction, reading old and new files together, keeps every key, and the old
    # files' nulls, in the files it writes
    done = compact(spark, CompactOptions(root=str(tmp_path), today=TOMORROW))
    assert (done.tables["messages"].directories, done.tables["messages"].rows_after) == (
        2,
        OLD + NEW,
    )
    compacted = archive_files(str(tmp_path), "messages")
    assert all("key" in pq.read_schema(f).names for f in compacted)
    assert keys_by_id(archive_dataset(str(tmp_path), "messages").to_table().to_pylist()) == (
        expected
    )
