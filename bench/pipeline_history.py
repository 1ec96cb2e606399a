"""Benchmark of the history jobs (report, replay, compact) on a large synthetic archive.

Run with ``make bench-pipeline`` (after ``bench/pipeline.py``) or
``.venv/bin/python bench/pipeline_history.py [--events N]``; needs the ``pipeline`` extra,
Java 17+ and a redis-server (``make redis``). Steps, all on ``--master`` (``local[2]``):

1. **generate** a synthetic archive of ``--events`` (10,000,000) events and the matching
   messages, written by Spark itself (``spark.range`` + column expressions, no Python
   UDF, no shuffle) straight into the archive layout
   ``ROOT/{messages,events}/queue=Q/date=D/*.parquet``, plus a ``_spark_metadata`` sink
   log naming the files (the compaction works through that log). The mix: three queues
   with 2, 3 and 4 logical consumers, ~5% of deliveries retried, ~0.5% dead after three
   attempts, four error classes, log-normal handler durations and publish -> handle
   latencies, spread evenly over ``--days`` days ending yesterday (UTC). Each Spark task
   covers one contiguous time slice, so each day of each queue gets about
   ``--slices / --days`` files, as an archive run with that many micro-batches would;
2. **report**: the ``report`` job over the whole range;
3. **replay**: the ``replay`` job publishing the first ``--replay`` (200,000) messages of
   one queue (chosen with ``--since/--until``, so the date partitions prune) to a private
   redis-server, twice (the first run of a session also starts Spark's Python workers;
   the second is the steady rate), against raw pipelined ``XADD`` of the same payload
   and headers from this process in batches of 500 (a Redis ``FLUSHALL`` in between);
4. **compact**: the ``compact`` job over the first ``--compact-days`` (2) days.

Prints one table. Nothing is asserted; the figures vary with the machine
(bench/RESULTS.md records them).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path[:0] = [str(REPO), str(BENCH_DIR)]

import redis  # noqa: E402
from pipeline import java_version, log, redis_binary  # noqa: E402

from redisq_django.core import Broker  # noqa: E402
from redisq_django.pipeline.writer import ORIGINAL_ID_HEADER  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

#: Queues and their logical consumers (2-4 each: 3 on average).
QUEUES = {
    "orders": ["billing", "shipping"],
    "emails": ["smtp", "audit", "metrics"],
    "webhooks": ["github", "stripe", "slack", "audit"],
}
ERRORS = [
    ("TimeoutError", "upstream did not answer within 30 s"),
    ("ConnectionError", "connection reset by peer"),
    ("ValidationError", "field 'total' is not a decimal"),
    ("KeyError", "'customer'"),
]
#: Share of deliveries (message x consumer) that fail at least once / that end dead.
RETRIED_SHARE = 0.05
DEAD_SHARE = 0.005
MAX_ATTEMPTS = 3
RAW_BATCH = 500


def expected_events_per_message() -> float:
    """Events one message produces on average: one per consumer, plus the retries."""
    consumers = sum(len(c) for c in QUEUES.values()) / len(QUEUES)
    # Retried but handled: 1 or 2 retries (1.5 on average); dead: MAX_ATTEMPTS - 1 retries.
    extra = (RETRIED_SHARE - DEAD_SHARE) * 1.5 + DEAD_SHARE * (MAX_ATTEMPTS - 1)
    return consumers * (1 + extra)


def message_id(i: int) -> str:
    """Python twin of the generator's message id expression."""
    return f"m{i:012x}"


# ---------------------------------------------------------------------------------------
# The generator
# ---------------------------------------------------------------------------------------


