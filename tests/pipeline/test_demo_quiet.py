"""`make demo`'s Spark steps print their own lines only: no log4j profile notice, no log
level advice, no WARN of Spark's, no JVM warning (example_project/quiet_spark.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "example_project"

# A session as the demo's jobs build it, one line of output of its own.
JOB = """
from redisq_django.pipeline.session import build_session

spark = build_session("local[1]")
print("counted", spark.range(3).count())
spark.stop()
"""


def test_a_spark_session_under_quiet_spark_prints_only_its_own_lines() -> None:
    # Given the demo's environment: Spark's Python workers on this interpreter, loopback
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("SPARK_CONF_DIR", None)

    # When a job starts Spark's JVM, runs and stops, the way the demo runs it
    out = subprocess.run(
        [str(EXAMPLE / "quiet_spark.sh"), sys.executable, "-c", JOB],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    # Then it succeeded, and its output (stderr joined to stdout) is its own line alone
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == ["counted 3"], out.stdout
    assert out.stderr == ""
