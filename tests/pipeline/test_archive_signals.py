"""The archive job stopped by a signal to all of it, as a terminal or a service manager
sends it: to its process group (Ctrl-C, ``kill -TERM -PGID``) or to every one of its
processes, Spark's JVM included (systemd's default ``KillMode=control-group``). It exits
0 and loses nothing: the next run archives the rest, every message exactly once."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession

from redisq_django.core import Broker, CoreConfig
from redisq_django.pipeline.cli import main
from tests.pipeline.archive_support import (
    archive_running,
    count_and_distinct,
    descendants,
    processes_gone,
    publish,
    read_table,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: A backlog of many micro-batches, so that the signal lands while the run is under way.
MESSAGES = 6000
PER_BATCH = 200


def _signal_all_of_it(pid: int, how: str) -> None:
    """Signal the job started as ``pid`` (the leader of its own process group)."""
    if how == "group SIGTERM":
        os.killpg(pid, signal.SIGTERM)
    elif how == "group SIGINT":
        os.killpg(pid, signal.SIGINT)
    else:  # every process, whatever its group: what systemd does to a unit's cgroup
        for each, _ in [(pid, 0), *descendants(pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(each, signal.SIGTERM)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("how", ["group SIGTERM", "group SIGINT", "every process SIGTERM"])
def test_a_signal_to_the_whole_job_stops_it_with_0_and_the_next_run_archives_the_rest(
    spark: SparkSession,
    redis_client: redis.Redis,
    redis_url: str,
    tmp_path: Path,
    queue_name: str,
    how: str,
) -> None:
    # Given an archive run over a backlog of many micro-batches, in its own process group
    broker = Broker(redis_client, CoreConfig())
    ids = publish(broker, queue_name, MESSAGES)
    root = tmp_path / "archive"
    args = ["--redis-url", redis_url, "--queue", queue_name]
    once = [*args, "--once", "--max-entries-per-trigger", str(PER_BATCH)]
    with archive_running(root, *once) as (proc, spark_processes):
        # When the signal reaches all of it while a micro-batch is most likely under way
        _signal_all_of_it(proc.pid, how)
        out, err = proc.communicate(timeout=120)

    # Then it stops, exits 0 and says so: what it archived (the driver stopped the queries
    # between micro-batches), or that the JVM got the signal too (the batch under way was
    # abandoned)
    assert proc.returncode == 0, err[-3000:]
    if how.startswith("group"):
        assert out.startswith("archived messages="), out
    else:
        assert out.startswith("stopped: Spark's JVM got SIGTERM as well"), out
    # ...part of the backlog, each message once...
    first, distinct = count_and_distinct(read_table(spark, root, "messages"), "message_id")
    assert first == distinct < MESSAGES
    # ...and no process of it is left
    assert spark_processes
    assert processes_gone(spark_processes, 60) == []

    # And the next run archives the rest: every message exactly once
    assert main(["archive", "--root", str(root), *args, "--once"]) == 0
    archived = read_table(spark, root, "messages")
    assert count_and_distinct(archived, "message_id") == (MESSAGES, MESSAGES)
    assert {r[0] for r in archived.select("message_id").collect()} == set(ids)
