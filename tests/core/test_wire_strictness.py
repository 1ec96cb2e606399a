"""Entries other clients may write that our publish never would: each one becomes an
undecodable dead letter saying why, never a crash, a merged id or a changed value."""

from __future__ import annotations

import json

import pytest
import redis

from redisq_django.core import Broker, CoreConfig, NotRedrivable, PayloadTooLarge
from tests.core.guarantee_helpers import drain, ids

#: The largest integer of the wire (15 digits) in ms since the epoch: the year 33658,
#: beyond what a datetime can hold. Longer text is not an integer at all.
FAR_FUTURE_MS = "999999999999999"


pytestmark = pytest.mark.core_config(poll_interval_ms=20)


def consume_all(broker: Broker, queue: str, expected: int) -> list[str]:
    """Ids of the messages a fresh instance of "billing" receives (``expected`` of them)."""
    with broker.subscribe(queue, "billing", "i1") as sub:
        return ids(drain(sub, expected=expected, timeout_s=3))


def dead_reasons(broker: Broker, queue: str) -> dict[str, str]:
    """{dead letter id: error message} of "billing"'s undecodable dead letters."""
    return {
        d.id: d.error_message
        for d in broker.dead_letters.read(queue, "billing")
        if d.reason == "undecodable"
    }


@pytest.mark.parametrize("field", ["published_at", "first_failed_at", "due_at"])
def test_a_time_beyond_the_year_9999_is_undecodable(
    queue_name: str, broker: Broker, redis_client: redis.Redis, field: str
) -> None:
    # Given an entry whose time no datetime can hold, between two valid messages
    broker.consumers.ensure(queue_name, "billing")
    log = broker.keys(queue_name).log
    before = broker.publish(queue_name, 1)
    bad = redis_client.xadd(log, {"payload": "1", "id": "far", field: FAR_FUTURE_MS}).decode()
    after = broker.publish(queue_name, 2)
    # When the consumer fetches
    got = consume_all(broker, queue_name, expected=2)
    # Then the valid ones arrive and the bad one is a dead letter naming the field
    assert got == [before, after]
    assert dead_reasons(broker, queue_name) == {
        bad: f"field '{field}' is not a time before the year 10000"
    }


