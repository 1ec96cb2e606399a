"""The ``compact`` job: rewrite old day directories of the archive into fewer, larger
Parquet files, without ever showing a Spark reader a row twice or not at all.

The rule. ``ROOT/<table>`` is the archive's file sink: Spark readers
(``spark.read.parquet(ROOT + "/messages")``) list exactly the files its ``_spark_metadata``
log names. So the compaction works *through that log*, and only on dates strictly before
today (UTC), which the archive no longer writes (a day's directory gets rows only while
that day's messages are being archived; a late straggler after midnight lands in a batch
whose log entry is new, see below):

1. For each log file Spark currently reads (the latest ``N.compact`` and the batches after
   it), the directories ``queue=Q/date=D`` in range whose files are *all* named in that one
   file are candidates (a directory spread over several batch files waits until the
   sink's own log compaction, every 10th batch, gathers it in one file; the next run then
   takes it).
2. Their rows are read from exactly those files, de-duplicated (messages by ``queue,
   message_id``; events by ``queue, message_id, event, consumer, attempt, entry_id``),
   written to ``ROOT/<table>/_compaction/<run>`` (ignored by every reader) in
   ``ceil(input bytes / target size)`` files per directory, then moved next to the old
   files as ``part-compacted-<run>-*.parquet``: still invisible, as the log does not
   name them.
3. That log file is rewritten in one atomic rename: the old files' entries out, the new
   files' in. Batch ids never change (the sink skips a batch id already in its log, so an
   added one would drop a micro-batch of the running archive).
4. If the archive wrote its own log compaction meanwhile from the old version of the file
   (it reads the earlier files every 10th batch), the same replacement is applied to it.
5. The old data files are *retired*, not deleted: ``ROOT/<table>/_retired/<run>.json``
   records them with the replacement and the newest batch id in the log at that moment.
   A later run deletes them once the log holds a batch two ids past that one and no
   current log file names them (re-applying the replacement where one does, which
   starts the wait again). The archive runs one micro-batch at a time, so by then the
   one that may have been running during the rewrite has finished, and any log
   compaction it wrote from the old version is on disk to be seen and corrected.

So compaction is safe while the archive runs, on any dates: a reader lists either the
old files or the new ones for a directory, never both, never neither, and never a file
that is gone. Files the archive adds to a directory while it is being compacted are in
newer log files and are left as they are. What this costs: old files stay on disk until
a run after the archive has committed two more micro-batches (``--once`` runs count).
The rule assumes one archive query per table and root, as the checkpoint does.

Files of batches that never committed (a driver killed mid-batch) are removed too, on
every date, once they are older than the archive's newest committed file
(:mod:`~redisq_django.pipeline.unlogged` says why that is safe while the archive runs).

Idempotent: a directory already made only of compacted files, no more of them than its
size calls for, is left alone, so a second run changes nothing. A run that dies before
step 3 leaves unreferenced files only (in ``_compaction`` or ``part-compacted-*``) that
no reader sees; after step 3 only old files that no reader lists, recorded for deletion
(the record is written before the log is rewritten, so none is forgotten).
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from redisq_django.pipeline.job_options import CompactOptions
from redisq_django.pipeline.options import ARCHIVED_TABLES, JobError, join_path, one_line
from redisq_django.pipeline.schemas import PARQUET_OPTIONS, Table, archive_schema
from redisq_django.pipeline.sink_log import (
    HadoopFs,
    LogFile,
    current_files,
    entry_for,
    read_entries,
    rewrite_entries,
)
from redisq_django.pipeline.unlogged import remove_unlogged

__all__ = ["CompactError", "CompactOptions", "CompactSummary", "compact"]

#: The rows that are one and the same, per table.
DEDUP_KEYS = {
    "messages": ("queue", "message_id"),
    "events": ("queue", "message_id", "event", "consumer", "attempt", "entry_id"),
}
COMPACTED_PREFIX = "part-compacted-"
STAGING_DIR = "_compaction"
RETIRED_DIR = "_retired"
_DIRECTORY = re.compile(r"/(queue=[^/]+)/date=(\d{4}-\d{2}-\d{2})/[^/]+$")


class CompactError(JobError):
    """The compaction could not finish; the message says why (readers are unaffected)."""


@dataclass
class TableCompaction:
    """What compacting one table did (``directories``: how many ``queue=Q/date=D`` it
    rewrote)."""

    directories: int = 0
    files_before: int = 0
    files_after: int = 0
    rows_before: int = 0
    rows_after: int = 0
    skipped: list[str] = field(default_factory=list)
    deleted: int = 0  # retired files of earlier runs deleted now
    retired: int = 0  # old files waiting to be deleted by a later run
    unlogged: int = 0  # files of batches that never committed, removed now (unlogged.py)

    @property
    def partitions(self) -> int:
        """Deprecated (removed in the next minor version): :attr:`directories`."""
        warnings.warn(
            "TableCompaction.partitions is now TableCompaction.directories (the archive's "
            "directories queue=Q/date=D; a partition is a queue's)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.directories


@dataclass
class CompactSummary:
    """What a compaction run did, per table (``messages``, ``events``)."""

    tables: dict[str, TableCompaction]
    seconds: float

    def line(self) -> str:
        """The summary line the CLI prints."""
        parts = [
            f"{name}: {t.directories} directories, files {t.files_before} -> {t.files_after}, "
            f"rows {t.rows_before} -> {t.rows_after}"
            for name, t in self.tables.items()
        ]
        waiting = sum(len(t.skipped) for t in self.tables.values())
        tail = f"; {waiting} directories wait for the sink's log compaction" if waiting else ""
        deleted = sum(t.deleted for t in self.tables.values())
        retired = sum(t.retired for t in self.tables.values())
        if deleted or retired:
            tail += f"; old files deleted {deleted}, waiting {retired} (see compact.py, step 5)"
        unlogged = sum(t.unlogged for t in self.tables.values())
        if unlogged:
            tail += f"; removed {unlogged} files of batches that never committed"
        return f"compacted {'; '.join(parts)} in {self.seconds:.1f} s{tail}"


@dataclass
class _Candidate:
    """One directory ``queue=Q/date=D`` to compact and the log file naming its files."""

    log_file: LogFile
    directory: str  # "queue=Q/date=D"
    entries: list[dict[str, Any]]

    @property
    def size(self) -> int:
        return sum(int(e.get("size", 0)) for e in self.entries)


def compact(spark: SparkSession, options: CompactOptions) -> CompactSummary:
    """Compact the day directories ``[since, until)`` (never today or later) of
    ``ROOT/messages`` and ``ROOT/events``.

    Raises:
        CompactError: reading, writing or the log rewrite failed; what was done stays
            consistent for readers (see the module docstring) and a re-run continues.
    """
    started = time.monotonic()
    fs = HadoopFs(spark, options.root)
    tables = {}
    for table in ARCHIVED_TABLES:
        try:
            tables[table] = _compact_table(spark, fs, options, table)
        except CompactError:
            raise
        except Exception as exc:
            raise CompactError(f"compacting {table} failed: {one_line(exc)}") from exc
    return CompactSummary(tables, time.monotonic() - started)


def _in_range(date: str, options: CompactOptions) -> bool:
    if options.since is not None and date < options.since.isoformat():
        return False
    return date < options.end_date().isoformat()


def _files_wanted(size: int, options: CompactOptions) -> int:
    return max(1, math.ceil(size / options.target_file_bytes))


def plan(
    fs: HadoopFs, table_path: str, options: CompactOptions
) -> tuple[list[_Candidate], list[str]]:
    """The directories to compact now, and those in range that must wait (their files
    are named in several log files)."""
    by_directory: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(dict)
    log_files = {f.batch: f for f in current_files(fs, table_path)}
    for log_file in log_files.values():
        for entry in read_entries(fs, log_file):
            match = _DIRECTORY.search(entry["path"])
            if match is None or not _in_range(match[2], options):
                continue
            directory = f"{match[1]}/date={match[2]}"
            by_directory[directory].setdefault(log_file.batch, []).append(entry)
    candidates, waiting = [], []
    for directory, per_file in sorted(by_directory.items()):
        if len(per_file) > 1:
            waiting.append(directory)
            continue
        ((batch, entries),) = per_file.items()
        candidate = _Candidate(log_files[batch], directory, entries)
        names = [e["path"].rsplit("/", 1)[1] for e in entries]
        done = all(n.startswith(COMPACTED_PREFIX) for n in names)
        if done and len(entries) <= _files_wanted(candidate.size, options):
            continue  # compacted already: a second run changes nothing
        candidates.append(candidate)
    return candidates, waiting


def _compact_table(
    spark: SparkSession, fs: HadoopFs, options: CompactOptions, table: str
) -> TableCompaction:
    table_path = join_path(options.root, table)
    result = TableCompaction()
    result.deleted = _delete_retired(fs, table_path)
    retired = [p for r in _records(fs, table_path) for p in json.loads(fs.read_text(r))["removed"]]
    result.unlogged = remove_unlogged(fs, table_path, retired, compacted_prefix=COMPACTED_PREFIX)
    candidates, result.skipped = plan(fs, table_path, options)
    if not candidates:
        result.retired = _retired_count(fs, table_path)
        return result
    run = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    staging = join_path(table_path, STAGING_DIR, run)
    old = [e["path"] for g in candidates for e in g.entries]
    # The table's schema, not one inferred from a file: files written before a column
    # was added (messages.key) would drop it from the rewrite of newer ones.
    reader = spark.read.schema(archive_schema(Table(table)))
    frame = reader.option("basePath", fs.qualified(table_path)).parquet(*old)
    wanted = {g.directory: _files_wanted(g.size, options) for g in candidates}
    # One bucket column per row: rows of a directory spread over its wanted file count.
    buckets = F.create_map(*[x for p, n in wanted.items() for x in (F.lit(p), F.lit(n))])
    key = F.concat(F.lit("queue="), F.col("queue"), F.lit("/date="), F.col("date").cast("string"))
    deduped = frame.dropDuplicates(list(DEDUP_KEYS[table]))
    bucket = F.pmod(F.xxhash64(*DEDUP_KEYS[table]), buckets[key])
    out = deduped.withColumn("_bucket", bucket).repartition(
        sum(wanted.values()), "queue", "date", "_bucket"
    )
    writer = out.drop("_bucket").write.partitionBy("queue", "date")
    writer.options(**PARQUET_OPTIONS[table]).parquet(staging)
    result.rows_before = frame.count()
    result.rows_after = spark.read.parquet(staging).count()
    new_entries = _move_into_place(fs, staging, table_path, run)
    fs.delete(join_path(table_path, STAGING_DIR), True)
    for candidate in candidates:
        added = new_entries.get(candidate.directory, [])
        removed = {e["path"] for e in candidate.entries}
        record = _retire(fs, table_path, f"{run}-{result.directories:05d}", removed, added)
        if not rewrite_entries(fs, candidate.log_file, removed, added):
            fs.delete(record)
            raise CompactError(
                f"the log of {table} changed while compacting {candidate.directory}; run again"
            )
        _follow_sink_compaction(fs, table_path, candidate.log_file, removed, added)
        result.directories += 1
        result.files_before += len(removed)
        result.files_after += len(added)
    result.retired = _retired_count(fs, table_path)
    return result


def _newest_batch(fs: HadoopFs, table_path: str) -> int:
    files = current_files(fs, table_path)
    return files[-1].batch if files else -1


def _retire(
    fs: HadoopFs, table_path: str, name: str, removed: set[str], added: list[dict[str, Any]]
) -> str:
    """Record ``removed`` for deletion by a later run (step 5); returns the record's path."""
    path = join_path(table_path, RETIRED_DIR, f"{name}.json")
    record = {"removed": sorted(removed), "added": added, "batch": _newest_batch(fs, table_path)}
    fs.replace_text(path, json.dumps(record))
    return path


