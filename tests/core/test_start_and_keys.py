"""Start points (``core/start.py``) and the key schema (``core/keys.py``)."""

from __future__ import annotations

import datetime as dt

import pytest
import redis
from redis.crc import key_slot

from redisq_django.core import Broker
from redisq_django.core.errors import InvalidName
from redisq_django.core.keys import queue_keys, registry_key, validate_name
from redisq_django.core.start import StartPoint

MAX_SEQ = 2**64 - 1

# -- StartPoint.parse ------------------------------------------------------------------


@pytest.mark.parametrize("text", ["latest", "$"])
def test_parse_latest(text: str) -> None:
    point = StartPoint.parse(text)
    assert point == StartPoint("latest")
    assert point.to_last_delivered_id() == "$"


@pytest.mark.parametrize("text", ["earliest", "0", "0-0"])
def test_parse_earliest(text: str) -> None:
    point = StartPoint.parse(text)
    assert point == StartPoint("earliest")
    assert point.to_last_delivered_id() == "0-0"


def test_parse_aware_datetime_keeps_milliseconds() -> None:
    when = dt.datetime(2024, 1, 2, 3, 4, 5, 678_000, tzinfo=dt.UTC)
    point = StartPoint.parse(when)
    assert point == StartPoint("time", "1704164645678")
    assert point.to_last_delivered_id() == f"1704164645677-{MAX_SEQ}"


def test_parse_datetime_in_other_zone_is_the_same_instant() -> None:
    plus_two = dt.timezone(dt.timedelta(hours=2))
    when = dt.datetime(2024, 1, 2, 5, 4, 5, 678_000, tzinfo=plus_two)
    assert StartPoint.parse(when) == StartPoint("time", "1704164645678")


@pytest.mark.parametrize("text", ["1700000000000-0", "1700000000000-17", "1700000000000"])
def test_parse_ids(text: str) -> None:
    assert StartPoint.parse(text) == StartPoint("id", text)


def test_parse_returns_a_start_point_unchanged() -> None:
    point = StartPoint("id", "5-3")
    assert StartPoint.parse(point) is point


def test_naive_datetime_is_rejected_with_a_hint() -> None:
    with pytest.raises(ValueError, match="no time zone; pass an aware datetime"):
        StartPoint.parse(dt.datetime(2024, 1, 1, 12, 0))


@pytest.mark.parametrize(
    "garbage",
    ["", "newest", "12-", "-5", "1-2-3", "abc-1", " 1-0", "1.5", "1-0 ", "1-0\n", "\u0661-0"],
)
def test_garbage_is_rejected_listing_what_is_accepted(garbage: str) -> None:
    with pytest.raises(ValueError) as info:
        StartPoint.parse(garbage)
    message = str(info.value)
    assert repr(garbage) in message
    assert "'latest', 'earliest', an aware datetime" in message
    assert "'1700000000000-0'" in message


@pytest.mark.parametrize("value", [None, 12, 1.5, dt.date(2024, 1, 1)])
def test_non_string_values_are_rejected(value: object) -> None:
    with pytest.raises(ValueError, match="Invalid start point"):
        StartPoint.parse(value)  # type: ignore[arg-type]


# -- to_last_delivered_id: the id just before (inclusive start) -------------------------


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        ("5-3", "5-2"),
        ("5-1", "5-0"),
        ("5-0", f"4-{MAX_SEQ}"),
        ("5", f"4-{MAX_SEQ}"),  # an id without seq means seq 0
        ("0-1", "0-0"),
        ("1-0", f"0-{MAX_SEQ}"),
        (f"7-{MAX_SEQ}", f"7-{MAX_SEQ - 1}"),
    ],
)
def test_id_start_points_to_the_id_just_before(start: str, expected: str) -> None:
    assert StartPoint.parse(start).to_last_delivered_id() == expected


def test_time_start_at_the_epoch_is_the_beginning() -> None:
    point = StartPoint.parse(dt.datetime(1970, 1, 1, tzinfo=dt.UTC))
    assert point == StartPoint("time", "0")
    assert point.to_last_delivered_id() == "0-0"


def test_time_one_ms_after_the_epoch() -> None:
    point = StartPoint.parse(dt.datetime(1970, 1, 1, 0, 0, 0, 1000, tzinfo=dt.UTC))
    assert point.to_last_delivered_id() == f"0-{MAX_SEQ}"


