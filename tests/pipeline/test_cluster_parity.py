"""Cluster parity: the archive, report and replay jobs on a Spark standalone master + worker
(started from the pyspark package, on loopback) give what local mode gives, with
executors whose Python cannot import ``redisq_django`` except from the zip the job ships.

The three jobs run in one driver, one after the other in the session it built, as a
notebook on a cluster runs them: the command line's ``main`` for each (what ``python -m
redisq_django.pipeline`` runs), without a driver's and an application's start for each.
"""

from __future__ import annotations

import json
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

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(400)]

REPO = Path(__file__).resolve().parents[2]
#: Longest the driver subprocess may take, its three jobs together (seconds).
JOB_TIMEOUT = 300
WHERE = "get_json_object(payload, '$.total') >= 1500"
#: A driver that builds the session on the cluster, prints the shuffle partitions it
#: chose, then runs each job of argv[3] (a JSON list of command lines) in that session.
JOBS_IN_ONE_DRIVER = r"""
import json, sys
from redisq_django.pipeline.cli import main
from redisq_django.pipeline.session import build_session

spark = build_session(sys.argv[1], {"spark.executor.memory": sys.argv[2]})
print("shuffle partitions:", spark.conf.get("spark.sql.shuffle.partitions"), flush=True)
for argv in json.loads(sys.argv[3]):
    status = main(argv)
    if status:
        sys.exit(status)
spark.stop()
"""


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

    # The archive, the report and the replay on the cluster, in one driver; the archive
    # in local mode first, of what the cluster's archive reads (before its replay), under
    # a name of its own (two archives of the same queue)
    on_cluster, local = tmp_path / "cluster", tmp_path / "local"
    local_options = ArchiveOptions(
        redis_url=redis_url, root=str(local), queues=(queue_name,), name="local"
    )
    archive(spark, local_options)
    reports = {"cluster": tmp_path / "report-cluster", "local": tmp_path / "report-local"}
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    source = ["--redis-url", redis_url, "--queue", queue_name]
    jobs = [
        ["archive", "--root", str(on_cluster), "--once", *source],
        ["report", "--root", str(on_cluster), "--out", str(reports["cluster"])],
        [
            *("replay", "--root", str(on_cluster), "--where", WHERE),
            *("--consumer", "billing", "--once", *source),
        ],
    ]
    done = run_driver(
        ["-c", JOBS_IN_ONE_DRIVER, cluster.master_url, "512m", json.dumps(jobs)], wrapper
    )
    # Without a cap, the shuffle has Spark's default parallelism when the session starts
    assert "shuffle partitions: 4" in done.stdout, done.stdout

    # The archive on the cluster and in local mode store the same rows.
    for table, rows in (("messages", 300), ("events", n_events)):
        cluster_rows = read_table(spark, on_cluster, table)
        local_rows = read_table(spark, local, table)
        assert cluster_rows.count() == rows
        assertDataFrameEqual(cluster_rows, local_rows)

    # The report on the cluster aggregates the same counts as in local mode.
    report(spark, ReportOptions(root=str(local), out=str(reports["local"])))
    assert (reports["cluster"] / "report.html").stat().st_size > 0
    counts = {k: spark.read.parquet(str(d / "counts.parquet")) for k, d in reports.items()}
    assert counts["local"].count() > 0
    assertDataFrameEqual(counts["cluster"], counts["local"])

    # The replay on the cluster published exactly the selected messages, to billing only.
    selected = {
        r.message_id for r in read_table(spark, local, "messages").where(F.expr(WHERE)).collect()
    }
    assert len(selected) == 150
    assert "replayed selected=150 published=150" in done.stdout, done.stdout
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
    # (Without a cap: the test above, whose driver prints its shuffle partitions.)
