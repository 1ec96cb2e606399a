"""Ordered consumers at their edges: batches, delayed and re-driven messages, history,
hand-backs, and what removing or purging a consumer leaves behind. Real Redis."""

from __future__ import annotations

import time

import pytest
import redis

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.delivery import Delivery
from redisq_django.core.subscription import Subscription
from tests.core.guarantee_helpers import wait_for
from tests.support.ordered import fetch, handle_all, ordered, seq

pytestmark = pytest.mark.core_config(poll_interval_ms=20)


def ordering_keys(client: redis.Redis, sub: Subscription) -> list[bytes]:
    """The holders hash and waiting lists of ``sub``'s consumer that exist."""
    waiting = client.scan_iter(match=sub.gkeys.waiting("*"), count=1000)
    return sorted([*waiting, *([sub.gkeys.holders.encode()] * client.exists(sub.gkeys.holders))])


def test_publish_many_with_a_key_is_handled_in_batch_order(broker: Broker, queue_name: str) -> None:
    # Given a batch of one key, payloads chosen so that no other order sorts them
    broker.consumers.ensure(queue_name, "ledger")
    ns = [5, 3, 9, 1, 7, 2, 8, 0, 6, 4]
    broker.publish_many(queue_name, [{"n": n} for n in ns], key="a")
    a, b = ordered(broker, queue_name, "i1"), ordered(broker, queue_name, "i2")
    # When two instances take turns
    handled: list[Delivery] = []
    for _ in range(100):
        if len(handled) == len(ns):
            break
        for sub in (a, b):
            got = fetch(sub, block_ms=20)
            assert len(got) <= 1  # one message of the key out at a time
            handled += got
            sub.ack(got)
    # Then the batch was handled in its order
    assert [d.payload["n"] for d in handled] == ns


