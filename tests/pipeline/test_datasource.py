"""The ``redisq`` data source against a real redis-server and a real local Spark.

Messages, events and dead letters are produced the way the library produces them
(publishes; a subscription with history on acking, failing and rejecting; odd entries
XADDed by hand in the spec's format), read back through ``spark.read`` /
``spark.readStream``, and written with ``df.write`` / ``writeStream``; every test checks
what ends up in Redis or in the DataFrame.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import time
from typing import Any

import pytest
import redis
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.clock import MAX_SEQ, ms_from_entry_id, ms_to_datetime
from redisq_django.pipeline import schemas
from redisq_django.pipeline.redis_io import split
from redisq_django.pipeline.source_options import StartingOffsets
from redisq_django.pipeline.streaming import starting_offset
from redisq_django.pipeline.writer import ORIGINAL_ID_HEADER
from tests.support.reading import read_all

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def compact(value: Any) -> str:
    """JSON text as the broker encodes payloads and headers."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def publish_spread(broker: Broker, queue: str, n: int, chunk: int = 100) -> list[str]:
    """Publish ``n`` messages in chunks a few ms apart, so their ids span many ms."""
    ids: list[str] = []
    for lo in range(0, n, chunk):
        payloads = [{"n": i, "text": "é"} for i in range(lo, min(n, lo + chunk))]
        ids += broker.publish_many(queue, payloads, headers={"chunk": lo})
        time.sleep(0.003)
    return ids


def reader(spark: Any, url: str, **options: str) -> Any:
    return spark.read.format("redisq").option("url", url).options(**options)


def utc(ms: int) -> dt.datetime:
    return ms_to_datetime(ms)


def run_now(stream_writer: Any, checkpoint: Any) -> Any:
    """Run a streaming query with trigger availableNow to its end."""
    stream_writer = stream_writer.option("checkpointLocation", str(checkpoint))
    query = stream_writer.trigger(availableNow=True).start()
    query.awaitTermination(90)
    query.stop()
    return query


def collected(when: dt.datetime) -> dt.datetime:
    """``when`` as ``collect()`` returns timestamps: naive, in the session zone (UTC)."""
    return when.astimezone(dt.UTC).replace(tzinfo=None)


# -- pure helpers (no Spark needed, but cheap) ---------------------------------------


def test_split_cuts_at_millisecond_boundaries() -> None:
    ranges = split("1000-5", "1009-2", 3)
    assert ranges[0][0] == "1000-5" and ranges[-1][1] == "1009-2"
    for (_, end), (start, _) in itertools.pairwise(ranges):
        end_ms, end_seq = end.split("-")
        assert end_seq == str(MAX_SEQ) and start == f"{int(end_ms) + 1}-0"
    assert split("7-0", "7-9", 4) == [("7-0", "7-9")]


def test_starting_offsets() -> None:
    names, last = ["a", "b"], {"a": "5-1", "b": "0-0"}
    none, gone = {}, {"a": "2-0", "b": "7-0"}  # what retention removed already

    def start(text: str, trimmed: dict[str, str]) -> dict[str, str]:
        return starting_offset(StartingOffsets.parse(text), names, last, trimmed)

    assert start("earliest", none) == {"a": "0-0", "b": "0-0"}
    assert start("earliest", gone) == gone  # what is still there, so what went is no loss
    assert start("latest", none) == last
    assert start("latest", gone) == {"a": "5-1", "b": "7-0"}
    assert start('{"a": "3-0"}', none) == {"a": "3-0", "b": "0-0"}
    assert start('{"a": "1-0"}', gone) == {"a": "1-0", "b": "7-0"}  # as asked: a loss
    at = start("1970-01-01T00:00:01Z", none)
    assert at == {"a": f"999-{MAX_SEQ}", "b": f"999-{MAX_SEQ}"}
    assert start("1970-01-01T00:00:00.005Z", gone) == {"a": f"4-{MAX_SEQ}", "b": "7-0"}