def _records(fs: HadoopFs, table_path: str) -> list[str]:
    statuses = fs.list_dir(join_path(table_path, RETIRED_DIR))
    paths = [str(s.getPath().toString()) for s in statuses]
    return [p for p in paths if p.endswith(".json")]


def _retired_count(fs: HadoopFs, table_path: str) -> int:
    return sum(len(json.loads(fs.read_text(p))["removed"]) for p in _records(fs, table_path))


def _delete_retired(fs: HadoopFs, table_path: str) -> int:
    """Delete the old files of earlier runs that no log compaction can name any more
    (step 5); returns how many were deleted."""
    deleted = 0
    for path in _records(fs, table_path):
        record = json.loads(fs.read_text(path))
        removed = set(record["removed"])
        named = [f for f in current_files(fs, table_path) if _names_any(fs, f, removed)]
        for log_file in named:  # a stale log compaction named them again: correct it
            rewrite_entries(fs, log_file, removed, record["added"])
        newest = _newest_batch(fs, table_path)
        if named:
            record["batch"] = newest  # the correction is a rewrite too: wait again
            fs.replace_text(path, json.dumps(record))
        elif newest >= record["batch"] + 2:
            for old in removed:
                fs.delete(old)
            fs.delete(path)
            deleted += len(removed)
    return deleted


