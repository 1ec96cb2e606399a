"""A partitioned queue (K=4) through the ``redisq`` data source, the archive and replay.

It reads as one queue (column ``queue``, the base name) with at least one Spark partition
per queue partition; streaming offsets and archive positions are per partition
(``"q#i"``), so retention trims each partition's log exactly behind what the archive
stored of it; replay publishes through the broker's routing, so each key's messages land
in their key's partition in their order.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from redisq_django.core import Broker, CoreConfig, Place
from redisq_django.core.partitions import partition_of
from redisq_django.pipeline import owner
from redisq_django.pipeline.archive import archive, archive_frame
from redisq_django.pipeline.checkpoint import last_committed_offset
from redisq_django.pipeline.job_options import ReplayOptions
from redisq_django.pipeline.options import ArchiveOptions
from redisq_django.pipeline.replay import replay
from redisq_django.pipeline.schemas import MESSAGES
from tests.pipeline.archive_support import count_and_distinct, read_table

K = 4
KEYS = [f"customer-{i}" for i in range(8)]


pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    # The broker: the test's queue has K partitions (recorded on first use).
    pytest.mark.core_config(queue_partitions=K, replay_window_ms=0),
]


def publish_keyed(broker: Broker, queue: str, per_key: int, start: int = 0) -> list[str]:
    """``per_key`` messages for each of :data:`KEYS`, in rounds a few ms apart (so the
    source splits each partition's log by time); returns the message ids."""
    ids: list[str] = []
    for n in range(start, start + per_key):
        for key in KEYS:
            ids.append(broker.publish(queue, {"n": n, "key": key}, key=key))
        time.sleep(0.001)
    return ids


def ack_all(broker: Broker, queue: str, consumer: str = "billing") -> int:
    """Deliver and acknowledge everything waiting for ``consumer`` in every partition."""
    done = 0
    for part in range(K):
        with broker.subscribe(Place(queue, part), consumer) as sub:
            for _ in range(100):  # bounded: at most 100 fetches of 500
                batch = sub.fetch(count=500, block_ms=20)
                if not batch:
                    break
                sub.ack(batch)
                done += len(batch)
    return done


def partition_entries(broker: Broker, queue: str, part: int) -> list[dict[str, str]]:
    """The fields of every entry of partition ``part``'s log, in log order, with its
    entry id under ``"entry"``."""
    log = broker.keys(queue).partition(part).log
    return [
        {"entry": eid.decode(), **{k.decode(): v.decode() for k, v in fields.items()}}
        for eid, fields in broker.client.xrange(log)
    ]


def test_a_partitioned_queue_reads_as_one_queue_with_a_spark_partition_per_partition(
    spark: SparkSession, broker: Broker, redis_url: str, queue_name: str
) -> None:
    # Given a queue of 4 partitions holding 8 keys' messages, and an unpartitioned one
    ids = publish_keyed(broker, queue_name, 25)
    plain = f"{queue_name}.plain"
    Broker(broker.client, CoreConfig()).publish_many(plain, [{"n": i} for i in range(30)])
    assert all(partition_entries(broker, queue_name, i) for i in range(K))  # all used

    # When both are read in one batch read
    df = (
        spark.read.format("redisq")
        .option("url", redis_url)
        .option("queue", f"{queue_name},{plain}")
        .option("partitions", "1")
        .load()
    )

    # Then each of its partitions is one Spark partition (and the plain queue one), and
    # its messages are one queue's: every id once, under the base name
    assert df.rdd.getNumPartitions() == K + 1
    mine = df.where(F.col("queue") == queue_name)
    assert count_and_distinct(mine, "message_id") == (len(ids), len(ids))
    assert {r["message_id"] for r in mine.select("message_id").collect()} == set(ids)
    assert df.where(F.col("queue") == plain).count() == 30
    assert {r["queue"] for r in df.select("queue").distinct().collect()} == {queue_name, plain}


def test_archive_commits_per_partition_so_retention_trims_each_exactly_behind_it(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given a queue of 4 partitions with 200 messages, and a consumer
    broker.consumers.ensure(queue_name, "billing", "earliest")
    first = publish_keyed(broker, queue_name, 25)
    options = ArchiveOptions(redis_url=redis_url, root=str(tmp_path), queues=(queue_name,))

    # When the archive runs once
    summary = archive(spark, options)

    # Then every message is archived once, under the base queue name
    assert summary.messages.rows == len(first)
    messages = read_table(spark, tmp_path, "messages")
    assert count_and_distinct(messages, "message_id") == (len(first), len(first))
    assert list((tmp_path / "messages" / f"queue={queue_name}").glob("date=*/*.parquet"))
    # and its offsets and positions are per partition: each partition's last entry
    # (the offset also carries the archive's owner token, which Redis holds)
    token, offset = owner.split(last_committed_offset(spark, options.checkpoint_path("messages")))
    assert token
    lasts = {
        f"{queue_name}#{i}": partition_entries(broker, queue_name, i)[-1]["entry"] for i in range(K)
    }
    assert offset == lasts
    for i in range(K):
        raw = broker.client.hget(broker.keys(queue_name).partition(i).archives, "default:messages")
        assert raw is not None and raw.decode() == lasts[f"{queue_name}#{i}"]

    # When more arrive, the consumer acknowledges everything and retention runs (no
    # replay window): only the archive holds it back
    second = publish_keyed(broker, queue_name, 5, start=25)
    assert ack_all(broker, queue_name) == len(first) + len(second)
    assert broker.trim(queue_name) == (len(first), 0)

    # Then each partition keeps exactly what the archive has not stored of it
    left = [e["id"] for i in range(K) for e in partition_entries(broker, queue_name, i)]
    assert sorted(left) == sorted(second)

    # And the next run archives just those, nothing twice
    assert archive(spark, options).messages.rows == len(second)
    messages = read_table(spark, tmp_path, "messages")
    total = len(first) + len(second)
    assert count_and_distinct(messages, "message_id") == (total, total)


def test_a_stream_starts_per_partition_from_the_offsets_given(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given a queue of 4 partitions, and a start offset after the 10th entry of partition 1
    publish_keyed(broker, queue_name, 10)
    one = partition_entries(broker, queue_name, 1)
    start = {f"{queue_name}#1": one[9]["entry"]}
    for i in (0, 2, 3):
        start[f"{queue_name}#{i}"] = "0-0"

    # When a read-only stream reads it all once
    query = (
        spark.readStream.format("redisq")
        .option("url", redis_url)
        .option("queue", queue_name)
        .option("startingOffsets", json.dumps(start))
        .load()
        .writeStream.format("memory")
        .queryName(f"parts_{abs(hash(queue_name))}")
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
        rows = spark.sql(f"SELECT message_id FROM parts_{abs(hash(queue_name))}").collect()
    finally:
        query.stop()

    # Then it read everything but those 10 entries of partition 1
    everything = {e["id"] for i in range(K) for e in partition_entries(broker, queue_name, i)}
    assert sorted(r[0] for r in rows) == sorted(everything - {e["id"] for e in one[:10]})


def test_replay_routes_each_key_to_its_partition_in_order(
    spark: SparkSession, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given an archive of 8 keys' messages (20 each, one second apart) and a consumer
    # registered on every partition of the 4
    day = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    rows: list[tuple[Any, ...]] = []
    for n in range(20):
        for k, key in enumerate(KEYS):
            at = day + dt.timedelta(seconds=n, milliseconds=k)
            ms = int(at.timestamp() * 1000)
            payload = json.dumps({"n": n, "key": key})
            rows.append((queue_name, f"m-{n}-{k}", f"{ms}-0", at, None, payload, None, 1, key))
    frame = archive_frame(spark.createDataFrame(rows, MESSAGES), "messages")
    frame.repartition(3).write.partitionBy("queue", "date").parquet(f"{tmp_path}/messages")
    broker.consumers.ensure(queue_name, "billing")

    # When they are replayed to the queue (several tasks)
    summary = replay(
        spark, ReplayOptions(redis_url=redis_url, root=str(tmp_path), queue=queue_name)
    )

    # Then each key's messages are all in its partition, in their original order
    assert summary.published == len(rows)
    seen: dict[str, list[int]] = {}
    for i in range(K):
        for entry in partition_entries(broker, queue_name, i):
            assert partition_of(entry["key"], K) == i, entry
            seen.setdefault(entry["key"], []).append(json.loads(entry["payload"])["n"])
    assert seen == {key: list(range(20)) for key in KEYS}
    # and nothing went to the base keys (a partitioned queue's log there is a fence)
    assert broker.client.type(broker.keys(queue_name).log) == b"string"


def test_the_events_and_dead_tables_of_a_partitioned_queue_read_as_one_queue(
    spark: SparkSession, redis_client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    # Given a partitioned queue with history on: every message handled once, and the
    # messages of two keys (two partitions, likely) dead letters
    broker = Broker(redis_client, CoreConfig(partitions={queue_name: K}, history=True))
    broker.consumers.ensure(queue_name, "billing", start="earliest")
    ids = publish_keyed(broker, queue_name, 5)
    doomed = {KEYS[0], KEYS[5]}
    dead = set()
    for part in range(K):
        with broker.subscribe(Place(queue_name, part), "billing", max_retries=0) as sub:
            for _ in range(20):
                batch = sub.fetch(count=100, block_ms=20)
                if not batch:
                    break
                for d in batch:
                    if d.key in doomed:
                        sub.reject(d, RuntimeError("no"))
                        dead.add(d.id)
                    else:
                        sub.ack([d])

    def table(name: str) -> Any:
        return (
            spark.read.format("redisq")
            .option("url", redis_url)
            .option("queue", queue_name)
            .option("table", name)
            .load()
        )

    # When the events and dead tables are read, then they hold every partition's rows,
    # under the queue's own name
    events = table("events")
    handled = {r["message_id"] for r in events.where(F.col("event") == "handled").collect()}
    died = {r["message_id"] for r in events.where(F.col("event") == "dead").collect()}
    assert (handled, died) == (set(ids) - dead, dead)
    assert {r["queue"] for r in events.select("queue").distinct().collect()} == {queue_name}
    letters = table("dead")
    assert {r["message_id"] for r in letters.collect()} == dead
    assert {r["queue"] for r in letters.select("queue").distinct().collect()} == {queue_name}
