"""Helpers of the archive tests: publish messages (also from a thread that keeps
publishing, :class:`Publisher`), write lifecycle events by hand, read the archive back
(with Spark, which sees only committed files), run the job as a process and follow the
processes it starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from redisq_django.core import Broker, CoreConfig

#: Messages per publish round trip.
CHUNK = 100
#: The repository, where the job processes run.
REPO = Path(__file__).resolve().parents[2]
#: What Spark says when a Python worker it started took more than its 10 s to connect
#: back: a host too busy (2 cores, three test processes with a JVM each), not what a
#: test of ours is about.
SLOW_WORKER = "Python worker failed to connect back"


def publish(broker: Broker, queue: str, n: int, *, start: int = 0) -> list[str]:
    """Publish ``n`` small messages to ``queue``; returns their ids (= entry ids).

    The chunks are a few milliseconds apart: the source splits a stream into slices
    by time, and one batch can fit in a single millisecond."""
    ids: list[str] = []
    for lo in range(start, start + n, CHUNK):
        hi = min(lo + CHUNK, start + n)
        ids += broker.publish_many(queue, [{"n": i} for i in range(lo, hi)])
        time.sleep(0.002)
    return ids


def add_events(broker: Broker, queue: str, message_ids: list[str]) -> int:
    """Write lifecycle events for ``message_ids`` to ``queue``'s events stream in the
    spec's format, as a history-on worker would: one ``handled`` entry per 50 messages,
    a ``retried`` and a ``dead`` for the first message, and a ``reset``.

    Returns:
        The rows the archive's events table has for them (one per message of an entry,
        one for the ``reset``).
    """
    key = broker.keys(queue).events
    client = broker.client
    rows = 0
    first = message_ids[0]
    client.xadd(
        key,
        {
            "e": "retried",
            "g": "billing",
            "c": "host:1:ab",
            "m": json.dumps([[first, 1, 12]]),
            "error_class": "ValueError",
            "error_message": "bad",
            "next_due": "1700000000000",
        },
    )
    client.xadd(
        key,
        {
            "e": "dead",
            "g": "billing",
            "c": "host:1:ab",
            "m": json.dumps([[first, 2, 3]]),
            "error_class": "ValueError",
            "error_message": "bad again",
            "reason": "failed",
        },
    )
    rows += 2
    for lo in range(0, len(message_ids), 50):
        batch = [[mid, 1, 5] for mid in message_ids[lo : lo + 50]]
        client.xadd(key, {"e": "handled", "g": "mail", "c": "host:2:cd", "m": json.dumps(batch)})
        rows += len(batch)
    client.xadd(key, {"e": "reset", "g": "mail", "c": "", "m": "[]", "start": "0-0"})
    return rows + 1


def read_table(spark: SparkSession, root: Path | str, table: str) -> DataFrame:
    """The committed rows of one archived table (``_spark_metadata`` decides what is in)."""
    return spark.read.parquet(f"{root}/{table}")


def count_and_distinct(frame: DataFrame, *columns: str) -> tuple[int, int]:
    """(rows, distinct values of ``columns``) computed by Spark."""
    row = frame.agg(
        F.count(F.lit(1)).alias("n"), F.count_distinct(*[F.col(c) for c in columns]).alias("d")
    ).first()
    assert row is not None
    return int(row["n"]), int(row["d"])


def entry_key(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a comparable (ms, seq)."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def max_entry_id(frame: DataFrame) -> str | None:
    """The greatest ``entry_id`` in ``frame`` (numerically, as Redis orders them)."""
    parts = F.split(F.col("entry_id"), "-")
    row = frame.agg(
        F.max(F.struct(parts[0].cast("long").alias("ms"), parts[1].cast("long").alias("seq")))
    ).first()
    if row is None or row[0] is None:
        return None
    top: Any = row[0]
    return f"{top['ms']}-{top['seq']}"


def archive_cli(*args: str) -> list[str]:
    """The command line of ``python -m redisq_django.pipeline archive ARGS`` on 2 cores."""
    return [
        sys.executable,
        "-m",
        "redisq_django.pipeline",
        "archive",
        *args,
        "--master",
        "local[2]",
        "--conf",
        "spark.sql.shuffle.partitions=2",
    ]


def cli_env() -> dict[str, str]:
    """The environment of a pipeline CLI process (this interpreter, loopback, no Django)."""
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the CLI needs no Django
    return env


def wait_for(
    condition: Callable[[], bool], timeout: float, what: str, proc: subprocess.Popen[str]
) -> None:
    """Wait until ``condition()``; fail when ``proc`` exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            pytest.fail(f"the archive process exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


@contextmanager
def archive_running(
    root: Path, *args: str, timeout: float = 240
) -> Iterator[tuple[subprocess.Popen[str], list[Process]]]:
    """``python -m redisq_django.pipeline archive --root ROOT ARGS`` in a process group of
    its own, once its first micro-batch has committed files: the process (stdout and
    stderr piped, for ``communicate``) and the processes below it then (its JVM and
    Spark's Python workers). The group is SIGKILLed at the end if it still runs."""
    proc = subprocess.Popen(
        archive_cli("--root", str(root), *args),
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        first = root / "messages" / "_spark_metadata" / "0"
        wait_for(first.exists, timeout, "the first committed files", proc)
        yield proc, descendants(proc.pid)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """State, parent pid and start time (clock ticks after boot) of process ``pid``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the name, in parentheses, may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


#: A process as (pid, start time): a pid used again by a later process is another one.
Process = tuple[int, int]


def descendants(pid: int) -> list[Process]:
    """Every process below ``pid`` now (children, theirs...): Spark's JVM and its Python
    workers, whatever session or process group they are in."""
    children: dict[int, list[Process]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (found := _stat(int(entry.name))):
            children.setdefault(found[1], []).append((int(entry.name), found[2]))
    out: list[Process] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo += children.get(child[0], [])
    return sorted(out)


def _running(process: Process) -> bool:
    found = _stat(process[0])
    return found is not None and found[0] != "Z" and found[2] == process[1]


def processes_gone(processes: list[Process], timeout: float) -> list[int]:
    """Wait until none of ``processes`` runs (zombies count as gone); the pids of those
    still running then."""
    deadline = time.monotonic() + timeout
    while True:
        running = [pid for pid, _ in filter(_running, processes)]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.1)


class Publisher(threading.Thread):
    """Keeps publishing small batches to one queue, and samples the archive position."""

    def __init__(self, url: str, queue: str, *, batch: int, pause: float, limit: int) -> None:
        super().__init__(daemon=True)
        self.broker = Broker(redis.Redis.from_url(url), CoreConfig())
        self.queue, self.batch, self.pause, self.limit = queue, batch, pause, limit
        self.ids: list[str] = []
        self.positions: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set() and len(self.ids) < self.limit:
            self.ids += publish(self.broker, self.queue, self.batch, start=len(self.ids))
            position = self.broker.archives.positions(self.queue, "default").get("messages")
            if position:
                self.positions.append(position)
            self.halt.wait(self.pause)
