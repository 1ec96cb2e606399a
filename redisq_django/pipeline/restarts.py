"""When the archive starts a failed query again, and what it says when it gives up.

A query that failed for a reason outside the data starts again from its checkpoint after
a pause that doubles with each restart in a row (5, 10, 20, 40, then 60 s each), at most
``restarts`` times and within ``restart_budget_seconds`` of the first failure of the run
of restarts (both count again once the query archives a micro-batch). Without pauses a
cause that lasts (a CPU-starved host, on which Spark's Python workers cannot start within
the 10 s Spark gives them) used up every restart within a minute or two.

Spark's 10 s are fixed: ``PythonWorkerFactory.createSimpleWorker`` waits for a new Python
worker to connect back for 10000 ms, a literal in Spark 4.0 to 4.3 that no configuration
changes (the driver-side runner of a streaming Python data source,
``python_streaming_source_runner``, is started that way for each query start).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence

#: The pause before the first restart in a row, seconds; each next one doubles it.
RESTART_FIRST_PAUSE_S = 5.0
#: The longest pause between two restarts, seconds.
RESTART_MAX_PAUSE_S = 60.0
#: Restarts in a row before the job fails (``--restarts``).
DEFAULT_RESTARTS = 10
#: How long a run of restarts may last, from the failure that began it, before the job
#: fails (``--restart-budget``), seconds: 10 restarts' pauses add up to 435 s.
DEFAULT_RESTART_BUDGET_S = 600.0

#: Spark's words when a new Python worker did not connect back in time.
WORKER_START_FAILURE = "Python worker failed to connect back"
#: Spark's time for it (not configurable: see the module's docstring), seconds.
WORKER_CONNECT_TIMEOUT_S = 10


def restart_pause(restart: int) -> float:
    """The pause before restart number ``restart`` (1 for the first) of a run, seconds:
    5, 10, 20, 40, then 60 each."""
    doubled = RESTART_FIRST_PAUSE_S * 2.0 ** min(max(restart - 1, 0), 16)
    return min(doubled, RESTART_MAX_PAUSE_S)


def failure_line(failures: Sequence[str]) -> str:
    """The job's one line for its queries' failures (``"table: Spark's first line"``):
    what happened and what to do when a Python worker could not start, else Spark's
    words."""
    starved = [f.split(":", 1)[0] for f in failures if WORKER_START_FAILURE in f]
    if not starved:
        return "archive query failed: " + "; ".join(failures)
    queries = " and ".join(starved)
    return (
        f"archive stopped: Spark's Python workers for the {queries} "
        f"{'query' if len(starved) == 1 else 'queries'} did not start within the "
        f"{WORKER_CONNECT_TIMEOUT_S} s Spark gives them, restarts included "
        f"({host_load()}): the host's CPU is too busy for them. Run the archive with "
        "fewer cores (--master local[1]), when the host is quieter, or with more "
        "restarts (--restarts, --restart-budget); what was archived stays, and the next "
        "run goes on from there"
    )


def host_load() -> str:
    """``"load 23.4 on 2 cores"``: the 1-minute load average and the cores this process
    may use (its CPU affinity, or its cgroup's quota when lower)."""
    try:
        load = f"load {os.getloadavg()[0]:.1f}"
    except OSError:  # no load average on this platform
        load = "load unknown"
    return f"{load} on {usable_cores()} cores"


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, or its cgroup v2 quota
    (``cpu.max``, a throttled container's) rounded up, whichever is fewer."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    cores = cores or os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max", encoding="ascii") as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError):
        return cores
    if quota == "max":
        return cores
    try:
        return max(1, min(cores, math.ceil(int(quota) / int(period))))
    except (ValueError, ZeroDivisionError):
        return cores
