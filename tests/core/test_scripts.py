"""Contract tests of every Lua script in ``core/scripts``, called directly.

Each test sets up Redis with raw commands, calls one script through
``Broker.scripts(name, keys, args)`` with keys from ``core/keys.py`` (as its header
documents), and checks the resulting Redis state with raw commands. They hold on
Redis 6.2 and 7.x.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from redisq_django.core.broker import Broker
from redisq_django.core.keys import GroupKeys, QueueKeys
from tests.core.guarantee_helpers import age_pending

G = "billing"
MAX_SEQ = 2**64 - 1


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def create_group(r: redis.Redis, gk: GroupKeys, log_id: str = "0-0") -> None:
    r.xgroup_create(gk.queue_keys.log, G, id=log_id, mkstream=True)
    r.xgroup_create(gk.direct, G, id="0-0", mkstream=True)


def add(r: redis.Redis, stream: str, n: int, **fields: str) -> list[bytes]:
    return [r.xadd(stream, {"payload": str(i), **fields}) for i in range(n)]


def read(r: redis.Redis, stream: str, consumer: str, count: int = 100) -> list[bytes]:
    """Deliver up to ``count`` new entries of ``stream`` to ``consumer``; their ids."""
    reply = r.xreadgroup(G, consumer, {stream: ">"}, count=count)
    return [entry_id for entry_id, _ in reply[0][1]] if reply else []


def pending(r: redis.Redis, stream: str) -> list[tuple[bytes, bytes, int]]:
    """(id, owner, delivery count) of every pending entry of ``stream``."""
    rows = r.xpending_range(stream, G, "-", "+", 1000)
    return [(row["message_id"], row["consumer"], row["times_delivered"]) for row in rows]


def idle_ms(r: redis.Redis, stream: str, entry_id: bytes) -> int:
    rows = r.xpending_range(stream, G, entry_id, entry_id, 1)
    return int(rows[0]["time_since_delivered"])


def ids(r: redis.Redis, stream: str) -> list[bytes]:
    return [entry_id for entry_id, _ in r.xrange(stream)]


def groups(r: redis.Redis, stream: str) -> dict[bytes, bytes]:
    """Group name -> last-delivered id."""
    return {g["name"]: g["last-delivered-id"] for g in r.xinfo_groups(stream)}


def consumers(r: redis.Redis, stream: str) -> set[bytes]:
    return {c["name"] for c in r.xinfo_consumers(stream, G)}


def as_dict(flat: list[Any]) -> dict[Any, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


# == ensure_consumer.lua =================================================================


def test_ensure_consumer_creates_both_groups_and_streams(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given a log with two entries and no direct stream
    redis_client.xadd(qk.log, {"payload": "1"}, id="1-0")
    redis_client.xadd(qk.log, {"payload": "2"}, id="2-0")
    # When the consumer is ensured after 1-0
    created = broker.scripts("ensure_consumer", [qk.meta, qk.log, gk.direct], [1, G, "1-0"])
    # Then the group sits at 1-0 on the log and at 0-0 on the new direct stream
    assert created == 1
    assert groups(redis_client, qk.log) == {G.encode(): b"1-0"}
    assert redis_client.type(gk.direct) == b"stream"
    assert groups(redis_client, gk.direct) == {G.encode(): b"0-0"}
    assert read(redis_client, qk.log, "c1") == [b"2-0"]


def test_ensure_consumer_creates_missing_log(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    assert broker.scripts("ensure_consumer", [qk.meta, qk.log, gk.direct], [1, G, "$"]) == 1
    assert redis_client.type(qk.log) == b"stream"
    assert redis_client.xlen(qk.log) == 0
    assert groups(redis_client, qk.log) == {G.encode(): b"0-0"}


def test_ensure_consumer_twice_leaves_the_group_where_it_is(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given a consumer created at 5-0 that has since read 7-0
    for entry_id in ("5-0", "6-0", "7-0", "8-0"):
        redis_client.xadd(qk.log, {"payload": "x"}, id=entry_id)
    assert broker.scripts("ensure_consumer", [qk.meta, qk.log, gk.direct], [1, G, "5-0"]) == 1
    assert read(redis_client, qk.log, "c1", count=2) == [b"6-0", b"7-0"]
    # When it is ensured again with another start point
    again = broker.scripts("ensure_consumer", [qk.meta, qk.log, gk.direct], [1, G, "0-0"])
    # Then nothing was created and its positions did not move
    assert again == 0
    assert groups(redis_client, qk.log) == {G.encode(): b"7-0"}
    assert groups(redis_client, gk.direct) == {G.encode(): b"0-0"}
    assert read(redis_client, qk.log, "c1") == [b"8-0"]


def test_ensure_consumer_recreates_a_missing_direct_group(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given the group exists on the log but its direct stream was deleted
    broker.scripts("ensure_consumer", [qk.meta, qk.log, gk.direct], [1, G, "$"])
    redis_client.delete(gk.direct)
    # When ensured again
    assert broker.scripts("ensure_consumer", [qk.meta, qk.log, gk.direct], [1, G, "$"]) == 0
    # Then the direct side is back
    assert groups(redis_client, gk.direct) == {G.encode(): b"0-0"}


def test_ensure_consumer_reports_errors_other_than_busygroup(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    redis_client.set(qk.log, "not a stream")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        broker.scripts("ensure_consumer", [qk.meta, qk.log, gk.direct], [1, G, "$"])


# == promote.lua =========================================================================


def member(**fields: Any) -> str:
    return json.dumps(fields)


def promote_keys(qk: QueueKeys, gk: GroupKeys) -> list[str]:
    return [qk.delayed, qk.log, gk.retry, gk.direct]


def test_promote_moves_due_members_and_returns_next_due(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given delayed messages due at 1000, 2000, 5000 and retries due at 1500, 9000
    redis_client.zadd(
        qk.delayed,
        {
            member(payload="1", id="d1"): 1000,
            member(payload="2", id="d2"): 2000,
            member(payload="5", id="d5"): 5000,
        },
    )
    redis_client.zadd(gk.retry, {member(payload="r", id="r1"): 1500, member(id="r9"): 9000})
    # When promoted at 3000
    result = broker.scripts("promote", promote_keys(qk, gk), [3000, 100])
    # Then 2 delayed went to the log (in due order), 1 retry to the direct stream,
    # and the next due time is 5000
    assert result == [2, 1, 5000, 3000]  # the last: the "now" it used
    log = redis_client.xrange(qk.log)
    assert [fields for _, fields in log] == [
        {b"payload": b"1", b"id": b"d1"},
        {b"payload": b"2", b"id": b"d2"},
    ]
    assert [f for _, f in redis_client.xrange(gk.direct)] == [{b"payload": b"r", b"id": b"r1"}]
    # and what was not due stayed
    assert redis_client.zrange(qk.delayed, 0, -1, withscores=True) == [
        (member(payload="5", id="d5").encode(), 5000.0)
    ]
    assert redis_client.zrange(gk.retry, 0, -1, withscores=True) == [
        (member(id="r9").encode(), 9000.0)
    ]


def test_promote_next_due_is_the_earliest_of_both_zsets(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    redis_client.zadd(qk.delayed, {member(payload="1"): 8000})
    redis_client.zadd(gk.retry, {member(payload="1"): 7000})
    assert broker.scripts("promote", promote_keys(qk, gk), [3000, 100]) == [0, 0, 7000, 3000]
    assert redis_client.exists(qk.log, gk.direct) == 0


def test_promote_with_nothing_left_returns_minus_one(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    assert broker.scripts("promote", promote_keys(qk, gk), [3000, 100]) == [0, 0, -1, 3000]
    redis_client.zadd(qk.delayed, {member(payload="1"): 3000})  # due exactly now
    assert broker.scripts("promote", promote_keys(qk, gk), [3000, 100]) == [1, 0, -1, 3000]
    assert redis_client.xlen(qk.log) == 1
    assert redis_client.exists(qk.delayed) == 0


def test_promote_limit_bounds_the_entries_moved_per_zset(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given 5 due delayed messages and 3 due retries
    redis_client.zadd(qk.delayed, {member(payload=str(i)): 100 + i for i in range(5)})
    redis_client.zadd(gk.retry, {member(payload=f"r{i}"): 200 + i for i in range(3)})
    # When promoted with a limit of 2
    result = broker.scripts("promote", promote_keys(qk, gk), [1000, 2])
    # Then 2 moved from each zset, the earliest ones, and the next due is already past
    assert result == [2, 2, 102, 1000]
    assert [f[b"payload"] for _, f in redis_client.xrange(qk.log)] == [b"0", b"1"]
    assert [f[b"payload"] for _, f in redis_client.xrange(gk.direct)] == [b"r0", b"r1"]
    assert redis_client.zcard(qk.delayed) == 3
    assert redis_client.zcard(gk.retry) == 1
    # and further calls drain the rest
    assert broker.scripts("promote", promote_keys(qk, gk), [1000, 2]) == [2, 1, 104, 1000]
    assert broker.scripts("promote", promote_keys(qk, gk), [1000, 2]) == [1, 0, -1, 1000]
    assert [f[b"payload"] for _, f in redis_client.xrange(qk.log)] == [
        b"0",
        b"1",
        b"2",
        b"3",
        b"4",
    ]


def test_promote_without_group_keys_only_moves_delayed(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    redis_client.zadd(qk.delayed, {member(payload="1"): 10, member(payload="2"): 50})
    assert broker.scripts("promote", [qk.delayed, qk.log], [20, 10]) == [1, 0, 50, 20]
    assert [f for _, f in redis_client.xrange(qk.log)] == [{b"payload": b"1"}]


@pytest.mark.parametrize(
    "text", ["not json", '"a string"', "42", "{}", "[]", "[1,2]", '{"payload": ']
)
def test_promote_moves_a_member_that_is_not_a_json_object_as_raw(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys, text: str
) -> None:
    # Given a delayed member that is not a JSON object (e.g. written by another client)
    redis_client.zadd(qk.delayed, {text: 10})
    # When promoted
    assert broker.scripts("promote", promote_keys(qk, gk), [20, 10]) == [1, 0, -1, 20]
    # Then it is in the log as one field "raw" holding the member unchanged
    assert [f for _, f in redis_client.xrange(qk.log)] == [{b"raw": text.encode()}]
    assert redis_client.zcard(qk.delayed) == 0


@pytest.mark.parametrize(
    "value",
    [3, 12345678901234567, 1.5, True, {"k": "v"}, [], ["x", "y"]],
    ids=["int", "big-int", "float", "bool", "object", "empty-array", "array"],
)
def test_promote_moves_a_member_with_a_value_that_is_not_a_string_unchanged_as_raw(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys, value: Any
) -> None:
    # Given a retry member with one value that is not a string (Lua's cjson would
    # re-encode it: 12345678901234567 as 1.2345678901235e+16, [] as {})
    text = member(payload='{"a":1}', id="m-1", extra=value)
    redis_client.zadd(gk.retry, {text: 10})
    # When promoted
    assert broker.scripts("promote", promote_keys(qk, gk), [20, 10]) == [0, 1, -1, 20]
    # Then it arrives as one field "raw" holding the member byte for byte (the consumer
    # makes it an undecodable dead letter), never re-encoded
    assert [f for _, f in redis_client.xrange(gk.direct)] == [{b"raw": text.encode()}]
    assert redis_client.zcard(gk.retry) == 0


def test_promote_drops_fields_whose_value_is_null(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given a delayed member with a JSON null (another client's "no headers")
    redis_client.zadd(qk.delayed, {member(payload='{"a":1}', headers=None): 10})
    # When promoted
    broker.scripts("promote", promote_keys(qk, gk), [20, 10])
    # Then the null field is absent, as if it had never been written
    assert [f for _, f in redis_client.xrange(qk.log)] == [{b"payload": b'{"a":1}'}]


def test_promote_keeps_utf8_and_escapes_in_string_values(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    payload = json.dumps({"text": 'é\u2028"\\\n\x00😀'}, ensure_ascii=False)
    redis_client.zadd(qk.delayed, {json.dumps({"payload": payload}, ensure_ascii=False): 1})
    broker.scripts("promote", promote_keys(qk, gk), [2, 10])
    [(_, fields)] = redis_client.xrange(qk.log)
    assert fields == {b"payload": payload.encode()}


# == the settle layout (ack.lua, fail.lua; PROTOCOL.md "The settle layout") =============


def settle_keys(qk: QueueKeys, gk: GroupKeys) -> list[str]:
    """The seven KEYS of every settling script, in their order."""
    return [qk.log, gk.direct, gk.retry, gk.dead, gk.holders, gk.held_back, qk.events]


def settle_args(
    instance: str, entries: list[tuple[str, Any]], event: tuple[Any, ...] = (), *own: Any
) -> list[Any]:
    """ARGV (after the token) of a settle of ``entries`` (``(stream, entry id)``; their
    message id is the entry id, no ordering key) by ``instance`` of a consumer that is
    not ordered, with ``event``'s pairs and the script's ``own`` arguments."""
    args: list[Any] = [G, instance, "", len(entries)]
    for stream, entry_id in entries:
        args += [stream, entry_id, entry_id, ""]
    return [*args, len(event) // 2, *event, *own]


def ack_entries(log: list[bytes], direct: list[Any]) -> list[tuple[str, Any]]:
    return [("log", i) for i in log] + [("direct", i) for i in direct]


# == ack.lua =============================================================================


def test_ack_acks_log_ids_and_acks_and_deletes_direct_ids(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given three log entries and two direct entries delivered to c1
    create_group(redis_client, gk)
    log = add(redis_client, qk.log, 3)
    direct = add(redis_client, gk.direct, 2)
    assert read(redis_client, qk.log, "c1") == log
    assert read(redis_client, gk.direct, "c1") == direct
    # When two log ids and one direct id are acked
    args = settle_args("c1", ack_entries(log[:2], direct[:1]))
    acked = broker.scripts("ack", settle_keys(qk, gk), args)
    # Then three were acked; log entries stay (history), the direct one is deleted
    assert acked == 3
    assert pending(redis_client, qk.log) == [(log[2], b"c1", 1)]
    assert ids(redis_client, qk.log) == log
    assert pending(redis_client, gk.direct) == [(direct[1], b"c1", 1)]
    assert ids(redis_client, gk.direct) == [direct[1]]
    # When the same ids are acked again, they count 0
    again = broker.scripts("ack", settle_keys(qk, gk), args)
    assert again == 0
    assert pending(redis_client, qk.log) == [(log[2], b"c1", 1)]


def test_ack_only_direct_ids(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    create_group(redis_client, gk)
    direct = add(redis_client, gk.direct, 2)
    read(redis_client, gk.direct, "c1")
    assert (
        broker.scripts("ack", settle_keys(qk, gk), settle_args("c1", ack_entries([], direct))) == 2
    )
    assert redis_client.xlen(gk.direct) == 0
    assert pending(redis_client, gk.direct) == []


def test_ack_of_ids_never_delivered_counts_zero(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    create_group(redis_client, gk)
    log = add(redis_client, qk.log, 1)
    args = settle_args("c1", ack_entries(log[:1], ["99-0"]))
    assert broker.scripts("ack", settle_keys(qk, gk), args) == 0
    assert redis_client.xlen(qk.log) == 1


def test_ack_of_a_large_batch(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given 1200 delivered log entries (more than the script's chunk of 500)
    create_group(redis_client, gk)
    with redis_client.pipeline() as pipe:
        for i in range(1200):
            pipe.xadd(qk.log, {"payload": str(i)})
        log = pipe.execute()
    assert len(read(redis_client, qk.log, "c1", count=2000)) == 1200
    # When all are acked in one call
    args = settle_args("c1", ack_entries(log, []))
    assert broker.scripts("ack", settle_keys(qk, gk), args) == 1200
    # Then none is pending
    assert redis_client.xpending(qk.log, G)["pending"] == 0


# == fail.lua ============================================================================


def fail_args(
    instance: str, entry_id: bytes, stream: str, mode: str, due: int, **fields: str
) -> list[Any]:
    """fail.lua's ARGV: one entry, no event, then its mode, due time and envelope."""
    flat: list[Any] = []
    for k, v in fields.items():
        flat += [k, v]
    return settle_args(instance, [(stream, entry_id)], (), mode, due, *flat)


