"""The archive on a CPU-starved host (issue 37, point 4): Spark gives a new Python worker
10 s to connect back; when it takes longer, the query fails, and the job starts it again
after growing pauses, within a budget, and when it gives up says why in one line.

A starved host is stood in for by ``PYSPARK_PYTHON``: a shell script that, for the
first N starts of Spark's driver-side streaming source runner (the worker started with
that 10 s limit), sleeps past it before running the real interpreter. Nothing in the
package knows about it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.worker import StopSignal
from redisq_django.pipeline.archive import _pause, _restart, _Run
from redisq_django.pipeline.options import ArchiveOptions
from redisq_django.pipeline.progress import TableTally
from redisq_django.pipeline.restarts import failure_line, restart_pause
from tests.pipeline.archive_support import (
    REPO,
    archive_cli,
    cli_env,
    count_and_distinct,
    publish,
    read_table,
)

#: How long a slow worker start takes: past Spark's 10 s.
SLOW_START_S = 13

SLOW_PYTHON = """#!/bin/sh
# The first {slow} starts of the streaming source runner take {sleep} s: Spark gives up
# on each after 10 s. Every other Python worker starts as usual.
case "$*" in
  *python_streaming_source_runner*)
    n=$(cat '{counter}' 2>/dev/null || echo 0)
    echo $((n + 1)) > '{counter}'
    if [ "$n" -lt {slow} ]; then sleep {sleep}; fi ;;
esac
exec '{python}' "$@"
"""


def slow_python(tmp_path: Path, slow_starts: int) -> tuple[Path, Path]:
    """A ``PYSPARK_PYTHON`` whose first ``slow_starts`` source runners start too slowly;
    returns it and the file counting the runner's starts."""
    counter = tmp_path / "runner-starts"
    script = tmp_path / "slow-python"
    script.write_text(
        SLOW_PYTHON.format(
            slow=slow_starts, sleep=SLOW_START_S, counter=counter, python=sys.executable
        )
    )
    script.chmod(0o755)
    return script, counter


def run_archive(
    tmp_path: Path, redis_url: str, queue: str, slow_starts: int, *args: str
) -> tuple[subprocess.CompletedProcess[str], Path, int]:
    """Run ``archive --once`` with the slow ``PYSPARK_PYTHON``; returns the finished
    process, the archive root and how often the source runner was started."""
    python, counter = slow_python(tmp_path, slow_starts)
    root = tmp_path / "archive"
    env = {**cli_env(), "PYSPARK_PYTHON": str(python)}
    proc = subprocess.run(
        archive_cli("--redis-url", redis_url, "--root", str(root), "--queue", queue, *args),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
    )
    starts = int(counter.read_text()) if counter.exists() else 0
    return proc, root, starts


def restart_lines(err: str) -> list[str]:
    """What the job's restart lines say after the failure: ``in 5 s (1 of at most 3 in a
    row)``; each must name the failure as the worker's start."""
    found = re.findall(r"query failed \((.*)\); starting it again from its checkpoint (.*)", err)
    assert all(failure == "Python worker failed to connect back." for failure, _ in found), err
    return [when for _, when in found]


def java_stack_frames(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("\tat ")]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(480)
@pytest.mark.usefixtures("empty_redis")
def test_a_slow_python_worker_start_is_waited_out_with_growing_pauses(
    spark: SparkSession, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    # Given messages, and a host on which the query's Python worker takes longer than
    # Spark's 10 s to start twice, then starts in time
    broker = Broker(redis_client, CoreConfig(history=False))
    ids = publish(broker, "orders", 300)

    # When the archive runs with 6 restarts
    proc, root, starts = run_archive(tmp_path, redis_url, "orders", 2, "--once", "--restarts", "6")

    # Then it failed twice, paused 5 s and then 10 s before starting the query again,
    # and archived every message once (a test machine as busy as the host stood in for
    # may fail a start more: then the pauses go on growing)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert restart_lines(proc.stderr)[:2] == [
        "in 5 s (1 of at most 6 in a row)",
        "in 10 s (2 of at most 6 in a row)",
    ], proc.stderr[-3000:]
    assert starts >= 3
    assert java_stack_frames(proc.stderr) == [], proc.stderr[-3000:]
    archived = read_table(spark, root, "messages")
    assert count_and_distinct(archived, "message_id") == (len(ids), len(ids))
    assert broker.archives.positions("orders", "default")["messages"] == ids[-1]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(480)
