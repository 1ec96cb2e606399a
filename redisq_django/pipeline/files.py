"""The archive's committed Parquet files, for engines other than Spark; pure Python.

Spark's file sink writes a micro-batch's Parquet files straight into the directories
``queue=Q/date=D`` and commits them by naming them in ``ROOT/<table>/_spark_metadata``. Spark
readers list only the named files; a plain glob of ``*.parquet`` also finds the files of
a batch that never committed (a driver killed mid-batch leaves them, complete or cut
short, and the batch is written again under new names on restart) and the files a
``compact`` run has replaced but not yet deleted. :func:`archive_files` reads the log as
Spark does and returns only the committed files, so pyarrow, pandas, DuckDB or anything
that takes a list of Parquet files sees every archived row exactly once::

    from redisq_django.pipeline.files import archive_dataset, archive_files

    table = archive_dataset("/var/lib/redisq/archive", "messages").to_table()
    duckdb.sql("SELECT count(*) FROM read_parquet($files, hive_partitioning = true, "
               "union_by_name = true)",
               params={"files": archive_files("/var/lib/redisq/archive", "messages")})

The log format (Spark's ``FileStreamSinkLog``): files named by batch id (``0``, ``1``, ...)
and, every 10th batch, ``N.compact`` holding the entries of every batch up to ``N``; each
file is a version line ``v1`` then one JSON object per line (``path``, ``size``,
``action`` ``add`` or ``delete``...). Readers use the latest ``.compact`` and the batch
files after it; Spark deletes the older ones later. ``compact.py`` rewrites these files
in place (one atomic rename each), so this reader follows compaction too.

Nothing here imports PySpark; :func:`archive_dataset` needs pyarrow only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from redisq_django.core.errors import RedisqError

if TYPE_CHECKING:
    import pyarrow.dataset as pa_dataset  # type: ignore[import-untyped]

__all__ = ["ArchiveLogError", "archive_dataset", "archive_files", "write_manifests"]

LOG_DIR = "_spark_metadata"
VERSION_LINE = "v1"
_BATCH_FILE = re.compile(r"^(\d+)(\.compact)?$")
#: The part of a logged path below the table directory: ``queue=Q/date=D/file``.
_DIRECTORY_TAIL = re.compile(r"(?:^|/)(queue=[^/]+/date=[^/]+/[^/]+)$")
#: The tables the archive job writes (``options.ARCHIVED_TABLES``, without its imports).
TABLES = ("messages", "events")
#: Columns added to a table after archives were first written (``schemas.py``): name,
#: and the column it follows. Files written before hold none; they read as null.
ADDED_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {"messages": (("key", "attempts"),)}
#: The columns of each table's Parquet files, in the order the archive writes them
#: (``schemas.py`` without PySpark, less the directory columns ``queue`` and ``date``):
#: the schema of an archive that has no committed file yet. A test checks them against
#: ``schemas.archive_schema`` and against files the archive wrote.
FILE_COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "messages": (
        ("message_id", "string"),
        ("entry_id", "string"),
        ("published_at", "timestamp"),
        ("due_at", "timestamp"),
        ("payload", "string"),
        ("headers", "string"),
        ("attempts", "int32"),
        ("key", "string"),
    ),
    "events": (
        ("consumer", "string"),
        ("instance", "string"),
        ("event", "string"),
        ("time", "timestamp"),
        ("entry_id", "string"),
        ("message_id", "string"),
        ("attempt", "int32"),
        ("duration_ms", "int64"),
        ("error_class", "string"),
        ("error_message", "string"),
        ("reason", "string"),
        ("next_due", "timestamp"),
        ("start_id", "string"),
    ),
}
#: Hadoop schemes pyarrow knows under another name.
_PYARROW_SCHEMES = {"s3a": "s3", "s3n": "s3"}


class ArchiveLogError(RedisqError, ValueError):
    """The table's sink log cannot be read (unknown version, a batch file missing)."""


