"""A class-data-sharing archive of the classes a Spark driver loads, for the JVMs of the
tests: a cold driver parses and verifies some ten thousand classes from Spark's jars
before it runs anything, and the suite starts ~45 of them (the shared sessions, every
command a test runs). Mapped from the archive, a start took half the CPU (8-11 s, was
16-17 s, on this 2-core machine), which a suite that keeps both cores busy gets back as
time.

Made once per venv (``<venv>/spark-classes-<pyspark version>.jsa``) by a small job run
with ``-XX:ArchiveClassesAtExit`` before the test processes start. A JVM that cannot use
it (another class path, as a test's own ``SPARK_CONF_DIR`` gives; another Java) loads
its classes as usual: its CDS warnings are turned off, since they go to stdout, where
tests read what a command printed. Only for the tests; a user's jobs keep Java's defaults.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: The JVM options of every Spark JVM of the tests. C1 only and the serial collector:
#: C2's compilation is wasted on JVMs that live seconds and run small jobs, and on a
#: busy 2-core machine it takes the cores the tests need (a README report command: 37 s
#: instead of 71 s at load 8).
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: Silence CDS on a JVM that cannot map the archive (it says so on stdout).
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: The job whose classes are archived: a session, a shuffle, Parquet written and read.
WORKLOAD = r"""
import sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
frame = spark.range(100).selectExpr("id % 3 AS k", "id AS v")
frame.groupBy("k").count().write.parquet(sys.argv[1])
assert spark.read.parquet(sys.argv[1]).count() == 3
spark.stop()
"""
#: Longest the archive's job may take (seconds); without it the tests run as before.
TIMEOUT = 180


def archive_path() -> Path | None:
    """Where this venv's archive is (None: no PySpark here)."""
    try:
        import pyspark
    except ImportError:
        return None
    return Path(sys.prefix) / f"spark-classes-{pyspark.__version__}.jsa"


def make_archive(target: Path) -> bool:
    """Run :data:`WORKLOAD` in a JVM that writes its classes to ``target``; whether it
    did (a failure leaves no file, and the tests' JVMs load their classes as before)."""
    with tempfile.TemporaryDirectory(prefix="spark-classes-") as tmp:
        # Beside the target: renamed into place whole, for a run started beside this one
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
        env = {
            **os.environ,
            "SPARK_SUBMIT_OPTS": f"{JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial}",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        env.pop("SPARK_CONF_DIR", None)  # the class path every test JVM has by default
        try:
            done = subprocess.run(
                [sys.executable, "-c", WORKLOAD, str(Path(tmp) / "counts")],
                env=env,
                capture_output=True,
                timeout=TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False
        if done.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            return False
        os.replace(partial, target)
    return True


def jvm_options(*, may_make: bool) -> str:
    """The ``SPARK_SUBMIT_OPTS`` of the tests: :data:`JVM_OPTIONS`, with the class
    archive when it exists or (``may_make``) could be made now."""
    target = archive_path()
    if target is None:
        return JVM_OPTIONS
    if not target.is_file() and not (may_make and make_archive(target)):
        return JVM_OPTIONS
    return f"{JVM_OPTIONS} -XX:SharedArchiveFile={target} {QUIET}"