def _names_any(fs: HadoopFs, log_file: LogFile, paths: set[str]) -> bool:
    return any(e["path"] in paths for e in read_entries(fs, log_file))


def _move_into_place(
    fs: HadoopFs, staging: str, table_path: str, run: str
) -> dict[str, list[dict[str, Any]]]:
    """Move the staged Parquet files to their directories (as
    ``part-compacted-<run>-<i>.parquet``); returns their log entries by directory."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    staged_root = fs.qualified(staging)
    for i, status in enumerate(fs.list_files(staging)):
        src = str(status.getPath().toString())
        if not src.endswith(".parquet"):
            continue  # _SUCCESS and checksums
        directory = src[len(staged_root) :].strip("/").rsplit("/", 1)[0]
        dst = join_path(table_path, directory, f"{COMPACTED_PREFIX}{run}-{i:05d}.parquet")
        fs.rename(src, dst)
        out[directory].append(entry_for(fs.fs.getFileStatus(fs.path(dst))))
    return out


def _follow_sink_compaction(
    fs: HadoopFs,
    table_path: str,
    rewritten: LogFile,
    removed: set[str],
    added: list[dict[str, Any]],
) -> None:
    """Apply the same replacement to a log compaction the running archive wrote from the
    version of ``rewritten`` before our rename (it would name the old files again)."""
    for log_file in current_files(fs, table_path):
        if log_file.batch > rewritten.batch and log_file.compact:
            rewrite_entries(fs, log_file, removed, added)  # no-op when it has our version
