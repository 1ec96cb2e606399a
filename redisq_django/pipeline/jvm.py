"""Spark's JVM as a process: started out of the driver's process group, and whether a
signal stopped it.

PySpark starts the JVM (``spark-submit`` running the py4j gateway) as a child in the
driver's process group, so a signal to the group (Ctrl-C in a terminal, ``kill -TERM
-PGID``, a supervisor stopping the group) stops the JVM in the middle of a micro-batch
while the driver is still stopping the job gracefully, and the job fails. Here the JVM
gets a session (and so a process group) of its own: the group's signals reach the driver
only, which stops its queries between micro-batches and then the JVM. The JVM still dies
with the driver, killed or not: it exits when its stdin, a pipe from the driver, closes
(PySpark's gateway does so).

A service manager may still signal every process of the job, the JVM among them
(systemd's default ``KillMode=control-group`` signals the whole cgroup, whatever the
sessions): then the micro-batch under way cannot finish. :func:`stop_signal` tells that
case from a failure, so that the job reports a stop, not an error; what it lost is only
the unfinished micro-batch, which the next run does again from the checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping

from py4j.protocol import Py4JNetworkError  # type: ignore[import-untyped]
from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway

#: The signals that ask the job to stop (as the archive job's handlers take them).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: How long a JVM whose gateway stopped answering gets to exit, seconds: after a SIGTERM
#: it runs Spark's shutdown hooks first, which took over 20 s on a loaded 2-core host
#: (the job then reported the lost gateway as its failure). Waited only when the
#: gateway is gone and the JVM still runs.
EXIT_WAIT_SECONDS = 60.0


def start_in_own_session(settings: Mapping[str, str]) -> None:
    """Start Spark's JVM in a session of its own, unless one runs already (a session
    existed in this process, or ``spark-submit`` started this driver from its JVM).

    PySpark's launcher does the work as usual (``launch_gateway`` with its
    ``popen_kwargs`` hook), including passing ``settings`` to ``spark-submit``, where
    those that shape the JVM (``spark.driver.memory``...) take effect.
    """
    if os.name != "posix" or "PYSPARK_GATEWAY_PORT" in os.environ:
        return
    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        conf = SparkConf().setAll(list(settings.items()))
        gateway = launch_gateway(conf, popen_kwargs={"start_new_session": True})  # type: ignore[no-untyped-call]
        SparkContext._ensure_initialized(gateway=gateway)


def is_running() -> bool:
    """Whether a JVM serves this process already (one it started, or the ``spark-submit``
    that started it): settings that shape the JVM can no longer take effect."""
    return "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._gateway is not None


def _process() -> subprocess.Popen[bytes] | None:
    """The JVM, when this process started it (not under ``spark-submit``)."""
    proc = getattr(SparkContext._gateway, "proc", None)
    return proc if isinstance(proc, subprocess.Popen) else None


def has_exited() -> bool:
    """Whether the JVM this process started has exited (nothing left to stop)."""
    proc = _process()
    return proc is not None and proc.poll() is not None


def stop_signal(error: BaseException) -> str | None:
    """The name of the signal (``"SIGTERM"``) that stopped the JVM when ``error`` came of
    its stopping, else None (a job's own failure, a JVM still running, one killed with
    SIGKILL or crashed, or one this process did not start)."""
    proc = _process()
    if proc is None:
        return None
    code = proc.poll()
    if code is None and _lost_the_gateway(error):
        try:
            code = proc.wait(EXIT_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            return None
    if code is None:
        return None
    # Java exits with 128 + the signal's number after running its shutdown hooks; a
    # process the signal ended outright reports minus the number.
    number = -code if code < 0 else code - 128
    return signal.Signals(number).name if number in STOP_SIGNALS else None


def _lost_the_gateway(error: BaseException) -> bool:
    """Whether ``error`` (or one it came from) says the JVM's gateway stopped answering."""
    seen: BaseException | None = error
    for _ in range(10):  # a chain is short; never follow a cycle for ever
        if seen is None:
            return False
        if isinstance(seen, Py4JNetworkError | ConnectionError | EOFError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
