"""Benchmark of the history jobs (report, replay, compact) on a large synthetic archive.

Run with ``make bench-pipeline`` (after ``bench/pipeline.py``) or
``.venv/bin/python bench/pipeline_history.py [--events N]``; needs the ``pipeline`` extra,
Java 17+ and a redis-server (``make redis``). Report and replay are measured the way a
user runs them, ``python -m redisq_django.pipeline JOB`` in a fresh process (its JVM
start included), each against the plainest baseline; the load average is recorded
beside every figure (the machine's cores are shared). Steps:

1. **generate** a synthetic archive of ``--events`` (10,000,000) events and the matching
   messages, written by Spark itself (``spark.range`` + column expressions, no Python
   UDF, no shuffle) straight into the archive layout
   ``ROOT/{messages,events}/queue=Q/date=D/*.parquet``, plus a ``_spark_metadata`` sink
   log naming the files (the readers and the compaction go by that log). The mix: three
   queues with 2, 3 and 4 logical consumers, ~5% of deliveries retried, ~0.5% dead after
   three attempts, four error classes, log-normal handler durations and publish ->
   handle latencies, spread evenly over ``--days`` days ending yesterday (UTC). Each
   Spark task covers one contiguous time slice, so each day of each queue gets about
   ``--slices / --days`` files, as an archive run with that many micro-batches would;
2. **report**: ``python -m redisq_django.pipeline report`` over the whole range on
   ``--master``, with the job's defaults (adaptive execution, 2 shuffle partitions per
   core) and with Spark's default of 200 shuffle partitions (what it ran with before);
3. **replay** of the first ``--replay`` (200,000) messages of one queue (chosen with
   ``--since/--until``, so the date partitions prune) to a private redis-server:
   ``python -m redisq_django.pipeline replay`` (cold: what a user's one-off replay
   gets), and in this process on a session that has replayed once already (warm: the
   steady rate of a long replay). Baseline: pipelined ``XADD`` of the same bytes (the
   entries the replay wrote, read back: no JSON work) with raw redis-py, batches of 500,
   in this process (warm) and in a fresh ``python`` process that reads them from a file
   first (cold). ``FLUSHALL`` before each;
4. **compact**: the ``compact`` job over the first ``--compact-days`` (2) days, in this
   process.

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
import re
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

import redis  # noqa: E402
from pipeline import java_version, log, redis_binary  # noqa: E402

from redisq_django.core import Broker  # noqa: E402
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
# Baselines, command-line runs, load
# ---------------------------------------------------------------------------------------

#: A fresh Python process doing the baseline: read the entries' fields from a Parquet
#: file (one list<binary> per entry), then pipelined XADD, RAW_BATCH per round trip.
RAW_XADD_PROGRAM = r"""
import sys, time
import pyarrow.parquet as pq
import redis
url, key, path, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
entries = pq.read_table(path)["fields"].to_pylist()
client = redis.Redis.from_url(url)
for lo in range(0, len(entries), batch):
    pipe = client.pipeline(transaction=False)
    for fields in entries[lo : lo + batch]:
        pipe.execute_command("XADD", key, "*", *fields)
    pipe.execute()
print(len(entries))
"""


#: The queue the replays take their messages from (queue index 0: ids 0, 3, 6, ...).
REPLAY_QUEUE = next(iter(QUEUES))


def archive_start(days: int) -> dt.datetime:
    """The first instant of a generated archive of ``days`` days ending yesterday (UTC)."""
    first_day = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=days)
    return dt.datetime(first_day.year, first_day.month, first_day.day, tzinfo=dt.UTC)


def replay_until(start: dt.datetime, days: int, n_messages: int, replay_n: int) -> dt.datetime:
    """The end of the range (``until``, exclusive) that selects the first ``replay_n``
    messages of :data:`REPLAY_QUEUE` from ``start``. Message i is published at
    floor(start_us + i * step_us) (the generator's double arithmetic, repeated here):
    they are exactly those published before id 3 * replay_n - 1's time + 1 us (ids
    3n - 2 and 3n - 1 belong to the other queues)."""
    step_us = days * 86_400_000_000 / n_messages
    last_us = math.floor(int(start.timestamp() * 1_000_000) + (3 * replay_n - 1) * step_us)
    return dt.datetime.fromtimestamp(0, dt.UTC) + dt.timedelta(microseconds=last_us + 1)


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def stream_fields(client: Any, key: str) -> list[list[bytes]]:
    """Every entry of stream ``key`` as its flat field/value list (the bytes as stored)."""
    out: list[list[bytes]] = []
    last = "-"
    while True:
        page = client.xrange(key, min=last, count=10_000)
        if last != "-":
            page = page[1:]
        if not page:
            return out
        out += [[x for kv in fields.items() for x in kv] for _, fields in page]
        last = page[-1][0]


def raw_xadd(client: Any, key: str, entries: list[list[bytes]]) -> float:
    """Pipelined ``XADD key * <fields>`` of ``entries``, RAW_BATCH per round trip, with
    raw redis-py; returns the seconds."""
    t0 = time.perf_counter()
    for lo in range(0, len(entries), RAW_BATCH):
        pipe = client.pipeline(transaction=False)
        for fields in entries[lo : lo + RAW_BATCH]:
            pipe.execute_command("XADD", key, "*", *fields)
        pipe.execute()
    return time.perf_counter() - t0


def raw_xadd_cold(url: str, key: str, entries: list[list[bytes]], tmp: Path) -> float:
    """The same in a fresh Python process that first reads the entries from a file;
    returns the process's wall time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp / "entries.parquet"
    pq.write_table(pa.table({"fields": pa.array(entries, pa.list_(pa.binary()))}), path)
    argv = [sys.executable, "-c", RAW_XADD_PROGRAM, url, key, str(path), str(RAW_BATCH)]
    t0 = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=True)
    seconds = time.perf_counter() - t0
    assert int(done.stdout) == len(entries), done.stdout
    return seconds


