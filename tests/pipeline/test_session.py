"""The pipeline's SparkSession: defaults, and our package zipped for the executors."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from redisq_django.pipeline.session import (
    build_session,
    package_zip,
    pipeline_session,
    runs_in_driver,
)

pytestmark = [pytest.mark.spark]


def test_the_package_zip_has_sources_and_package_data_but_no_bytecode(tmp_path: Path) -> None:
    target = package_zip(tmp_path / "redisq_django.zip")

    names = set(zipfile.ZipFile(target).namelist())
    assert {
        "redisq_django/__init__.py",
        "redisq_django/pipeline/datasource.py",
        "redisq_django/core/broker.py",
    } <= names
    assert any(n.startswith("redisq_django/core/scripts/") and n.endswith(".lua") for n in names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # Importable from the zip alone, as on an executor without the package (-S: no
    # site-packages, so not the editable install of this checkout).
    where = subprocess.run(
        [sys.executable, "-S", "-c", "import redisq_django; print(redisq_django.__file__)"],
        env={"PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert where.stdout.strip() == f"{target}/redisq_django/__init__.py", where.stderr


@pytest.mark.parametrize(
    ("master", "local"),
    [
        ("local", True),
        ("local[*]", True),
        ("local[2,3]", True),
        ("local-cluster[2,1,1024]", False),
        ("spark://127.0.0.1:7077", False),
        ("yarn", False),
    ],
)
def test_which_masters_need_the_package_shipped(master: str, local: bool) -> None:
    assert runs_in_driver(master) is local


def test_an_existing_session_is_reused_with_the_data_source_and_left_running(
    spark: SparkSession,
) -> None:
    with pipeline_session("local[2]", {"spark.sql.shuffle.partitions": "3"}) as session:
        assert session is spark
        assert session.conf.get("spark.sql.session.timeZone") == "UTC"
        assert session.conf.get("spark.sql.shuffle.partitions") == "3"

    assert spark.range(2).count() == 2
    assert build_session(conf={"spark.sql.shuffle.partitions": "2"}) is spark


# Runs the command line's report job in a fresh process, with the job itself replaced by
# a probe that prints the settings of the session the command line built.
SESSION_PROBE = r"""
import json, sys
import redisq_django.pipeline.report as report_module
from redisq_django.pipeline.cli import main

KEYS = ("spark.sql.shuffle.partitions", "spark.sql.adaptive.enabled",
        "spark.sql.adaptive.coalescePartitions.enabled", "spark.driver.memory")

class Probed:
    def __init__(self, spark):
        self.conf = {key: spark.conf.get(key, None) for key in KEYS}
    def line(self):
        return json.dumps(self.conf)

report_module.report = lambda spark, options: Probed(spark)
sys.exit(main(["report", *sys.argv[1:]]))
"""


def probe_session(*args: str) -> dict[str, str]:
    """The settings of the session ``python -m redisq_django.pipeline report ARGS``
    builds (a fresh process: a new JVM)."""
    import json

    if "--root" in args:  # the command line refuses a root without an archive: a file
        # stands for one (the report is probed, never run)
        table = Path(args[args.index("--root") + 1]) / "messages"
        table.mkdir(parents=True, exist_ok=True)
        (table / "part-00000.parquet").touch()
    done = subprocess.run(
        [sys.executable, "-c", SESSION_PROBE, *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow
def test_the_session_of_the_command_line_has_adaptive_execution_and_partitions_from_cores(
    tmp_path: Path,
) -> None:
    # When the command line builds its session on 3 local cores, the user saying nothing
    from redisq_django.pipeline.tuning import local_driver_memory, machine_memory_mb

    chosen = probe_session("--root", str(tmp_path), "--master", "local[3]")
    # Then adaptive execution is on and a shuffle has 2 partitions per core, not 200,
    # and the local driver's heap comes of the machine's memory, not Spark's 1 GB
    memory = local_driver_memory({"spark.master": "local[3]"}, machine_memory_mb())
    assert chosen == {
        "spark.sql.shuffle.partitions": "6",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.driver.memory": memory["spark.driver.memory"],
    }
    # And the user's own --conf wins over each
    chosen = probe_session(
        "--root",
        str(tmp_path),
        "--master",
        "local[3]",
        "--conf",
        "spark.sql.shuffle.partitions=7",
        "--conf",
        "spark.sql.adaptive.enabled=false",
        "--conf",
        "spark.driver.memory=1500m",
    )
    assert chosen["spark.sql.shuffle.partitions"] == "7"
    assert chosen["spark.sql.adaptive.enabled"] == "false"
    assert chosen["spark.driver.memory"] == "1500m"


def test_a_local_driver_gets_a_quarter_of_the_memory_between_1_and_4_gb(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from redisq_django.pipeline.tuning import local_driver_memory

    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    local = {"spark.master": "local[2]"}
    assert local_driver_memory(local, 24 * 1024) == {"spark.driver.memory": "4096m"}
    assert local_driver_memory(local, 8 * 1024) == {"spark.driver.memory": "2048m"}
    assert local_driver_memory(local, 2 * 1024) == {"spark.driver.memory": "1024m"}
    assert local_driver_memory({"spark.master": "local"}, 6 * 1024) == {
        "spark.driver.memory": "1536m"
    }
    # Not on a cluster, not when the machine does not say, never over the user's choice
    assert local_driver_memory({"spark.master": "spark://127.0.0.1:7077"}, 24 * 1024) == {}
    assert local_driver_memory(local, None) == {}
    assert local_driver_memory({**local, "spark.driver.memory": "2g"}, 24 * 1024) == {}
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--driver-memory 3g pyspark-shell")
    assert local_driver_memory(local, 24 * 1024) == {}
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS")
    (tmp_path / "spark-defaults.conf").write_text("spark.driver.memory   6g\n")
    assert local_driver_memory(local, 24 * 1024) == {}


def test_cores_and_shuffle_partitions_from_the_configuration() -> None:
    from redisq_django.pipeline.tuning import job_cores, job_defaults

    # local[N], or a cluster whose executors have registered: Spark's default parallelism
    assert job_cores({}, 2) == 2
    # Sizes the configuration gives win over what has registered so far
    assert job_cores({"spark.default.parallelism": "12"}, 2) == 12
    assert job_cores({"spark.executor.instances": "5", "spark.executor.cores": "4"}, 2) == 20
    assert job_cores({"spark.executor.instances": "5"}, 2) == 2  # cores per executor unknown
    assert job_cores({"spark.cores.max": "16"}, 2) == 16
    assert job_cores({"spark.default.parallelism": "x"}, 3) == 3
    assert job_defaults({}, 4) == {
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
        "spark.sql.shuffle.partitions": "8",
    }
    assert job_defaults({"spark.sql.shuffle.partitions": "200"}, 4) == {
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.adaptive.coalescePartitions.enabled": "true",
    }
