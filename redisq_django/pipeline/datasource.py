"""The ``redisq`` Python data source: queues' messages, events and dead letters as tables.

``spark.read.format("redisq")`` reads what is in Redis now, split by entry-id ranges
(:mod:`redisq_django.pipeline.reading`); ``spark.readStream.format("redisq")`` streams it
with offsets ``{"queue": "last id"}`` (a partitioned queue's per partition,
``{"queue#0": "last id", ...}``, its rows all in column ``queue`` as one queue),
read-only unless option ``archive`` names it a
registered archive that commits its position (:mod:`redisq_django.pipeline.streaming`);
``df.write.format("redisq")`` publishes rows as messages
(:mod:`redisq_django.pipeline.writer`). Options:
:class:`~redisq_django.pipeline.source_options.SourceOptions`; schemas:
:mod:`redisq_django.pipeline.schemas` (both documented in docs/reference/datasource.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from redisq_django.pipeline.options import OptionError
from redisq_django.pipeline.reading import RedisqReader
from redisq_django.pipeline.schemas import check_schema, spark_schema
from redisq_django.pipeline.source_options import SourceOptions, check_use
from redisq_django.pipeline.streaming import RedisqStreamReader
from redisq_django.pipeline.writer import RedisqStreamWriter, RedisqWriter


class RedisqDataSource(DataSource):
    """Redis queues as a Spark table (format ``"redisq"``): their messages, lifecycle
    events or dead letters; writes publish rows as messages.

    Args:
        options: Spark's options (see :class:`SourceOptions`); ``url`` is required.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(options)  # type: ignore[arg-type]
        # Checked here, so that a bad option fails load() / save() at once. Spark shows
        # the traceback of an error raised here before its message: raised again from
        # this frame alone, it is one frame, and the message is its last line.
        try:
            self.parsed = SourceOptions.parse(options)
            return
        except OptionError as exc:
            problem = str(exc)
        raise OptionError(problem) from None

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.read.format("redisq")``."""
        return "redisq"

    def schema(self) -> StructType:
        """The fixed schema of the table chosen by option ``table``."""
        return spark_schema(self.parsed.table)

    def _for(self, use: str) -> SourceOptions:
        """The options, refused when one of them is not for ``use`` (one frame, as in
        ``__init__``)."""
        try:
            check_use(self.options, use)
            return self.parsed
        except OptionError as exc:
            problem = str(exc)
        raise OptionError(problem) from None

    def _fixed(self, schema: StructType) -> None:
        """Refuse a schema the user gave (``.schema(...)`` before ``load()``) other than
        this table's own (one frame, as in ``__init__``).

        Spark does not show a data source the user's schema at ``load()``: only here, when
        the read is planned (a batch read's first action, a stream's start), before a task
        runs; without this check the first task failed, with Arrow's mismatch."""
        try:
            check_schema(self.parsed.table, schema)
            return
        except OptionError as exc:
            problem = str(exc)
        raise OptionError(problem) from None

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader (the schema is always this table's own)."""
        self._fixed(schema)
        return RedisqReader(self._for("read"))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A streaming reader with offsets ``{"queue": "last entry id"}`` (``"queue#i"``:
        partition ``i`` of a partitioned queue)."""
        self._fixed(schema)
        return RedisqStreamReader(self._for("stream"))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A batch writer publishing each row as a message."""
        return RedisqWriter(self._for("write"), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """A streaming writer publishing each row as a message."""
        return RedisqStreamWriter(self._for("write"), schema, overwrite)