@dataclass(frozen=True, slots=True)
class LogName:
    """One file name of the sink log: batch ``batch``, a compaction of the earlier ones or not."""

    batch: int
    compact: bool
    name: str


def current_log_files(names: Iterable[str]) -> list[LogName]:
    """The log files a reader uses, oldest first: the latest ``N.compact`` and the batch
    files after it (every batch file when there is no compaction yet). Other names
    (checksums, temporary files, batches a compaction covers) are left out."""
    files = []
    for name in names:
        match = _BATCH_FILE.match(name)
        if match:
            files.append(LogName(int(match[1]), bool(match[2]), name))
    files.sort(key=lambda f: (f.batch, not f.compact))
    compacts = [f for f in files if f.compact]
    if compacts:
        files = [f for f in files if f.batch > compacts[-1].batch or f is compacts[-1]]
    # Batch N and N.compact both present (never by Spark's hand): the compaction wins.
    by_batch = {f.batch: f for f in reversed(files)}
    return sorted(by_batch.values(), key=lambda f: f.batch)


def parse_log(text: str, where: str) -> list[dict[str, Any]]:
    """The entries of one log file.

    Raises:
        ArchiveLogError: it is not a version 1 sink log.
    """
    lines = text.splitlines()
    if not lines or lines[0].strip() != VERSION_LINE:
        raise ArchiveLogError(
            f"{where} is not a version 1 Spark file sink log (first line "
            f"{lines[0][:20] if lines else ''!r}); this reader does not know its format"
        )
    return [json.loads(line) for line in lines[1:] if line.strip()]


def committed_paths(entries: Iterable[dict[str, Any]]) -> list[str]:
    """The paths ``entries`` leave added, in log order (an ``add`` then a ``delete`` of
    the same path cancel out; a path added twice counts once)."""
    added: dict[str, None] = {}
    for entry in entries:
        if entry.get("action", "add") == "delete":
            added.pop(entry["path"], None)
        else:
            added[entry["path"]] = None
    return list(added)


