"""History end to end: a consumer with history on, retention holding for the archive,
the archive job, and Spark reading the events back (the archive under ``spark-submit``:
tests/pipeline/test_readme_spark.py runs the README's command)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from pyspark.sql import SparkSession

from redisq_django.core import Broker, CoreConfig, Failure
from redisq_django.core.outcome import Outcome
from redisq_django.pipeline.archive import archive
from redisq_django.pipeline.options import ArchiveOptions
from tests.pipeline.archive_support import count_and_distinct, read_table

pytestmark = [pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_retention_waits_for_the_archive_job_then_trims_behind_it(
    queue_name: str, spark: SparkSession, redis_client: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    # Given history on, no replay window, and a consumer that handled 200 messages, one
    # of them after a failure
    broker = Broker(redis_client, CoreConfig(history=True, replay_window_ms=0))
    broker.consumers.ensure(queue_name, "billing")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(200)])
    sub = broker.subscribe(queue_name, "billing", "w1", backoff_s=0.001, max_backoff_s=0.001)
    batch = sub.fetch(count=500, block_ms=500)
    assert sub.fail(batch[0], Failure("KeyError", "customer")).outcome is Outcome.RETRIED
    sub.ack(batch[1:])
    (again,) = sub.fetch(count=10, block_ms=1000)
    sub.ack([again])

    # When retention runs before the archive: nothing goes
    assert broker.trim(queue_name) == (0, 0)
    assert redis_client.xlen(broker.keys(queue_name).log) == 200

    # When the archive job stores everything
    summary = archive(
        spark, ArchiveOptions(redis_url=redis_url, root=str(tmp_path), queues=(queue_name,))
    )
    assert (summary.messages.rows, summary.events.rows) == (200, 201)

    # Then retention trims the log and the events behind it
    removed, dropped = broker.trim(queue_name)
    assert (removed, dropped) == (200, 0)
    assert redis_client.xlen(broker.keys(queue_name).events) == 0
    # And Spark reads the whole story back: 200 handled, one retried before
    messages = read_table(spark, tmp_path, "messages")
    assert count_and_distinct(messages, "message_id") == (200, 200)
    events = read_table(spark, tmp_path, "events")
    kinds = {r["event"]: r["count"] for r in events.groupBy("event").count().collect()}
    assert kinds == {"handled": 200, "retried": 1}
    retried = events.where("event = 'retried'").first()
    assert (retried["message_id"], retried["attempt"], retried["error_class"]) == (
        ids[0],
        1,
        "KeyError",
    )
    second = events.where(f"event = 'handled' AND message_id = '{ids[0]}'").first()
    assert second["attempt"] == 2
