"""Ending one message before its time (issue 36, point 1; ``end_message.lua``): a retry, a
delayed message or a private-input entry becomes a dead letter (reason ``ended``) or is
deleted, alone; an ordered consumer's poison message that holds its key hands the key on
to the key's next message, in order. Real redis-server."""

from __future__ import annotations

import pytest
import redis

from redisq_django.core import Broker, RetryPolicy
from redisq_django.core.dead_entry import DeadEntry
from redisq_django.core.operator import browse
from tests.core.guarantee_helpers import drain
from tests.support.ordered import fetch, ordered, seq

pytestmark = pytest.mark.core_config(retry=RetryPolicy(max_retries=30, backoff_s=60))


def dead(client: redis.Redis, broker: Broker, queue: str, consumer: str) -> list[DeadEntry]:
    stream = broker.keys(queue).group(consumer).dead
    return [DeadEntry.from_entry(queue, i, dict(f)) for i, f in client.xrange(stream)]


def retrying(client: redis.Redis, broker: Broker, queue: str, consumer: str) -> list[str]:
    page = browse.retrying(client, broker.keys(queue).group(consumer), None)
    return [e.message_id for e in page.entries]


def _failing(broker: Broker, queue: str, n: int) -> tuple[list[str], list[browse.Entry]]:
    """n messages that billing and email each failed once (both retrying them)."""
    for name in ("billing", "email"):
        broker.consumers.ensure(queue, name)
    ids = broker.publish_many(queue, [{"n": i} for i in range(n)])
    for name in ("billing", "email"):
        with broker.subscribe(queue, name) as sub:
            for m in drain(sub, expected=n, ack=False):
                sub.fail(m, ValueError(f"card declined for {m.payload['n']}"))
    entries = browse.retrying(broker.client, broker.keys(queue).group("billing"), None).entries
    return ids, entries


