"""Spark's Python worker daemon with the ``redisq`` writer imported before it forks.

Spark starts Python workers by forking them from one daemon process per executor
(``pyspark.daemon``); each worker then imports what it runs. A replay's workers (the
planner of the write, each task's, the commit's) all import the writer, redis-py and
the core: ~0.4 s each on an idle core, much more on a busy machine. This daemon imports
them once, before forking, so that every worker starts with them already loaded.

Spark runs it when ``spark.python.daemon.module`` names it; :func:`~.session.build_session`
does that for local masters only, where the workers run this interpreter with the
driver's path (on a cluster the executors import ``redisq_django`` from the zip the job
ships, which a daemon does not see). Nothing imported here starts a thread: the daemon
forks, and a forked thread-holding process can hang (pyarrow, which starts threads, is
imported by the workers after the fork, as before).
"""

from __future__ import annotations

from pyspark.daemon import manager

import redisq_django.pipeline.writer  # noqa: F401  (imported for the forked workers)

if __name__ == "__main__":
    manager()