@pytest.mark.usefixtures("empty_redis")
def test_a_python_worker_that_never_starts_in_time_ends_the_job_with_one_clear_line(
    redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    # Given a host on which the query's Python worker never starts within Spark's 10 s
    broker = Broker(redis_client, CoreConfig(history=False))
    publish(broker, "orders", 10)

    # When the archive runs with 1 restart
    proc, _, starts = run_archive(tmp_path, redis_url, "orders", 99, "--once", "--restarts", "1")

    # Then it paused 5 s, tried once more, and failed with one line saying what happened
    # and what to do, without Spark's stack traces
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert restart_lines(proc.stderr) == ["in 5 s (1 of at most 1 in a row)"]
    assert starts == 2
    # (a worker that starts late may print its own traceback after it: Spark no longer
    # waits for it)
    failed = [line for line in proc.stderr.splitlines() if " failed: " in line]
    assert len(failed) == 1, proc.stderr[-3000:]
    last = failed[0]
    assert last.startswith("python -m redisq_django.pipeline archive: failed: archive stopped: ")
    assert "Spark's Python workers for the messages query did not start within the 10 s" in last
    assert "--master local[1]" in last and "--restarts" in last
    assert re.search(r"\(load \d+\.\d on \d+ cores\)", last), last
    assert java_stack_frames(proc.stderr) == [], proc.stderr[-3000:]


def test_the_pauses_between_restarts_double_from_5_s_up_to_60_s() -> None:
    assert [restart_pause(n) for n in range(1, 8)] == [5, 10, 20, 40, 60, 60, 60]


def test_a_worker_start_failure_says_what_to_do_and_other_failures_keep_sparks_words() -> None:
    starved = failure_line(
        ["messages: Python worker failed to connect back.", "events: Python worker failed"]
    )
    assert starved.startswith(
        "archive stopped: Spark's Python workers for the messages query did not start "
        "within the 10 s Spark gives them"
    )
    assert "--master local[1]" in starved
    other = failure_line(["messages: Job aborted due to stage failure: boom"])
    assert other == "archive query failed: messages: Job aborted due to stage failure: boom"


class FailedQuery:
    """A streaming query that failed with ``message`` (what ``_restart`` asks of it)."""

    def __init__(self, message: str) -> None:
        self.message = message

    def exception(self) -> Exception:
        return Exception(self.message)


def test_no_restart_is_made_whose_pause_would_outlast_the_budget(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a query whose worker did not start, and a budget shorter than the first pause
    options = ArchiveOptions(
        redis_url="redis://127.0.0.1:1/0", root="/tmp/a", restart_budget_seconds=4
    )
    failed = FailedQuery("Python worker failed to connect back.")
    run = _Run("messages", failed, TableTally("m", {}))  # type: ignore[arg-type]
    paused: list[float] = []

    # When the archive decides whether to start it again
    restarted = _restart(None, options, ("orders",), run, lambda s: paused.append(s) or True)  # type: ignore[arg-type]

    # Then it does not, without pausing, and says why
    assert (restarted, paused, run.restarts) == (False, [], 0)
    assert "would outlast --restart-budget (4 s)" in caplog.text


@pytest.mark.parametrize("ask", ["event", "signal"])
def test_a_pause_before_a_restart_ends_when_a_stop_is_asked_for(ask: str) -> None:
    # Given a pause of 10 minutes under way
    stop, signals = threading.Event(), StopSignal()
    outcome: list[bool] = []
    thread = threading.Thread(target=lambda: outcome.append(_pause(600, stop, signals)))
    thread.start()

    # When a stop is asked for (archive()'s stop event, or the flag SIGTERM sets)
    if ask == "event":
        stop.set()
    else:
        signals.request()
    thread.join(60)

    # Then the pause ends, saying it was cut short
    assert outcome == [False]
