"""A query of the archive that fails for a reason outside the data is started again from
its checkpoint (``--restarts``), exactly once; a failure the source chose is not."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession

from redisq_django.core import Broker, CoreConfig
from redisq_django.pipeline.archive import restartable
from redisq_django.pipeline.cli import build_parser
from tests.pipeline.archive_support import (
    archive_running,
    count_and_distinct,
    descendants,
    publish,
    read_table,
)

RESTARTED = "starting it again from its checkpoint (1 of at most 5 in a row)"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.usefixtures("empty_redis")
def test_killed_python_workers_restart_the_query_and_it_archives_everything_once(
    spark: SparkSession, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    broker = Broker(redis_client, CoreConfig(history=False))
    queue = "orders"
    ids = publish(broker, queue, 4000)
    root = tmp_path / "archive"
    args = ("--redis-url", redis_url, "--queue", queue, "--once")
    with archive_running(root, *args, "--max-records-per-trigger", "250") as (proc, below):
        # Every Python process Spark started (its daemon and workers, the driver-side
        # source runner), as an OOM killer might: the query under way fails.
        python = [pid for pid, _ in below if "java" not in _cmdline(pid).split(" ", 1)[0]]
        assert python, f"no Python process below the job: {[_cmdline(p) for p, _ in below]}"
        for pid in python:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=240)

    assert proc.returncode == 0, err[-3000:]
    assert RESTARTED in err, err[-3000:]
    assert "the messages query failed" in err
    archived = read_table(spark, root, "messages")
    assert count_and_distinct(archived, "message_id") == (len(ids), len(ids))
    assert {r[0] for r in archived.select("message_id").collect()} == set(ids)
    assert broker.archives.positions(queue, "default")["messages"] == ids[-1]
    assert f"archived messages={len(ids)} " in out  # the summary counts each row once
    assert descendants(proc.pid) == []


@pytest.mark.parametrize(
    ("failure", "restarts", "expected"),
    [
        ("Job aborted due to stage failure: java.io.OptionalDataException", 0, True),
        ("org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)", 1, True),
        ("Python worker exited unexpectedly (crashed)", 2, False),  # the limit, in a row
        ("pyspark.errors.PythonException: DataLossError: entries 1-0..5-0 were removed", 0, False),
        ("PythonException: RedisOutage: Redis at redis://127.0.0.1:1/0 is unreachable", 0, False),
        ("PythonException: OptionError: option 'table' must be messages or events", 0, False),
    ],
)
def test_only_failures_outside_the_data_are_restarted_and_only_so_often_in_a_row(
    failure: str, restarts: int, expected: bool
) -> None:
    assert restartable(failure, restarts, 2) is expected


def test_restarts_default_to_5_and_0_turns_them_off() -> None:
    parser = build_parser()
    base = ["archive", "--redis-url", "redis://127.0.0.1:1/0", "--root", "/tmp/a"]
    assert parser.parse_args(base).restarts == 5
    assert parser.parse_args([*base, "--restarts", "0"]).restarts == 0
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--restarts", "-1"])
