"""The report's aggregates as the driver holds them (Arrow tables, small): written as the
Parquet datasets ``DIR/<name>.parquet``, the backlog derived from the counts, and the rows
the HTML is drawn from."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from itertools import groupby
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

__all__ = ["backlog", "rows", "write"]

#: Error classes shown in the HTML (the Parquet dataset has them all).
TOP_ERRORS = 20
BACKLOG_SCHEMA = pa.schema(
    [
        ("queue", pa.string()),
        ("consumer", pa.string()),
        ("bucket", pa.timestamp("us", tz="UTC")),
        ("start", pa.int64()),
        ("published_total", pa.int64()),
        ("redriven_total", pa.int64()),
        ("settled_total", pa.int64()),
        ("backlog", pa.int64()),
    ]
)


def write(table: pa.Table, out_dir: Path, name: str) -> None:
    """``table`` as the dataset ``DIR/<name>.parquet`` (replacing one of an earlier run):
    one file, as Spark would lay it out, so Spark, pyarrow and DuckDB all read it."""
    dataset = out_dir / f"{name}.parquet"
    shutil.rmtree(dataset, ignore_errors=True)
    dataset.mkdir(parents=True)
    pq.write_table(table, dataset / "part-00000.parquet")


def backlog(counts: pa.Table) -> pa.Table:
    """Per consumer and bucket, the messages waiting for it at the bucket's end.

    What enters a consumer's backlog is what the range's rows say: messages published to
    its queue and dead letters re-driven to it (``redriven`` events: a bulk retry hands
    them to the consumer again without publishing them again); what leaves it is
    ``handled`` and ``dead``. Retried messages still wait, so they stay in.

    The backlog at the range's start is not in the range's rows: messages published
    before it and settled in it would make a count started from 0 negative. So each
    consumer starts from the least backlog its events allow, the one that keeps the
    cumulated count at 0 or more (``start``): it is the true one whenever the consumer
    was drained at some bucket's end in the range, and a lower bound otherwise. Nothing
    cheaper is exact either way: messages published before the range and still waiting
    at its end leave no row in it. Counted from the counts aggregate (a row per consumer
    and bucket: small), in the driver.
    """
    rows = [row for row in counts.to_pylist() if row["consumer"] is not None]
    rows.sort(key=lambda row: (row["queue"], row["consumer"], row["bucket"]))
    out: list[dict[str, Any]] = []
    for (queue, consumer), group in groupby(rows, key=lambda r: (r["queue"], r["consumer"])):
        cumulated: list[tuple[dict[str, Any], int, int, int]] = []
        published = redriven = settled = 0
        for row in group:
            published += row["published"]
            redriven += row["redriven"]
            settled += row["handled"] + row["dead"]
            cumulated.append((row, published, redriven, settled))
        start = max(0, *(s - p - r for _, p, r, s in cumulated))
        out.extend(
            {
                "queue": queue,
                "consumer": consumer,
                "bucket": row["bucket"],
                "start": start,
                "published_total": p,
                "redriven_total": r,
                "settled_total": s,
                "backlog": start + p + r - s,
            }
            for row, p, r, s in cumulated
        )
    return pa.Table.from_pylist(out, schema=BACKLOG_SCHEMA)


def rows(name: str, table: pa.Table) -> list[dict[str, Any]]:
    """An aggregate's rows, sorted (nulls first, as Spark sorts), as plain dicts with
    aware UTC timestamps; errors: the top ones only (the dataset has them all)."""
    rows = [{k: _utc(v) for k, v in row.items()} for row in table.to_pylist()]
    if name == "errors":
        rows.sort(key=lambda r: (-r["count"], *_nulls_first(r, "queue", "consumer", "error_class")))
        return rows[:TOP_ERRORS]
    order = [
        c for c in ("queue", "consumer", "bucket", "event", "attempt") if c in table.column_names
    ]
    rows.sort(key=lambda r: _nulls_first(r, *order))
    return rows


def _nulls_first(row: dict[str, Any], *columns: str) -> tuple[tuple[bool, Any], ...]:
    return tuple((row[c] is not None, row[c]) for c in columns)


def _utc(value: Any) -> Any:
    """The report speaks UTC: timestamps as aware UTC datetimes (Arrow's are already)."""
    return value.astimezone(UTC) if isinstance(value, datetime) else value