@dataclass
class CliRun:
    """One ``python -m redisq_django.pipeline`` run."""

    wall: float  # the process, JVM start and stop included
    job: float  # what the job's summary line says
    line: str
    load_before: float
    load_after: float

    @property
    def loads(self) -> str:
        return f"{self.load_before:.1f}-{self.load_after:.1f}"


def cli(args: list[str]) -> CliRun:
    """Run ``python -m redisq_django.pipeline ARGS`` as a user would."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    before = load()
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "redisq_django.pipeline", *args],
        capture_output=True,
        text=True,
        timeout=3600,
        env=env,
        cwd=REPO,
    )
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
    line = done.stdout.strip().splitlines()[-1]
    seconds = re.search(r" in ([\d.]+) s", line)
    return CliRun(wall, float(seconds[1]) if seconds else float("nan"), line, before, load())


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
        "--reuse", action="store_true", help="with --keep: use the archive already in DIR"
    )
    ap.add_argument("--skip", action="append", default=[], choices=["report", "replay", "compact"])
    args = ap.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    import pyspark

    from redisq_django.pipeline.compact import compact
    from redisq_django.pipeline.job_options import CompactOptions, ReplayOptions
    from redisq_django.pipeline.replay import replay
    from redisq_django.pipeline.session import build_session

    n_messages = round(args.events / expected_events_per_message())
    start = archive_start(args.days)
    first_day = start.date()
    end = start + dt.timedelta(days=args.days)
    replay_queue = REPLAY_QUEUE
    replay_n = min(args.replay, n_messages // 3)
    until = replay_until(start, args.days, n_messages, replay_n)
    figures: dict[str, Any] = {}

    with tempfile.TemporaryDirectory(prefix="redisq-bench-history-") as tmpdir:
        tmp = Path(tmpdir)
        root = Path(args.keep) if args.keep else tmp / "archive"
        if args.reuse and (root / "messages").exists():
            log(f"reusing the archive in {root}")
            gen_s, size_mb, rows = float("nan"), float("nan"), {"events": 0, "messages": 0}
        else:
            log(f"starting Spark ({args.master}) to generate ...")
            spark = build_session(args.master)
            spark.sparkContext.setLogLevel("ERROR")
            log(f"generating {n_messages:,} messages and ~{args.events:,} events ...")
            t0 = time.perf_counter()
            rows = generate(spark, root, n_messages, start, args.days, args.slices)
            gen_s = time.perf_counter() - t0
            spark.stop()  # the command-line runs below start JVMs of their own
            size_mb = sum(f.stat().st_size for f in root.rglob("*.parquet")) / 1e6
            log(f"  {rows} in {gen_s:.1f} s, {size_mb:,.0f} MB")

        common = ["--root", str(root), "--master", args.master]
        if "report" not in args.skip:
            span = ["--since", start.isoformat(), "--until", end.isoformat()]
            for label, extra in (
                ("report", []),
                ("report200", ["--conf", "spark.sql.shuffle.partitions=200"]),
            ):
                log(f"{label}: python -m redisq_django.pipeline report {' '.join(extra)} ...")
                out = ["--out", str(tmp / label)]
                figures[label] = cli(["report", *common, *span, *out, *extra])
                log(f"  {figures[label].line} (wall {figures[label].wall:.1f} s)")

        server = RedisServer(redis_binary(), tmp / "redis").start()
        try:
            url = server.url
            client = redis.Redis.from_url(url)
            key = Broker(client).keys(replay_queue).log
            if "replay" not in args.skip:
                span = ["--since", start.isoformat(), "--until", until.isoformat()]
                target = ["--redis-url", url, "--queue", replay_queue]
                log(f"replay (cold): python -m redisq_django.pipeline replay, {replay_n:,} ...")
                figures["replay_cold"] = cli(["replay", *common, *target, *span])
                log(f"  {figures['replay_cold'].line} (wall {figures['replay_cold'].wall:.1f} s)")
                entries = stream_fields(client, key)
                figures["replayed"] = len(entries)
                client.flushall()
                log("raw pipelined XADD of the same bytes (warm, then a fresh process) ...")
                figures["raw_load"] = load()
                figures["raw_warm"] = raw_xadd(client, key, entries)
                client.flushall()
                figures["raw_cold"] = raw_xadd_cold(url, key, entries, tmp)
                client.flushall()

            spark = build_session(args.master)
            spark.sparkContext.setLogLevel("ERROR")
            if "replay" not in args.skip:
                options = ReplayOptions(
                    redis_url=url, root=str(root), queue=replay_queue, since=start, until=until
                )
                log("replay in this process, twice (the second is warm) ...")
                replay(spark, options, progress=lambda line: None)
                client.flushall()
                figures["replay_warm_load"] = load()
                figures["replay_warm"] = replay(spark, options, progress=lambda line: None)
                log(f"  {figures['replay_warm'].line()}")
                client.flushall()
        finally:
            server.stop()

        if "compact" not in args.skip:
            compact_until = first_day + dt.timedelta(days=args.compact_days - 1)
            cut = compact_until + dt.timedelta(days=1)
            before = {t: file_count(spark, root / t, cut) for t in ("messages", "events")}
            log(f"compact {first_day}..{compact_until} ...")
            figures["compact_load"] = load()
            csum = compact(
                spark, CompactOptions(root=str(root), since=first_day, until=compact_until)
            )
            log(f"  {csum.line()}")
            after = {t: file_count(spark, root / t, cut) for t in ("messages", "events")}
            check = spark.read.parquet((root / "events").as_uri()).count()
        spark.stop()

    print()
    print(
        f"history benchmark: {rows['events']:,} events, {rows['messages']:,} messages, "
        f"{args.days} days, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"PySpark {pyspark.__version__}, {java_version()}, master {args.master}"
    )
    print(f"{'measurement':<60} {'figure':>18} {'load':>9}")

    def row(label: str, figure: str, loads: str = "") -> None:
        print(f"{label:<60} {figure:>18} {loads:>9}")

    row("generate archive (in one session)", f"{gen_s:.1f} s")
    row("  Parquet written", f"{size_mb:,.0f} MB")
    for label, what in (("report", "job's defaults"), ("report200", "200 shuffle partitions")):
        if label in figures:
            run = figures[label]
            row(f"report CLI, whole range, {what}: wall", f"{run.wall:.1f} s", run.loads)
            row("  the job's own time (after the JVM started)", f"{run.job:.1f} s")
    if "replay_cold" in figures:
        n = figures["replayed"]
        cold, warm = figures["replay_cold"], figures["replay_warm"]
        raw_warm, raw_cold = n / figures["raw_warm"], n / figures["raw_cold"]
        row(f"replay CLI, {n:,} msgs, cold: wall", f"{n / cold.wall:,.0f} msg/s", cold.loads)
        row("  wall seconds / the job's own", f"{cold.wall:.1f} / {cold.job:.1f} s")
        row(
            "replay in-process, warm (wall, incl. selection)",
            f"{warm.rate:,.0f} msg/s",
            f"{figures['replay_warm_load']:.1f}",
        )
        row(
            "raw pipelined XADD of the same bytes, warm",
            f"{raw_warm:,.0f} msg/s",
            f"{figures['raw_load']:.1f}",
        )
        row("raw, fresh python process (wall)", f"{raw_cold:,.0f} msg/s")
        row("  replay / raw, warm", f"{warm.rate / raw_warm:.2f}x")
        row("  replay / raw, cold (CLI wall vs fresh process)", f"{n / cold.wall / raw_cold:.2f}x")
        row("  replay / raw, cold (CLI wall vs warm raw)", f"{n / cold.wall / raw_warm:.2f}x")
    if "compact" not in args.skip:
        for t in ("messages", "events"):
            row(f"compact {args.compact_days} days: {t} files", f"{before[t]:,} -> {after[t]:,}")
        row("compact time (both tables)", f"{csum.seconds:.1f} s", f"{figures['compact_load']:.1f}")
        row("  events read back after compaction", f"{check:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
