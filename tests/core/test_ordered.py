"""Ordered consumers (core/ordered.py): one message of an ordering key out at a time, in
publish order, through retries, dead letters, crashes and several instances. Real Redis."""

from __future__ import annotations

import time

import pytest
import redis

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.ordered import held_keys, release_key
from tests.support.ordered import fetch, ordered, seq

pytestmark = pytest.mark.core_config(poll_interval_ms=20)


def test_one_message_of_a_key_out_at_a_time_in_publish_order(
    broker: Broker, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        for key in ("a", "b"):
            broker.publish(queue_name, {"n": n}, key=key)
    broker.publish(queue_name, {"n": 99})  # no key: never held back
    sub = ordered(broker, queue_name, "i1")

    first = fetch(sub)
    assert sorted(seq(first), key=str) == sorted([("a", 0), ("b", 0), (None, 99)], key=str)
    assert fetch(sub) == []  # a and b are held: their later messages wait
    other = ordered(broker, queue_name, "i2")
    assert fetch(other) == []  # for every instance

    by_key = {d.key: d for d in first}
    sub.ack([by_key["a"]])
    [nxt] = fetch(other)  # the next of a, handed on to the consumer's input
    assert seq([nxt]) == [("a", 1)]
    assert fetch(sub) == []
    sub.ack([by_key["b"], by_key[None]])
    other.ack([nxt])
    got = fetch(sub)
    assert sorted(seq(got), key=str) == [("a", 2), ("b", 1)]
    sub.ack(got)
    assert seq(fetch(sub)) == [("b", 2)]


def test_a_failing_message_holds_back_its_key_only_until_it_succeeds(
    broker: Broker, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        broker.publish(queue_name, {"n": n}, key="a")
        broker.publish(queue_name, {"n": n}, key="b")
    sub = ordered(broker, queue_name, "i1", backoff_s=0.05, max_backoff_s=0.05, max_retries=5)
    got = {d.key: d for d in fetch(sub)}
    sub.fail(got["a"], RuntimeError("boom"))
    sub.ack([got["b"]])
    handled: list[tuple[str | None, int]] = []
    deadline = time.monotonic() + 10
    while len(handled) < 5 and time.monotonic() < deadline:
        for d in fetch(sub):
            handled.append((d.key, d.payload["n"]))
            sub.ack([d])
    # a's retry comes before a's later messages; b went on meanwhile
    assert [n for k, n in handled if k == "a"] == [0, 1, 2]
    assert [n for k, n in handled if k == "b"] == [1, 2]


def test_a_dead_letter_hands_its_key_on(broker: Broker, queue_name: str) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        broker.publish(queue_name, {"n": n}, key="a")
    sub = ordered(broker, queue_name, "i1", max_retries=0)
    [first] = fetch(sub)
    assert sub.fail(first, RuntimeError("boom")).outcome.value == "dead"
    [second] = fetch(sub)
    assert seq([second]) == [("a", 1)]
    sub.reject(second, RuntimeError("no"))
    [third] = fetch(sub)
    sub.ack([third])
    assert seq([third]) == [("a", 2)]
    assert broker.client.hlen(sub.gkeys.holders) == 0  # every key freed


def test_a_crashed_holder_keeps_its_key_and_is_reclaimed_first(
    broker: Broker, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        broker.publish(queue_name, {"n": n}, key="a")
    crashed = ordered(broker, queue_name, "crashed", visibility_timeout_ms=100)
    assert seq(fetch(crashed)) == [("a", 0)]  # then its process dies
    survivor = ordered(broker, queue_name, "survivor", visibility_timeout_ms=100)
    assert fetch(survivor) == []  # a's later messages wait for the crashed one's
    time.sleep(0.2)
    [again] = survivor.reclaim()
    assert seq([again]) == [("a", 0)]
    survivor.ack([again])
    assert seq(fetch(survivor)) == [("a", 1)]


def test_held_keys_say_why_and_a_key_can_be_released_by_hand(
    broker: Broker, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        broker.publish(queue_name, {"n": n}, key="a")
    broker.publish(queue_name, {"n": 0}, key="b")
    sub = ordered(broker, queue_name, "i1", backoff_s=60, max_backoff_s=60)
    got = {d.key: d for d in fetch(sub)}
    assert fetch(sub) == []
    [held] = held_keys(broker.client, sub.gkeys)  # b has nothing waiting
    assert (held.key, held.waiting, held.holder, held.state) == ("a", 2, got["a"].id, "running")
    assert held.instance == "i1"
    sub.fail(got["a"], RuntimeError("boom"))
    [held] = held_keys(broker.client, sub.gkeys)
    assert held.state == "retrying" and held.due_ms and "boom" in (held.last_error or "")

    # An operator gives up on the retry: the next message of a goes out at once
    broker.client.delete(sub.gkeys.retry)
    assert release_key(broker.scripts, sub.gkeys, "a") is True
    [nxt] = fetch(sub)
    assert seq([nxt]) == [("a", 1)]
    assert release_key(broker.scripts, sub.gkeys, "zzz") is False


def test_history_on_and_the_worker_path(redis_client: redis.Redis, queue_name: str) -> None:
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20, history=True))
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(2):
        broker.publish(queue_name, {"n": n}, key="a")
    sub = ordered(broker, queue_name, "i1")
    [d] = fetch(sub)
    assert sub.ack([d]) == 1
    assert seq(fetch(sub)) == [("a", 1)]
    events = [e[1][b"e"] for e in redis_client.xrange(broker.keys(queue_name).events)]
    assert b"handled" in events


def test_unordered_consumers_of_the_same_queue_are_unaffected(
    broker: Broker, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    broker.consumers.ensure(queue_name, "mailer")
    for n in range(3):
        broker.publish(queue_name, {"n": n}, key="a")
    with broker.subscribe(queue_name, "mailer", "m1") as mailer:
        assert seq(mailer.fetch(count=10, block_ms=50)) == [("a", 0), ("a", 1), ("a", 2)]
    assert seq(fetch(ordered(broker, queue_name, "i1"))) == [("a", 0)]


def test_purging_the_consumer_drops_waiting_messages_and_frees_keys(
    broker: Broker, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        broker.publish(queue_name, {"n": n}, key="a")
    sub = ordered(broker, queue_name, "i1")
    [first] = fetch(sub)
    assert fetch(sub) == []  # 2 wait
    retries, dropped = broker.operator.purge_consumer(queue_name, "ledger")
    assert (retries, dropped) == (0, 2)
    assert broker.client.exists(sub.gkeys.waiting("a"), sub.gkeys.held_back) == 0
    broker.publish(queue_name, {"n": 3}, key="a")
    assert fetch(sub) == []  # the key stays with its running holder...
    sub.ack([first])
    assert seq(fetch(sub)) == [("a", 3)]  # ...until it is settled


def test_the_held_back_counter_follows_every_push_and_pop(broker: Broker, queue_name: str) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(4):
        broker.publish(queue_name, {"n": n}, key="a")
    sub = ordered(broker, queue_name, "i1", max_retries=0)
    counter = sub.gkeys.held_back

    def held_back() -> int:
        return int(broker.client.get(counter) or 0)

    [first] = fetch(sub)
    assert held_back() == 3
    sub.ack([first])  # ack_ordered.lua hands on: 2 left
    assert held_back() == 2
    [second] = fetch(sub)
    sub.fail(second, RuntimeError("boom"))  # a dead letter (fail.lua) hands on: 1 left
    assert held_back() == 1
    [third] = fetch(sub)
    broker.client.delete(sub.gkeys.retry)
    assert release_key(broker.scripts, sub.gkeys, "a")  # by hand: 0 left
    assert held_back() == 0
    assert seq(fetch(sub)) == [("a", 3)]
    assert third.key == "a"


def test_the_stats_count_what_is_held_back(broker: Broker, queue_name: str) -> None:
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        broker.publish(queue_name, {"n": n}, key="a")
    sub = ordered(broker, queue_name, "i1")
    [first] = fetch(sub)
    [ledger] = broker.stats(queue_name).consumers
    assert (ledger.held_back, ledger.in_flight, ledger.backlog) == (2, 1, 0)
    sub.ack([first])
    [ledger] = broker.stats(queue_name).consumers
    assert (ledger.held_back, ledger.backlog) == (1, 1)  # the next one is in its input


def test_a_holder_past_what_is_looked_at_is_unseen_not_lost(
    broker: Broker, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given more messages in flight than the admin looks at, the holder among the last
    broker.consumers.ensure(queue_name, "ledger")
    for n in range(3):
        broker.publish(queue_name, {"n": n})
    for n in range(2):
        broker.publish(queue_name, {"n": n}, key="a")
    sub = ordered(broker, queue_name, "i1")
    assert len(fetch(sub)) == 4
    monkeypatch.setattr("redisq_django.core.ordered.LOOK_LIMIT", 2)
    # Then the key's holder is "unseen" (busy, most likely), not "unknown" (release it)
    [held] = held_keys(broker.client, sub.gkeys)
    assert (held.key, held.state) == ("a", "unseen")
    monkeypatch.setattr("redisq_django.core.ordered.LOOK_LIMIT", 1000)
    assert held_keys(broker.client, sub.gkeys)[0].state == "running"


@pytest.mark.parametrize("raw_key", [b"\xff\xfe-not-utf-8", b"k" * 300], ids=["bytes", "long"])
def test_an_undecodable_entry_with_a_key_frees_the_key_it_took(
    broker: Broker, queue_name: str, raw_key: bytes
) -> None:
    # Given an entry another client wrote with a key our publishers refuse, and a message
    # of the same raw key behind it
    broker.consumers.ensure(queue_name, "ledger")
    log = broker.keys(queue_name).log
    broker.client.xadd(log, {"payload": b'{"n": 0}', "key": raw_key})
    broker.client.xadd(log, {"payload": b'{"n": 1}', "key": raw_key})
    sub = ordered(broker, queue_name, "i1")
    # When they are read: the first is a dead letter (undecodable) and hands the key on to
    # the second, which the same fetch reads from the consumer's input, dead as well
    assert fetch(sub) == []
    assert sub.dead_on_receive == 2
    assert broker.client.hlen(sub.gkeys.holders) == 0  # nothing holds the key for ever
    assert int(broker.client.get(sub.gkeys.held_back) or 0) == 0
