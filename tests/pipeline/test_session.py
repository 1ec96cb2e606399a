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
