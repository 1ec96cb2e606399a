"""Spark SQL settings a pipeline job chooses for the session it creates, unless the user
set them: adaptive query execution on, and shuffle partitions from the cores.

Spark's default of 200 shuffle partitions suits a cluster; on two cores the report spent
half its time on the overhead of 200 small tasks per shuffle (bench/RESULTS.md). A few
partitions per core keep every core busy and leave adaptive execution room to even out
skew; adaptive execution then coalesces what is too small.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Shuffle partitions per core of the job (local[N]: N cores).
SHUFFLE_PARTITIONS_PER_CORE = 2
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
#: Adaptive query execution and its partition coalescing (Spark's defaults since 3.2,
#: set anyway: a cluster's spark-defaults.conf may have turned them off for other jobs).
ADAPTIVE = {
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
}


def job_cores(conf: Mapping[str, str], default_parallelism: int) -> int:
    """The cores the job's tasks run on, from the session's configuration.

    ``spark.default.parallelism`` if set; else ``spark.executor.instances`` x
    ``spark.executor.cores``; else ``spark.cores.max`` (a standalone cluster's cap);
    else Spark's default parallelism (``local[N]``: N; YARN and Kubernetes: the cores of
    the executors registered when the session started, as Spark waits for most of them;
    standalone: those registered so far, at least 2).
    """

    def number(key: str) -> int:
        try:
            return int(conf.get(key, "0") or 0)
        except ValueError:
            return 0

    if number("spark.default.parallelism") > 0:
        return number("spark.default.parallelism")
    instances, per_executor = number("spark.executor.instances"), number("spark.executor.cores")
    if instances > 0 and per_executor > 0:
        return instances * per_executor
    if number("spark.cores.max") > 0:
        return number("spark.cores.max")
    return max(1, default_parallelism)


def job_defaults(conf: Mapping[str, str], default_parallelism: int) -> dict[str, str]:
    """The settings to apply: :data:`ADAPTIVE` and :data:`SHUFFLE_PARTITIONS`
    (:data:`SHUFFLE_PARTITIONS_PER_CORE` per core), each unless ``conf`` (the
    SparkConf: ``--conf``, spark-submit's, spark-defaults.conf) has it."""
    wanted = {
        **ADAPTIVE,
        SHUFFLE_PARTITIONS: str(SHUFFLE_PARTITIONS_PER_CORE * job_cores(conf, default_parallelism)),
    }
    return {key: value for key, value in wanted.items() if key not in conf}


def apply_job_defaults(spark: Any) -> dict[str, str]:
    """Set :func:`job_defaults` on ``spark`` (a session the job created); returns them."""
    context = spark.sparkContext
    chosen = job_defaults(dict(context.getConf().getAll()), context.defaultParallelism)
    for key, value in chosen.items():
        spark.conf.set(key, value)
    return chosen