def generate(spark: Any, root: Path, n_messages: int, start: dt.datetime, days: int, slices: int):
    """Write ``n_messages`` messages and their events under ``root``; returns the rows
    written per table. Message ``i`` is published at ``start + i * step`` (an even
    rate), so a time range selects a known id range (the replay step relies on it)."""
    from pyspark.sql import functions as F

    span_us = days * 86_400_000_000
    step_us = span_us / n_messages
    queue_names = list(QUEUES)

    def uniform(salt: int, *cols: Any) -> Any:
        # Deterministic per row (a hash, not rand()): messages and events agree on what
        # they share even though they are computed in separate jobs.
        return (F.abs(F.xxhash64(F.lit(salt), *cols)) % 1_000_000) / 1_000_000.0

    def lognormal_ms(salt: int, median_ms: float, sigma: float, *cols: Any) -> Any:
        # Box-Muller from two hashed uniforms: a long right tail, as real handlers have.
        u1 = F.greatest(uniform(salt, *cols), F.lit(1e-6))
        u2 = uniform(salt + 1, *cols)
        z = F.sqrt(-2 * F.log(u1)) * F.cos(2 * 3.141592653589793 * u2)
        return F.exp(F.log(F.lit(median_ms)) + sigma * z)

    start_us = int(start.timestamp() * 1_000_000)
    base = spark.range(0, n_messages, 1, slices).select(
        F.col("id"),
        F.element_at(F.array(*map(F.lit, queue_names)), (F.col("id") % 3 + 1).cast("int")).alias(
            "queue"
        ),
        F.format_string("m%012x", F.col("id")).alias("message_id"),
        F.floor(F.lit(start_us) + F.col("id") * F.lit(step_us)).cast("long").alias("pub_us"),
    )
    pub_ms = (F.col("pub_us") / 1000).cast("long")  # stream ids are in milliseconds
    messages = base.select(
        "queue",
        "message_id",
        F.concat(pub_ms.cast("string"), F.lit("-0")).alias("entry_id"),
        F.timestamp_micros("pub_us").alias("published_at"),
        F.lit(None).cast("timestamp").alias("due_at"),
        F.format_string(
            '{"order": %d, "customer": "c-%04d", "items": [{"sku": "ABC-%d", "qty": %d}], '
            '"total": "%d.90"}',
            F.col("id"),
            F.col("id") % 9973,
            F.col("id") % 97,
            F.col("id") % 5 + 1,
            F.col("id") % 500,
        ).alias("payload"),
        F.lit(None).cast("string").alias("headers"),
        F.lit(0).cast("int").alias("attempts"),
        F.to_date(F.timestamp_micros("pub_us")).alias("date"),
    )
    consumers = F.create_map(
        *[x for q, cs in QUEUES.items() for x in (F.lit(q), F.array(*map(F.lit, cs)))]
    )
    deliveries = base.select("*", F.explode(consumers[F.col("queue")]).alias("consumer"))
    fate = uniform(11, "id", "consumer")
    attempts_needed = (
        F.when(fate < DEAD_SHARE, MAX_ATTEMPTS)
        .when(fate < DEAD_SHARE + (RETRIED_SHARE - DEAD_SHARE) / 2, 2)
        .when(fate < RETRIED_SHARE, 3)
        .otherwise(1)
    )
    delivered = deliveries.select(
        "*",
        (fate < DEAD_SHARE).alias("dead"),
        attempts_needed.alias("n"),
        # Publish -> first handling: median 250 ms, a tail into minutes (backlogs).
        lognormal_ms(21, 250.0, 1.6, "id", "consumer").alias("wait_ms"),
        F.explode(F.sequence(F.lit(1), attempts_needed)).alias("attempt"),
    )
    # Backoff before attempt k: 30 s * 2^(k-2), as a retry policy would.
    backoff_ms = F.when(F.col("attempt") > 1, F.pow(2, F.col("attempt") - 2) * 30_000).otherwise(0)
    t_us = F.col("pub_us") + ((F.col("wait_ms") + backoff_ms) * 1000).cast("long")
    last = F.col("attempt") == F.col("n")
    event = F.when(~last, "retried").when(F.col("dead"), "dead").otherwise("handled")
    err = (F.abs(F.xxhash64(F.lit(31), "id", "consumer", "attempt")) % len(ERRORS) + 1).cast("int")
    failed = event != "handled"
    events = delivered.select(
        "queue",
        "consumer",
        F.concat(F.col("consumer"), F.lit("-"), (F.col("id") % 4).cast("string")).alias("instance"),
        event.alias("event"),
        F.timestamp_micros(t_us).alias("time"),
        F.concat(pub_ms.cast("string"), F.lit("-0")).alias("entry_id"),
        "message_id",
        F.col("attempt").cast("int").alias("attempt"),
        # Handler time: median 40 ms, long tail.
        lognormal_ms(41, 40.0, 1.0, "id", "consumer", "attempt").cast("long").alias("duration_ms"),
        F.when(failed, F.element_at(F.array(*[F.lit(c) for c, _ in ERRORS]), err)).alias(
            "error_class"
        ),
        F.when(failed, F.element_at(F.array(*[F.lit(m) for _, m in ERRORS]), err)).alias(
            "error_message"
        ),
        F.when(event == "dead", F.lit("max_attempts")).alias("reason"),
        F.when(event == "retried", F.timestamp_micros(t_us + F.lit(30_000_000))).alias("next_due"),
        F.lit(None).cast("string").alias("start_id"),
        F.to_date(F.timestamp_micros(t_us)).alias("date"),
    )
    rows = {}
    for name, frame in (("messages", messages), ("events", events)):
        path = root / name
        frame.write.partitionBy("queue", "date").parquet(path.as_uri())
        write_sink_log(spark, path, slices)
        rows[name] = spark.read.parquet(path.as_uri()).count()
    return rows


