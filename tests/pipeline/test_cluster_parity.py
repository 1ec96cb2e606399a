"""Cluster parity: the archive, report and replay jobs on a Spark standalone master + worker
(started from the pyspark package, on loopback) give what local mode gives, with
executors whose Python cannot import ``redisq_django`` except from the zip the job ships.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from redisq_django.core import Broker, CoreConfig
from redisq_django.pipeline.archive import archive
from redisq_django.pipeline.options import ArchiveOptions
from redisq_django.pipeline.report import ReportOptions, report
from redisq_django.pipeline.writer import ORIGINAL_ID_HEADER
from tests.pipeline.archive_support import add_events, read_table
from tests.support.spark_cluster import SparkCluster, isolated_python, spark_cluster

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
#: Longest a driver subprocess may take (seconds).
JOB_TIMEOUT = 120
WHERE = "get_json_object(payload, '$.total') >= 1500"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running


def run_driver(argv: list[str], executor_python: Path) -> subprocess.CompletedProcess[str]:
    """Run a driver in a subprocess from the checkout, its executors on ``executor_python``."""
    env = {
        **os.environ,
        "PYSPARK_PYTHON": str(executor_python),
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    env.pop("PYTHONPATH", None)
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
    )
    assert done.returncode == 0, f"{argv[:3]} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done


def fetch_all(broker: Broker, queue: str, group: str) -> list[object]:
    with broker.subscribe(queue, group) as sub:
        out: list[object] = []
        while batch := sub.fetch(count=100, block_ms=50):
            out += batch
            sub.ack(batch)
        return out


def test_archive_report_and_replay_on_a_standalone_cluster_match_local_mode(
    spark: SparkSession,
    cluster: SparkCluster,
    redis_client: redis.Redis,
    redis_url: str,
    queue_name: str,
    tmp_path: Path,
) -> None:
    broker = Broker(redis_client, CoreConfig())
    ids = broker.publish_many(queue_name, [{"n": i, "total": i * 10} for i in range(300)])
    n_events = add_events(broker, queue_name, ids)
    wrapper = isolated_python(tmp_path)

    # Executors cannot import redisq_django by themselves (their Python sees the venv's
    # site-packages only, not the checkout): the archive below reads Redis in executors
    # through the shipped zip or not at all. (Checked with the executors' Python directly:
    # a Spark application to ask them costs a driver's and an executor's start.)
    alone = subprocess.run(
        [str(wrapper), "-c", "import redisq_django"],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert alone.returncode != 0 and "No module named 'redisq_django'" in alone.stderr, alone

    # The archive on the cluster and in local mode store the same rows.
    on_cluster, local = tmp_path / "cluster", tmp_path / "local"
    common = ["--redis-url", redis_url, "--queue", queue_name, "--master", cluster.master_url]
    common += ["--conf", "spark.executor.memory=512m"]
    run_driver(
        ["-m", "redisq_django.pipeline", "archive", "--root", str(on_cluster), "--once", *common],
        wrapper,
    )
    # (two archives of the same queue: each with a name of its own)
    local_options = ArchiveOptions(
        redis_url=redis_url, root=str(local), queues=(queue_name,), name="local"
    )
    archive(spark, local_options)
    for table, rows in (("messages", 300), ("events", n_events)):
        cluster_rows = read_table(spark, on_cluster, table)
        local_rows = read_table(spark, local, table)
        assert cluster_rows.count() == rows
        assertDataFrameEqual(cluster_rows, local_rows)

    # The report on the cluster aggregates the same counts as in local mode.
    reports = {"cluster": tmp_path / "report-cluster", "local": tmp_path / "report-local"}
    run_driver(
        [
            "-m",
            "redisq_django.pipeline",
            "report",
            "--root",
            str(on_cluster),
            "--out",
            str(reports["cluster"]),
            "--master",
            cluster.master_url,
            "--conf",
            "spark.executor.memory=512m",
        ],
        wrapper,
    )
    report(spark, ReportOptions(root=str(local), out=str(reports["local"])))
    assert (reports["cluster"] / "report.html").stat().st_size > 0
    counts = {k: spark.read.parquet(str(d / "counts.parquet")) for k, d in reports.items()}
    assert counts["local"].count() > 0
    assertDataFrameEqual(counts["cluster"], counts["local"])

    # The replay on the cluster publishes exactly the selected messages, to billing only.
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    selected = {
        r.message_id for r in read_table(spark, local, "messages").where(F.expr(WHERE)).collect()
    }
    assert len(selected) == 150
    replay = ["replay", "--root", str(on_cluster), "--where", WHERE, "--consumer", "billing"]
    done = run_driver(["-m", "redisq_django.pipeline", *replay, "--once", *common], wrapper)
    assert "replayed selected=150 published=150" in done.stdout
    got = fetch_all(broker, queue_name, "billing")
    assert sorted(m.headers[ORIGINAL_ID_HEADER] for m in got) == sorted(selected)  # type: ignore[attr-defined]
    assert fetch_all(broker, queue_name, "email") == []


def test_on_a_cluster_shuffle_partitions_follow_the_cores_the_configuration_gives(
    cluster: SparkCluster, tmp_path: Path
) -> None:
    from tests.pipeline.test_session import probe_session

    common = ["--root", str(tmp_path), "--master", cluster.master_url]
    # A standalone application capped at 3 cores: 2 shuffle partitions per core
    capped = probe_session(*common, "--conf", "spark.cores.max=3")
    assert capped["spark.sql.shuffle.partitions"] == "6"
    assert capped["spark.sql.adaptive.enabled"] == "true"
    # A cluster's driver memory is the cluster's business: not chosen from this machine
    assert capped["spark.driver.memory"] is None
    # Without a cap, Spark's default parallelism when the session starts (at least 2)
    assert probe_session(*common)["spark.sql.shuffle.partitions"] == "4"