def test_fail_retry_acks_and_schedules_the_envelope(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given a log entry delivered to c1
    create_group(redis_client, gk)
    [entry] = add(redis_client, qk.log, 1)
    read(redis_client, qk.log, "c1")
    # When c1 fails it in retry mode, due at 12345
    args = fail_args("c1", entry, "log", "retry", 12345, payload='"x"', id="m1", attempts="1")
    done = broker.scripts("fail", settle_keys(qk, gk), args)
    # Then it is acked (still in the log) and its envelope waits in the retry zset
    assert done == 1
    assert pending(redis_client, qk.log) == []
    assert ids(redis_client, qk.log) == [entry]
    [(raw_member, score)] = redis_client.zrange(gk.retry, 0, -1, withscores=True)
    assert score == 12345
    assert json.loads(raw_member) == {"payload": '"x"', "id": "m1", "attempts": "1"}
    assert redis_client.exists(gk.dead) == 0


def test_fail_dead_writes_the_dead_letter(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    create_group(redis_client, gk)
    [entry] = add(redis_client, qk.log, 1)
    read(redis_client, qk.log, "c1")
    args = fail_args("c1", entry, "log", "dead", 0, payload="1", reason="failed", error_class="E")
    assert broker.scripts("fail", settle_keys(qk, gk), args) == 1
    assert pending(redis_client, qk.log) == []
    [(_, fields)] = redis_client.xrange(gk.dead)
    assert list(fields.items()) == [
        (b"payload", b"1"),
        (b"reason", b"failed"),
        (b"error_class", b"E"),
    ]
    assert redis_client.exists(gk.retry) == 0


@pytest.mark.parametrize(
    ("mode", "broken"), [("retry", "retry"), ("dead", "dead"), ("retry", "events")]
)
def test_fail_with_a_key_of_the_wrong_type_writes_nothing_and_keeps_the_entry_pending(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys, mode: str, broken: str
) -> None:
    # Given a delivered entry, and the retry set, dead stream or events stream taken by a
    # string (an operator's mistake, another program)
    create_group(redis_client, gk)
    [entry] = add(redis_client, qk.log, 1)
    read(redis_client, qk.log, "c1")
    taken = {"retry": gk.retry, "dead": gk.dead, "events": qk.events}
    redis_client.set(taken[broken], "not mine")
    event = ("e", "retried", "g", G)
    args = settle_args("c1", [("log", entry)], event, mode, 12345, "payload", "1")
    # When c1 fails it, then the script refuses before writing anything
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        broker.scripts("fail", settle_keys(qk, gk), args)
    # And the entry is still pending for c1: retried later instead of lost
    assert [p[0] for p in pending(redis_client, qk.log)] == [entry]
    for key in taken.values():
        assert redis_client.type(key) in (b"none", b"string")


def test_fail_from_direct_deletes_the_entry(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given a direct entry delivered to c1 (a retry being retried)
    create_group(redis_client, gk)
    [entry, other] = add(redis_client, gk.direct, 2)
    read(redis_client, gk.direct, "c1")
    # When it fails again, named as a direct entry
    args = fail_args("c1", entry, "direct", "retry", 500, payload="0")
    assert broker.scripts("fail", settle_keys(qk, gk), args) == 1
    # Then it is acked and deleted from the direct stream
    assert ids(redis_client, gk.direct) == [other]
    assert pending(redis_client, gk.direct) == [(other, b"c1", 1)]
    assert redis_client.zrange(gk.retry, 0, -1, withscores=True) == [(b'{"payload":"0"}', 500.0)]


def test_fail_of_an_entry_owned_by_another_consumer_changes_nothing(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given an entry now owned by c2 (it took the entry over from c1)
    create_group(redis_client, gk)
    [entry] = add(redis_client, gk.direct, 1)
    read(redis_client, gk.direct, "c2")
    # When c1 tries to fail it, in either mode
    for mode in ("retry", "dead"):
        args = fail_args("c1", entry, "direct", mode, 500, payload="0")
        assert broker.scripts("fail", settle_keys(qk, gk), args) == 0
    # Then it is still pending for c2, still there, and nothing was written
    assert pending(redis_client, gk.direct) == [(entry, b"c2", 1)]
    assert ids(redis_client, gk.direct) == [entry]
    assert redis_client.exists(gk.retry, gk.dead) == 0


def test_fail_of_an_entry_no_longer_pending_returns_zero(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    create_group(redis_client, gk)
    [entry] = add(redis_client, qk.log, 1)
    read(redis_client, qk.log, "c1")
    redis_client.xack(qk.log, G, entry)
    args = fail_args("c1", entry, "log", "dead", 0, payload="0")
    assert broker.scripts("fail", settle_keys(qk, gk), args) == 0
    assert redis_client.exists(gk.retry, gk.dead) == 0


def test_fail_with_empty_consumer_skips_the_ownership_check(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    create_group(redis_client, gk)
    [entry] = add(redis_client, qk.log, 1)
    read(redis_client, qk.log, "c2")
    args = fail_args("", entry, "log", "dead", 0, payload="0")
    assert broker.scripts("fail", settle_keys(qk, gk), args) == 1
    assert pending(redis_client, qk.log) == []
    assert redis_client.xlen(gk.dead) == 1


# == extend.lua ==========================================================================


def test_extend_resets_idle_time_of_owned_entries_and_returns_the_rest(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given c1 holds log entries L1, L2 and direct entry D1, c2 holds L3,
    # and all have been idle for 200 ms
    create_group(redis_client, gk)
    l1, l2, l3 = add(redis_client, qk.log, 3)
    [d1] = add(redis_client, gk.direct, 1)
    assert read(redis_client, qk.log, "c1", count=2) == [l1, l2]
    assert read(redis_client, qk.log, "c2") == [l3]
    assert read(redis_client, gk.direct, "c1") == [d1]
    for stream in (qk.log, gk.direct):
        age_pending(redis_client, stream, G, 200)
    assert min(idle_ms(redis_client, s, e) for s, e in [(qk.log, l1), (gk.direct, d1)]) >= 200
    # When c1 extends L1, L2, L3, an entry no longer pending and D1
    [settled] = add(redis_client, qk.log, 1)
    lost = broker.scripts(
        "extend",
        [qk.log, gk.direct],
        [G, "c1", 4, l1, l2, l3, settled, d1],
    )
    # Then the ids another consumer owns now are returned (a settled one is not)
    assert lost == [l3]
    # and its own entries are fresh again, with their delivery count unchanged
    for stream, entry in [(qk.log, l1), (qk.log, l2), (gk.direct, d1)]:
        assert idle_ms(redis_client, stream, entry) < 100
    assert idle_ms(redis_client, qk.log, l3) >= 200
    assert pending(redis_client, qk.log) == [(l1, b"c1", 1), (l2, b"c1", 1), (l3, b"c2", 1)]
    assert pending(redis_client, gk.direct) == [(d1, b"c1", 1)]


def test_extend_with_no_ids_returns_nothing(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    create_group(redis_client, gk)
    assert broker.scripts("extend", [qk.log, gk.direct], [G, "c1", 0]) == []


# == reclaim.lua =========================================================================


def reclaim(
    broker: Broker,
    qk: QueueKeys,
    gk: GroupKeys,
    me: str,
    min_idle: int,
    limit: int = 10,
    now: int | None = None,
    cursors: tuple[str, str] = ("0-0", "0-0"),
) -> tuple[Any, Any, list[tuple[bytes, dict[bytes, bytes], int]], list[Any]]:
    cur_log, cur_direct, log, direct = broker.scripts(
        "reclaim",
        [qk.log, gk.direct, gk.instances],
        [G, me, min_idle, limit, now if now is not None else now_ms(), *cursors],
    )

    def entries(raw: list[Any]) -> list[tuple[bytes, dict[bytes, bytes], int]]:
        return [(e[0], as_dict(e[1]), e[2]) for e in raw]

    return cur_log, cur_direct, entries(log), entries(direct)


def test_reclaim_claims_idle_entries_and_ignores_fresh_ones(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given c1 holds L1 and D1 for 200 ms and has just received L2
    create_group(redis_client, gk)
    l1, l2 = add(redis_client, qk.log, 2)
    [d1] = add(redis_client, gk.direct, 1)
    read(redis_client, qk.log, "c1", count=1)
    read(redis_client, gk.direct, "c1")
    for stream in (qk.log, gk.direct):
        age_pending(redis_client, stream, G, 200)
    read(redis_client, qk.log, "c1")
    # When c2 reclaims entries idle for more than 150 ms
    cur_log, cur_direct, log, direct = reclaim(broker, qk, gk, "c2", 150)
    # Then it got L1 and D1 with their fields, each delivered twice now
    assert log == [(l1, {b"payload": b"0"}, 2)]
    assert direct == [(d1, {b"payload": b"0"}, 2)]
    assert (cur_log, cur_direct) == (b"0-0", b"0-0")
    # and L2 is still c1's
    assert pending(redis_client, qk.log) == [(l1, b"c2", 2), (l2, b"c1", 1)]
    assert pending(redis_client, gk.direct) == [(d1, b"c2", 2)]


def test_reclaim_respects_the_limit_and_returns_a_cursor(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    create_group(redis_client, gk)
    log_ids = add(redis_client, qk.log, 5)
    read(redis_client, qk.log, "c1")
    age_pending(redis_client, qk.log, G, 20)
    cur_log, _, log, _ = reclaim(broker, qk, gk, "c2", 10, limit=2)
    assert [e[0] for e in log] == log_ids[:2]
    assert cur_log == log_ids[2]
    cur_log, _, log, _ = reclaim(broker, qk, gk, "c2", 10, limit=2, cursors=(cur_log, "0-0"))
    assert [e[0] for e in log] == log_ids[2:4]


def test_reclaim_takes_everything_from_an_instance_whose_heartbeat_expired(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given c1 (heartbeat expired) holds L1 and D1 delivered just now, c2 is alive
    create_group(redis_client, gk)
    [l1] = add(redis_client, qk.log, 1)
    [d1] = add(redis_client, gk.direct, 1)
    read(redis_client, qk.log, "c1")
    read(redis_client, gk.direct, "c1")
    now = now_ms()
    redis_client.zadd(gk.instances, {"c1": now - 1000, "c2": now + 60_000})
    # When c2 reclaims, with a visibility timeout far from reached
    _, _, log, direct = reclaim(broker, qk, gk, "c2", 60_000, now=now)
    # Then it took both at once, each delivered twice now
    assert log == [(l1, {b"payload": b"0"}, 2)]
    assert direct == [(d1, {b"payload": b"0"}, 2)]
    assert pending(redis_client, qk.log) == [(l1, b"c2", 2)]
    # and c1 is gone from both groups and from the instances
    assert consumers(redis_client, qk.log) == {b"c2"}
    assert consumers(redis_client, gk.direct) == {b"c2"}
    assert redis_client.zrange(gk.instances, 0, -1) == [b"c2"]


@pytest.mark.parametrize("dead", [False, True])
def test_reclaim_counts_a_delivery_only_for_the_entry_its_instance_started(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys, dead: bool
) -> None:
    # Given c1 fetched L1, L2, L3 and D1 and recorded in `running` that it started L2
    # (it then died: heartbeat expired, or its leases simply ran out), and c0 fetched
    # L4 without ever recording anything (a client that writes no `running`)
    create_group(redis_client, gk)
    l1, l2, l3, l4 = add(redis_client, qk.log, 4)
    [d1] = add(redis_client, gk.direct, 1)
    read(redis_client, qk.log, "c1", count=3)
    read(redis_client, gk.direct, "c1")
    read(redis_client, qk.log, "c0")
    redis_client.hset(gk.running, mapping={"c1": b"log:" + l2, "c9": "direct:1-1"})
    now = now_ms()
    if dead:
        redis_client.zadd(gk.instances, {"c1": now - 1000, "c0": now - 1000})
    else:
        for stream in (qk.log, gk.direct):
            age_pending(redis_client, stream, G, 200)
    # When c2 reclaims, passing `running`
    _, _, log, direct = broker.scripts(
        "reclaim",
        [qk.log, gk.direct, gk.instances, gk.running],
        [G, "c2", 60_000 if dead else 150, 10, now, "0-0", "0-0"],
    )
    # Then only L2 (started) and L4 (c0 records nothing) count a delivery; L1, L3, D1
    # were never started and keep their count
    got = {e[0]: e[2] for e in [*log, *direct]}
    assert got == {l1: 1, l2: 2, l3: 1, l4: 2, d1: 1}
    assert {(i, n) for i, _, n in pending(redis_client, qk.log)} == {
        (l1, 1), (l2, 2), (l3, 1), (l4, 2)
    }  # fmt: skip
    # and c1's record is used up: a second takeover of L2 before it starts again
    # does not count again
    assert redis_client.hget(gk.running, "c1") == (None if dead else b"")
    assert redis_client.hget(gk.running, "c9") == b"direct:1-1"


def test_reclaim_from_several_dead_instances_stays_within_the_limit(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given three dead instances holding 3 log entries each
    create_group(redis_client, gk)
    add(redis_client, qk.log, 9)
    for name in ("c1", "c2", "c3"):
        read(redis_client, qk.log, name, count=3)
    now = now_ms()
    redis_client.zadd(gk.instances, {"c1": now - 1, "c2": now - 1, "c3": now - 1})
    # When c9 reclaims with a limit of 4, twice more to finish
    _, _, first, _ = reclaim(broker, qk, gk, "c9", 60_000, limit=4, now=now)
    _, _, second, _ = reclaim(broker, qk, gk, "c9", 60_000, limit=4, now=now)
    _, _, third, _ = reclaim(broker, qk, gk, "c9", 60_000, limit=4, now=now)
    # Then no call returns more than 4, and together they took all 9 exactly once
    assert [len(first), len(second), len(third)] == [4, 4, 1]
    assert len({e[0] for e in first + second + third}) == 9
    assert redis_client.zcard(gk.instances) == 0


def test_reclaim_keeps_a_dead_instance_until_it_holds_nothing(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given an expired c1 holding three log entries
    create_group(redis_client, gk)
    l1, l2, l3 = add(redis_client, qk.log, 3)
    read(redis_client, qk.log, "c1")
    now = now_ms()
    redis_client.zadd(gk.instances, {"c1": now - 1})
    # When c2 reclaims at most 2
    _, _, log, _ = reclaim(broker, qk, gk, "c2", 60_000, limit=2, now=now)
    # Then it took 2, and c1 is kept: it still holds one
    assert [e[0] for e in log] == [l1, l2]
    assert consumers(redis_client, qk.log) == {b"c1", b"c2"}
    assert redis_client.zrange(gk.instances, 0, -1) == [b"c1"]
    # When c2 reclaims again, it takes the last one and c1 is forgotten
    _, _, log, _ = reclaim(broker, qk, gk, "c2", 60_000, limit=2, now=now)
    assert [e[0] for e in log] == [l3]
    assert consumers(redis_client, qk.log) == {b"c2"}
    assert redis_client.zcard(gk.instances) == 0


def test_reclaim_leaves_live_instances_and_itself_alone(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given live c1 and expired c2 (the caller itself) each holding a fresh entry
    create_group(redis_client, gk)
    l1, l2 = add(redis_client, qk.log, 2)
    read(redis_client, qk.log, "c1", count=1)
    read(redis_client, qk.log, "c2", count=1)
    now = now_ms()
    redis_client.zadd(gk.instances, {"c1": now + 60_000, "c2": now - 1})
    # When c2 reclaims
    _, _, log, direct = reclaim(broker, qk, gk, "c2", 60_000, now=now)
    # Then nothing was claimed, and no instance removed
    assert (log, direct) == ([], [])
    assert pending(redis_client, qk.log) == [(l1, b"c1", 1), (l2, b"c2", 1)]
    assert redis_client.zcard(gk.instances) == 2


def test_reclaim_skips_entries_deleted_while_pending(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given c1 holds L1 and L2 for 200 ms, and L1 was deleted (e.g. by a hard cap)
    create_group(redis_client, gk)
    l1, l2 = add(redis_client, qk.log, 2)
    read(redis_client, qk.log, "c1")
    redis_client.xdel(qk.log, l1)
    age_pending(redis_client, qk.log, G, 200)
    # When c2 reclaims idle entries
    _, _, log, _ = reclaim(broker, qk, gk, "c2", 150)
    # Then only L2 is returned, and L1 is no longer pending for anyone
    assert log == [(l2, {b"payload": b"1"}, 2)]
    assert pending(redis_client, qk.log) == [(l2, b"c2", 2)]


def test_reclaim_from_a_dead_instance_skips_deleted_entries(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given expired c1 holds L1 and L2, and L1 was deleted while pending
    create_group(redis_client, gk)
    l1, l2 = add(redis_client, qk.log, 2)
    read(redis_client, qk.log, "c1")
    redis_client.xdel(qk.log, l1)
    now = now_ms()
    redis_client.zadd(gk.instances, {"c1": now - 1})
    # When c2 reclaims
    _, _, log, _ = reclaim(broker, qk, gk, "c2", 60_000, now=now)
    # Then it gets L2 only; L1 is not pending any more and c1 is forgotten
    assert log == [(l2, {b"payload": b"1"}, 2)]
    assert pending(redis_client, qk.log) == [(l2, b"c2", 2)]
    assert consumers(redis_client, qk.log) == {b"c2"}
    assert redis_client.zcard(gk.instances) == 0


# == redrive.lua =========================================================================


def test_redrive_moves_a_dead_letter_to_the_direct_stream(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given two dead letters
    dead_id = redis_client.xadd(gk.dead, {"payload": "1", "reason": "failed"})
    other = redis_client.xadd(gk.dead, {"payload": "2"})
    # When the first is re-driven with its envelope
    new_id = broker.scripts(
        "redrive", [qk.meta, gk.dead, gk.direct], [1, dead_id, "payload", "1", "id", "m"]
    )
    # Then it left the dead stream and is the one entry of the direct stream
    assert ids(redis_client, gk.dead) == [other]
    assert redis_client.xrange(gk.direct) == [(new_id, {b"payload": b"1", b"id": b"m"})]
    # When re-driven again (someone did it first), nothing is written
    again = broker.scripts("redrive", [qk.meta, gk.dead, gk.direct], [1, dead_id, "payload", "1"])
    assert again is None
    assert redis_client.xlen(gk.direct) == 1


def test_redrive_without_dead_id_only_adds(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    dead_id = redis_client.xadd(gk.dead, {"payload": "1"})
    new_id = broker.scripts("redrive", [qk.meta, gk.dead, gk.direct], [1, "", "payload", "7"])
    assert redis_client.xrange(gk.direct) == [(new_id, {b"payload": b"7"})]
    assert ids(redis_client, gk.dead) == [dead_id]


# == trim.lua ============================================================================

TEN = [f"{i * 1000}-0".encode() for i in range(1, 11)]  # 1000-0 .. 10000-0


@pytest.fixture
def log10(redis_client: redis.Redis, qk: QueueKeys) -> list[bytes]:
    """A log holding ten entries, 1000-0 to 10000-0."""
    for entry_id in TEN:
        redis_client.xadd(qk.log, {"payload": "x"}, id=entry_id)
    return TEN


def trim(
    broker: Broker,
    qk: QueueKeys,
    *,
    now: int = 10_500,
    window_ms: int = 0,
    window_len: int = 0,
    max_len: int = 0,
    max_age: int = 0,
    batch: int = 1000,
) -> list[int]:
    return broker.scripts(
        "trim",
        [qk.log, qk.meta, qk.archives],
        [now, window_ms, window_len, max_len, max_age, batch],
    )


def consume(r: redis.Redis, stream: str, group: str, n: int, ack: bool = True) -> list[bytes]:
    """Deliver the next ``n`` entries to ``group`` and ack them."""
    reply = r.xreadgroup(group, "c", {stream: ">"}, count=n)
    got = [entry_id for entry_id, _ in reply[0][1]] if reply else []
    if ack and got:
        r.xack(stream, group, *got)
    return got


def test_trim_of_an_empty_or_missing_log(broker: Broker, qk: QueueKeys) -> None:
    assert trim(broker, qk) == [0, 0]


def test_trim_without_groups_removes_nothing(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    assert trim(broker, qk) == [0, 0]
    assert ids(redis_client, qk.log) == log10


def test_trim_removes_what_every_group_has_acked(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    # Given group A acked six entries and group B acked three
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    redis_client.xgroup_create(qk.log, "B", id="0-0")
    consume(redis_client, qk.log, "A", 6)
    consume(redis_client, qk.log, "B", 3)
    # When trimmed with no replay window
    # Then the three both acked are removed
    assert trim(broker, qk) == [3, 0]
    assert ids(redis_client, qk.log) == log10[3:]
    # When B catches up to A, A's six are gone
    consume(redis_client, qk.log, "B", 3)
    assert trim(broker, qk) == [3, 0]
    assert ids(redis_client, qk.log) == log10[6:]
    # When both acked everything, the log is emptied
    consume(redis_client, qk.log, "A", 10)
    consume(redis_client, qk.log, "B", 10)
    assert trim(broker, qk) == [4, 0]
    assert redis_client.xlen(qk.log) == 0
    # And nothing was counted as dropped; the mark says how far retention removed
    assert redis_client.hgetall(qk.meta) == {b"last_trimmed": b"10000-0"}


def test_trim_keeps_entries_not_yet_delivered_to_a_group(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    # Given a group that starts after 4000-0 and has read nothing
    redis_client.xgroup_create(qk.log, "A", id="4000-0")
    # Then everything up to 4000-0 may go, nothing after it
    assert trim(broker, qk) == [4, 0]
    assert ids(redis_client, qk.log) == log10[4:]


def test_trim_stops_at_the_oldest_pending_entry(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    # Given a group that has read eight entries and acked all but 3000-0
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    got = consume(redis_client, qk.log, "A", 8, ack=False)
    redis_client.xack(qk.log, "A", *[i for i in got if i != b"3000-0"])
    # When trimmed
    # Then only what precedes 3000-0 is removed
    assert trim(broker, qk) == [2, 0]
    assert ids(redis_client, qk.log) == log10[2:]
    assert trim(broker, qk) == [0, 0]


def test_trim_keeps_the_replay_window_by_age(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    # Given everything acked
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    consume(redis_client, qk.log, "A", 10)
    # When trimmed at 10500 with a 5000 ms replay window
    # Then entries newer than 5500 stay
    assert trim(broker, qk, now=10_500, window_ms=5000) == [5, 0]
    assert ids(redis_client, qk.log) == log10[5:]
    # and an entry exactly at the window's edge stays too
    assert trim(broker, qk, now=11_000, window_ms=5000) == [0, 0]
    assert trim(broker, qk, now=11_001, window_ms=5000) == [1, 0]
    assert ids(redis_client, qk.log) == log10[6:]


def test_trim_keeps_the_replay_window_by_length(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    consume(redis_client, qk.log, "A", 10)
    assert trim(broker, qk, window_len=12) == [0, 0]
    assert trim(broker, qk, window_len=10) == [0, 0]
    assert trim(broker, qk, window_len=3) == [7, 0]
    assert ids(redis_client, qk.log) == log10[7:]


def test_trim_with_both_windows_keeps_the_larger(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    consume(redis_client, qk.log, "A", 10)
    # age keeps 6000..10000 (five), length keeps the last three: five stay
    assert trim(broker, qk, now=10_500, window_ms=5000, window_len=3) == [5, 0]
    assert ids(redis_client, qk.log) == log10[5:]
    # length keeps four, age (now 20000) none: four stay
    assert trim(broker, qk, now=20_000, window_ms=5000, window_len=4) == [1, 0]
    assert ids(redis_client, qk.log) == log10[6:]


def test_trim_window_never_overrides_what_a_group_needs(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    consume(redis_client, qk.log, "A", 2)
    assert trim(broker, qk, now=10**9, window_ms=1, window_len=1) == [2, 0]
    assert ids(redis_client, qk.log) == log10[2:]


def test_trim_hard_cap_by_length_counts_drops(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    # Given a group that acked the first four entries only
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    consume(redis_client, qk.log, "A", 4)
    # When trimmed with a hard cap of three entries
    # Then the four acked are removed safely and three unacked dropped
    assert trim(broker, qk, max_len=3) == [4, 3]
    assert ids(redis_client, qk.log) == log10[7:]
    assert redis_client.hget(qk.meta, "dropped") == b"3"
    # When trimmed again, nothing more goes
    assert trim(broker, qk, max_len=3) == [0, 0]
    # When two more entries arrive, two more are dropped and the count adds up
    redis_client.xadd(qk.log, {"payload": "x"}, id="11000-0")
    redis_client.xadd(qk.log, {"payload": "x"}, id="12000-0")
    assert trim(broker, qk, max_len=3) == [0, 2]
    assert ids(redis_client, qk.log) == [b"10000-0", b"11000-0", b"12000-0"]
    assert redis_client.hget(qk.meta, "dropped") == b"5"


def test_trim_hard_cap_within_acked_entries_is_no_drop(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    # Given all acked but a replay window keeping all of them
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    consume(redis_client, qk.log, "A", 10)
    # When the hard cap cuts into the window, removals are safe (acked)
    assert trim(broker, qk, window_len=10, max_len=4) == [6, 0]
    assert ids(redis_client, qk.log) == log10[6:]
    assert redis_client.hget(qk.meta, "dropped") is None


def test_trim_hard_cap_without_groups_counts_every_removal_as_dropped(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    assert trim(broker, qk, max_len=4) == [0, 6]
    assert ids(redis_client, qk.log) == log10[6:]
    assert redis_client.hget(qk.meta, "dropped") == b"6"


def test_trim_hard_cap_by_age(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    # Given a group that has read nothing
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    # When trimmed at 10500 with a max age of 3000 ms
    # Then entries older than 7500 are dropped
    assert trim(broker, qk, now=10_500, max_age=3000) == [0, 7]
    assert ids(redis_client, qk.log) == log10[7:]
    assert redis_client.hget(qk.meta, "dropped") == b"7"


def test_trim_batch_bounds_entries_removed_per_call(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    consume(redis_client, qk.log, "A", 10)
    results = [trim(broker, qk, batch=3) for _ in range(5)]
    assert results == [[3, 0], [3, 0], [3, 0], [1, 0], [0, 0]]
    assert redis_client.xlen(qk.log) == 0


def test_trim_batch_bounds_hard_cap_drops_per_call(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, log10: list[bytes]
) -> None:
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    consume(redis_client, qk.log, "A", 2)
    assert trim(broker, qk, max_len=1, batch=4) == [2, 2]
    assert trim(broker, qk, max_len=1, batch=4) == [0, 4]
    assert trim(broker, qk, max_len=1, batch=4) == [0, 1]
    assert trim(broker, qk, max_len=1, batch=4) == [0, 0]
    assert ids(redis_client, qk.log) == log10[9:]
    assert redis_client.hget(qk.meta, "dropped") == b"7"


def test_trim_with_ids_at_max_sequence(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys
) -> None:
    # Given entries with extreme sequence numbers, all acked
    for entry_id in ("5-0", f"5-{MAX_SEQ - 1}", f"5-{MAX_SEQ}", "6-0"):
        redis_client.xadd(qk.log, {"payload": "x"}, id=entry_id)
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    consume(redis_client, qk.log, "A", 3)
    # When trimmed, exactly the three acked go
    assert trim(broker, qk) == [3, 0]
    assert ids(redis_client, qk.log) == [b"6-0"]


def test_send_to_consumer_reaches_that_consumer_only(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    # When two envelopes are sent to billing only
    envelopes = [broker.prepare(queue_name, {"n": n}, id=f"orig-{n}") for n in range(2)]
    entries = broker.consumers.deliver("billing", envelopes)
    assert len(entries) == 2
    # Then billing receives both with their ids, and email nothing
    with broker.subscribe(queue_name, "billing") as billing:
        got = billing.fetch(count=10, block_ms=200)
        assert [(m.id, m.payload) for m in got] == [("orig-0", {"n": 0}), ("orig-1", {"n": 1})]
        billing.ack(got)
    with broker.subscribe(queue_name, "email") as email:
        assert email.fetch(count=10, block_ms=100) == []


def test_send_to_consumer_once_delivers_once_per_message_and_consumer(
    redis_client: redis.Redis,
) -> None:
    broker = Broker(redis_client)
    broker.consumers.ensure("target-once", "billing")
    broker.consumers.ensure("target-once", "email")
    envelope = broker.prepare("target-once", {"n": 1}, id="replay-1")
    # When the same message is sent once to billing twice, and once to email
    assert broker.consumers.deliver("billing", [envelope], once=True) == ["replay-1"]
    assert broker.consumers.deliver("billing", [envelope], once=True) == ["replay-1"]
    broker.consumers.deliver("email", [envelope], once=True)
    # Then each consumer got it exactly once, and the queue's log never saw it
    for name in ("billing", "email"):
        with broker.subscribe("target-once", name) as sub:
            got = sub.fetch(count=10, block_ms=200)
            assert [m.id for m in got] == ["replay-1"]
            sub.ack(got)
    assert redis_client.xlen(broker.keys("target-once").log) == 0
