"""Spark's Python worker daemon with the ``redisq`` writer imported before it forks.

Spark starts Python workers by forking them from one daemon process per executor
(``pyspark.daemon``); each worker then imports what it runs. A replay's workers (the
planner of the write, each task's, the commit's) all import PySpark's worker modules,
the writer, redis-py and the core: about a second each on an idle core, several on a
busy machine. This daemon imports them once, before forking, so that every worker
starts with them loaded.

Spark runs it when ``spark.python.daemon.module`` names it;
:func:`~redisq_django.pipeline.session.preload_workers` does that for local masters
only, where the workers run this interpreter with the driver's path (on a cluster the
executors import ``redisq_django`` from the zip the job ships, which a daemon does not
see). A process that forks must not hold threads (``pyspark.daemon`` says so too): none
of these modules starts one (pyarrow, which does, is imported by the workers after the
fork, as before), and should one ever do so, the daemon starts over as Spark's own.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

#: Imported before forking: what the workers of a replay import first thing.
PRELOADED = (
    "redisq_django.pipeline.writer",
    "pyspark.worker",
    "pyspark.sql.worker.write_into_data_source",
    "pyspark.sql.worker.commit_data_source_write",
)


def _threads() -> int:
    """This process's threads, native ones included (1 where /proc cannot say)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def main() -> None:
    """Preload, then run ``pyspark.daemon``'s manager (or, with threads, exec it)."""
    for name in PRELOADED:
        # Another PySpark's layout: its worker imports what it needs itself.
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    if _threads() > 1:
        os.execv(sys.executable, [sys.executable, "-m", "pyspark.daemon", *sys.argv[1:]])
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()