@pytest.mark.parametrize(
    ("start", "expected_ids"),
    [
        ("5-1", [b"5-1", b"6-0"]),
        ("5-0", [b"5-0", b"5-1", b"6-0"]),
        ("6", [b"6-0"]),
        ("5-2", [b"6-0"]),
        (dt.datetime(1970, 1, 1, 0, 0, 0, 5000, tzinfo=dt.UTC), [b"5-0", b"5-1", b"6-0"]),
        (dt.datetime(1970, 1, 1, 0, 0, 0, 6000, tzinfo=dt.UTC), [b"6-0"]),
    ],
)
def test_start_points_are_inclusive_in_redis(
    redis_client: redis.Redis,
    queue_name: str,
    start: str | dt.datetime,
    expected_ids: list[bytes],
) -> None:
    # Given a log holding 5-0, 5-1 and 6-0
    log = queue_keys("redisq", queue_name).log
    for entry_id in ("5-0", "5-1", "6-0"):
        redis_client.xadd(log, {"payload": "1"}, id=entry_id)
    # When a group starts at the point
    redis_client.xgroup_create(log, "g", id=StartPoint.parse(start).to_last_delivered_id())
    reply = redis_client.xreadgroup("g", "c", {log: ">"}, count=10)
    # Then it receives every entry at or after the point, in order
    assert [entry_id for entry_id, _ in reply[0][1]] == expected_ids


# -- keys ------------------------------------------------------------------------------


def test_every_key_of_a_queue_shares_its_hash_tag() -> None:
    qk = queue_keys("redisq", "orders")
    gk = qk.group("billing")
    keys = [qk.log, qk.delayed, qk.meta, gk.direct, gk.retry, gk.dead, gk.instances]
    assert keys == [
        "redisq:{orders}:log",
        "redisq:{orders}:delayed",
        "redisq:{orders}:meta",
        "redisq:{orders}:g:billing:direct",
        "redisq:{orders}:g:billing:retry",
        "redisq:{orders}:g:billing:dead",
        "redisq:{orders}:g:billing:instances",
    ]
    for key in keys:
        assert key.count("{") == 1
        assert key.count("}") == 1
    # so one script may touch them all in Redis Cluster
    assert {key_slot(key.encode()) for key in keys} == {key_slot(b"orders")}


def test_queues_with_different_names_get_different_tags() -> None:
    assert queue_keys("redisq", "a").log != queue_keys("redisq", "b").log
    assert queue_keys("app2", "a").log == "app2:{a}:log"


def test_registry_key_is_outside_any_hash_tag() -> None:
    assert registry_key("redisq") == "redisq:queues"


@pytest.mark.parametrize("name", ["a", "orders", "Orders_2.v-1", "x" * 100, "0"])
def test_valid_names(name: str) -> None:
    assert queue_keys("redisq", name).queue == name
    assert queue_keys("redisq", "q").group(name).group == name


INVALID_NAMES = ["a{b", "a}b", "a:b", "a b", "", "x" * 101, "é", "a\n", "a/b", "a*"]


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_invalid_queue_names_raise(name: str) -> None:
    with pytest.raises(InvalidName) as info:
        queue_keys("redisq", name)
    assert f"Invalid queue name {name!r}" in str(info.value)
    assert "1-100 letters, digits, '_', '.' or '-'" in str(info.value)


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_invalid_consumer_names_raise(name: str) -> None:
    with pytest.raises(InvalidName, match="Invalid consumer name"):
        queue_keys("redisq", "q").group(name)


def test_invalid_name_is_a_value_error_and_non_strings_are_rejected() -> None:
    with pytest.raises(ValueError):
        validate_name("queue", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidName):
        validate_name("queue", 5)  # type: ignore[arg-type]


def test_stats_count_a_key_of_the_wrong_type_as_empty(
    redis_client: redis.Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a queue with a consumer, and some of its keys taken by strings
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    broker.publish_many(queue_name, [{"n": i} for i in range(3)])
    keys = broker.keys(queue_name)
    for key in (keys.delayed, keys.group("billing").retry, keys.group("billing").dead):
        redis_client.set(key, "not a queue's")
    # When the stats are read, then the rest is reported and the odd keys count as empty
    stats = broker.stats(queue_name)
    assert (stats.length, stats.delayed) == (3, 0)
    (billing,) = stats.consumers
    assert (billing.lag, billing.waiting_retry, billing.dead) == (3, 0, 0)
    assert "WRONGTYPE" in caplog.text