def write_sink_log(spark: Any, table: Path, slices: int) -> None:
    """Name every Parquet file of ``table`` in ``_spark_metadata/<k>.compact``, as the
    archive's file sink would after ``k + 1`` micro-batches and its own log compaction
    (every 10th batch): readers then list exactly those files, and the compaction job
    finds each partition's files in one log file, as it expects."""
    from redisq_django.pipeline.sink_log import HadoopFs, entry_for

    fs = HadoopFs(spark, table.as_uri())
    files = [
        s for s in fs.list_files(table.as_uri()) if str(s.getPath().getName()).endswith(".parquet")
    ]
    batch = max(9, (slices // 10) * 10 - 1)
    log_dir = table / "_spark_metadata"
    log_dir.mkdir()
    lines = ["v1", *(json.dumps(entry_for(s), separators=(",", ":")) for s in files)]
    (log_dir / f"{batch}.compact").write_text("\n".join(lines))
    (table / "_SUCCESS").unlink(missing_ok=True)


def file_count(spark: Any, table: Path, before: dt.date | None = None) -> int:
    """Parquet files of ``table`` that readers see, i.e. that its sink log names (in
    partitions dated before ``before``, if given). Files a compaction replaced stay on
    disk, retired, until a later run deletes them."""
    from redisq_django.pipeline.sink_log import HadoopFs, current_files, read_entries

    fs = HadoopFs(spark, str(table.parent))
    n = 0
    for log_file in current_files(fs, str(table)):
        for entry in read_entries(fs, log_file):
            date = entry["path"].rsplit("/date=", 1)[1][:10]
            if before is None or date < before.isoformat():
                n += 1
    return n


# ---------------------------------------------------------------------------------------
# Replay: the job, and raw pipelined XADD of the same messages
# ---------------------------------------------------------------------------------------


def raw_xadd(url: str, queue: str, rows: list[tuple[str, str]]) -> float:
    """XADD ``rows`` (payload, original id) to ``queue``'s log, ``RAW_BATCH`` per
    pipeline round trip, with the headers the replay writes (the original id); returns
    the seconds."""
    client = redis.Redis.from_url(url)
    key = Broker(client).keys(queue).log
    t0 = time.perf_counter()
    for lo in range(0, len(rows), RAW_BATCH):
        pipe = client.pipeline(transaction=False)
        for payload, original in rows[lo : lo + RAW_BATCH]:
            headers = json.dumps({ORIGINAL_ID_HEADER: original}, separators=(",", ":"))
            pipe.xadd(key, {"payload": payload, "headers": headers})
        pipe.execute()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=10_000_000, help="events generated (about)")
    ap.add_argument("--days", type=int, default=7, help="days the archive spans (to yesterday)")
    ap.add_argument(
        "--slices", type=int, default=168, help="generator tasks = files per queue over all days"
    )
    ap.add_argument("--replay", type=int, default=200_000, help="messages replayed")
    ap.add_argument("--compact-days", type=int, default=2, help="first days compacted")
    ap.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    ap.add_argument("--keep", metavar="DIR", help="generate into DIR and keep it")
    ap.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="Spark configuration"
    )
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import pyspark

    from redisq_django.pipeline.compact import compact
    from redisq_django.pipeline.job_options import CompactOptions, ReplayOptions
    from redisq_django.pipeline.options import parse_conf
    from redisq_django.pipeline.replay import replay, select_messages
    from redisq_django.pipeline.report import ReportOptions, report
    from redisq_django.pipeline.session import build_session

    n_messages = round(args.events / expected_events_per_message())
    today = dt.datetime.now(dt.UTC).date()
    first_day = today - dt.timedelta(days=args.days)
    start = dt.datetime(first_day.year, first_day.month, first_day.day, tzinfo=dt.UTC)
    end = start + dt.timedelta(days=args.days)
    replay_queue = next(iter(QUEUES))  # queue index 0: ids 0, 3, 6, ...
    replay_n = min(args.replay, n_messages // 3)

    with tempfile.TemporaryDirectory(prefix="redisq-bench-history-") as tmpdir:
        tmp = Path(tmpdir)
        root = Path(args.keep) if args.keep else tmp / "archive"
        log(f"starting Spark ({args.master}) ...")
        conf = {"spark.sql.shuffle.partitions": "4", **parse_conf(args.conf)}
        spark = build_session(args.master, conf)
        spark.sparkContext.setLogLevel("ERROR")

        log(f"generating {n_messages:,} messages and ~{args.events:,} events ...")
        t0 = time.perf_counter()
        rows = generate(spark, root, n_messages, start, args.days, args.slices)
        gen_s = time.perf_counter() - t0
        size_mb = sum(f.stat().st_size for f in root.rglob("*.parquet")) / 1e6
        log(f"  {rows} in {gen_s:.1f} s, {size_mb:,.0f} MB")

        log("report over the whole range ...")
        rep = report(
            spark, ReportOptions(root=str(root), out=str(tmp / "report"), since=start, until=end)
        )
        log(f"  {rep.line()}")

        server = RedisServer(redis_binary(), tmp / "redis").start()
        try:
            url = server.url
            # Message i is published at floor(start_us + i * step_us) (the generator's
            # double arithmetic, repeated here): the first replay_n messages of queue 0
            # (ids 0, 3, ...) are exactly those published before id 3 * replay_n - 1's
            # time + 1 us (ids 3n - 2 and 3n - 1 belong to the other queues).
            start_us = int(start.timestamp() * 1_000_000)
            step_us = args.days * 86_400_000_000 / n_messages
            last_us = math.floor(start_us + (3 * replay_n - 1) * step_us)
            until = dt.datetime.fromtimestamp(0, dt.UTC) + dt.timedelta(microseconds=last_us + 1)
            options = ReplayOptions(
                redis_url=url, root=str(root), queue=replay_queue, since=start, until=until
            )
            client = redis.Redis.from_url(url)
            # Twice: the first replay of a session also starts Spark's Python workers
            # (the daemon, the writer's planner, the tasks' workers: seconds, once); the
            # second shows the steady rate a long replay runs at.
            log(f"replay job: {replay_n:,} messages of {replay_queue!r} (cold) ...")
            cold = replay(spark, options, progress=lambda line: None)
            log(f"  {cold.line()}")
            client.flushall()
            log("replay job again (warm) ...")
            rsum = replay(spark, options, progress=lambda line: None)
            log(f"  {rsum.line()}")
            # The baseline gets the same rows, already in memory: only Redis is timed.
            selected = select_messages(spark, options).select("payload", "message_id").collect()
            # The selection alone (partition pruning, Parquet scan, count), warm: how
            # much of the job's wall time is not publishing.
            t0 = time.perf_counter()
            select_messages(spark, options).count()
            select_s = time.perf_counter() - t0
            replayed_len = client.xlen(Broker(client).keys(replay_queue).log)
            client.flushall()
            log("raw pipelined XADD of the same messages ...")
            raw_s = raw_xadd(url, replay_queue, [(r[0], r[1]) for r in selected])
            raw_len = client.xlen(Broker(client).keys(replay_queue).log)
        finally:
            server.stop()

        compact_until = first_day + dt.timedelta(days=args.compact_days - 1)
        cut = compact_until + dt.timedelta(days=1)
        before = {t: file_count(spark, root / t, cut) for t in ("messages", "events")}
        log(f"compact {first_day}..{compact_until} ...")
        csum = compact(spark, CompactOptions(root=str(root), since=first_day, until=compact_until))
        log(f"  {csum.line()}")
        after = {t: file_count(spark, root / t, cut) for t in ("messages", "events")}
        check = spark.read.parquet((root / "events").as_uri()).count()
        spark.stop()

    replay_rate = rsum.published / rsum.seconds
    raw_rate = len(selected) / raw_s
    print()
    print(
        f"history benchmark: {rows['events']:,} events, {rows['messages']:,} messages, "
        f"{args.days} days, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"PySpark {pyspark.__version__}, {java_version()}"
    )
    print(f"{'measurement':<52} {'figure':>22}")
    print(f"{'generate archive (' + args.master + ')':<52} {gen_s:>20.1f} s")
    print(f"{'  rows/s written (messages + events)':<52} {sum(rows.values()) / gen_s:>22,.0f}")
    print(f"{'  Parquet written':<52} {size_mb:>19,.0f} MB")
    print(f"{'report, whole range (' + rep.bucket + ' buckets)':<52} {rep.seconds:>20.1f} s")
    cold_rate = cold.published / cold.seconds
    print(
        f"{'replay job, ' + f'{rsum.published:,}' + ' msgs, warm (wall, incl. select)':<52} "
        f"{replay_rate:>16,.0f} msg/s"
    )
    print(f"{'  same, first run of the session (cold)':<52} {cold_rate:>16,.0f} msg/s")
    print(f"{'  the selection alone (count, warm)':<52} {select_s:>20.1f} s")
    print(f"{'raw pipelined XADD, batches of ' + str(RAW_BATCH):<52} {raw_rate:>16,.0f} msg/s")
    print(f"{'  replay / raw (warm)':<52} {replay_rate / raw_rate:>21.2f}x")
    print(f"{'  replay / raw (cold)':<52} {cold_rate / raw_rate:>21.2f}x")
    for t in ("messages", "events"):
        print(
            f"{'compact ' + str(args.compact_days) + ' days: ' + t + ' files':<52} "
            f"{before[t]:>11,} -> {after[t]:>6,}"
        )
    print(f"{'compact time (both tables)':<52} {csum.seconds:>20.1f} s")
    print(
        f"report totals: {rep.totals}; replayed stream {replayed_len:,}, raw stream "
        f"{raw_len:,}; events read back after compaction {check:,}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
