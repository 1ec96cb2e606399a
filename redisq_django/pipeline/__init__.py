"""The history pipeline on Spark (PySpark >= 4.0; the ``pipeline`` extra).

The ``redisq`` data source reads queues' messages, lifecycle events and dead letters as
tables, streams them for the archive, and publishes rows as messages::

    from redisq_django.pipeline import register

    register(spark)
    df = spark.read.format("redisq").option("url", "redis://localhost:6379/0").load()

The archive's committed files for other engines (pyarrow, DuckDB, pandas), without
PySpark::

    from redisq_django.pipeline import archive_dataset, archive_files

This package is the only part of redisq_django that imports PySpark, and imports it only
when something of it is used (PEP 562): :mod:`.files` and the command line's argument
parsing work without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redisq_django.pipeline.files import archive_dataset, archive_files

if TYPE_CHECKING:
    from redisq_django.pipeline.datasource import RedisqDataSource

__all__ = ["RedisqDataSource", "archive_dataset", "archive_files", "register"]


def __getattr__(name: str) -> Any:
    if name == "RedisqDataSource":
        from redisq_django.pipeline.datasource import RedisqDataSource

        return RedisqDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register(spark: Any) -> None:
    """Make ``format("redisq")`` available in ``spark``'s session.

    Args:
        spark: a ``pyspark.sql.SparkSession``.
    """
    from redisq_django.pipeline.datasource import RedisqDataSource

    spark.dataSource.register(RedisqDataSource)
