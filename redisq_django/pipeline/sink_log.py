"""The file sink's ``_spark_metadata`` log of an archived table, read and rewritten through
Hadoop's file system API (so any root Spark can write works: local, ``hdfs:``, ``s3a:``).

The archive's file sink names every committed Parquet file in ``ROOT/<table>/_spark_metadata``:
one file per micro-batch (``0``, ``1``, ...), every 10th a compaction of the earlier ones
(``9.compact``); each holds ``v1`` then one JSON ``SinkFileStatus`` per line. Spark
readers of ``ROOT/<table>`` list exactly the files named by the latest ``.compact`` and the
batches after it, and nothing else (:mod:`.files` reads the format; this module adds the
Hadoop file system and the rewriting).

:func:`rewrite_entries` replaces some entries of one log file by others in one atomic
rename, so a reader sees the file either before or after, never in between. Batch ids are
never added or removed: the sink skips a batch id that is already in its log, so adding one
would make the archive silently drop a micro-batch.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

from pyspark.sql import SparkSession

from redisq_django.pipeline.files import LOG_DIR, VERSION_LINE, current_log_files, parse_log


@dataclass(frozen=True, slots=True)
class LogFile:
    """One batch file of the sink log."""

    batch: int
    compact: bool
    path: str


class HadoopFs:
    """The few Hadoop ``FileSystem`` calls the compaction needs, on one root."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        # py4j handles: PySpark types them loosely (Optional), they are set in a session.
        self._jvm: Any = cast(Any, spark._jvm)
        self._gateway: Any = spark.sparkContext._gateway
        self._conf: Any = spark.sparkContext._jsc.hadoopConfiguration()
        self._Path = self._jvm.org.apache.hadoop.fs.Path
        self.fs = self._Path(root).getFileSystem(self._conf)

    def path(self, text: str) -> Any:
        return self._Path(text)

    def qualified(self, text: str) -> str:
        """``text`` as the fully qualified URI the sink log uses (``file:/...``)."""
        return str(self.fs.makeQualified(self._Path(text)).toString())

    def exists(self, text: str) -> bool:
        return bool(self.fs.exists(self._Path(text)))

    def list_dir(self, text: str) -> list[Any]:
        """The ``FileStatus`` of each entry of directory ``text`` ([] when missing)."""
        if not self.exists(text):
            return []
        return list(self.fs.listStatus(self._Path(text)))

    def list_files(self, text: str) -> list[Any]:
        """Every data file under ``text``, recursively (``FileStatus``): names starting
        with ``_`` or ``.`` left out, as Spark's readers leave them out.

        Not Hadoop's recursive ``listFiles``: it visits the sink log too, where a running
        archive renames hidden temporary files into place, and on the local file system
        it asks each file it listed for its permissions, failing the whole listing when
        one was renamed in between. A directory removed during the walk is skipped."""
        out: list[Any] = []
        pending = [self._Path(text)]
        while pending:
            try:
                statuses = self.fs.listStatus(pending.pop())
            except Exception as exc:
                if "FileNotFoundException" in str(exc):
                    continue
                raise
            for status in statuses:
                if str(status.getPath().getName()).startswith(("_", ".")):
                    continue
                if status.isDirectory():
                    pending.append(status.getPath())
                else:
                    out.append(status)
        return out

    def read_text(self, text: str) -> str:
        stream = self.fs.open(self._Path(text))
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data).decode("utf-8")

    def replace_text(self, text: str, content: str) -> None:
        """Write ``content`` to ``text`` atomically: a hidden temporary file in the same
        directory, renamed over the target (``FileContext`` rename with OVERWRITE)."""
        target = self._Path(text)
        tmp = self._Path(target.getParent(), f".{target.getName()}.{uuid.uuid4().hex}.tmp")
        out = self.fs.create(tmp, False)
        try:
            out.write(bytearray(content.encode("utf-8")))
        finally:
            out.close()
        fc = self._jvm.org.apache.hadoop.fs.FileContext.getFileContext(target.toUri(), self._conf)
        rename = self._jvm.org.apache.hadoop.fs.Options.Rename
        options = self._gateway.new_array(rename, 1)  # Java varargs: Options.Rename[]
        options[0] = rename.OVERWRITE
        fc.rename(tmp, target, options)

    def rename(self, src: str, dst: str) -> None:
        """Move file ``src`` to ``dst`` (its directory created if needed)."""
        dst_path = self._Path(dst)
        self.fs.mkdirs(dst_path.getParent())
        if not self.fs.rename(self._Path(src), dst_path):
            raise OSError(f"cannot move {src} to {dst}")

    def delete(self, text: str, recursive: bool = False) -> None:
        self.fs.delete(self._Path(text), recursive)


def current_files(fs: HadoopFs, table_path: str) -> list[LogFile]:
    """The log files Spark readers use now: the latest ``.compact`` and the batches after
    it, oldest first ([] when the table has no sink log)."""
    log_dir = f"{table_path}/{LOG_DIR}"
    paths = {
        str(s.getPath().getName()): str(s.getPath().toString())
        for s in fs.list_dir(log_dir)
        if s.isFile()
    }
    return [LogFile(f.batch, f.compact, paths[f.name]) for f in current_log_files(paths)]


def read_entries(fs: HadoopFs, log_file: LogFile) -> list[dict[str, Any]]:
    """The ``SinkFileStatus`` entries of one log file.

    Raises:
        ArchiveLogError: the file is not a version 1 sink log (a newer Spark?).
    """
    return parse_log(fs.read_text(log_file.path), log_file.path)


def rewrite_entries(
    fs: HadoopFs,
    log_file: LogFile,
    remove: set[str],
    add: Iterable[dict[str, Any]],
) -> bool:
    """Replace the entries of ``log_file`` whose path is in ``remove`` by ``add``, in one
    atomic rename. Nothing is done (False) unless every path in ``remove`` is there: the
    caller's view of the log is out of date."""
    entries = read_entries(fs, log_file)
    present = {e["path"] for e in entries}
    if not remove <= present:
        return False
    kept = [e for e in entries if e["path"] not in remove]
    lines = [VERSION_LINE, *(json.dumps(e, separators=(",", ":")) for e in [*kept, *add])]
    fs.replace_text(log_file.path, "\n".join(lines))
    return True


def entry_for(status: Any) -> dict[str, Any]:
    """The ``SinkFileStatus`` JSON of a Hadoop ``FileStatus`` (as the sink writes it)."""
    return {
        "path": str(status.getPath().toUri().toString()),
        "size": int(status.getLen()),
        "isDir": False,
        "modificationTime": int(status.getModificationTime()),
        "blockReplication": int(status.getReplication()),
        "blockSize": int(status.getBlockSize()),
        "action": "add",
    }
