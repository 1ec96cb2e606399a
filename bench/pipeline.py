"""Benchmark of the archive job against a hand-written single-process loop.

Run with ``make bench-pipeline`` (or ``.venv/bin/python bench/pipeline.py``; needs the
``pipeline`` extra and Java 17+). On one private redis-server:

1. publish ``--messages`` (300,000) messages to each of ``--rounds`` (3) queues
   (``Broker.publish_many``);
2. **archive**: the ``archive`` job (``trigger(availableNow=True)``) on ``local[2]``,
   once per queue, after a warm-up run on another queue (the first run of a JVM pays for
   starting the Python workers and the JIT). Figures: messages/s over the micro-batches' own time as
   Spark's progress reports it (steady state), and over the run's wall time (query start
   and stop included);
3. **loop**: the same messages read with ``XRANGE ... COUNT 10000`` pages in this
   process, each page turned into a pyarrow table of the archive's ``messages`` columns
   and appended to one Parquet file (``pyarrow.parquet.ParquetWriter``), after each
   archive run (interleaved, so that the machine's load hits both alike).

Prints one table, the medians of the rounds' messages/s and their ratio, then each round
with the machine's load average before and after it (its cores may be shared).
Nothing is asserted; the figures vary with the machine (bench/RESULTS.md records them).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path[:0] = [str(REPO), str(BENCH_DIR)]

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import redis  # noqa: E402

from redisq_django.core import Broker  # noqa: E402
from tests.support.redis_server import RedisServer, find_redis_server  # noqa: E402

QUEUE = "bench"
WARMUP_QUEUE = "warmup"
PAYLOAD = {
    "order": 123456,
    "customer": "c-0042",
    "items": [{"sku": "ABC-1", "qty": 2}, {"sku": "XYZ-9", "qty": 1}],
    "total": "59.90",
}
PUBLISH_BATCH = 1000
TS = pa.timestamp("us", tz="UTC")
LOOP_SCHEMA = pa.schema(
    [
        ("queue", pa.string()),
        ("message_id", pa.string()),
        ("entry_id", pa.string()),
        ("published_at", TS),
        ("due_at", TS),
        ("payload", pa.string()),
        ("headers", pa.string()),
        ("attempts", pa.int32()),
    ]
)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def redis_binary() -> str:
    stamp = REPO / ".venv" / ".redis-server"
    if not os.environ.get("REDISQ_TEST_REDIS_SERVER") and stamp.exists():
        os.environ["REDISQ_TEST_REDIS_SERVER"] = stamp.read_text().strip()
    found = find_redis_server()
    if not found:
        sys.exit("bench: no redis-server (set REDISQ_TEST_REDIS_SERVER or run `make redis`)")
    return found


def publish(broker: Broker, queue: str, n: int) -> float:
    """Publish ``n`` messages; returns the seconds it took."""
    t0 = time.perf_counter()
    for lo in range(0, n, PUBLISH_BATCH):
        broker.publish_many(queue, [PAYLOAD] * min(PUBLISH_BATCH, n - lo))
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------
# The hand-written loop
# ---------------------------------------------------------------------------------------


def page_table(queue: str, page: list[Any]) -> pa.Table:
    """One XRANGE page (raw ``[id, [field, value, ...]]`` entries) as the archive's
    ``messages`` columns; payloads stay JSON text."""
    n = len(page)
    entry_ids = [e[0] for e in page]
    payloads: list[bytes | None] = [None] * n
    headers: list[bytes | None] = [None] * n
    message_ids: list[bytes] = list(entry_ids)
    published = [int(i[: i.index(b"-")]) * 1000 for i in entry_ids]
    due: list[int | None] = [None] * n
    attempts = [0] * n
    for i, (_, flat) in enumerate(page):
        if len(flat) == 2 and flat[0] == b"payload":
            payloads[i] = flat[1]
            continue
        fields = dict(zip(flat[::2], flat[1::2], strict=False))
        payloads[i] = fields.get(b"payload")
        headers[i] = fields.get(b"headers")
        message_ids[i] = fields.get(b"id") or entry_ids[i]
        if b"published_at" in fields:
            published[i] = int(fields[b"published_at"]) * 1000
        if b"due_at" in fields:
            due[i] = int(fields[b"due_at"]) * 1000
        attempts[i] = int(fields.get(b"attempts") or 0)
    return pa.table(
        [
            pa.array([queue] * n, pa.string()),
            pa.array(message_ids, pa.binary()).cast(pa.string()),
            pa.array(entry_ids, pa.binary()).cast(pa.string()),
            pa.array(published, pa.int64()).cast(TS),
            pa.array(due, pa.int64()).cast(TS),
            pa.array(payloads, pa.binary()).cast(pa.string()),
            pa.array(headers, pa.binary()).cast(pa.string()),
            pa.array(attempts, pa.int32()),
        ],
        schema=LOOP_SCHEMA,
    )


def hand_loop(url: str, queue: str, target: Path, page_size: int) -> tuple[int, float]:
    """XRANGE pages -> pyarrow -> one Parquet file. Returns (rows, seconds)."""
    client = redis.Redis.from_url(url)
    # Raw replies ([id, [f, v, ...]]): skip redis-py's per-entry dict building, as a
    # careful hand-written loop would.
    client.set_response_callback("XRANGE", lambda response, **options: response)
    key = Broker(client).keys(queue).log
    rows = 0
    t0 = time.perf_counter()
    with pq.ParquetWriter(target, LOOP_SCHEMA) as writer:
        start = "-"
        while True:
            page = client.execute_command("XRANGE", key, start, "+", "COUNT", page_size)
            if not page:
                break
            writer.write_table(page_table(queue, page))
            rows += len(page)
            start = "(" + page[-1][0].decode()
            if len(page) < page_size:
                break
    return rows, time.perf_counter() - t0


# ---------------------------------------------------------------------------------------
# The archive job
# ---------------------------------------------------------------------------------------


def spark_archive(spark: Any, url: str, root: Path, queue: str, max_per_trigger: int | None) -> Any:
    from redisq_django.pipeline.archive import archive
    from redisq_django.pipeline.options import ArchiveOptions

    options = ArchiveOptions(
        redis_url=url, root=str(root), queues=(queue,), max_entries_per_trigger=max_per_trigger
    )
    return archive(spark, options)


def java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except OSError:
        return "?"
    lines = (out.stderr or out.stdout).splitlines()
    return lines[0] if lines else "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=300_000, help="messages archived")
    ap.add_argument("--warmup", type=int, default=100_000, help="messages of the warm-up run")
    ap.add_argument(
        "--rounds", type=int, default=3, help="archive runs and loops, interleaved (median)"
    )
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    ap.add_argument("--page", type=int, default=10_000, help="XRANGE page of the loop")
    ap.add_argument(
        "--max-per-trigger",
        type=int,
        default=None,
        help="maxEntriesPerTrigger of the archive run (default: one micro-batch)",
    )
    ap.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark configuration"
    )
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import pyspark

    from redisq_django.pipeline.options import parse_conf
    from redisq_django.pipeline.session import build_session

    with tempfile.TemporaryDirectory(prefix="redisq-bench-pipeline-") as tmpdir:
        tmp = Path(tmpdir)
        server = RedisServer(redis_binary(), tmp / "redis").start()
        try:
            url = server.url
            broker = Broker(redis.Redis.from_url(url))
            queues = [f"{QUEUE}{i}" for i in range(args.rounds)]
            log(f"publishing {args.rounds} x {args.messages:,} + {args.warmup:,} (warm-up) ...")
            seconds = sum(publish(broker, queue, args.messages) for queue in queues)
            publish(broker, WARMUP_QUEUE, args.warmup)
            log(f"  {args.rounds * args.messages / seconds:,.0f} msg/s published")

            log(f"starting Spark ({args.master}) ...")
            conf = {"spark.sql.shuffle.partitions": "2", **parse_conf(args.conf)}
            spark = build_session(args.master, conf)
            spark.sparkContext.setLogLevel("ERROR")
            log("warm-up archive run ...")
            warm = spark_archive(spark, url, tmp / "warmup", WARMUP_QUEUE, None)
            log(f"  {warm.line()}")
            rounds: list[Round] = []
            for i, queue in enumerate(queues):
                # Interleaved, so that a change in the machine's load hits both alike.
                log(f"round {i + 1}: archive ...")
                load_before = os.getloadavg()[0]
                summary = spark_archive(
                    spark, url, tmp / f"archive{i}", queue, args.max_per_trigger
                )
                log(f"  {summary.line()}")
                stored = spark.read.parquet(str(tmp / f"archive{i}" / "messages")).count()
                log(f"round {i + 1}: hand-written loop ...")
                rows, loop_seconds = hand_loop(url, queue, tmp / "loop.parquet", args.page)
                loads = (load_before, os.getloadavg()[0])
                rounds.append(Round(summary, stored, rows, loop_seconds, loads))
            spark.stop()
        finally:
            server.stop()

    steady = statistics.median(r.summary.messages.busy_rate for r in rounds)
    wall = statistics.median(r.wall_rate for r in rounds)
    loop = statistics.median(r.loop_rate for r in rounds)
    print()
    print(
        f"archive benchmark: {args.messages:,} messages x {args.rounds} rounds, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, "
        f"PySpark {pyspark.__version__}, {java_version()}"
    )
    print(f"{'measurement (median of the rounds)':<46} {'messages/s':>12} {'vs loop':>8}")
    print(
        f"{'archive job, micro-batch time (' + args.master + ')':<46} {steady:>12,.0f} "
        f"{steady / loop:>7.2f}x"
    )
    print(
        f"{'archive job, wall time incl. query start/stop':<46} {wall:>12,.0f} {wall / loop:>7.2f}x"
    )
    print(f"{'hand-written loop (XRANGE 10k -> pyarrow)':<46} {loop:>12,.0f} {1:>7.2f}x")
    for i, r in enumerate(rounds, 1):
        m = r.summary.messages
        print(
            f"round {i}: archive {m.rows:,} rows in {m.batches} micro-batch(es), "
            f"{m.busy_ms / 1000:.2f} s busy ({m.busy_rate:,.0f}/s, "
            f"{m.busy_rate / r.loop_rate:.2f}x), {r.summary.seconds:.1f} s wall; "
            f"{r.stored:,} rows read back; loop {r.rows:,} rows in {r.loop_seconds:.2f} s; "
            f"load {r.loads[0]:.1f}-{r.loads[1]:.1f}"
        )
    if any(r.stored != args.messages or r.rows != args.messages for r in rounds):
        print("WARNING: row counts differ from the messages published", file=sys.stderr)
        return 1
    return 0


@dataclass
class Round:
    """One archive run and one loop over the same queue."""

    summary: Any
    stored: int
    rows: int
    loop_seconds: float
    loads: tuple[float, float]  # 1-minute load average before the archive, after the loop

    @property
    def wall_rate(self) -> float:
        seconds = self.summary.seconds
        return self.summary.messages.rows / seconds if seconds else 0.0

    @property
    def loop_rate(self) -> float:
        return self.rows / self.loop_seconds


if __name__ == "__main__":
    sys.exit(main())
