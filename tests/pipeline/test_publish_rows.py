"""The writer's ``publish_rows`` (what ``df.write.format("redisq")`` and ``replay`` run per
task) against a real redis-server, without a JVM: the order of the rows across batches,
"every row before a bad one, none from it on", and what a failure leaves behind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from pyspark.sql.types import StringType, StructField, StructType

from redisq_django.core import Broker
from redisq_django.pipeline.source_options import SourceOptions
from redisq_django.pipeline.writer import RowLayout, UnpublishableRow, publish_rows

COLUMNS = ("payload", "headers", "message_id", "key")
SCHEMA = StructType([StructField(c, StringType()) for c in COLUMNS])


def rows(n: int, bad_at: int | None = None) -> Iterator[tuple[Any, ...]]:
    for i in range(1, n + 1):
        payload = "{not json" if i == bad_at else json.dumps({"n": i})
        yield (payload, None, f"m-{i}", None)


def options(redis_url: str, queue: str, **more: str) -> SourceOptions:
    return SourceOptions.parse({"url": redis_url, "queue": queue, "batchSize": "100", **more})


def published(client: redis.Redis, queue: str) -> list[int]:
    log = Broker(client).keys(queue).log
    return [json.loads(f[b"payload"])["n"] for _, f in client.xrange(log)]


def test_every_row_is_published_once_in_the_order_of_the_rows(
    redis_client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    # Given 2,345 rows: 23 full batches of 100 and a last one of 45
    opts = options(redis_url, queue_name)

    # When they are published
    count = publish_rows(opts, RowLayout.of(SCHEMA, opts), rows(2345))

    # Then every one is in the log once, in the rows' order across the batches
    assert count == 2345
    assert published(redis_client, queue_name) == list(range(1, 2346))


@pytest.mark.parametrize("bad_at", [1, 100, 101, 1234])
def test_a_bad_row_stops_at_itself_after_every_row_before_it(
    redis_client: redis.Redis, redis_url: str, queue_name: str, bad_at: int
) -> None:
    # Given rows whose row `bad_at` holds no JSON (at a batch's start, end, or inside)
    opts = options(redis_url, queue_name)

    # When they are published, then the error names it and says how many went
    with pytest.raises(UnpublishableRow, match=f"row {bad_at} of this task.*{bad_at - 1} rows"):
        publish_rows(opts, RowLayout.of(SCHEMA, opts), rows(2000, bad_at=bad_at))

    # And exactly the rows before it are published, in order
    assert published(redis_client, queue_name) == list(range(1, bad_at))


def test_rows_that_stop_coming_leave_the_full_batches_sent(
    redis_client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    # Given rows whose source fails after 250 (a Spark task killed, a read that broke)
    def failing() -> Iterator[tuple[Any, ...]]:
        yield from rows(250)
        raise OSError("the rows stopped coming")

    opts = options(redis_url, queue_name)

    # When they are published, then that error comes out as it was raised
    with pytest.raises(OSError, match="stopped coming"):
        publish_rows(opts, RowLayout.of(SCHEMA, opts), failing())

    # And the full batches sent before it are whole in Redis, the 50 rows of the
    # unfinished batch are not
    assert published(redis_client, queue_name) == list(range(1, 201))


def test_a_refused_send_stops_the_rows_after_it(
    redis_client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    # Given a queue whose log is no stream (the send of every batch is refused)
    redis_client.set(Broker(redis_client).keys(queue_name).log, "not a stream")
    opts = options(redis_url, queue_name)
    taken = 0

    def counted() -> Iterator[tuple[Any, ...]]:
        nonlocal taken
        for row in rows(1000):
            taken += 1
            yield row

    # When rows are published, then the refusal comes out as Redis said it
    with pytest.raises(Exception, match="WRONGTYPE"):
        publish_rows(opts, RowLayout.of(SCHEMA, opts), counted())

    # And no row after the refused batch was taken
    assert taken == 100


@pytest.mark.parametrize(
    "payload",
    ["\ufeff{}", "NaN", '{"a": Infinity}', "1e999", "{} x", "", "{'a': 1}", "{", "ok"],
)
def test_a_payload_a_consumer_would_dead_letter_is_refused_as_the_consumer_reads_it(
    redis_client: redis.Redis, redis_url: str, queue_name: str, payload: str
) -> None:
    # Given a row whose payload every consumer would find undecodable (a byte order
    # mark, a number JSON has not, trailing text, no JSON at all), after a good row
    opts = options(redis_url, queue_name)
    bad = [(json.dumps({"n": 1}), None, "m-1", None), (payload, None, "m-2", None)]

    # When the rows are published, then that row is refused and the one before goes
    with pytest.raises(UnpublishableRow, match=r"row 2 of this task.*payload.*is not JSON"):
        publish_rows(opts, RowLayout.of(SCHEMA, opts), iter(bad))
    assert published(redis_client, queue_name) == [1]


@pytest.mark.parametrize("payload", [' {"n": 1} ', "[1]", '"text"', "12.5", "null", '{"é": "ü"}'])
def test_any_json_value_is_published_byte_for_byte(
    redis_client: redis.Redis, redis_url: str, queue_name: str, payload: str
) -> None:
    opts = options(redis_url, queue_name)
    publish_rows(opts, RowLayout.of(SCHEMA, opts), iter([(payload, None, "m-1", None)]))
    ((_, fields),) = redis_client.xrange(Broker(redis_client).keys(queue_name).log)
    assert fields[b"payload"] == payload.encode()


def test_the_original_id_reaches_the_headers_exactly_whatever_it_holds(
    redis_client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    # Given rows whose ids JSON carries as they are (an entry id, a hex id) and ids it
    # must escape (quotes, backslashes, control characters, non-ASCII), some with
    # headers of their own
    ids = ["1700000000000-17", "0" * 32, 'a"b', "a\\b", "tab\there", "\x7f", "é-ü", "\u2028"]
    given = [(json.dumps({"n": i}), None, m, None) for i, m in enumerate(ids)]
    given += [(json.dumps({"n": 99}), '{"trace": "t-1"}', 'q"1', None)]
    opts = options(redis_url, queue_name)

    # When they are published
    assert publish_rows(opts, RowLayout.of(SCHEMA, opts), iter(given)) == len(given)

    # Then each message's headers are JSON holding its id exactly, beside its own headers
    log = Broker(redis_client).keys(queue_name).log
    headers = [json.loads(f[b"headers"]) for _, f in redis_client.xrange(log)]
    assert headers[: len(ids)] == [{"redisq-original-id": m} for m in ids]
    assert headers[-1] == {"trace": "t-1", "redisq-original-id": 'q"1'}


@pytest.mark.parametrize("once", [True, False])
def test_a_connection_lost_while_a_batch_is_unconfirmed_loses_no_row_and_keeps_the_order(
    redis_client: redis.Redis, redis_url: str, queue_name: str, once: bool
) -> None:
    # Given rows whose source, while the writer builds a batch (the one before it
    # written and not confirmed yet), has Redis close the writer's connections: three
    # times, in different batches
    kills = {150, 777, 1201}

    def killing() -> Iterator[tuple[Any, ...]]:
        for row in rows(1500):
            if int(row[2].removeprefix("m-")) in kills:
                redis_client.client_kill_filter(_type="normal", skipme=True)
            yield row

    more = {"once": "true"} if once else {}
    opts = options(redis_url, queue_name, retryTimeout="30", **more)

    # When they are published
    count = publish_rows(opts, RowLayout.of(SCHEMA, opts), killing())

    # Then no row is lost and the order holds: the batch a fault left unknown was sent
    # again before the next one (with once, published once; without, its rows may come
    # twice, the second time right after the first)
    got = published(redis_client, queue_name)
    assert count == 1500
    if once:
        assert got == list(range(1, 1501))
    else:
        assert list(dict.fromkeys(got)) == list(range(1, 1501))
        assert len(got) - 1500 <= 3 * 100  # at most the unconfirmed batch per fault


def test_rows_for_several_queues_reach_each_queue_in_their_order(
    redis_client: redis.Redis, redis_url: str, queue_name: str
) -> None:
    # Given rows with a queue column that moves to a queue not seen yet every 250 rows
    # (a new queue's layout is read between batches), then back to the first
    queues = [f"{queue_name}-{q}" for q in "abc"]
    schema = StructType([*SCHEMA.fields, StructField("queue", StringType())])
    order = [0, 1, 2, 0]
    given = [
        (json.dumps({"n": n}), None, f"m-{n}", None, queues[order[n // 250]]) for n in range(1000)
    ]
    opts = SourceOptions.parse({"url": redis_url, "batchSize": "100"})

    # When they are published
    assert publish_rows(opts, RowLayout.of(schema, opts), iter(given)) == 1000

    # Then each queue holds its rows once, in their order
    for q, queue in enumerate(queues):
        expected = [n for n in range(1000) if order[n // 250] == q]
        assert published(redis_client, queue) == expected