def test_an_id_over_64_characters_is_undecodable(
    queue_name: str, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given two entries whose 65-character ids share their first 64 characters
    broker.consumers.ensure(queue_name, "billing")
    log = broker.keys(queue_name).log
    fine = broker.publish(queue_name, 0)
    bad = [redis_client.xadd(log, {"payload": "1", "id": "p" * 64 + end}).decode() for end in "12"]
    # When the consumer fetches
    got = consume_all(broker, queue_name, expected=1)
    # Then each is a dead letter of its own, under its entry id, saying why
    assert got == [fine]
    assert dead_reasons(broker, queue_name) == dict.fromkeys(
        bad, "field 'id' is longer than 64 characters"
    )


def test_publishing_with_an_id_over_64_characters_is_refused(
    queue_name: str, broker: Broker
) -> None:
    with pytest.raises(ValueError, match="64 characters"):
        broker.prepare(queue_name, 1, id="p" * 65)
    assert broker.prepare(queue_name, 1, id="p" * 64).id == "p" * 64


@pytest.mark.parametrize(
    "member",
    [
        '{"payload":"1","headers":{"n":12345678901234567}}',
        '{"payload":"1","headers":{"tags":[]}}',
        '{"payload":"1","published_at":1700000000123}',
    ],
    ids=["big-int", "empty-array", "number"],
)
def test_a_delayed_member_with_a_value_that_is_not_a_string_is_undecodable_unchanged(
    queue_name: str, broker: Broker, redis_client: redis.Redis, member: str
) -> None:
    # Given a delayed member whose values are not all strings, and a valid delayed one
    broker.consumers.ensure(queue_name, "billing")
    redis_client.zadd(broker.keys(queue_name).delayed, {member: 1})
    good = broker.publish(queue_name, "fine", delay=0.05)
    # When consuming
    got = consume_all(broker, queue_name, expected=1)
    # Then the valid one arrives and the other is an undecodable dead letter that keeps
    # the member exactly as it was written (no number or array re-encoded)
    assert got == [good]
    [dead] = broker.dead_letters.read(queue_name, "billing")
    assert dead.reason == "undecodable"
    assert dead.error_message == "a delayed or retry member that is not a JSON object of strings"
    assert json.loads(dead.fields[b"raw"]) == {"raw": member}


@pytest.mark.parametrize(
    "fields",
    [
        {"payload": "NaN"},
        {"payload": '{"x":Infinity}'},
        {"payload": "[-Infinity]"},
        {"payload": "1e999"},
        {"payload": "1", "headers": '{"x":NaN}'},
    ],
    ids=["nan", "infinity", "minus-infinity", "overflow", "headers"],
)
def test_nan_or_infinity_written_by_another_client_is_undecodable(
    queue_name: str, broker: Broker, redis_client: redis.Redis, fields: dict[str, str]
) -> None:
    # Given an entry holding a number JSON has no place for (our publish refuses them)
    broker.consumers.ensure(queue_name, "billing")
    bad = redis_client.xadd(broker.keys(queue_name).log, fields).decode()
    fine = broker.publish(queue_name, 1.5)
    # When consuming, the handler never sees it: it is an undecodable dead letter
    assert consume_all(broker, queue_name, expected=1) == [fine]
    [(dead_id, message)] = dead_reasons(broker, queue_name).items()
    assert dead_id == bad
    assert "not valid JSON" in message and "not a finite number" in message


def test_headers_count_toward_the_payload_size_limit(
    queue_name: str, redis_client: redis.Redis
) -> None:
    broker = Broker(redis_client, CoreConfig(max_payload_bytes=1024))
    # A small payload with 4 KiB of headers is refused, naming both sizes
    with pytest.raises(PayloadTooLarge) as info:
        broker.publish(queue_name, {"n": 1}, headers={"blob": "x" * 4096})
    assert (info.value.size, info.value.limit) == (7 + 4107, 1024)
    assert "Payload and headers (4107 bytes of headers)" in str(info.value)
    # What fits together is accepted
    broker.publish(queue_name, {"n": 1}, headers={"blob": "x" * 900})
    assert redis_client.xlen(broker.keys(queue_name).log) == 1


def test_an_unsupported_version_is_named_as_text(
    queue_name: str, broker: Broker, redis_client: redis.Redis
) -> None:
    broker.consumers.ensure(queue_name, "billing")
    bad = redis_client.xadd(broker.keys(queue_name).log, {"payload": "1", "v": "2"}).decode()
    fine = broker.publish(queue_name, 1)
    assert consume_all(broker, queue_name, expected=1) == [fine]
    assert dead_reasons(broker, queue_name) == {bad: "unsupported envelope version '2'"}


@pytest.mark.parametrize(
    "fields",
    [{"body": "no payload"}, {"payload": "1", "headers": "[1]"}],
    ids=["without-payload", "with-payload"],
)
def test_an_undecodable_dead_letter_is_not_redriven(
    queue_name: str, broker: Broker, redis_client: redis.Redis, fields: dict[str, str]
) -> None:
    # Given an undecodable dead letter (re-driven, it would only die again)
    broker.consumers.ensure(queue_name, "billing")
    redis_client.xadd(broker.keys(queue_name).log, fields)
    fine = broker.publish(queue_name, 1)
    assert consume_all(broker, queue_name, expected=1) == [fine]
    [dead] = broker.dead_letters.read(queue_name, "billing")
    # When re-driving it, the broker refuses and says why
    with pytest.raises(NotRedrivable, match="undecodable"):
        broker.dead_letters.redrive(queue_name, "billing", dead.entry_id)
    # Then it is still a dead letter and nothing was delivered again
    assert [d.entry_id for d in broker.dead_letters.read(queue_name, "billing")] == [dead.entry_id]
    assert redis_client.xlen(broker.keys(queue_name).group("billing").direct) == 0
