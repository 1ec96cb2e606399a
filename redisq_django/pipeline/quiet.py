"""Spark's log level for a command-line job, without the log dump of a failing task.

When a task fails, Spark logs the exception with its stack trace from several places
(the executor, the task scheduler, the writer aborting its commit) at ERROR, and PySpark
logs it once more as JSON; a replay whose ``--where`` fails on one value printed ~40 KB.
The job then fails, and the command line reports that failure in one line that carries
Spark's message. So at ERROR and quieter, the loggers that only report a task's failure
are turned off; ``--spark-log-level WARN`` (or INFO...) shows everything again.
"""

from __future__ import annotations

from typing import Any

#: Loggers (Spark's JVM classes) whose ERROR lines repeat a task's failure.
TASK_FAILURE_LOGGERS = (
    "org.apache.spark.executor.Executor",
    "org.apache.spark.scheduler.TaskSetManager",
    "org.apache.spark.util.Utils",  # "Aborting task" with the stack trace
    "org.apache.spark.sql.execution.datasources.v2.DataWritingSparkTask",
    "org.apache.spark.sql.execution.datasources.v2.AppendDataExec",
    "org.apache.spark.sql.execution.datasources.FileFormatWriter",
    "org.apache.spark.sql.execution.datasources.FileFormatDataWriter",
    # "Query ... terminated with error" and its stack trace (~70 lines) when a streaming
    # query fails: the archive job says so in one line (its package in Spark 4.3, then
    # the older one).
    "org.apache.spark.sql.execution.streaming.runtime.MicroBatchExecution",
    "org.apache.spark.sql.execution.streaming.MicroBatchExecution",
)
#: PySpark's loggers that print a captured exception as JSON (``pyspark.logger``).
PYSPARK_EXCEPTION_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
_QUIET_LEVELS = frozenset({"ERROR", "FATAL", "OFF"})


def set_log_level(spark: Any, level: str) -> None:
    """Set Spark's log level to ``level`` (``ALL`` ... ``OFF``); at ``ERROR`` and
    quieter, without the lines that only repeat a failing task's exception."""
    spark.sparkContext.setLogLevel(level)
    if level.upper() not in _QUIET_LEVELS:
        return
    import logging

    from pyspark.logger import PySparkLogger

    jvm = spark._jvm
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    off = jvm.org.apache.logging.log4j.Level.OFF
    for name in TASK_FAILURE_LOGGERS:
        configurator.setLevel(name, off)
    for name in PYSPARK_EXCEPTION_LOGGERS:
        # Through PySparkLogger: a plain Logger of that name would break its callers.
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL + 1)