class _Fs:
    """Listing and reading on the local file system or a pyarrow ``FileSystem``."""

    def __init__(self, filesystem: Any | None) -> None:
        self.pa = filesystem

    def names(self, directory: str) -> list[str]:
        if self.pa is None:
            return os.listdir(directory) if os.path.isdir(directory) else []
        from pyarrow import fs

        infos = self.pa.get_file_info(fs.FileSelector(directory, allow_not_found=True))
        return [info.base_name for info in infos if info.type == fs.FileType.File]

    def read(self, path: str) -> str:
        if self.pa is None:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        with self.pa.open_input_stream(path) as stream:
            return bytes(stream.read()).decode("utf-8")

    def replace(self, path: str, text: str) -> None:
        """Write ``text`` to ``path`` through a temporary file moved over it, so that a
        reader sees the old content or the new, never a part."""
        directory, name = path.rsplit("/", 1)
        tmp = f"{directory}/.{name}.tmp"
        if self.pa is None:
            os.makedirs(directory, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as handle:
                handle.write(text)
            os.replace(tmp, path)
            return
        self.pa.create_dir(directory, recursive=True)
        with self.pa.open_output_stream(tmp) as stream:
            stream.write(text.encode("utf-8"))
        self.pa.move(tmp, path)


def _resolve(root: str, filesystem: Any | None) -> tuple[str, Any | None]:
    """``root`` as a path in ``filesystem``; a local path for ``file:`` URIs, and for
    other URIs (``s3a://``, ``hdfs://``...) pyarrow's file system for it."""
    parts = urlsplit(root)
    if filesystem is not None or len(parts.scheme) <= 1:  # a path ("C:" is a drive)
        return root.rstrip("/") or root, filesystem
    if parts.scheme == "file":
        return unquote(parts.path).rstrip("/") or "/", None
    from pyarrow import fs

    scheme = _PYARROW_SCHEMES.get(parts.scheme, parts.scheme)
    found, path = fs.FileSystem.from_uri(parts._replace(scheme=scheme).geturl())
    return path.rstrip("/"), found


def _local_path(logged: str, table_dir: str) -> str:
    """Where a logged file is, seen from ``table_dir``: its directory (``queue=Q/date=D``) and name
    below the table (so an archive copied elsewhere still reads), else the logged URI's
    path."""
    path = unquote(urlsplit(logged).path) if len(urlsplit(logged).scheme) > 1 else logged
    tail = _DIRECTORY_TAIL.search(path)
    if tail:
        return f"{table_dir}/{tail[1]}"
    return path


def archive_files(root: str, table: str = "messages", *, filesystem: Any = None) -> list[str]:
    """The Parquet files of ``ROOT/<table>`` that the archive committed, and nothing else.

    Args:
        root: the archive's root, as given to the archive job: a local path, a
            ``file:`` URI, or another Hadoop URI (``s3a://bucket/redisq``: read with
            pyarrow's file system for it), or a path in ``filesystem``.
        table: ``messages`` or ``events``.
        filesystem: a ``pyarrow.fs.FileSystem`` holding the archive (``root`` is then a
            path in it, e.g. ``bucket/redisq`` for S3).

    Returns:
        The files' paths (local paths, or paths in the file system), in commit order.
        The same list a Spark reader of ``ROOT/<table>`` uses at this moment. Files
        replaced by a later ``compact`` run are deleted some time after it: read the
        files soon after listing them.

    Raises:
        ValueError: ``table`` is not an archived table.
        ArchiveLogError: the sink log cannot be read.
        FileNotFoundError: a local ``root`` is not a directory.
    """
    if table not in TABLES:
        raise ValueError(f"table must be one of {', '.join(TABLES)}, got {table!r}")
    base, pa_fs = _resolve(root, filesystem)
    if pa_fs is None and not os.path.isdir(base):
        raise FileNotFoundError(f"no archive at {root}: {base} is not a directory")
    table_dir = f"{base}/{table}"
    log_dir = f"{table_dir}/{LOG_DIR}"
    fs = _Fs(pa_fs)
    # Spark deletes log files a newer compaction covers (after a delay): if one goes
    # between listing and reading, list again once.
    for attempt in range(2):
        files = current_log_files(fs.names(log_dir))
        try:
            entries = [e for f in files for e in parse_log(fs.read(f"{log_dir}/{f.name}"), f.name)]
        except FileNotFoundError:
            if attempt:
                raise
            continue
        _check_contiguous(files, log_dir)
        return [_local_path(p, table_dir) for p in committed_paths(entries)]
    return []  # not reached: the loop returns or raises


def _check_contiguous(files: list[LogName], log_dir: str) -> None:
    batches = [f.batch for f in files]
    if batches and batches != list(range(batches[0], batches[0] + len(batches))):
        missing = sorted(set(range(batches[0], batches[-1] + 1)) - set(batches))
        raise ArchiveLogError(
            f"{log_dir} lacks batch file(s) {missing[:5]}: the log is incomplete (a "
            "copy of the archive in progress?); Spark would refuse it too"
        )
    if files and not files[0].compact and files[0].batch != 0:
        raise ArchiveLogError(
            f"{log_dir} starts at batch {files[0].batch} without a .compact file "
            "before it: the log is incomplete"
        )


def archive_dataset(
    root: str, table: str = "messages", *, filesystem: Any = None
) -> pa_dataset.Dataset:
    """A ``pyarrow.dataset.Dataset`` over the committed files of ``ROOT/<table>``, with
    the directory columns ``queue`` (string) and ``date`` (date32) from the paths and
    timestamps in microseconds (Spark writes them as INT96).

    ``.to_table()``, ``.to_table(filter=...)``, ``.to_batches()``, or
    ``.to_table().to_pandas()`` for pandas; DuckDB queries it directly by name.
    Arguments and errors as :func:`archive_files`. A column added to the table since
    some files were written (``messages.key``) is in the schema whichever file is
    first, null in the files written before it. An archive with no committed file yet
    (a root created for it, or a first batch not yet committed) has the same columns
    and no row.
    """
    import pyarrow as pa
    import pyarrow.dataset as ds

    files = archive_files(root, table, filesystem=filesystem)
    base, pa_fs = _resolve(root, filesystem)
    directories = pa.schema([("queue", pa.string()), ("date", pa.date32())])
    partitioning = ds.partitioning(directories, flavor="hive")
    parquet = ds.ParquetFileFormat(read_options={"coerce_int96_timestamp_unit": "us"})
    options: dict[str, Any] = {
        "filesystem": pa_fs,
        "format": parquet,
        "partitioning": partitioning,
        "partition_base_dir": f"{base}/{table}",
    }
    if not files:
        # With no file to take a schema from, pyarrow would know the directory columns
        # only, and a query naming any other column would fail on an archive that merely
        # has no rows yet.
        return ds.dataset([], schema=pa.schema([*_file_schema(table), *directories]), **options)
    found = ds.dataset(files, **options)
    # pyarrow takes the schema of the first file: one written before a column was added
    # would hide that column in every file. Add it; older files then read it as null.
    schema = found.schema
    for name, after in ADDED_COLUMNS.get(table, ()):
        if name not in schema.names and after in schema.names:
            schema = schema.insert(schema.get_field_index(after) + 1, pa.field(name, pa.string()))
    return found if schema is found.schema else ds.dataset(files, schema=schema, **options)


def _file_schema(table: str) -> Any:
    """The Arrow schema of ``table``'s Parquet files as :func:`archive_dataset` reads them
    (Spark's INT96 timestamps as microseconds)."""
    import pyarrow as pa

    kinds = {"string": pa.string(), "int32": pa.int32(), "int64": pa.int64()}
    kinds["timestamp"] = pa.timestamp("us")
    return pa.schema([(name, kinds[kind]) for name, kind in FILE_COLUMNS[table]])


def write_manifests(
    root: str, out: str, tables: Iterable[str] = TABLES, *, filesystem: Any = None
) -> dict[str, int]:
    """Write Hive "symlink" manifests of the committed files, for engines that read a
    table from a list of files (Trino's and Presto's Hive connector, Athena, Redshift
    Spectrum: ``SymlinkTextInputFormat``): ``OUT/<table>/queue=Q/date=D/manifest``, one
    file per line, each replaced atomically. Run it again after every archive and
    compact run: a manifest names the files committed when it was written.

    Args:
        root: the archive root, written into the manifests as given (``s3://bucket/x``,
            a local path...), so give it as the engine reaching the files names it.
        out: where the manifests go (a local directory, a URI, or a path in
            ``filesystem``).
        tables: the tables to write manifests of.
        filesystem: as for :func:`archive_files` (used for ``out`` too).

    Returns:
        The files named, per table.
    """
    out_base, out_fs = _resolve(out, filesystem)
    base, _ = _resolve(root, filesystem)
    writer = _Fs(out_fs)
    named: dict[str, int] = {}
    for table in tables:
        by_directory: dict[str, list[str]] = {}
        for path in archive_files(root, table, filesystem=filesystem):
            tail = path.removeprefix(f"{base}/{table}/")
            directory = tail.rsplit("/", 1)[0]
            by_directory.setdefault(directory, []).append(f"{root.rstrip('/')}/{table}/{tail}")
        for directory, paths in sorted(by_directory.items()):
            writer.replace(f"{out_base}/{table}/{directory}/manifest", "\n".join(paths) + "\n")
        named[table] = sum(len(p) for p in by_directory.values())
    return named
