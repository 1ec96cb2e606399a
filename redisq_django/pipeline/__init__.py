"""The history pipeline on Spark (PySpark >= 4.0; the ``pipeline`` extra).

The ``redisq`` data source reads queues' messages, lifecycle events and dead letters as
tables, streams them for the archive, and publishes rows as messages::

    from redisq_django.pipeline import register

    register(spark)
    df = spark.read.format("redisq").option("url", "redis://localhost:6379/0").load()

This package is the only part of redisq_django that imports PySpark.
"""

from __future__ import annotations

from typing import Any

from redisq_django.pipeline.datasource import RedisqDataSource

__all__ = ["RedisqDataSource", "register"]


def register(spark: Any) -> None:
    """Make ``format("redisq")`` available in ``spark``'s session.

    Args:
        spark: a ``pyspark.sql.SparkSession``.
    """
    spark.dataSource.register(RedisqDataSource)
