"""A query of the archive that fails for a reason outside the data is started again from
its checkpoint (``--restarts``), exactly once; a failure the source chose is not."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession

from redisq_django.core import Broker, CoreConfig
from redisq_django.pipeline.archive import ArchiveError, ArchiveSummary, archive, restartable
from redisq_django.pipeline.cli import build_parser
from redisq_django.pipeline.options import ArchiveOptions
from tests.pipeline.archive_support import (
    archive_running,
    count_and_distinct,
    descendants,
    publish,
    read_table,
)

RESTARTED = "starting it again from its checkpoint in 5 s (1 of at most 10 in a row)"
#: Micro-batches of the killed archive: the first commits before the kill, the others are
#: archived after the restart.
PER_BATCH = 200
MESSAGES = 6 * PER_BATCH


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
    ids = publish(broker, queue, MESSAGES)
    root = tmp_path / "archive"
    args = ("--redis-url", redis_url, "--queue", queue, "--once")
    with archive_running(root, *args, "--max-records-per-trigger", str(PER_BATCH)) as (proc, below):
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
    # The summary counts the batches Spark reported: each at most once, and a batch whose
    # files committed just as its query failed (its report never made) is archived (above)
    # but not counted, at most one batch's rows per restart
    counted = int(re.search(r"archived messages=(\d+) ", out).group(1))  # type: ignore[union-attr]
    restarts = err.count("starting it again from its checkpoint")
    assert len(ids) - PER_BATCH * restarts <= counted <= len(ids), (out, restarts)
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
        ("PythonException: ArchiveNotRegistered: Archive 'default' is not registered", 0, False),
        ("Job 7 cancelled because SparkContext was shut down", 0, False),  # a signal to all
        ("Cannot call methods on a stopped SparkContext.", 0, False),
    ],
)
def test_only_failures_outside_the_data_are_restarted_and_only_so_often_in_a_row(
    failure: str, restarts: int, expected: bool
) -> None:
    assert restartable(failure, restarts, 2) is expected


def test_restarts_default_to_10_within_10_minutes_and_0_turns_them_off() -> None:
    parser = build_parser()
    base = ["archive", "--redis-url", "redis://127.0.0.1:1/0", "--root", "/tmp/a"]
    assert parser.parse_args(base).restarts == 10
    assert parser.parse_args(base).restart_budget == 600
    assert parser.parse_args([*base, "--restarts", "0"]).restarts == 0
    assert parser.parse_args([*base, "--restart-budget", "90"]).restart_budget == 90
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--restarts", "-1"])
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--restart-budget", "0"])


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_archive_removed_while_it_runs_stops_and_stays_removed(
    spark: SparkSession, redis_client: redis.Redis, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    broker = Broker(redis_client, CoreConfig(history=False))
    ids = publish(broker, queue_name, 20)
    options = ArchiveOptions(
        redis_url=redis_url, root=str(tmp_path), queues=(queue_name,), trigger_seconds=0.5
    )
    stop = threading.Event()
    outcome: list[BaseException | ArchiveSummary] = []

    def run() -> None:
        try:
            outcome.append(archive(spark, options, stop=stop))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        # Running for a while: a batch archived and committed (Spark commits a batch when
        # it plans the next, so a second batch is what moves the position)
        wait_until(lambda: (tmp_path / "messages" / "_spark_metadata" / "0").exists(), thread)
        ids += publish(broker, queue_name, 5, start=20)
        position = lambda: broker.archives.positions(queue_name, "default").get("messages")  # noqa: E731
        wait_until(lambda: position() == ids[19], thread)
        assert broker.archives.remove(queue_name, "default") >= 1  # messages (and events)
        publish(broker, queue_name, 5, start=25)  # its next commit finds it removed
        thread.join(120)
    finally:
        stop.set()
        thread.join(60)
    assert len(outcome) == 1 and isinstance(outcome[0], ArchiveError), outcome
    assert "ArchiveNotRegistered" in str(outcome[0]) or "not registered" in str(outcome[0])
    # Not started again: that would have registered it anew, undoing the removal
    assert broker.archives.positions(queue_name, "default") == {}


def wait_until(
    condition: Callable[[], bool], thread: threading.Thread, timeout: float = 120
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert thread.is_alive(), "the archive ended first"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)