# -- batch reads ---------------------------------------------------------------------


def test_batch_read_of_messages_equals_what_was_published(
    queue_name: str, spark: Any, broker: Broker, redis_client: redis.Redis, redis_url: str
) -> None:
    n = 3000
    ids = publish_spread(broker, queue_name, n)
    # A promoted delayed message carries its own id and times; a retry carries attempts.
    extra = redis_client.xadd(
        broker.keys(queue_name).log,
        {
            "payload": "[1,2]",
            "id": "custom-1",
            "published_at": "1700000000000",
            "due_at": "1700000060000",
            "attempts": "2",
            "key": "order-42",
        },
    ).decode()

    df = reader(spark, redis_url, queue=queue_name, slicesPerStream="4").load()

    assert df.schema == schemas.MESSAGES
    assert df.rdd.getNumPartitions() > 1
    assert df.count() == n + 1
    assert df.select("message_id").distinct().count() == n + 1

    def published(i: int, mid: str) -> tuple[Any, ...]:
        # queue, message_id, entry_id, published_at, due_at, payload, headers, attempts, key
        payload, headers = compact({"n": i, "text": "é"}), compact({"chunk": i - i % 100})
        return (queue_name, mid, mid, utc(ms_from_entry_id(mid)), None, payload, headers, 0, None)

    expected = [published(i, mid) for i, mid in enumerate(ids)]
    late, due = utc(1700000000000), utc(1700000060000)
    expected.append((queue_name, "custom-1", extra, late, due, "[1,2]", None, 2, "order-42"))
    assertDataFrameEqual(df, spark.createDataFrame(expected, schemas.MESSAGES))


# Reads every queue in Redis: this test's must be the only ones.
@pytest.mark.usefixtures("empty_redis")
def test_batch_read_of_all_queues_and_empty_ones(
    spark: Any, broker: Broker, redis_url: str, queue_name: str
) -> None:
    a, b, empty = f"{queue_name}.a", f"{queue_name}.b", f"{queue_name}.empty"
    broker.publish_many(a, [1, 2])
    broker.publish_many(b, [3])
    broker.consumers.ensure(empty, "billing")  # registered, log created, no entries

    df = reader(spark, redis_url).load()

    rows = sorted((r.queue, r.payload) for r in df.collect())
    assert rows == [(a, "1"), (a, "2"), (b, "3")]
    nothing = f"{queue_name}.nothing-here"
    assert reader(spark, redis_url, queue=nothing).load().count() == 0


@pytest.mark.cluster
def test_batch_read_and_write_on_a_cluster(spark: Any, redis_cluster: Any) -> None:
    redis_cluster.flushall()  # reads every queue of the (shared) cluster: only this test's
    host, port = redis_cluster.startup_nodes[0]
    url = f"redis://{host}:{port}/0"
    client = redis_cluster.client()
    try:
        broker = Broker(client, CoreConfig())
        ids = {q: broker.publish_many(q, [{"q": q, "n": i} for i in range(50)]) for q in "abc"}
        df = reader(spark, url, cluster="true").load()
        assert sorted((r.queue, r.message_id) for r in df.collect()) == sorted(
            (q, mid) for q, mids in ids.items() for mid in mids
        )
        df.where(F.col("queue") == "a").select("payload").write.format("redisq").options(
            url=url, cluster="true", queue="copy"
        ).mode("append").save()
        assert client.xlen(broker.keys("copy").log) == 50
    finally:
        client.close()


# Reads every queue in Redis (and counts them all): this test's must be the only ones.
@pytest.mark.usefixtures("empty_redis")
def test_filters_on_a_loaded_dataframe_leave_it_whole(
    queue_name: str, spark: Any, broker: Broker, redis_url: str
) -> None:
    early = publish_spread(broker, queue_name, 300)
    time.sleep(0.05)
    cut = ms_from_entry_id(broker.publish(f"{queue_name}.other", {"marker": True})) + 1
    time.sleep(0.01)
    late = publish_spread(broker, queue_name, 200)
    df = reader(spark, redis_url).load()

    since = df.where((F.col("queue") == queue_name) & (F.col("published_at") >= utc(cut)))

    assert sorted(r.message_id for r in since.collect()) == sorted(late)
    # The unfiltered DataFrame still reads everything (Spark reuses a load()'s plan).
    assert df.count() == len(early) + len(late) + 1


