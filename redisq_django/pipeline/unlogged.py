"""Parquet files that no commit of the sink log names ("unlogged"), removed by ``compact``.

A micro-batch writes its files into ``queue=Q/date=D`` first and names them in the sink
log when it commits. A driver killed in between (SIGKILL, a lost host) leaves those files
behind, complete or cut short; the batch is written again under new names when the
archive restarts, and no reader ever lists the old ones, but nothing else removes them.

Which of them are safe to remove: one archive query writes a table, one micro-batch at a
time, so the files of the batch being written now were all written after the latest
commit's files. A file the log does not name, older than the newest file the archive
itself committed (its ``modificationTime`` as the log records it; files a ``compact``
run wrote are left out, as their time is the compaction's), can therefore belong to no
batch under way: it is what a batch that never committed left. A margin
(:data:`MARGIN_MS`) covers clocks that disagree, where the files' times come from
several hosts. Files a ``compact`` run retired (``_retired``, step 5 of ``compact.py``)
are unlogged too, but wait for their own turn, and are kept here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

from redisq_django.pipeline.sink_log import HadoopFs, current_files, read_entries

#: How much older than the archive's newest committed file an unlogged file must be to
#: be removed (ms): room for clocks of several hosts that disagree.
MARGIN_MS = 5 * 60 * 1000
#: The part of a data file's path below the table directory: ``queue=Q/date=D/name``.
_DATA_FILE = re.compile(r"(?:^|/)(queue=[^/]+/date=[^/]+/([^/]+\.parquet))$")


def _tail(path: str) -> str | None:
    """``queue=Q/date=D/name`` of a data file's path or URI (None: not a data file)."""
    match = _DATA_FILE.search(unquote(urlsplit(path).path))
    return match[1] if match else None


def remove_unlogged(
    fs: HadoopFs, table_path: str, keep: Iterable[str], *, compacted_prefix: str
) -> int:
    """Delete the data files of ``table_path`` that no current log file names, older than
    the newest file the archive committed by :data:`MARGIN_MS`; returns how many.

    Args:
        fs: the archive's file system.
        table_path: ``ROOT/<table>``.
        keep: paths never to delete here (files a ``compact`` run retired).
        compacted_prefix: the name prefix of files a ``compact`` run wrote.
    """
    entries = [e for f in current_files(fs, table_path) for e in read_entries(fs, f)]
    own = [
        int(e.get("modificationTime") or 0)
        for e in entries
        if not str(e["path"]).rsplit("/", 1)[-1].startswith(compacted_prefix)
    ]
    if not own:
        return 0  # no commit of the archive's yet: any file may be its first batch's
    before = max(own) - MARGIN_MS
    named = {_tail(str(p)) for p in [*(e["path"] for e in entries), *keep]}
    removed = 0
    for status in fs.list_files(table_path):
        path = str(status.getPath().toString())
        tail = _tail(str(status.getPath().toUri().toString()))  # escaped, as the log's
        if tail is None or tail in named or int(status.getModificationTime()) >= before:
            continue
        fs.delete(path)
        checksum = f"{path.rsplit('/', 1)[0]}/.{path.rsplit('/', 1)[1]}.crc"
        if fs.exists(checksum):  # the local file system's checksum beside it
            fs.delete(checksum)
        removed += 1
    return removed
