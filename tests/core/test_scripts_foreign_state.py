"""Contract tests: what the ordered consumer's scripts read but did not write in the same
call (``held_back``, the ``holders`` hash, the waiting lists and their members), written
wrong by another client with raw commands. Each script refuses before its first write,
with a ``REDISQ_CORRUPT`` reply naming the key, or hands a member it cannot read on whole:
no message is lost or delivered twice (every id is accounted for). PROTOCOL.md, "What the
scripts check". Real Redis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker, DeadReason, Failure
from redisq_django.core.delivery import Delivery
from redisq_django.core.errors import CorruptState, error_code
from redisq_django.core.keys import GroupKeys, QueueKeys
from redisq_django.core.scripts.assembly import fragment
from redisq_django.core.settle import Settling
from redisq_django.core.subscription import Subscription
from tests.support.ordered import CONSUMER, fetch, handle_all, ordered

SCRIPTS = Path(__file__).resolve().parents[2] / "redisq_django" / "core" / "scripts"

#: Values of a count that INCR/DECR refuse (or that only look like one).
BAD_COUNTS = ["x", "4.5", "", " 5", "007", "1e3", "99999999999999999999"]


pytestmark = pytest.mark.core_config(poll_interval_ms=20)


def two_of_key_a(broker: Broker, queue: str) -> tuple[Subscription, list[str]]:
    """An ordered instance and two messages of key ``a``, none read yet."""
    broker.consumers.ensure(queue, CONSUMER)
    ids = [broker.publish(queue, {"n": n}, key="a") for n in range(2)]
    return ordered(broker, queue, "i1"), ids


def first_out_second_waiting(broker: Broker, queue: str) -> tuple[Subscription, Delivery, str]:
    """The first message of key ``a`` delivered (it holds the key), the second waiting."""
    sub, ids = two_of_key_a(broker, queue)
    [first] = fetch(sub)
    assert fetch(sub) == []  # the second waits behind it
    assert broker.client.llen(sub.gkeys.waiting("a")) == 1
    return sub, first, ids[1]


def assert_names(exc: BaseException, key: str) -> None:
    assert error_code(exc) == "REDISQ_CORRUPT", exc
    assert key in str(exc), exc


def read_call(broker: Broker, gk: GroupKeys) -> list[object]:
    keys = [gk.queue_keys.log, gk.direct, gk.holders, gk.held_back]
    return broker.scripts("read_ordered", keys, [gk.group, "i1", 100, gk.waiting_prefix])


def all_handled(sub: Subscription, expected: int) -> list[str]:
    """Ids of everything handled from now on, with a last look that finds nothing more."""
    handled = [d.id for d in handle_all(sub, expected)]
    assert fetch(sub) == []
    return handled


def settled_state(client: redis.Redis, gk: GroupKeys) -> None:
    """Nothing held, nothing waiting, nothing pending."""
    assert client.hlen(gk.holders) == 0
    assert client.llen(gk.waiting("a")) == 0
    assert int(client.get(gk.held_back) or 0) == 0
    assert client.xpending(gk.queue_keys.log, gk.group)["pending"] == 0


# -- held_back: a count only the scripts write -------------------------------------------


@pytest.mark.parametrize("bad", BAD_COUNTS)
def test_read_ordered_refuses_a_held_back_that_is_no_count_before_reading(
    broker: Broker, queue_name: str, bad: str
) -> None:
    # Given two messages of key a and a held_back another client set to `bad`
    sub, ids = two_of_key_a(broker, queue_name)
    gk = sub.gkeys
    broker.client.set(gk.held_back, bad)
    # When an instance reads
    with pytest.raises(redis.ResponseError) as refused:
        read_call(broker, gk)
    # Then it is refused, naming the key, and nothing was read (nothing pending or waiting)
    assert_names(refused.value, gk.held_back)
    assert broker.client.xpending(gk.queue_keys.log, gk.group)["pending"] == 0
    assert broker.client.llen(gk.waiting("a")) == 0
    # And once an operator repairs it, each message is handled once, in order
    broker.client.set(gk.held_back, 0)
    assert all_handled(sub, 2) == ids
    settled_state(broker.client, gk)


def test_a_subscription_reports_a_corrupt_held_back_as_corrupt_state(
    broker: Broker, queue_name: str
) -> None:
    sub, _ = two_of_key_a(broker, queue_name)
    broker.client.set(sub.gkeys.held_back, "many")
    with pytest.raises(CorruptState) as refused:
        fetch(sub)
    assert refused.value.key == sub.gkeys.held_back
    assert "many" in str(refused.value)


@pytest.mark.parametrize("bad", BAD_COUNTS)
def test_ack_ordered_refuses_a_held_back_that_is_no_count_and_loses_no_waiting_message(
    broker: Broker, queue_name: str, bad: str
) -> None:
    # Given the first message of key a out and the second waiting, and a corrupt count
    sub, first, second = first_out_second_waiting(broker, queue_name)
    gk = sub.gkeys
    broker.client.set(gk.held_back, bad)
    # When the first is acknowledged
    with pytest.raises(CorruptState) as refused:
        sub.ack([first])
    # Then the ack is refused, naming the key, before anything was written: the first
    # is still pending and holds the key, the second still waits
    assert_names(refused.value.__cause__, gk.held_back)
    assert broker.client.xpending(gk.queue_keys.log, gk.group)["pending"] == 1
    assert broker.client.hget(gk.holders, "a") == first.id.encode()
    [member] = broker.client.lrange(gk.waiting("a"), 0, -1)
    assert json.loads(member)["id"] == second
    # And once repaired, the ack goes through and the second is handled, once
    broker.client.set(gk.held_back, 1)
    assert sub.ack([first]) == 1
    assert all_handled(sub, 1) == [second]
    settled_state(broker.client, gk)


@pytest.mark.parametrize("bad", BAD_COUNTS[:3])
def test_fail_refuses_a_held_back_that_is_no_count_and_loses_no_waiting_message(
    broker: Broker, queue_name: str, bad: str
) -> None:
    # Given the first message of key a out and the second waiting, and a corrupt count
    sub, first, second = first_out_second_waiting(broker, queue_name)
    gk = sub.gkeys
    broker.client.set(gk.held_back, bad)
    # When the first becomes a dead letter (which hands its key on)
    with pytest.raises(CorruptState) as refused:
        sub.dead_letter(first, Failure("ValueError", "bad"), DeadReason.FAILED)
    # Then it is refused before anything was written
    assert_names(refused.value.__cause__, gk.held_back)
    assert broker.client.xpending(gk.queue_keys.log, gk.group)["pending"] == 1
    assert broker.client.xlen(gk.dead) == 0
    assert broker.client.llen(gk.waiting("a")) == 1
    # And once repaired: one dead letter, the second handled once
    broker.client.set(gk.held_back, 1)
    sub.dead_letter(first, Failure("ValueError", "bad"), DeadReason.FAILED)
    assert broker.client.xlen(gk.dead) == 1
    assert all_handled(sub, 1) == [second]
    settled_state(broker.client, gk)


# -- keys of the wrong type --------------------------------------------------------------


def test_read_ordered_refuses_holders_of_the_wrong_type_before_reading(
    broker: Broker, queue_name: str
) -> None:
    sub, ids = two_of_key_a(broker, queue_name)
    gk = sub.gkeys
    broker.client.set(gk.holders, "not a hash")
    with pytest.raises(redis.ResponseError) as refused:
        read_call(broker, gk)
    assert_names(refused.value, gk.holders)
    assert broker.client.xpending(gk.queue_keys.log, gk.group)["pending"] == 0
    broker.client.delete(gk.holders)
    assert all_handled(sub, 2) == ids


def test_read_ordered_refuses_a_waiting_list_of_the_wrong_type_and_delivers_nothing_twice(
    broker: Broker, queue_name: str
) -> None:
    # Given the first message of key a out, a string where its waiting list goes, then
    # a second message of key a
    broker.consumers.ensure(queue_name, CONSUMER)
    broker.publish(queue_name, {"n": 0}, key="a")
    sub = ordered(broker, queue_name, "i1")
    gk = sub.gkeys
    assert len(fetch(sub)) == 1
    broker.client.set(gk.waiting("a"), "not a list")
    broker.publish(queue_name, {"n": 1}, key="a")
    # When the second is read (it must wait behind the first)
    with pytest.raises(redis.ResponseError) as refused:
        read_call(broker, gk)
    # Then the call is refused naming the list; the second is pending (it comes back
    # after the visibility timeout), neither waiting nor delivered
    assert_names(refused.value, gk.waiting("a"))
    assert broker.client.type(gk.waiting("a")) == b"string"
    assert broker.client.xpending(gk.queue_keys.log, gk.group)["pending"] == 2
    assert int(broker.client.get(gk.held_back) or 0) == 0


def test_ack_ordered_refuses_a_waiting_list_of_the_wrong_type_before_acknowledging(
    broker: Broker, queue_name: str
) -> None:
    sub, first, _ = first_out_second_waiting(broker, queue_name)
    gk = sub.gkeys
    member = broker.client.lpop(gk.waiting("a"))
    broker.client.set(gk.waiting("a"), "not a list")
    ack = Settling(gk, "i1", ordered=True).ack([first])
    with pytest.raises(redis.ResponseError) as refused:
        broker.scripts(ack.script, ack.keys, ack.args)
    assert_names(refused.value, gk.waiting("a"))
    assert broker.client.xpending(gk.queue_keys.log, gk.group)["pending"] == 1
    assert broker.client.hget(gk.holders, "a") == first.id.encode()
    assert member is not None


def test_fail_refuses_a_waiting_list_of_the_wrong_type_before_settling(
    broker: Broker, queue_name: str
) -> None:
    sub, first, _ = first_out_second_waiting(broker, queue_name)
    gk = sub.gkeys
    broker.client.delete(gk.waiting("a"))
    broker.client.set(gk.waiting("a"), "not a list")
    with pytest.raises(CorruptState) as refused:
        sub.dead_letter(first, Failure("ValueError", "bad"), DeadReason.FAILED)
    assert_names(refused.value.__cause__, gk.waiting("a"))
    assert refused.value.key == gk.waiting("a")
    assert broker.client.xpending(gk.queue_keys.log, gk.group)["pending"] == 1
    assert broker.client.xlen(gk.dead) == 0


def test_ordered_purge_refuses_a_waiting_list_of_the_wrong_type_before_deleting(
    broker: Broker, queue_name: str
) -> None:
    sub, _, _ = first_out_second_waiting(broker, queue_name)
    gk = sub.gkeys
    broker.client.hset(gk.holders, "b", "1-1")
    broker.client.set(gk.waiting("b"), "not a list")
    keys = [gk.queue_keys.log, gk.direct, gk.holders, gk.held_back]
    with pytest.raises(redis.ResponseError) as refused:
        broker.scripts("ordered_purge", keys, [gk.group, gk.waiting_prefix, 1000])
    assert_names(refused.value, gk.waiting("b"))
    assert broker.client.llen(gk.waiting("a")) == 1
    assert broker.client.hlen(gk.holders) == 2


# -- waiting members another client wrote ------------------------------------------------


@pytest.mark.parametrize("settle", ["ack", "dead_letter"])
def test_a_waiting_member_that_is_no_envelope_of_strings_is_handed_on_whole(
    broker: Broker, queue_name: str, settle: str
) -> None:
    # Given the first message of key a out, and behind it a member another client wrote
    # with a value that is not a string (nested JSON), then the real second message
    sub, first, second = first_out_second_waiting(broker, queue_name)
    gk = sub.gkeys
    foreign = json.dumps({"id": "foreign-1", "payload": {"nested": [1, 2]}})
    broker.client.lpush(gk.waiting("a"), foreign)
    broker.client.incr(gk.held_back)
    # When the first is settled (acknowledged, or a dead letter: the same hand-over)
    if settle == "ack":
        sub.ack([first])
    else:
        sub.dead_letter(first, Failure("ValueError", "bad"), DeadReason.FAILED)
    # Then the foreign member reaches the consumer's input whole, as `raw` (it becomes a
    # dead letter as undecodable), and the second is handed the key and handled once
    raws = [f[b"raw"] for _, f in broker.client.xrange(gk.direct) if b"raw" in f]
    assert raws == [foreign.encode()]
    handled = all_handled(sub, 1)
    assert handled == [second]
    assert broker.client.llen(gk.waiting("a")) == 0
    assert int(broker.client.get(gk.held_back)) == 0


# -- release_key.lua: an operator lets a key go ------------------------------------------


@pytest.mark.parametrize("bad", BAD_COUNTS[:3])
def test_release_key_refuses_a_held_back_that_is_no_count_and_loses_no_waiting_message(
    broker: Broker, queue_name: str, bad: str
) -> None:
    # Given the first message of key a out (it holds a), the second waiting, and
    # held_back written wrong by another client
    sub, first, second = first_out_second_waiting(broker, queue_name)
    gk = sub.gkeys
    broker.client.set(gk.held_back, bad)
    # When an operator releases the key: refused, naming the key, nothing moved
    with pytest.raises(CorruptState) as refused:
        broker.operator.release_key(queue_name, CONSUMER, "a")
    assert refused.value.key == gk.held_back
    assert broker.client.hget(gk.holders, "a") == first.id.encode()
    assert broker.client.llen(gk.waiting("a")) == 1 and broker.client.xlen(gk.direct) == 0
    # And once repaired, the release hands the key on: the second is delivered once
    broker.client.set(gk.held_back, 1)
    assert broker.operator.release_key(queue_name, CONSUMER, "a") is True
    sub.ack([first])  # the first finishes after all: its key is no longer its own
    assert all_handled(sub, 1) == [second]
    settled_state(broker.client, gk)


def test_release_key_of_a_key_nobody_holds_writes_nothing(broker: Broker, queue_name: str) -> None:
    sub, _ = two_of_key_a(broker, queue_name)
    broker.client.set(sub.gkeys.held_back, "junk")  # not read: nothing to hand on
    assert broker.operator.release_key(queue_name, CONSUMER, "nobody") is False
    assert broker.client.xlen(sub.gkeys.direct) == 0


# -- the hand-over and the checks are written once (core/scripts/fragments/) -------------


def test_ack_ordered_fail_and_release_share_the_same_checks_and_hand_over_text() -> None:
    # One fragment each, shipped whole in each script (test_scripts_assembly.py checks
    # that no source copies a fragment's text instead of including it)
    for name in ("ack_ordered.lua", "fail.lua", "release_key.lua"):
        text = (SCRIPTS / name).read_text()
        assert text.count(fragment("hand_over")) == 1, name
        assert text.count(fragment("foreign_state")) == 1, name


@pytest.mark.parametrize("name", ["read_ordered.lua", "ordered_purge.lua", "release_key.lua"])
def test_every_ordered_script_checks_with_the_same_words(name: str) -> None:
    assert (SCRIPTS / name).read_text().count(fragment("foreign_state")) == 1


# -- retention: archive positions and marks of what it removed ---------------------------


def trim_keys(qk: QueueKeys) -> list[str]:
    return [qk.log, qk.meta, qk.archives]


@pytest.mark.parametrize(
    ("where", "field"),
    [
        ("archives", "fsck:messages"),
        ("meta", "last_trimmed"),
        ("meta", "archive:messages"),
    ],
)
@pytest.mark.parametrize("bad", ["garbage", "12-x", "", "1-2-3"])
def test_trim_refuses_a_position_that_is_no_entry_id_before_removing_anything(
    broker: Broker, queue_name: str, where: str, field: str, bad: str
) -> None:
    # Given a log of 10 acknowledged entries, an archive at entry 5, and a position or
    # mark another client wrote
    qk = broker.keys(queue_name)
    broker.consumers.ensure(queue_name, "billing", "earliest")
    ids = broker.publish_many(queue_name, [{"n": i} for i in range(10)])
    sub = broker.subscribe(queue_name, "billing", "b1")
    sub.ack(sub.fetch(count=10, block_ms=0))
    broker.client.hset(qk.archives, "fsck:messages", ids[4])
    key = qk.archives if where == "archives" else qk.meta
    broker.client.hset(key, field, bad)
    try:
        # When retention runs (no replay window: everything acked may go)
        with pytest.raises(redis.ResponseError) as refused:
            broker.scripts("trim", trim_keys(qk), ["", 0, 0, 0, 0, 1000])
        # Then it is refused naming the key and field, and nothing was removed
        assert_names(refused.value, key)
        assert field in str(refused.value)
        assert broker.client.xlen(qk.log) == 10
        assert CorruptState(refused.value).key == key
        # And once repaired, it trims behind the archive only
        if where == "archives":
            broker.client.hset(key, field, ids[4])
        else:
            broker.client.hdel(key, field)
        broker.scripts("trim", trim_keys(qk), ["", 0, 0, 0, 0, 1000])
        assert [i.decode() for i, _ in broker.client.xrange(qk.log)] == ids[5:]
    finally:  # listings of every archive in the server (other tests) must not see it
        broker.client.delete(qk.archives)


def test_archive_register_refuses_a_mark_that_is_no_entry_id(
    broker: Broker, queue_name: str
) -> None:
    qk = broker.keys(queue_name)
    broker.publish(queue_name, {"n": 1})
    broker.client.hset(qk.meta, "last_trimmed", "yesterday")
    try:
        with pytest.raises(CorruptState) as refused:
            broker.archives.register(queue_name, "fsck", "messages", "earliest")
        assert refused.value.key == qk.meta
        assert "last_trimmed" in str(refused.value)
        assert broker.client.hget(qk.archives, "fsck:messages") is None
    finally:  # jobs archiving every queue of the server (other tests) must not see it
        broker.client.hdel(qk.meta, "last_trimmed")