def test_since_and_until_narrow_what_a_batch_read_reads(
    queue_name: str, spark: Any, broker: Broker, redis_url: str
) -> None:
    # Given three spells of messages a few milliseconds apart
    early = publish_spread(broker, queue_name, 200)
    time.sleep(0.02)
    middle = publish_spread(broker, queue_name, 300)
    time.sleep(0.02)
    late = publish_spread(broker, queue_name, 100)
    first_ms, last_ms = ms_from_entry_id(middle[0]), ms_from_entry_id(middle[-1])

    # When reading with since/until as ISO times, and as entry ids
    by_time = reader(
        spark,
        redis_url,
        queue=queue_name,
        since=utc(first_ms).isoformat(),
        until=utc(last_ms).replace(tzinfo=None).isoformat(),  # naive: UTC
    ).load()
    by_id = reader(spark, redis_url, queue=queue_name, since=middle[1], until=late[0]).load()
    none = reader(spark, redis_url, queue=queue_name, since=late[-1], until=early[0]).load()

    # Then each reads exactly the entries in its range, and its count agrees afterwards
    assert sorted(r.message_id for r in by_time.collect()) == sorted(middle)
    assert by_time.count() == len(middle)
    assert sorted(r.message_id for r in by_id.collect()) == sorted(middle[1:] + late[:1])
    assert none.count() == 0


def test_since_and_until_must_be_times_or_entry_ids(spark: Any, redis_url: str) -> None:
    with pytest.raises(Exception, match="Option 'since' must be an ISO 8601 time or an entry id"):
        reader(spark, redis_url, since="yesterday").load().count()


def test_events_are_one_row_per_message(
    queue_name: str, spark: Any, broker: Broker, redis_client: redis.Redis, redis_url: str
) -> None:
    def xadd(**fields: str) -> str:
        time.sleep(0.003)  # entries a few ms apart: several slices
        return redis_client.xadd(
            broker.keys(queue_name).events, {"g": "billing", **fields}
        ).decode()

    handled = xadd(e="handled", c="w-1", m='[["m1",1,12],["m2",1,null]]')
    error = {"error_class": "ValueError", "error_message": "bad"}
    retried = xadd(e="retried", c="w-1", m='[["m3",2,40]]', next_due="1700000001000", **error)
    dead = xadd(e="dead", c="w-2", m='[["m3",3,5]]', reason="failed", **error)
    reset = xadd(e="reset", c="", m="[]", start="1700000000000-0")

    df = reader(spark, redis_url, queue=queue_name, table="events", slicesPerStream="8").load()

    def row(entry: str, event: str, instance: str, mid: Any, att: Any, ms: Any, **more: Any) -> Row:
        values = dict.fromkeys(schemas.EVENTS.fieldNames())
        values.update(queue=queue_name, consumer="billing", time=utc(ms_from_entry_id(entry)))
        values.update(entry_id=entry, event=event, instance=instance, message_id=mid)
        values.update(attempt=att, duration_ms=ms, **more)
        return Row(**values)

    expected = [
        row(handled, "handled", "w-1", "m1", 1, 12),
        row(handled, "handled", "w-1", "m2", 1, None),
        row(retried, "retried", "w-1", "m3", 2, 40, next_due=utc(1700000001000), **error),
        row(dead, "dead", "w-2", "m3", 3, 5, reason="failed", **error),
        row(reset, "reset", "", None, None, None, start_id="1700000000000-0"),
    ]
    assert df.schema == schemas.EVENTS
    assert df.rdd.getNumPartitions() > 1
    assertDataFrameEqual(df, spark.createDataFrame(expected, schemas.EVENTS))


