"""The last batch a streaming query committed, read from its checkpoint.

Spark tells a source that micro-batch N is committed (``commit(end)``) only when it plans
batch N + 1. The archive's last batch would therefore never move the archive position in
Redis: an ``availableNow`` run ends right after it, and a continuous run waits for new
data. Once its queries have stopped, the job does what Spark would have done next, from
the checkpoint itself: the newest batch in ``commits/`` was written to the sink (its
files are in ``_spark_metadata``), and ``offsets/<batch>`` holds its end offset.

Files are read through Hadoop's ``FileSystem`` in the driver's JVM, so a checkpoint on
HDFS or S3 works like a local one.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from pyspark.sql import SparkSession

logger = logging.getLogger("redisq.pipeline")

#: First line of Spark's metadata log files (``OffsetSeqLog``, ``CommitLog``).
_VERSION_PREFIX = "v"


def last_committed_offset(spark: SparkSession, checkpoint: str) -> dict[str, str] | None:
    """The end offset (``{queue: entry id}``) of the newest committed batch, or None
    when the checkpoint has none yet (or its offset is not one of ours).

    Args:
        spark: a classic (JVM) session.
        checkpoint: the query's checkpoint location.
    """
    jvm: Any = spark.sparkContext._jvm
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    fs_path = jvm.org.apache.hadoop.fs.Path
    root = fs_path(checkpoint)
    fs = root.getFileSystem(hadoop_conf)
    commits = fs_path(root, "commits")
    if not fs.exists(commits):
        return None
    # Batch files are named by their id; ".crc", ".tmp" and the like are not digits.
    batches = [
        int(name)
        for status in fs.listStatus(commits)
        if (name := status.getPath().getName()).isdigit()
    ]
    if not batches:
        return None
    offsets = fs_path(fs_path(root, "offsets"), str(max(batches)))
    if not fs.exists(offsets):
        return None
    return parse_offset_log(_read_text(jvm, fs, offsets))


def parse_offset_log(text: str) -> dict[str, str] | None:
    """The (single) source offset of an ``offsets/<batch>`` file.

    Its lines: the version (``v1``), the batch metadata (JSON), then one line per source
    of the query: its offset as JSON, or ``-`` when it has none.
    """
    lines = text.splitlines()
    if len(lines) < 3 or not lines[0].startswith(_VERSION_PREFIX):
        logger.warning("Unexpected streaming offset log format; archive position not moved.")
        return None
    source = lines[2].strip()
    if source in ("", "-"):
        return None
    try:
        value = json.loads(source)
    except ValueError:
        logger.warning("Unreadable source offset %r; archive position not moved.", source[:200])
        return None
    if not isinstance(value, dict):
        return None
    return {str(k): str(v) for k, v in value.items()}


def _read_text(jvm: Any, fs: Any, path: Any) -> str:
    stream = fs.open(path)
    try:
        reader = jvm.java.io.BufferedReader(jvm.java.io.InputStreamReader(stream, "UTF-8"))
        lines = []
        while (line := reader.readLine()) is not None:
            lines.append(line)
        return "\n".join(lines)
    finally:
        stream.close()