def test_ending_a_retry_makes_that_one_a_dead_letter_of_that_consumer_only(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    ids, entries = _failing(broker, queue_name, 3)
    chosen = next(e for e in entries if e.message_id == ids[1])

    # When staff end billing's retry of the second message
    ended = broker.operator.end_message(queue_name, "billing", chosen.ref, by="ann")

    # Then it is billing's dead letter now, with why and its last error, and nothing else moved
    assert ended.outcome == "ended" and ended.entry and ended.entry.message_id == ids[1]
    (letter,) = dead(redis_client, broker, queue_name, "billing")
    assert (letter.id, letter.consumer, letter.reason) == (ids[1], "billing", "ended")
    assert letter.payload == {"n": 1} and letter.attempts == 1
    assert letter.error_class == "Ended"
    assert letter.error_message == (
        "ended by ann before its time; its last error: ValueError: card declined for 1"
    )
    assert sorted(retrying(redis_client, broker, queue_name, "billing")) == sorted([ids[0], ids[2]])
    assert sorted(retrying(redis_client, broker, queue_name, "email")) == sorted(ids)
    assert dead(redis_client, broker, queue_name, "email") == []
    # ... and ending it again finds it gone
    assert broker.operator.end_message(queue_name, "billing", chosen.ref).outcome == "gone"
    assert len(dead(redis_client, broker, queue_name, "billing")) == 1


def test_deleting_a_retry_leaves_no_dead_letter(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    ids, entries = _failing(broker, queue_name, 2)
    chosen = next(e for e in entries if e.message_id == ids[0])
    assert broker.operator.end_message(queue_name, "billing", chosen.ref, delete=True).outcome == (
        "ended"
    )
    assert retrying(redis_client, broker, queue_name, "billing") == [ids[1]]
    assert dead(redis_client, broker, queue_name, "billing") == []


def test_ending_a_delayed_message_makes_a_dead_letter_for_each_consumer(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    for name in ("billing", "email"):
        broker.consumers.ensure(queue_name, name)
    ids = [broker.publish(queue_name, {"n": n}, delay=3600) for n in range(3)]
    keys = broker.keys(queue_name)
    by_id = {e.message_id: e for e in browse.delayed(redis_client, keys, None).entries}

    # When staff end the first one, and delete the second
    assert broker.operator.end_message(queue_name, None, by_id[ids[0]].ref).outcome == "ended"
    gone = broker.operator.end_message(queue_name, None, by_id[ids[1]].ref, delete=True)
    assert gone.outcome == "ended"

    # Then each consumer has the first as a dead letter of its own; the third stays delayed
    for name in ("billing", "email"):
        (letter,) = dead(redis_client, broker, queue_name, name)
        assert (letter.id, letter.consumer, letter.reason) == (ids[0], name, "ended")
        assert letter.error_message == "ended by an operator before its time"
    assert [e.message_id for e in browse.delayed(redis_client, keys, None).entries] == [ids[2]]
    with broker.subscribe(queue_name, "billing") as sub:
        assert sub.fetch(count=10, block_ms=100) == []


def test_ending_a_poison_message_that_holds_its_key_hands_the_key_on_in_order(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given an ordered consumer whose first message of key a keeps failing (retrying,
    # holding a), with three more of a waiting behind it and one of key b
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(4):
        broker.publish(queue_name, {"n": n}, key="a")
    broker.publish(queue_name, {"n": 0}, key="b")
    sub = ordered(broker, queue_name, "i1", backoff_s=60, max_backoff_s=60)
    got = {d.key: d for d in fetch(sub)}
    sub.ack([got["b"]])
    sub.fail(got["a"], RuntimeError("poison"))
    assert fetch(sub) == []  # a is held by its retrying first message
    (poison,) = browse.retrying(redis_client, sub.gkeys, None).entries

    # When staff end it
    assert broker.operator.end_message(queue_name, "ledger", poison.ref, by="ann").outcome == (
        "ended"
    )

    # Then it is a dead letter, and a's next messages run one at a time, in order
    (letter,) = dead(redis_client, broker, queue_name, "ledger")
    assert letter.id == got["a"].id and letter.reason == "ended"
    order = []
    for _ in range(3):
        batch = fetch(sub)
        assert len(batch) == 1, seq(batch)
        order += seq(batch)
        sub.ack(batch)
    assert order == [("a", 1), ("a", 2), ("a", 3)]
    assert fetch(sub) == []


def test_a_private_input_entry_is_ended_until_its_consumer_reads_it(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    _failing(broker, queue_name, 2)
    # Both retries delivered now: into billing's private input, not yet read
    assert broker.operator.deliver_waiting(queue_name, "billing").count == 2
    waiting = browse.waiting(redis_client, broker.keys(queue_name).group("billing"), None)
    first, second = waiting.entries[:2]
    assert (first.where, second.where) == ("direct", "direct")

    assert broker.operator.end_message(queue_name, "billing", first.ref).outcome == "ended"
    with broker.subscribe(queue_name, "billing") as sub:
        (read,) = sub.fetch(count=10, block_ms=100)
        assert read.id == second.message_id
        # Read (in flight) now: its instance settles it, the operator cannot end it
        assert broker.operator.end_message(queue_name, "billing", second.ref).outcome == (
            "in_flight"
        )
        sub.ack([read])
    (letter,) = dead(redis_client, broker, queue_name, "billing")
    assert letter.id == first.message_id


@pytest.mark.parametrize("ref", ["retry:1:x", "direct:1-0", "dead:1-0"])
def test_what_cannot_be_ended_is_refused_with_the_reason(
    broker: Broker, queue_name: str, ref: str
) -> None:
    broker.consumers.ensure(queue_name, "billing")
    consumer = None if ref.startswith(("retry", "direct")) else "billing"
    with pytest.raises(ValueError, match="Only a delayed message, a message waiting in the log"):
        broker.operator.end_message(queue_name, consumer, ref)