# Reads the events of every queue in Redis: this test's must be the only ones.
@pytest.mark.usefixtures("empty_redis")
def test_events_written_by_a_subscription_with_history_on(
    queue_name: str, spark: Any, redis_client: redis.Redis, redis_url: str
) -> None:
    broker = Broker(redis_client, CoreConfig(history=True))
    broker.consumers.ensure(queue_name, "billing", start="earliest")
    ids = broker.publish_many(queue_name, [1, 2, 3])
    with broker.subscribe(queue_name, "billing", instance="w-1") as sub:
        first, second, third = sub.fetch(count=3, block_ms=100)
        sub.ack([first, second])
        sub.fail(third, ValueError("later"))

    df = reader(spark, redis_url, table="events").load()

    rows = sorted(df.collect(), key=lambda r: (r.entry_id, r.message_id))
    assert [(r.event, r.message_id, r.attempt) for r in rows] == [
        ("handled", ids[0], 1),
        ("handled", ids[1], 1),
        ("retried", ids[2], 1),
    ]
    assert {(r.queue, r.consumer, r.instance) for r in rows} == {(queue_name, "billing", "w-1")}
    assert rows[2].error_class == "ValueError" and rows[2].next_due is not None


# Reads the dead letters of every queue in Redis: this test's must be the only ones.
@pytest.mark.usefixtures("empty_redis")
def test_dead_letters_of_a_rejected_message(
    queue_name: str, spark: Any, broker: Broker, redis_url: str
) -> None:
    broker.consumers.ensure(queue_name, "billing", start="earliest")
    broker.consumers.ensure(queue_name, "email", start="earliest")
    message_id = broker.publish(queue_name, {"order": 42}, headers={"trace": "t-1"}, key="o-42")
    with broker.subscribe(queue_name, "billing") as sub:
        fetched = sub.fetch(count=10, block_ms=100)
        sub.reject(fetched[0], ValueError("no such customer"))
    letter = broker.dead_letters.read(queue_name, "billing")[0]

    df = reader(spark, redis_url, table="dead").load()

    rows = df.collect()
    assert df.schema == schemas.DEAD
    assert len(rows) == 1
    got = rows[0].asDict()
    assert got["traceback"] and "no such customer" in got["traceback"]
    assert letter.last_failed_at is not None
    assert got["first_failed_at"] == got["last_failed_at"] == collected(letter.last_failed_at)
    del got["traceback"], got["first_failed_at"], got["last_failed_at"]
    assert got == {
        "queue": queue_name,
        "consumer": "billing",
        "entry_id": letter.entry_id,
        "message_id": message_id,
        "payload": compact({"order": 42}),
        "headers": compact({"trace": "t-1"}),
        "attempts": letter.attempts,
        "reason": "rejected",
        "error_class": "ValueError",
        "error_message": "no such customer",
        "published_at": collected(utc(ms_from_entry_id(message_id))),
        "key": "o-42",
    }


# -- streaming -----------------------------------------------------------------------


def test_streaming_reads_everything_once_and_commits_the_archive_position(
    queue_name: str, spark: Any, broker: Broker, redis_url: str, tmp_path: Any
) -> None:
    ids = publish_spread(broker, queue_name, 250, chunk=25)
    stream = (
        spark.readStream.format("redisq")
        .option("url", redis_url)
        .option("queue", queue_name)
        .option("maxEntriesPerTrigger", "40")
        .option("archive", "nightly")
        .load()
    )
    sink = stream.writeStream.format("memory").queryName("streamed_orders")
    query = run_now(sink, tmp_path / "checkpoint")
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]

    got = [r.message_id for r in spark.sql("SELECT message_id FROM streamed_orders").collect()]
    assert sorted(got) == sorted(ids)  # nothing missed, nothing repeated
    assert len(progress) >= 250 // 40
    assert all(p["numInputRows"] <= 40 for p in progress)
    assert broker.archives.positions(queue_name, "nightly") == {"messages": ids[-1]}


