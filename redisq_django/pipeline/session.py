"""The SparkSession of the pipeline jobs: safe defaults, the ``redisq`` data source, and
our package shipped to executors.

Defaults: no web UI (a job on a shared machine should not open a port) and no console
progress bar, session time zone UTC (timestamps shown and parsed as UTC, as the archive's
``date`` directories are UTC days), all overridable with ``conf``; in a session it
creates, adaptive query execution and shuffle partitions from the cores, and for a local
master that starts its own JVM a driver heap of a quarter of the machine's memory (1 to 4
GB; :mod:`.tuning`), each unless the configuration sets it; Python workers running
this interpreter (``PYSPARK_PYTHON``) and Spark bound to the loopback interface
(``SPARK_LOCAL_IP``) unless the environment already says otherwise.

Both environment defaults suit one machine (``local[*]``, or a standalone master and
worker on it). On a cluster of several hosts set them yourself: ``SPARK_LOCAL_IP`` to an
address the executors can reach the driver at, and ``PYSPARK_PYTHON`` (or
``spark.pyspark.python``) to the Python of the worker nodes.

On a cluster the executors must import ``redisq_django`` to run the data source; rather
than asking every user to build and pass ``--py-files``, :func:`build_session` zips the
installed package on the fly and adds it with ``SparkContext.addPyFile``. The executors
still need ``redis`` (redis-py) installed.

The JVM runs in a session of its own, out of reach of signals to the job's process group
(:mod:`~redisq_django.pipeline.jvm`).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from redisq_django.pipeline import jvm, register
from redisq_django.pipeline.tuning import apply_job_defaults, local_driver_memory, machine_memory_mb

DEFAULT_MASTER = "local[*]"
DEFAULT_APP_NAME = "redisq-pipeline"

#: Applied unless ``conf`` sets the same key.
DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    # The console progress bar garbles the job's own output lines.
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.session.timeZone": "UTC",
}

# Not shipped to executors: bytecode caches (built for the driver's interpreter) and tests.
_SKIPPED_DIRS = frozenset({"__pycache__", "tests"})
_SKIPPED_SUFFIXES = (".pyc", ".pyo")


def build_session(
    master: str | None = DEFAULT_MASTER,
    conf: Mapping[str, str] | None = None,
    app_name: str = DEFAULT_APP_NAME,
    *,
    data_source: bool = True,
) -> SparkSession:
    """A SparkSession for the pipeline jobs, with the ``redisq`` data source registered.

    Args:
        master: the Spark master URL; None keeps the one ``spark-submit`` (or
            ``spark.master`` in ``conf``) gives, falling back to ``local[*]``.
        conf: Spark configuration, applied over :data:`DEFAULT_CONF`.
        app_name: the application name shown by the cluster manager.
        data_source: register the ``redisq`` data source. A job that never reads or
            writes ``format("redisq")`` (report, replay, compact) leaves it out: Spark
            answers the first registration of a Python data source by starting a Python
            worker that looks for installed ones, seconds of a one-off job's start
            (bench/RESULTS.md, issue 37).

    Returns:
        The session; an existing one in this process is reused (``getOrCreate``), with
        ``conf`` applied where Spark allows it at run time and no other defaults.
    """
    # Read by the JVM and the Python workers when they start: set before the first session.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    created = SparkSession.getActiveSession() is None
    settings = {"spark.app.name": app_name, **DEFAULT_CONF, **(conf or {})}
    if master is not None:
        settings["spark.master"] = master
    if created and not jvm.is_running():
        # Only before the JVM starts: its heap cannot change afterwards.
        settings.update(local_driver_memory(settings, machine_memory_mb()))
    jvm.start_in_own_session(settings)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if created:  # never retune a session someone else made (a test's, a notebook's)
        apply_job_defaults(spark)
    if not runs_in_driver(spark.sparkContext.master or "local"):
        ship_package(spark)
    if data_source:
        register(spark)
    return spark


def runs_in_driver(master: str) -> bool:
    """Whether ``master`` runs the executors inside the driver's process (``local``,
    ``local[N]``, ``local[N,F]``), where they import what the driver imports; any other
    master (``local-cluster[...]`` included) has executor processes of their own."""
    return master == "local" or master.startswith("local[")


@contextmanager
def pipeline_session(
    master: str | None = DEFAULT_MASTER,
    conf: Mapping[str, str] | None = None,
    app_name: str = DEFAULT_APP_NAME,
    *,
    data_source: bool = True,
) -> Iterator[SparkSession]:
    """:func:`build_session` as a context manager that stops the session at the end,
    unless it already existed (a test's shared session, a notebook's) or its JVM is gone
    (a signal stopped it: there is nothing left to stop)."""
    existed = SparkSession.getActiveSession() is not None
    spark = build_session(master, conf, app_name, data_source=data_source)
    try:
        yield spark
    finally:
        if not existed and not jvm.has_exited():
            try:
                spark.stop()
            except Exception as exc:
                # The signal reached the JVM as the job ended: it is stopping already.
                if jvm.stop_signal(exc) is None:
                    raise


#: The zip shipped to each Spark application (by application id) this process started.
_SHIPPED: dict[str, Path] = {}


def ship_package(spark: SparkSession) -> Path:
    """Zip the ``redisq_django`` package and add it to the executors' Python path, once
    per Spark application.

    Returns:
        The zip file (in a temporary directory removed when this process exits; the
        executors fetch it from the driver while the session runs).
    """
    application = spark.sparkContext.applicationId
    if application in _SHIPPED:
        # A second job in a session that lives on (a notebook's): the executors have the
        # package, and a second zip of the same name from another path would clash with
        # the first in their working directories.
        return _SHIPPED[application]
    tmp = Path(tempfile.mkdtemp(prefix="redisq-pyfiles-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    archive = package_zip(tmp / "redisq_django.zip")
    spark.sparkContext.addPyFile(str(archive))
    _SHIPPED[application] = archive
    return archive


def package_zip(target: Path) -> Path:
    """Write the ``redisq_django`` package (sources and package data, no bytecode or
    tests) to the zip file ``target``, importable from ``sys.path``."""
    # This module's grandparent, not ``redisq_django.__file__``: the pipeline imports
    # the core and ``arguments.py`` only (docs/layout.md), not the package's public names.
    package = Path(__file__).resolve().parent.parent
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for dirpath, dirnames, filenames in os.walk(package):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS)
            for name in sorted(filenames):
                if name.endswith(_SKIPPED_SUFFIXES):
                    continue
                path = Path(dirpath, name)
                zf.write(path, path.relative_to(package.parent).as_posix())
    return target
