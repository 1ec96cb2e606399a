"""The data source survives Redis faults: a stalled Redis (SIGSTOP) during a read and a
write, and a continuous archive through a stall, a restart and a LOADING phase, with
every message archived exactly once and the job still running afterwards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.sql import SparkSession

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.archives.named import DEFAULT_ARCHIVE
from tests.pipeline.archive_support import count_and_distinct, publish, read_table
from tests.support.redis_server import RedisServer, free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
#: Longer than redis-py's default socket timeout (5 s): it failed reads and writes.
STALL_S = 7.0


def stall(server: RedisServer, seconds: float) -> None:
    """Stop Redis (SIGSTOP: connections are accepted, nothing is answered) for
    ``seconds``, then let it go on (SIGCONT)."""
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(server.pid, signal.SIGCONT)


def xrange_calls(server: RedisServer) -> int:
    with server.client() as client:
        stats = client.info("commandstats")
    return int(stats.get("cmdstat_xrange", {}).get("calls", 0))


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


def in_thread(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``work`` in a thread; the list gets its result or its exception."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(work())
        except Exception as exc:  # handed to the test, which fails on it
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def test_a_batch_read_waits_out_a_stalled_redis(
    spark: SparkSession, volatile_redis_server: RedisServer, queue_name: str
) -> None:
    # Given 20,000 messages, read 10 entries per XRANGE page (so the read takes a while)
    server = volatile_redis_server
    with server.client() as client:
        ids = publish(Broker(client, CoreConfig()), queue_name, 20_000)
    frame = (
        spark.read.format("redisq")
        .options(url=server.url, queue=queue_name, pageSize="10", partitions="2")
        .options(socketTimeout="1", retryTimeout="120")
        .load()
    )
    before = xrange_calls(server)
    thread, out = in_thread(lambda: [r.message_id for r in frame.select("message_id").collect()])
    # When Redis stalls for 7 s once the executors are reading
    reading = lambda: xrange_calls(server) > before + 50 or not thread.is_alive()  # noqa: E731
    wait_until(reading, 120, "the executors' reads")
    at_stall = xrange_calls(server)
    stall(server, STALL_S)
    thread.join(timeout=180)
    # Then the read completes, with every message exactly once
    assert out and not isinstance(out[0], Exception), str(out[0])[-3000:]
    assert len(out[0]) == len(ids) and set(out[0]) == set(ids)
    # And the stall did fall in the middle of the read: pages were read after it
    assert xrange_calls(server) > at_stall + 10


def test_a_write_waits_out_a_stalled_redis_and_publishes_once(
    spark: SparkSession, volatile_redis_server: RedisServer, queue_name: str
) -> None:
    # Given 20,000 rows written with once=true, 20 per send
    server = volatile_redis_server
    rows = spark.range(20_000).selectExpr(
        "concat('m-', id) AS message_id", "to_json(named_struct('n', id)) AS payload"
    )
    writer = (
        rows.repartition(2)
        .write.format("redisq")
        .options(url=server.url, queue=queue_name, once="true", batchSize="20")
        .options(socketTimeout="1", retryTimeout="120")
        .mode("append")
    )
    log = Broker(server.client(), CoreConfig()).keys(queue_name).log

    def stall_once_sending() -> int:
        with server.client() as client:
            wait_until(lambda: client.xlen(log) > 1000, 120, "the first sends")
            published = int(client.xlen(log))
        stall(server, STALL_S)
        return published

    # When Redis stalls for 7 s once the sends have started (the write runs in this
    # thread: Spark finds the registered data source through this thread's session)
    staller, stalled = in_thread(stall_once_sending)
    writer.save()
    staller.join(timeout=60)
    # Then the write completes, and each message is published once (a send whose reply
    # was lost, sent again, is deduplicated by once=true)
    assert stalled and stalled[0] < 20_000, stalled  # the stall fell within the write
    with server.client() as client:
        entries = client.xrange(log)
    published = [fields[b"id"].decode() for _, fields in entries]
    assert len(published) == 20_000 and len(set(published)) == 20_000


# -- the continuous archive job ------------------------------------------------------


class Publisher(threading.Thread):
    """Publishes 10 messages every 0.1 s until halted; ``pause`` holds it (its client
    never times out, so a stalled Redis only makes it wait)."""

    def __init__(self, url: str, queue: str) -> None:
        super().__init__(daemon=True)
        self.broker = Broker(redis.Redis.from_url(url, socket_timeout=None), CoreConfig())
        self.queue = queue
        self.ids: list[str] = []
        self.halt = threading.Event()
        self.running = threading.Event()
        self.running.set()

    def run(self) -> None:
        while not self.halt.is_set() and len(self.ids) < 50_000:
            self.running.wait()
            if not self.halt.is_set():
                self.ids += publish(self.broker, self.queue, 10, start=len(self.ids))
            self.halt.wait(0.1)

    def stop(self) -> list[str]:
        self.halt.set()
        self.running.set()
        self.join(timeout=60)
        return self.ids


def start_archive(url: str, root: Path, queue: str, stderr: Any) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.pop("DJANGO_SETTINGS_MODULE", None)
    command = [
        sys.executable,
        "-m",
        "redisq_django.pipeline",
        "archive",
        *("--redis-url", url, "--root", str(root), "--queue", queue, "--trigger", "1"),
        *("--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=2"),
    ]
    return subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        start_new_session=True,  # its own process group: the JVM is stopped with it
    )


def archive_through(
    spark: SparkSession,
    url: str,
    queue: str,
    root: Path,
    fault: Callable[[Publisher], None],
) -> str:
    """Run a continuous archive while messages are published, inject ``fault`` once it
    has committed a micro-batch, and check that it goes on archiving: it catches up with
    everything published (after the fault too) while still running, stops on SIGTERM
    with exit status 0, and every message is in the archive exactly once. Returns its
    stderr."""
    broker = Broker(redis.Redis.from_url(url), CoreConfig())
    publish(broker, queue, 300)
    publisher = Publisher(url, queue)
    publisher.start()
    errors = root.parent / "archive.err"
    with errors.open("w") as stderr:
        proc = start_archive(url, root, queue, stderr)
        try:

            def running(condition: Callable[[], bool]) -> Callable[[], bool]:
                def check() -> bool:
                    if proc.poll() is not None:
                        log = errors.read_text()[-3000:]
                        pytest.fail(f"the archive exited ({proc.returncode}):\n{log}")
                    return condition()

                return check

            sink_log = root / "messages" / "_spark_metadata"
            wait_until(running(lambda: (sink_log / "0").exists()), 240, "the first batch")
            fault(publisher)
            time.sleep(3)  # more messages after the fault
            ids = publisher.stop()
            last = broker.client.xrevrange(broker.keys(queue).log, count=1)[0][0].decode()

            def caught_up() -> bool:
                return broker.archives.positions(queue, DEFAULT_ARCHIVE).get("messages") == last

            wait_until(running(caught_up), 240, "the archive to catch up after the fault")
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=120)
        finally:
            publisher.stop()
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
    log = errors.read_text()
    assert proc.returncode == 0, log[-3000:]
    published = [e[0].decode() for e in broker.client.xrange(broker.keys(queue).log)]
    assert len(published) == len(ids) + 300
    archived = read_table(spark, root, "messages")
    assert count_and_distinct(archived, "message_id") == (len(published), len(published))
    assert {r[0] for r in archived.select("message_id").collect()} == set(published)
    broker.client.close()
    return log


@pytest.mark.timeout(600)
def test_a_continuous_archive_survives_a_stalled_redis(
    spark: SparkSession, fresh_redis_server: RedisServer, queue_name: str, tmp_path: Path
) -> None:
    def sigstop(publisher: Publisher) -> None:
        stall(fresh_redis_server, 18)  # longer than the default socket timeout (10 s)

    log = archive_through(spark, fresh_redis_server.url, queue_name, tmp_path / "root", sigstop)
    assert "is unreachable" in log and "answers again" in log


@pytest.mark.timeout(600)
def test_a_continuous_archive_survives_a_restart_and_loading(
    spark: SparkSession, redis_server_binary: str, queue_name: str, tmp_path: Path
) -> None:
    # Given a Redis with AOF whose data set takes ~5 s to load (1 ms per filler key)
    server = RedisServer(
        redis_server_binary,
        tmp_path / "redis",
        port=free_port(),
        extra_args=("--appendonly", "yes", "--appendfsync", "always", "--key-load-delay", "1000"),
        start_timeout=60,  # ~5 s of loading, far more on a machine busy with Spark
    ).start()
    try:
        with server.client() as client:
            pipe = client.pipeline(transaction=False)
            for i in range(5000):  # 10 MB: loading answers LOADING between its 2 MB steps
                pipe.set(f"filler:{i}", "x" * 2000)
            pipe.execute()
            client.bgrewriteaof()  # into the AOF's RDB base, which key-load-delay slows
            wait_until(lambda: not client.info("persistence")["aof_rewrite_in_progress"], 60, "AOF")

        errors = tmp_path / "archive.err"  # archive_through's log of the archive

        def restart(publisher: Publisher) -> None:
            publisher.running.clear()
            time.sleep(0.3)  # let a publish under way finish
            # SIGTERM, then start: refused, then LOADING for ~5 s. A query busy with a
            # micro-batch on a loaded machine may not ask Redis in that window: restart
            # again (up to 4 times) until it has met LOADING
            for _ in range(4):
                server.restart()  # returns once loading is over
                if "refusing commands (loading)" in errors.read_text():
                    break
            publisher.running.set()

        log = archive_through(spark, server.url, queue_name, tmp_path / "root", restart)
    finally:
        server.stop()
    # (the query met LOADING; connection refused too, if it asked during the restart)
    assert "refusing commands (loading)" in log and "answers again" in log, log[-3000:]