def test_streaming_starts_at_latest_and_picks_up_new_entries(
    queue_name: str, spark: Any, broker: Broker, redis_url: str, tmp_path: Any
) -> None:
    publish_spread(broker, queue_name, 30)
    options = {
        "url": redis_url,
        "queue": queue_name,
        "startingOffsets": "latest",
        "archive": "nightly",
    }
    output = str(tmp_path / "out")

    def run() -> list[str]:
        stream = spark.readStream.format("redisq").options(**options).load()
        run_now(stream.writeStream.format("parquet").option("path", output), tmp_path / "cp")
        files = spark.read.schema(schemas.MESSAGES).parquet(output)
        return [r.message_id for r in files.collect()]

    assert run() == []
    new = broker.publish_many(queue_name, [1, 2, 3])
    assert sorted(run()) == sorted(new)  # resumed from the checkpoint, nothing old
    assert broker.archives.positions(queue_name, "nightly") == {"messages": new[-1]}


# -- writing -------------------------------------------------------------------------


def test_write_publishes_every_row_to_every_consumer(
    queue_name: str, spark: Any, broker: Broker, redis_url: str
) -> None:
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    rows = [
        (compact({"n": i}), compact({"h": i}) if i % 2 else None, f"old-{i}") for i in range(120)
    ]
    df = spark.createDataFrame(rows, "payload STRING, headers STRING, message_id STRING")

    df.repartition(3).write.format("redisq").option("url", redis_url).option(
        "queue", queue_name
    ).mode("append").save()

    for group in ("billing", "email"):
        got = {m.headers[ORIGINAL_ID_HEADER]: m for m in read_all(broker, queue_name, group)}
        assert len(got) == 120
        for i in range(120):
            message = got[f"old-{i}"]
            assert message.payload == {"n": i}
            assert message.headers.get("h") == (i if i % 2 else None)


def test_write_to_one_consumer_and_publish_once(
    queue_name: str, spark: Any, broker: Broker, redis_url: str
) -> None:
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    df = spark.createDataFrame(
        [(compact({"n": i}), f"m-{i}") for i in range(10)], "payload STRING, message_id STRING"
    )
    writer = (
        df.write.format("redisq")
        .option("url", redis_url)
        .option("queue", queue_name)
        .mode("append")
    )

    writer.option("consumer", "billing").save()

    billing = read_all(broker, queue_name, "billing")
    assert sorted(m.payload["n"] for m in billing) == list(range(10))
    assert {m.headers[ORIGINAL_ID_HEADER] for m in billing} == {f"m-{i}" for i in range(10)}
    assert read_all(broker, queue_name, "email") == []

    once = df.write.format("redisq").option("url", redis_url).option("queue", queue_name)
    once.option("once", "true").mode("append").save()
    once.option("once", "true").mode("append").save()  # a repeated job publishes nothing
    email = read_all(broker, queue_name, "email")
    assert sorted(m.id for m in email) == sorted(f"m-{i}" for i in range(10))


def test_stream_from_one_queue_into_another(
    queue_name: str, spark: Any, broker: Broker, redis_url: str, tmp_path: Any
) -> None:
    copy = f"{queue_name}.copy"
    broker.consumers.ensure(copy, "audit")
    ids = publish_spread(broker, queue_name, 90, chunk=30)
    stream = (
        spark.readStream.format("redisq")
        .options(url=redis_url, queue=queue_name, maxEntriesPerTrigger="40")
        .load()
        .select("payload", "headers", "message_id")
    )
    run_now(stream.writeStream.format("redisq").options(url=redis_url, queue=copy), tmp_path)

    copied = [m.headers[ORIGINAL_ID_HEADER] for m in read_all(broker, copy, "audit")]
    assert sorted(copied) == sorted(ids)
    # A stream without option archive is read-only: no archive registered, none waited for
    assert broker.archives.states(queue_name) == []
