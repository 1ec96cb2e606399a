"""The ordering key (issue 25, step 1): an optional envelope field ``key`` carried from
publish to the handler (``message.key``) through every path a message takes — delayed,
at most once, batch once, retries, dead letters and re-drives, replay — and refused at
publish when it is not a short non-empty string. Real redis-server, no mocks."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, InvalidKey, Message, PublishError
from redisq_django.core.envelope import MAX_KEY_BYTES
from redisq_django.core.outcome import Outcome
from tests.core.guarantee_helpers import drain, fetch_nothing

pytestmark = pytest.mark.core_config(poll_interval_ms=20)


def _keys(messages: list[Message]) -> dict[str, str | None]:
    return {m.id: m.key for m in messages}


def test_an_immediate_message_carries_its_key_to_the_handler_and_none_without(
    queue_name: str, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given a consumer, a message without a key (the queue is recorded by this process
    # from then on: later publishes take its shortest path), one with, one without
    broker.consumers.ensure(queue_name, "billing")
    first = broker.publish(queue_name, {"n": 0})
    with_key = broker.publish(queue_name, {"n": 1}, key="order-42")
    without = broker.publish(queue_name, {"n": 2})
    # When they are received
    sub = broker.subscribe(queue_name, "billing", "i1")
    received = drain(sub, expected=3)
    # Then the handler sees the key, and None for the others
    assert _keys(received) == {first: None, with_key: "order-42", without: None}
    # And on the wire: a `key` field only where there is a key
    log = {i.decode(): f for i, f in redis_client.xrange(broker.keys(queue_name).log)}
    assert log[with_key][b"key"] == b"order-42"
    assert b"key" not in log[without] and b"key" not in log[first]


def test_publish_many_gives_every_message_of_the_batch_the_one_key(
    queue_name: str, broker: Broker
) -> None:
    broker.consumers.ensure(queue_name, "billing")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(5)], key="cart-7")
    received = drain(broker.subscribe(queue_name, "billing", "i1"), expected=5)
    assert _keys(received) == dict.fromkeys(ids, "cart-7")


def test_delayed_messages_keep_their_key_by_delay_and_by_eta(
    queue_name: str, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given messages delayed by delay= (made a member by the script) and eta= (ZADD),
    # one at a time and as a batch
    broker.consumers.ensure(queue_name, "billing")
    eta = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=0.2)
    by_delay = broker.publish(queue_name, "d", delay=0.1, key="order-1")
    by_eta = broker.publish(queue_name, "e", eta=eta, key="order-2")
    batch = broker.publish_many(queue_name, ["b1", "b2"], delay=0.1, key="order-3")
    # The delayed members hold the key as one more string field
    members = [json.loads(m) for m in redis_client.zrange(broker.keys(queue_name).delayed, 0, -1)]
    assert sorted(m["key"] for m in members) == ["order-1", "order-2", "order-3", "order-3"]
    # When they are promoted and received
    received = drain(broker.subscribe(queue_name, "billing", "i1"), expected=4, timeout_s=5)
    # Then each has its key
    assert _keys(received) == {
        by_delay: "order-1",
        by_eta: "order-2",
        batch[0]: "order-3",
        batch[1]: "order-3",
    }
    assert all(m.due_at_ms is not None for m in received)


def test_publish_once_and_batch_once_carry_the_key(queue_name: str, broker: Broker) -> None:
    # Given envelopes with keys sent at most once (per id, and per batch id), now and later
    broker.consumers.ensure(queue_name, "billing")
    once_now = broker.prepare(queue_name, 1, key="a", id="once-now")
    once_later = broker.prepare(queue_name, 2, key="b", id="once-later", delay=0.05)
    once_eta = broker.prepare(queue_name, 3, key="c", id="once-eta", eta=dt.datetime.now(dt.UTC))
    batch_now = broker.prepare(queue_name, 4, key="d", id="batch-now")
    batch_later = broker.prepare(queue_name, 5, key="e", id="batch-later", delay=0.05)
    # When sent (twice: the second send publishes nothing)
    for _ in range(2):
        broker.send([once_now, once_later, once_eta], once=True)
        broker.send([batch_now, batch_later], batch="tx-1")
    # Then each arrives once, with its key
    sub = broker.subscribe(queue_name, "billing", "i1")
    received = drain(sub, expected=5, timeout_s=5)
    assert _keys(received) == {
        "once-now": "a",
        "once-later": "b",
        "once-eta": "c",
        "batch-now": "d",
        "batch-later": "e",
    }
    assert fetch_nothing(sub, wait_ms=150) == []


def test_send_to_one_consumer_keeps_the_key(queue_name: str, broker: Broker) -> None:
    broker.consumers.ensure(queue_name, "billing")
    envelopes = [broker.prepare(queue_name, n, key=f"k{n}", id=f"m{n}") for n in range(2)]
    broker.consumers.deliver("billing", envelopes[:1])
    broker.consumers.deliver("billing", envelopes[1:], once=True)
    received = drain(broker.subscribe(queue_name, "billing", "i1"), expected=2)
    assert _keys(received) == {"m0": "k0", "m1": "k1"}


def test_a_retry_and_a_dead_letter_keep_the_key_and_a_redrive_delivers_it_again(
    queue_name: str, broker: Broker
) -> None:
    # Given a message with a key whose handler fails on every delivery
    broker.consumers.ensure(queue_name, "billing")
    mid = broker.publish(queue_name, {"order": 42}, key="order-42")
    sub = broker.subscribe(queue_name, "billing", "i1", max_retries=1, backoff_s=0.01)
    seen: list[tuple[int, str | None]] = []
    outcomes: list[Outcome] = []

    def fail(s: Any, m: Message) -> None:
        seen.append((m.attempts, m.key))
        outcomes.append(s.fail(m, ValueError("no")).outcome)

    drain(sub, expected=2, timeout_s=5, settle=fail)
    # Then the retry carried the key, and the dead letter keeps it
    assert seen == [(1, "order-42"), (2, "order-42")]
    assert outcomes == [Outcome.RETRIED, Outcome.DEAD]
    [dead] = broker.dead_letters.read(queue_name, "billing")
    assert (dead.id, dead.key) == (mid, "order-42")
    # When an operator re-drives it, the consumer gets it again with its key
    assert broker.dead_letters.redrive(queue_name, "billing", dead.entry_id) is not None
    [again] = drain(sub, expected=1)
    assert (again.id, again.key, again.attempts) == (mid, "order-42", 1)
    # And re-driving the envelope a database row keeps (its carried fields) does too
    broker.dead_letters.redrive_envelope(queue_name, "billing", dead.fields)
    [third] = drain(sub, expected=1)
    assert (third.id, third.key) == (mid, "order-42")


def test_a_reset_replays_messages_with_their_keys(queue_name: str, broker: Broker) -> None:
    broker.consumers.ensure(queue_name, "billing")
    ids = [broker.publish(queue_name, n, key=f"order-{n}") for n in range(3)]
    sub = broker.subscribe(queue_name, "billing", "i1")
    assert len(drain(sub, expected=3)) == 3
    broker.consumers.reset(queue_name, "billing", "earliest")
    assert _keys(drain(sub, expected=3)) == {i: f"order-{n}" for n, i in enumerate(ids)}


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("", "must not be empty"),
        ("x" * (MAX_KEY_BYTES + 1), f"at most {MAX_KEY_BYTES} bytes in UTF-8, got 257"),
        ("é" * 129, f"at most {MAX_KEY_BYTES} bytes in UTF-8, got 258"),
        (42, "must be a str"),
        (b"order-42", "must be a str"),
        ("\udcff", "valid Unicode text"),
    ],
)
def test_an_invalid_key_is_refused_before_anything_is_sent(
    queue_name: str, broker: Broker, redis_client: redis.Redis, key: Any, says: str
) -> None:
    # When publishing with an invalid key, in every publishing call
    for call in (
        lambda: broker.publish(queue_name, 1, key=key),
        lambda: broker.publish(queue_name, 1, key=key, delay=1),
        lambda: broker.publish_many(queue_name, [1, 2], key=key),
        lambda: broker.prepare(queue_name, 1, key=key),
    ):
        with pytest.raises(InvalidKey, match=says) as caught:
            call()
        # Then the error is a publish error (and a ValueError), saying what is wrong
        assert isinstance(caught.value, PublishError | ValueError)
    # And nothing reached Redis
    keys = broker.keys(queue_name)
    assert redis_client.exists(keys.log, keys.delayed) == 0


def test_the_longest_key_is_allowed(queue_name: str, broker: Broker) -> None:
    broker.consumers.ensure(queue_name, "billing")
    longest = "é" * (MAX_KEY_BYTES // 2)  # 256 bytes in UTF-8
    mid = broker.publish(queue_name, 1, key=longest)
    assert _keys(drain(broker.subscribe(queue_name, "billing", "i1"), expected=1)) == {mid: longest}


@pytest.mark.parametrize(
    ("raw_key", "reason"),
    [
        (b"", "field 'key' is empty"),
        (b"k" * (MAX_KEY_BYTES + 1), f"field 'key' is longer than {MAX_KEY_BYTES} bytes"),
        (b"\xff\xfe", "field 'key' is not UTF-8"),
    ],
)
def test_an_entry_with_a_key_publish_would_refuse_is_undecodable(
    queue_name: str, broker: Broker, redis_client: redis.Redis, raw_key: bytes, reason: str
) -> None:
    # Given a client in another language that wrote a key our publish refuses
    broker.consumers.ensure(queue_name, "billing")
    log = broker.keys(queue_name).log
    redis_client.xadd(log, {"payload": b"{}", "key": raw_key})
    good = redis_client.xadd(log, {"payload": b"{}", "key": "order-1"}).decode()
    # When the consumer reads them
    sub = broker.subscribe(queue_name, "billing", "i1")
    received = drain(sub, expected=1)
    # Then the valid one is handled and the other is an undecodable dead letter saying why
    assert _keys(received) == {good: "order-1"}
    [dead] = broker.dead_letters.read(queue_name, "billing")
    assert (dead.reason, dead.error_message) == ("undecodable", reason)