def test_a_delayed_keyed_message_joins_its_keys_order_when_due(
    broker: Broker, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    sub = ordered(broker, queue_name, "i1")
    # Given a delayed message of key a, and one of a published now
    broker.publish(queue_name, {"n": 1}, key="a", delay=0.3)
    broker.publish(queue_name, {"n": 0}, key="a")
    # When the one published now is still being handled as the delayed one falls due
    [first] = fetch(sub)
    assert seq([first]) == [("a", 0)]
    time.sleep(0.4)
    assert fetch(sub, block_ms=100) == []  # due, but behind a's holder
    broker.publish(queue_name, {"n": 2}, key="a")
    sub.ack([first])
    # Then it comes next, before a's later message
    assert seq(handle_all(sub, 2)) == [("a", 1), ("a", 2)]


def test_a_redriven_dead_letter_goes_to_the_end_of_its_keys_line(
    broker: Broker, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    sub = ordered(broker, queue_name, "i1", max_retries=0)
    for n in range(3):
        broker.publish(queue_name, {"n": n}, key="a")
    # Given a's first message dead, and a's second one running
    [first] = fetch(sub)
    sub.fail(first, RuntimeError("boom"))
    [second] = fetch(sub)
    assert seq([second]) == [("a", 1)]
    # When the dead letter is re-driven meanwhile
    [dead] = broker.dead_letters.read(queue_name, "ledger")
    assert broker.dead_letters.redrive(queue_name, "ledger", dead.entry_id)
    assert fetch(sub) == []  # it waits: a is held
    sub.ack([second])
    # Then it runs after the messages of a that were waiting already
    assert seq(handle_all(sub, 2)) == [("a", 2), ("a", 0)]
    assert broker.client.hlen(sub.gkeys.holders) == 0


def test_remove_consumer_deletes_its_holders_and_waiting_lists(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        for key in ("a", "b"):
            broker.publish(queue_name, {"n": n}, key=key)
    sub = ordered(broker, queue_name, "i1")
    assert len(fetch(sub)) == 2
    assert fetch(sub) == []  # the rest wait
    assert len(ordering_keys(redis_client, sub)) == 3  # holders, waiting:a, waiting:b
    broker.consumers.remove(queue_name, "ledger")
    assert ordering_keys(redis_client, sub) == []


def test_history_records_handled_retried_and_dead_events_of_an_ordered_consumer(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20, history=True))
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        broker.publish(queue_name, {"n": n}, key="a")
    sub = ordered(broker, queue_name, "i1", max_retries=1, backoff_s=0.01, max_backoff_s=0.01)
    # a0 fails then is handled; a1 fails twice (dead); a2 is handled
    [d] = fetch(sub)
    sub.fail(d, RuntimeError("once"))
    [d] = wait_for(lambda: fetch(sub))
    sub.ack([d])
    for _ in range(2):
        [d] = wait_for(lambda: fetch(sub))
        assert d.payload["n"] == 1
        sub.fail(d, RuntimeError("always"))
    [d] = wait_for(lambda: fetch(sub))
    assert d.payload["n"] == 2
    sub.ack([d])

    events = [fields for _, fields in redis_client.xrange(broker.keys(queue_name).events)]
    assert [e[b"e"] for e in events] == [b"retried", b"handled", b"retried", b"dead", b"handled"]
    # Each event holds what an unordered consumer's holds: none of the ordering arguments
    plain = {b"e", b"g", b"c", b"m", b"error_class", b"error_message", b"next_due", b"reason"}
    for event in events:
        assert set(event) <= plain, event
    retried = [e for e in events if e[b"e"] == b"retried"]
    assert all(int(e[b"next_due"]) > 0 for e in retried)


def test_a_hand_back_keeps_the_key_with_its_holder(broker: Broker, queue_name: str) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        broker.publish(queue_name, {"n": n}, key="a")
    leaving = ordered(broker, queue_name, "leaving")
    [first] = fetch(leaving)
    # When the instance hands its unstarted message back (graceful shutdown)
    assert leaving.release([first]) == 1
    # Then the key stays with it: the next instance gets it first, then the rest in order
    assert broker.client.hget(leaving.gkeys.holders, "a") == first.id.encode()
    other = ordered(broker, queue_name, "other")
    handled = handle_all(other, 3)
    assert seq(handled) == [("a", 0), ("a", 1), ("a", 2)]
    assert handled[0].attempts == 1  # a hand-back is not an attempt


def test_purging_the_queue_frees_its_ordering_keys(broker: Broker, queue_name: str) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        broker.publish(queue_name, {"n": n}, key="a")
    sub = ordered(broker, queue_name, "i1", backoff_s=60, max_backoff_s=60)
    [first] = fetch(sub)
    sub.fail(first, RuntimeError("later"))  # a is held by a retry, two messages wait
    # When the queue is purged (every message deleted)
    broker.purge(queue_name)
    # Then a message of a published afterwards is not held back by one purged
    broker.publish(queue_name, {"n": 9}, key="a")
    assert seq(handle_all(sub, 1, timeout_s=2)) == [("a", 9)]


def test_purging_a_consumer_frees_the_keys_its_purged_messages_held(
    broker: Broker, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        for key in ("a", "b"):
            broker.publish(queue_name, {"n": n}, key=key)
    sub = ordered(broker, queue_name, "i1", backoff_s=60, max_backoff_s=60)
    got = {d.key: d for d in fetch(sub)}
    sub.fail(got["a"], RuntimeError("later"))  # a: held by a retry; b: in flight
    # When the consumer's waiting work is purged (its in-flight message finishes)
    broker.operator.purge_consumer(queue_name, "ledger")
    holders = broker.client.hgetall(sub.gkeys.holders)
    assert holders == {b"b": got["b"].id.encode()}  # b stays held while its message runs
    assert broker.client.exists(sub.gkeys.waiting("a"), sub.gkeys.waiting("b")) == 0
    sub.ack([got["b"]])
    # Then nothing purged comes back, and later messages of a and b are not held back
    broker.publish(queue_name, {"n": 9}, key="a")
    broker.publish(queue_name, {"n": 9}, key="b")
    assert sorted(seq(handle_all(sub, 2, timeout_s=2)), key=str) == [("a", 9), ("b", 9)]
    assert fetch(sub, block_ms=100) == []


def test_a_delayed_keyed_batch_is_handled_in_batch_order(broker: Broker, queue_name: str) -> None:
    # Given a delayed batch of one key (one due time for all), payloads in no sorted order
    broker.consumers.ensure(queue_name, "ledger")
    ns = [5, 3, 9, 1, 7, 2, 8, 0, 6, 4]
    broker.publish_many(queue_name, [{"n": n} for n in ns], key="a", delay=0.1)
    # When it falls due
    handled = handle_all(ordered(broker, queue_name, "i1"), len(ns))
    # Then its messages are handled in the batch's order
    assert [d.payload["n"] for d in handled] == ns
