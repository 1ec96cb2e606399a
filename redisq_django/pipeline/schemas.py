"""The fixed schemas of the ``redisq`` data source's three tables (docs/reference/datasource.md).

``messages`` is a queue's log, ``events`` its lifecycle events (one row per message of an
event entry) and ``dead`` its dead letters still in Redis. The Arrow schemas are derived
with PySpark's own converter, so the record batches the reader yields match exactly what
the engine checks them against.
"""

from __future__ import annotations

from enum import StrEnum
from functools import cache
from typing import TYPE_CHECKING

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    DateType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from redisq_django.pipeline.options import OptionError

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]


class Table(StrEnum):
    """What a read of the ``redisq`` data source returns (option ``table``)."""

    MESSAGES = "messages"
    EVENTS = "events"
    DEAD = "dead"


def _struct(*fields: tuple[str, object]) -> StructType:
    return StructType([StructField(name, kind, True) for name, kind in fields])  # type: ignore[arg-type]


_S, _T, _I, _L = StringType(), TimestampType(), IntegerType(), LongType()

MESSAGES = _struct(
    ("queue", _S),
    ("message_id", _S),
    ("entry_id", _S),
    ("published_at", _T),
    ("due_at", _T),
    ("payload", _S),
    ("headers", _S),
    ("attempts", _I),
    # Added after the first archives were written: files without it read as null.
    ("key", _S),
)

EVENTS = _struct(
    ("queue", _S),
    ("consumer", _S),
    ("instance", _S),
    ("event", _S),
    ("time", _T),
    ("entry_id", _S),
    ("message_id", _S),
    ("attempt", _I),
    ("duration_ms", _L),
    ("error_class", _S),
    ("error_message", _S),
    ("reason", _S),
    ("next_due", _T),
    ("start_id", _S),
)

DEAD = _struct(
    ("queue", _S),
    ("consumer", _S),
    ("entry_id", _S),
    ("message_id", _S),
    ("payload", _S),
    ("headers", _S),
    ("attempts", _I),
    ("reason", _S),
    ("error_class", _S),
    ("error_message", _S),
    ("traceback", _S),
    ("published_at", _T),
    ("first_failed_at", _T),
    ("last_failed_at", _T),
    ("key", _S),
)

SCHEMAS: dict[Table, StructType] = {
    Table.MESSAGES: MESSAGES,
    Table.EVENTS: EVENTS,
    Table.DEAD: DEAD,
}


def spark_schema(table: Table) -> StructType:
    """The Spark schema of ``table``."""
    return SCHEMAS[table]


def check_schema(table: Table, given: StructType) -> None:
    """Accept ``given`` only when it is ``table``'s schema (column names and types, in
    order; nullability aside): the data source's schemas are fixed.

    Raises:
        OptionError: another schema, naming the table's columns and what to do instead.
    """
    own = SCHEMAS[table]
    if [(f.name, f.dataType) for f in given.fields] == [(f.name, f.dataType) for f in own]:
        return
    columns = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in own.fields)
    raise OptionError(
        f"The redisq data source has a fixed schema; it cannot read the {table.value} "
        f"table as {given.simpleString()}. Remove .schema(...) before load(): the "
        f"{table.value} table's columns are {columns}. Select, rename or cast columns "
        "after load() (docs/reference/datasource.md)."
    )


def archive_schema(table: Table) -> StructType:
    """The schema of ``table`` as the archive stores it: its columns and the ``date``
    directory column. A reader given it infers nothing (Spark would run a job to read a file's
    footer, a second or more of a short job), and reads a column added since a file was
    written (``messages.key``) as null in that file: every reader of archived files
    passes it, never a schema inferred from whichever file Spark opens first."""
    return StructType([*SCHEMAS[table].fields, StructField("date", DateType(), True)])


@cache
def arrow_schema(table: Table) -> pa.Schema:
    """The Arrow schema of ``table``'s record batches (timestamps in UTC microseconds),
    built as the engine builds the schema it validates them against."""
    return to_arrow_schema(SCHEMAS[table], timezone="UTC")


def _parquet_options(
    no_dictionary: tuple[str, ...], no_statistics: tuple[str, ...]
) -> dict[str, str]:
    return {
        **{f"parquet.enable.dictionary#{c}": "false" for c in no_dictionary},
        **{f"parquet.column.statistics.enabled#{c}": "false" for c in no_statistics},
    }


#: parquet-mr settings of each table's files (options of the file sink, and of the
#: ``compact`` job's rewrite). A profile of the archive's executors (Java Flight Recorder,
#: bench/RESULTS.md) found about a third of their time in dictionary look-ups and min/max
#: statistics of columns where neither pays off: ids are unique per row, so their
#: dictionary only grows until parquet-mr drops it, and nobody prunes files by the
#: lexicographic minimum of a JSON payload. Readers see the same values either way.
PARQUET_OPTIONS: dict[str, dict[str, str]] = {
    "messages": _parquet_options(
        no_dictionary=("message_id", "entry_id", "payload"),
        no_statistics=("payload", "headers"),
    ),
    "events": _parquet_options(no_dictionary=("message_id",), no_statistics=("error_message",)),
}
