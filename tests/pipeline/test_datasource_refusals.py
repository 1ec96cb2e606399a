"""What the ``redisq`` data source refuses, and how it says so, on a real local Spark and
a real redis-server: a schema of the user's other than the table's own, a
``startingOffsets`` naming a queue the read does not read, and a row whose ``payload``
is no JSON text (with what was published before it)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from redisq_django.core import Broker
from redisq_django.pipeline import schemas
from tests.pipeline.archive_support import SLOW_WORKER

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(300)]


def stream_failure(frame: Any, checkpoint: Path) -> str:
    """Run a streaming query of ``frame`` to memory (availableNow); what stopped it
    ("" when it ran to its end), whether ``start()`` or the query's thread refused it.
    A query whose Python worker was too slow to start runs again from its checkpoint
    (twice at most), as the archive job's restarts do."""
    for _ in range(3):
        failure = _run_to_end(frame, checkpoint)
        if SLOW_WORKER not in failure:
            return failure
    return failure


def _run_to_end(frame: Any, checkpoint: Path) -> str:
    try:
        query = (
            frame.writeStream.format("memory")
            .queryName(f"refusals_{checkpoint.name}".replace("-", "_"))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
    except Exception as exc:  # refused when the query started
        return str(exc)
    with contextlib.suppress(StreamingQueryException):
        query.awaitTermination(120)
    query.stop()
    failure = query.exception()
    return "" if failure is None else str(failure)


# -- a schema of the user's --------------------------------------------------------------


def test_a_schema_of_the_users_is_refused_naming_the_tables_columns(
    spark: Any, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given a queue with three messages
    broker.publish_many(queue_name, [{"n": i} for i in range(3)])
    options = {"url": redis_url, "queue": queue_name}
    columns = "queue string, message_id string, entry_id string, published_at timestamp"

    # When a batch read is given a schema of its own, then its first action is refused
    # before any task runs, saying the schema is fixed and which columns it has
    batch = spark.read.format("redisq").options(**options).schema("payload STRING").load()
    with pytest.raises(Exception, match="fixed schema") as refused:
        batch.count()
    assert columns in str(refused.value)
    assert "Remove .schema(...) before load()" in str(refused.value)

    # And so is a streaming read, when its query starts
    stream = spark.readStream.format("redisq").options(**options).schema("n INT").load()
    failure = stream_failure(stream, tmp_path / "stream")
    assert "fixed schema" in failure and columns in failure

    # But the table's own schema, given explicitly, reads as without it
    same = spark.read.format("redisq").options(**options).schema(schemas.MESSAGES).load()
    assert same.count() == 3
    ddl = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in schemas.MESSAGES.fields)
    assert ddl.startswith(columns)
    as_ddl = spark.read.format("redisq").options(**options).schema(ddl).load()
    assert as_ddl.select("payload").count() == 3


# -- startingOffsets naming a queue not read -------------------------------------------


def test_starting_offsets_naming_a_queue_not_read_is_refused(
    spark: Any, broker: Broker, redis_url: str, tmp_path: Path, queue_name: str
) -> None:
    # Given a queue with messages, and a streaming read of it whose startingOffsets
    # also names a queue it does not read (a typo)
    ids = broker.publish_many(queue_name, [{"n": i} for i in range(3)])
    typo = f"{queue_name}-typo"
    start = json.dumps({queue_name: ids[0], typo: ids[0]})

    # When it is loaded with option queue, then load() refuses it, naming both
    with pytest.raises(Exception, match="OptionError") as refused:
        spark.readStream.format("redisq").options(
            url=redis_url, queue=queue_name, startingOffsets=start
        ).load()
    said = str(refused.value)
    assert f"names {typo!r}, which this read does not read" in said
    assert f"it reads queue(s) {queue_name} (option 'queue')" in said

    # And without option queue (every queue of the registry), the query's start does
    stream = spark.readStream.format("redisq").options(url=redis_url, startingOffsets=start)
    failure = stream_failure(stream.load(), tmp_path / "every-queue")
    assert f"names {typo!r}, which this read does not read" in failure
    assert queue_name in failure.split("it reads", 1)[1]

    # And a startingOffsets naming only the queue read starts after the id given
    good = json.dumps({queue_name: ids[0]})
    frame = spark.readStream.format("redisq").options(
        url=redis_url, queue=queue_name, startingOffsets=good
    )
    assert stream_failure(frame.load().select("message_id"), tmp_path / "good") == ""
    got = spark.sql("SELECT message_id FROM refusals_good").collect()
    assert sorted(r.message_id for r in got) == sorted(ids[1:])


# -- a payload that is no JSON ---------------------------------------------------------


def test_a_row_whose_payload_is_no_json_is_named_and_the_rows_before_it_are_published(
    spark: Any, broker: Broker, redis_url: str, queue_name: str
) -> None:
    # Given four rows in one task, the third one's payload not JSON text
    rows = [
        ("m1", '{"n": 1}'),
        ("m2", '{"n": 2}'),
        ("m3", "hello, not json"),
        ("m4", '{"n": 4}'),
    ]
    frame = spark.createDataFrame(rows, "message_id string, payload string").coalesce(1)

    # When it is written to a queue
    with pytest.raises(Exception) as failed:
        frame.write.format("redisq").options(url=redis_url, queue=queue_name).mode("append").save()

    # Then the error names the row, the column and what to do...
    said = str(failed.value)
    assert (
        "UnpublishableRow: Cannot publish row 3 of this task, message_id 'm3': column "
        "'payload' is not JSON" in said
    ), said[-2000:]
    assert "'hello, not json'" in said
    assert "to_json(struct(...))" in said
    assert "JSONDecodeError" not in said
    # ...and says what was published: the rows before it, not it nor the ones after
    assert "The 2 rows before it in this task were published; it and the rows after it" in said
    log = broker.client.xrange(broker.keys(queue_name).log)
    published = [json.loads(fields[b"payload"]) for _, fields in log]
    assert published == [{"n": 1}, {"n": 2}]

    # And a plain string sent as the error says arrives as a JSON string
    text = spark.createDataFrame([("hello",)], "text string")
    fixed = text.select(F.to_json(F.col("text").cast("variant")).alias("payload"))
    fixed.write.format("redisq").options(url=redis_url, queue=queue_name).mode("append").save()
    last = broker.client.xrevrange(broker.keys(queue_name).log, count=1)
    assert json.loads(last[0][1][b"payload"]) == "hello"
