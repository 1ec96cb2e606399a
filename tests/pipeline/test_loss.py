"""Data loss found while a streaming read reads (what runs on an executor, called here
directly against a real Redis): entries removed between planning a range and reading it
fail the read, or with ``failOnDataLoss`` false are recorded for a named archive."""

from __future__ import annotations

import dataclasses

import pytest
import redis

from redisq_django.core import Broker, CoreConfig
from redisq_django.pipeline import redis_io
from redisq_django.pipeline.loss import DataLossError, Loss
from redisq_django.pipeline.reading import RangeSlice, plan_ranges, read_slice
from redisq_django.pipeline.source_options import SourceOptions

pytestmark = pytest.mark.spark  # imports PySpark; needs no session


def ids_read(options: SourceOptions, piece: RangeSlice) -> list[str]:
    return [mid for batch in read_slice(options, piece) for mid in batch["message_id"].to_pylist()]


@pytest.fixture
def setup(
    redis_client: redis.Redis, redis_url: str, queue_name: str
) -> tuple[Broker, SourceOptions, RangeSlice, list[str]]:
    """Ten messages a slow consumer has not read, an archive "a" at the start, and the
    one range a micro-batch planned over them (pages of 3)."""
    broker = Broker(redis_client, CoreConfig(max_len=6, replay_window_ms=0))
    broker.consumers.ensure(queue_name, "billing", "earliest")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(10)])
    broker.archives.register(queue_name, "a", "messages")
    raw = {"url": redis_url, "queue": queue_name, "archive": "a", "pageSize": "3"}
    options = dataclasses.replace(SourceOptions.parse(raw), slices_per_stream=1)
    conn = redis_io.client(options)
    try:
        stream = redis_io.StreamRef(queue_name, broker.keys(queue_name).log)
        [piece] = plan_ranges(options, conn, stream, "(0-0", ids[-1], checked=True)
    finally:
        conn.close()
    assert piece.expect == ids[0]
    return broker, options, piece, ids


def test_entries_removed_after_planning_fail_the_read_naming_them(
    setup: tuple[Broker, SourceOptions, RangeSlice, list[str]], queue_name: str
) -> None:
    broker, options, piece, ids = setup
    # When a hard cap (6) drops the first four before the range is read
    assert broker.trim(queue_name) == (0, 4)
    # Then the read fails, naming the first missing entry and the first one left
    with pytest.raises(DataLossError) as caught:
        ids_read(options, piece)
    assert str(caught.value).startswith(
        f"Data loss in the messages of queue {queue_name!r}: entries {ids[0]} up to (not "
        f"including) {ids[4]} were removed before archive 'a' read them"
    )


def test_entries_removed_between_two_pages_are_found_too(
    setup: tuple[Broker, SourceOptions, RangeSlice, list[str]],
    queue_name: str,
    redis_client: redis.Redis,
) -> None:
    broker, options, piece, ids = setup
    lenient = dataclasses.replace(options, fail_on_data_loss=False)
    # Given the read has yielded its first page (3 entries)
    pages = read_slice(lenient, piece)
    assert next(pages)["message_id"].to_pylist() == ids[:3]
    # When the next three are removed before the second page is read
    redis_client.xtrim(broker.keys(queue_name).log, minid=ids[6], approximate=False)
    # Then with failOnDataLoss false the read goes on with what is left
    rest = [mid for batch in pages for mid in batch["message_id"].to_pylist()]
    assert rest == ids[6:]
    # And the archive has the loss recorded for its job, exactly
    [text] = broker.archives.losses(queue_name, "a")
    found = Loss.from_json(text)
    assert found is not None
    assert (found.queue, found.table, found.archive, found.first, found.before) == (
        queue_name,
        "messages",
        "a",
        ids[3],
        ids[6],
    )
    assert found.found_ms > 0


def test_a_readonly_stream_records_nothing(
    setup: tuple[Broker, SourceOptions, RangeSlice, list[str]],
    queue_name: str,
    redis_client: redis.Redis,
) -> None:
    broker, options, piece, ids = setup
    readonly = dataclasses.replace(options, archive=None, fail_on_data_loss=False)
    broker.trim(queue_name)
    before = redis_client.hgetall(broker.keys(queue_name).archives)
    assert ids_read(readonly, piece) == ids[4:]
    assert redis_client.hgetall(broker.keys(queue_name).archives) == before
    assert redis_client.exists(broker.keys(queue_name).archive_gaps("a")) == 0
