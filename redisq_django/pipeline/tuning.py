"""Settings a pipeline job chooses for the session it creates, unless the user set them:
adaptive query execution on, shuffle partitions from the cores, and a local driver's heap
from the machine's memory.

Spark's default of 200 shuffle partitions suits a cluster; on two cores the report spent
half its time on the overhead of 200 small tasks per shuffle (bench/RESULTS.md). A few
partitions per core keep every core busy and leave adaptive execution room to even out
skew; adaptive execution then coalesces what is too small.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
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


DRIVER_MEMORY = "spark.driver.memory"
#: A local driver's heap, unless the user sets one: a quarter of the memory the machine
#: (or the container's cgroup) has, between Spark's own default and this ceiling.
#: Measured on 2 cores: the report of 10M events took 121 s with Spark's 1 GB and 108 s
#: with 4 GB, its aggregations spilling less and collecting less garbage.
DRIVER_MEMORY_FLOOR_MB, DRIVER_MEMORY_CEILING_MB = 1024, 4096


def machine_memory_mb() -> int | None:
    """The memory this process may use, in MiB: the machine's, or its cgroup's limit
    when lower (a container); None where the platform does not say."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(limit_file).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
        break
    return total // (1024 * 1024)


def local_driver_memory(settings: Mapping[str, str], memory_mb: int | None) -> dict[str, str]:
    """``spark.driver.memory`` for a session about to start its own local JVM, unless the
    user chose one (``settings``, ``PYSPARK_SUBMIT_ARGS``, or a ``spark-defaults.conf``).

    A local master runs every task in the driver's JVM, so its heap is the job's memory;
    Spark's 1 GB default suits a laptop's notebook, not months of history. On a cluster
    the executors hold the data and the driver's size is the cluster's business.
    """
    master = settings.get("spark.master", "")
    if memory_mb is None or not (master == "local" or master.startswith("local[")):
        return {}
    if DRIVER_MEMORY in settings or "driver-memory" in os.environ.get("PYSPARK_SUBMIT_ARGS", ""):
        return {}
    if _in_spark_defaults(DRIVER_MEMORY):
        return {}
    chosen = min(max(memory_mb // 4, DRIVER_MEMORY_FLOOR_MB), DRIVER_MEMORY_CEILING_MB)
    return {DRIVER_MEMORY: f"{chosen}m"}


def _in_spark_defaults(key: str) -> bool:
    """Whether the ``spark-defaults.conf`` that ``spark-submit`` reads sets ``key``."""
    directory = os.environ.get("SPARK_CONF_DIR") or (
        str(Path(os.environ["SPARK_HOME"]) / "conf") if os.environ.get("SPARK_HOME") else None
    )
    if directory is None:
        return False
    try:
        lines = (Path(directory) / "spark-defaults.conf").read_text().splitlines()
    except OSError:
        return False
    return any(line.split(None, 1)[:1] == [key] for line in lines)
