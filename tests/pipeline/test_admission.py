"""Admission by rows (``maxRecordsPerTrigger``) next to admission by entries, and reads
split by size (``maxEntriesPerPartition``), on real Spark."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from redisq_django.core.keys import queue_keys
from redisq_django.pipeline import admission, redis_io
from redisq_django.pipeline.admission import Behind
from redisq_django.pipeline.cli import archive_options, build_parser
from redisq_django.pipeline.schemas import Table
from redisq_django.pipeline.source_options import SourceOptions

BASE_MS = 1_700_000_000_000


def add_acks(client: redis.Redis, queue: str, sizes: list[int]) -> list[str]:
    """One ``handled`` events entry per size, acknowledging that many messages (as a
    history-on worker acks a batch); returns the message ids."""
    key = queue_keys("redisq", queue).events
    ids: list[str] = []
    for n, size in enumerate(sizes):
        batch = [f"m{n}-{i}" for i in range(size)]
        ids += batch
        entry = {"e": "handled", "g": "billing", "c": "host:1:ab"}
        client.xadd(key, {**entry, "m": json.dumps([[mid, 1, 3] for mid in batch])})
    return ids


def test_admission_counts_rows_of_events_and_entries_alike(
    redis_client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    # Given events entries of 100, 100, 100 and 400 messages, and a message log
    add_acks(redis_client, queue_name, [100, 100, 100, 400])
    conn = redis_io.client(SourceOptions.parse({"url": redis_url}))
    events = Behind(queue_name, queue_keys("redisq", queue_name).events, "0-0", "+")

    def rows(entries: int | None, records: int | None, *, overshoot: bool = True) -> int:
        return admission.take(
            conn, Table.EVENTS, events, entries, records, 2, overshoot=overshoot
        ).rows

    try:
        # Then rows are counted per message, entries per entry
        assert rows(None, 250) == 200
        assert rows(2, None) == 200
        assert rows(3, 1000) == 300
        # An entry bigger than the limit is read whole when nothing else is admitted...
        later = Behind(events.name, events.key, _third(conn, events.key), "+")
        taken = admission.take(conn, Table.EVENTS, later, None, 50, 100, overshoot=True)
        assert (taken.entries, taken.rows) == (1, 400)
        # ...and not at all after something else
        after = admission.take(conn, Table.EVENTS, later, None, 50, 100, overshoot=False)
        assert (after.end, after.entries) == (None, 0)
    finally:
        conn.close()


def _third(conn: Any, key: str) -> str:
    return redis_io.text(conn.execute_command("XRANGE", key, "-", "+", "COUNT", 3)[-1][0])


def test_the_budget_is_shared_and_unused_shares_go_on(
    redis_client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    # Given three queues' events: 1 entry of 10 rows, and two with 5 entries of 10
    queues = [f"{queue_name}{n}" for n in range(3)]
    add_acks(redis_client, queues[0], [10])
    add_acks(redis_client, queues[1], [10] * 5)
    add_acks(redis_client, queues[2], [10] * 5)
    conn = redis_io.client(SourceOptions.parse({"url": redis_url}))
    streams = [Behind(q, queue_keys("redisq", q).events, "0-0", "+") for q in queues]
    try:
        # When 90 rows are shared (30 each; the first needs 10)
        ends = admission.admit(conn, Table.EVENTS, streams, None, 90, 1000)
        taken = {
            q: len(conn.execute_command("XRANGE", s.key, "-", ends[q]))
            for q, s in zip(queues, streams, strict=True)
        }
    finally:
        conn.close()
    # Then the first's unused 20 go to the others: 1 + 4 + 4 entries, 90 rows
    assert taken == {queues[0]: 1, queues[1]: 4, queues[2]: 4}


def test_the_archive_job_passes_its_record_limit_to_both_queries() -> None:
    args = build_parser().parse_args(
        ["archive", "--redis-url", "redis://h", "--root", "/r", "--max-records-per-trigger", "500"]
    )
    options = archive_options(args, redis_url=args.redis_url, prefix=args.prefix)
    for table in ("messages", "events"):
        assert options.source_options(table)["maxRecordsPerTrigger"] == "500"


@pytest.mark.spark
@pytest.mark.slow
def test_max_records_per_trigger_bounds_the_rows_of_each_events_micro_batch(
    spark: SparkSession, redis_client: redis.Redis, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    # Given 20 events entries of 100 acknowledged messages each (2,000 rows)
    ids = add_acks(redis_client, queue_name, [100] * 20)

    def run(option: str, value: int, name: str) -> list[int]:
        stream = (
            spark.readStream.format("redisq")
            .options(url=redis_url, queue=queue_name, table="events")
            .option(option, str(value))
            .load()
        )
        query = (
            stream.writeStream.format("memory")
            .queryName(name)
            .option("checkpointLocation", str(tmp_path / name))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        query.stop()
        got = [r.message_id for r in spark.sql(f"SELECT message_id FROM {name}").collect()]
        assert sorted(got) == sorted(ids)  # nothing missed, nothing twice
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    # When it is streamed with at most 250 rows per micro-batch
    tag = re.sub(r"\W", "_", queue_name)
    by_rows = run("maxRecordsPerTrigger", 250, f"rows_{tag}")
    # Then each micro-batch holds at most 250 rows (2 entries: a third would be 300)
    assert by_rows and max(by_rows) <= 250 and sum(by_rows) == 2000
    # While maxEntriesPerTrigger counts entries: 2 entries are 200 rows
    by_entries = run("maxEntriesPerTrigger", 2, f"entries_{tag}")
    assert max(by_entries) == 200 and sum(by_entries) == 2000


@pytest.mark.spark
@pytest.mark.slow
def test_a_skewed_stream_is_read_in_slices_of_bounded_size(
    spark: SparkSession, redis_client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    # Given a queue's log: 3,000 messages in one millisecond, then one a second for 40 s
    log = queue_keys("redisq", queue_name).log
    pipe = redis_client.pipeline(transaction=False)
    for i in range(3000):
        pipe.xadd(log, {"payload": json.dumps({"n": i})}, id=f"{BASE_MS}-{i}")
    for s in range(1, 41):
        pipe.xadd(log, {"payload": json.dumps({"s": s})}, id=f"{BASE_MS + 1000 * s}-0")
    pipe.execute()
    # When it is read with 4 time slices of at most 500 entries
    frame = (
        spark.read.format("redisq")
        .options(url=redis_url, queue=queue_name, slicesPerStream="4", maxEntriesPerSlice="500")
        .load()
    )
    sizes = [
        r["n"] for r in frame.groupBy(F.spark_partition_id()).agg(F.count("*").alias("n")).collect()
    ]
    # Then the burst is spread over slices of at most 500 rows, every row read once
    assert sum(sizes) == 3040
    assert frame.select("message_id").distinct().count() == 3040
    assert max(sizes) <= 500
