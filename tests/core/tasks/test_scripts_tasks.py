"""Contract tests of the task scripts (``task_enqueue``, ``task_start``, ``task_settle``,
``task_ready``, ``task_lost``), called directly with keys from ``core/keys.py``, state
checked with raw commands."""

from __future__ import annotations

import json
import time

import pytest
import redis
from redis.cluster import key_slot

from redisq_django.core.broker import Broker
from redisq_django.core.keys import GroupKeys, QueueKeys
from tests.core.guarantee_helpers import age_pending
from tests.support.clock_steps import redis_ms

G = "tasks"
RID = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def group_name() -> str:
    return G


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def result_fields(**extra: str) -> list[str]:
    fields = {"task": "app.tasks.t", "status": "READY", "errors": "[]", "worker_ids": "[]"}
    fields.update(extra)
    return [x for kv in fields.items() for x in kv]


def enqueue_args(mode: str, due: int = 0, member: str = "", expire: int = 0) -> list[object]:
    fields = result_fields()
    envelope = ["payload", '{"task": "app.tasks.t"}', "id", RID]
    return [expire or now_ms() + 60_000, RID, mode, due, member, now_ms(), len(fields) // 2,
            *fields, *envelope]  # fmt: skip


def enqueue_keys(qk: QueueKeys) -> list[str]:
    return [qk.task_result(RID), qk.task_results, qk.log, qk.delayed]


def test_result_keys_share_the_queue_hash_tag(qk: QueueKeys) -> None:
    keys = [qk.task_result(RID), qk.task_results, qk.log]
    assert keys[0].endswith(f"}}:result:{RID}") and keys[1].endswith("}:results")
    assert len({key_slot(k.encode()) for k in keys}) == 1


def test_enqueue_publishes_the_message_with_its_ready_result(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys
) -> None:
    expire = now_ms() + 60_000
    entry = broker.scripts("task_enqueue", enqueue_keys(qk), enqueue_args("publish", expire=expire))
    [(entry_id, fields)] = redis_client.xrange(qk.log)
    assert entry_id == entry and fields[b"id"] == RID.encode()
    assert redis_client.hget(qk.task_result(RID), "status") == b"READY"
    assert 0 < redis_client.pttl(qk.task_result(RID)) <= 60_000
    assert redis_client.zscore(qk.task_results, RID) == expire


def test_enqueue_with_a_due_time_adds_the_member_to_delayed(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys
) -> None:
    due = now_ms() + 10_000
    reply = broker.scripts("task_enqueue", enqueue_keys(qk), enqueue_args("publish", due, "{}"))
    assert reply == b""
    assert redis_client.xlen(qk.log) == 0
    assert redis_client.zrange(qk.delayed, 0, -1, withscores=True) == [(b"{}", due)]


def test_enqueue_once_writes_a_result_once_and_publishes_nothing(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys
) -> None:
    assert broker.scripts("task_enqueue", enqueue_keys(qk), enqueue_args("once")) == []
    redis_client.hset(qk.task_result(RID), "status", "SUCCESSFUL")
    again = broker.scripts("task_enqueue", enqueue_keys(qk), enqueue_args("once"))
    assert dict(zip(again[::2], again[1::2], strict=True))[b"status"] == b"SUCCESSFUL"
    assert redis_client.exists(qk.log) == 0


def test_enqueue_removes_expired_ids_from_the_index(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys
) -> None:
    redis_client.zadd(qk.task_results, {"old": now_ms() - 1000, "fresh": now_ms() + 60_000})
    broker.scripts("task_enqueue", enqueue_keys(qk), enqueue_args("publish"))
    assert sorted(redis_client.zrange(qk.task_results, 0, -1)) == [RID.encode(), b"fresh"]


def start_keys(qk: QueueKeys, gk: GroupKeys) -> list[str]:
    return [qk.task_result(RID), qk.task_results, qk.log, gk.leases]


def start_args(worker: str, now: int, *rebuild: str, entry: bytes = b"1-1", lease: int = 0) -> (
    list[object]
):  # fmt: skip
    return [now_ms() + 1000, RID, worker, now, G, entry, b"log:" + entry, lease, *rebuild]


def test_start_appends_the_worker_and_keeps_the_first_start(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    key = qk.task_result(RID)
    redis_client.hset(key, mapping=dict(zip(*[iter(result_fields())] * 2, strict=True)))
    redis_client.hset(key, "finished_at", "5")
    first = broker.scripts("task_start", start_keys(qk, gk), start_args("w1", 100))
    second = broker.scripts("task_start", start_keys(qk, gk), start_args("w2", 200))
    assert json.loads(first[0]) == ["w1"] and first[2] == b"100"
    assert json.loads(second[0]) == ["w1", "w2"] and second[2] == b"100"
    stored = redis_client.hgetall(key)
    assert stored[b"status"] == b"RUNNING" and stored[b"last_attempted_at"] == b"200"
    assert b"finished_at" not in stored
    assert redis_client.exists(gk.leases) == 0  # no lease of its own asked for


def test_start_rebuilds_an_expired_result(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    broker.scripts("task_start", start_keys(qk, gk), start_args("w1", 100, *result_fields()))
    stored = redis_client.hgetall(qk.task_result(RID))
    assert stored[b"task"] == b"app.tasks.t" and stored[b"status"] == b"RUNNING"


def test_start_with_a_lease_starts_it_for_the_holder_only(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given an entry delivered to c1 a while ago (its idle time runs since then)
    entry = _delivered(redis_client, qk, gk)
    age_pending(redis_client, qk.log, G, 5_000)
    # When another instance "starts" it with a lease of 3 s, nothing is leased
    broker.scripts("task_start", start_keys(qk, gk), start_args("c9", 1, entry=entry, lease=3000))
    assert redis_client.exists(gk.leases) == 0
    # When c1 starts it with a lease of 3 s
    before = redis_ms(redis_client)
    broker.scripts("task_start", start_keys(qk, gk), start_args("c1", 1, entry=entry, lease=3000))
    # Then its lease ends 3 s after Redis's now, and its idle time starts again
    ends = redis_client.zscore(gk.leases, b"log:" + entry)
    assert ends is not None and before + 3000 <= ends <= redis_ms(redis_client) + 3000
    [row] = redis_client.xpending_range(qk.log, G, entry, entry, 1)
    assert row["time_since_delivered"] < 1000 and row["times_delivered"] == 1


def _delivered(r: redis.Redis, qk: QueueKeys, gk: GroupKeys) -> bytes:
    r.xgroup_create(qk.log, G, id="0-0", mkstream=True)
    entry = r.xadd(qk.log, {"payload": "{}", "id": RID})
    r.xreadgroup(G, "c1", {qk.log: ">"})
    r.hset(qk.task_result(RID), mapping={"status": "RUNNING", "errors": "[]"})
    return entry


def settle_args(entry: bytes, mode: str, result: list[str], envelope: list[str],
                *, error: str = "", consumer: str = "c1", event: list[str] | None = None,
                ) -> list[object]:  # fmt: skip
    """The settle layout (PROTOCOL.md): one log entry of message RID, its event, then the
    script's own arguments."""
    event = event or []
    return [G, consumer, "", 1, "log", entry, RID, "", len(event) // 2, *event,
            mode, "+50", now_ms() + 60_000, RID, error, len(result) // 2, *result,
            *envelope]  # fmt: skip


def settle_keys(qk: QueueKeys, gk: GroupKeys) -> list[str]:
    """The settle layout's seven keys, then task_settle.lua's own three."""
    layout = [qk.log, gk.direct, gk.retry, gk.dead, gk.holders, gk.held_back, qk.events]
    return [*layout, qk.task_result(RID), qk.task_results, gk.leases]


def test_settle_ack_writes_successful_with_the_ack(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    entry = _delivered(redis_client, qk, gk)
    done = ["status", "SUCCESSFUL", "return_value", "42"]
    assert broker.scripts("task_settle", settle_keys(qk, gk), settle_args(entry, "ack", done, []))
    assert redis_client.xpending(qk.log, G)["pending"] == 0
    assert redis_client.hget(qk.task_result(RID), "status") == b"SUCCESSFUL"


def test_settle_retry_schedules_it_ready_with_the_error(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    entry = _delivered(redis_client, qk, gk)
    error = json.dumps({"exception_class_path": "builtins.ValueError", "traceback": "tb"})
    args = settle_args(entry, "retry", ["status", "READY"], ["payload", "{}"], error=error)
    assert broker.scripts("task_settle", settle_keys(qk, gk), args) == 1
    assert redis_client.xpending(qk.log, G)["pending"] == 0
    [(member, score)] = redis_client.zrange(gk.retry, 0, -1, withscores=True)
    assert json.loads(member) == {"payload": "{}"} and score > now_ms()
    stored = redis_client.hgetall(qk.task_result(RID))
    assert stored[b"status"] == b"READY"
    assert json.loads(stored[b"errors"])[0]["exception_class_path"] == "builtins.ValueError"


def test_settle_dead_writes_the_dead_letter_and_failed(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    entry = _delivered(redis_client, qk, gk)
    args = settle_args(entry, "dead", ["status", "FAILED"], ["payload", "{}", "reason", "failed"])
    assert broker.scripts("task_settle", settle_keys(qk, gk), args) == 1
    [(_, fields)] = redis_client.xrange(gk.dead)
    assert fields[b"reason"] == b"failed"
    assert redis_client.hget(qk.task_result(RID), "status") == b"FAILED"


def test_settle_by_an_instance_that_lost_the_entry_writes_nothing(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    entry = _delivered(redis_client, qk, gk)
    args = settle_args(entry, "ack", ["status", "SUCCESSFUL"], [], consumer="other")
    assert broker.scripts("task_settle", settle_keys(qk, gk), args) == 0
    assert redis_client.xpending(qk.log, G)["pending"] == 1
    assert redis_client.hget(qk.task_result(RID), "status") == b"RUNNING"


def test_settle_ends_the_delivery_s_own_lease(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given a started delivery with a lease of its own, and another delivery's lease
    entry = _delivered(redis_client, qk, gk)
    redis_client.zadd(gk.leases, {b"log:" + entry: now_ms() + 60_000, "log:9-9": 1})
    # When it is settled
    args = settle_args(entry, "ack", ["status", "SUCCESSFUL"], [])
    assert broker.scripts("task_settle", settle_keys(qk, gk), args) == 1
    # Then its lease is gone, the other one kept
    assert redis_client.zrange(gk.leases, 0, -1) == [b"log:9-9"]


@pytest.mark.parametrize("mode", ["ack", "retry", "dead"])
def test_settle_with_history_writes_its_event_with_the_settle(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys, mode: str
) -> None:
    # Given a delivered task, and its settle's event (history layout)
    entry = _delivered(redis_client, qk, gk)
    name = {"ack": "handled", "retry": "retried", "dead": "dead"}[mode]
    event = ["e", name, "g", G, "c", "c1", "m", f'[["{RID}",1,7]]']
    if mode != "ack":
        event += ["error_class", "builtins.ValueError", "error_message", "no"]
    event += {"ack": [], "retry": ["next_due", "1"], "dead": ["reason", "failed"]}[mode]
    keys = settle_keys(qk, gk)
    # When another instance tries to settle it, nothing is written, no event either
    lost = settle_args(
        entry, mode, ["status", "READY"], ["payload", "{}"], consumer="c9", event=event
    )
    assert broker.scripts("task_settle", keys, lost) == 0
    assert redis_client.xlen(qk.events) == 0
    # When its instance settles it
    before = redis_ms(redis_client)
    args = settle_args(entry, mode, ["status", "READY"], ["payload", "{}"], event=event)
    assert broker.scripts("task_settle", keys, args) == 1
    # Then the settle happened and its one event says so
    assert redis_client.xpending(qk.log, G)["pending"] == 0
    [(_, fields)] = redis_client.xrange(qk.events)
    got = {k.decode(): v.decode() for k, v in fields.items()}
    expected = dict(zip(event[::2], event[1::2], strict=True))
    if mode == "retry":  # the retry's due time, by Redis's clock (+50 ms)
        [(_, due)] = redis_client.zrange(gk.retry, 0, -1, withscores=True)
        assert int(got["next_due"]) == int(due) >= before + 50
        expected["next_due"] = got["next_due"]
    assert got == expected
    assert redis_client.xlen(gk.dead) == (1 if mode == "dead" else 0)


def test_ready_turns_only_a_failed_result_ready(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys
) -> None:
    key = qk.task_result(RID)
    redis_client.hset(key, mapping={"status": "FAILED", "finished_at": "9"})
    assert broker.scripts("task_ready", [key, qk.task_results], [now_ms() + 1000, RID]) == 1
    assert redis_client.hgetall(key) == {b"status": b"READY"}
    redis_client.hset(key, "status", "RUNNING")
    assert broker.scripts("task_ready", [key, qk.task_results], [now_ms() + 1000, RID]) == 0
    assert redis_client.hget(key, "status") == b"RUNNING"


def test_lost_fails_only_an_unfinished_result(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys
) -> None:
    key = qk.task_result(RID)
    error = json.dumps({"exception_class_path": "x.LeaseExpired", "traceback": "died"})
    redis_client.hset(key, mapping={"status": "RUNNING", "errors": "[]"})
    args = [now_ms() + 1000, RID, error, 1234]
    assert broker.scripts("task_lost", [key, qk.task_results], args) == 1
    stored = redis_client.hgetall(key)
    assert stored[b"status"] == b"FAILED" and stored[b"finished_at"] == b"1234"
    assert json.loads(stored[b"errors"]) == [{"exception_class_path": "x.LeaseExpired",
                                              "traceback": "died"}]  # fmt: skip
    redis_client.hset(key, "status", "SUCCESSFUL")
    assert broker.scripts("task_lost", [key, qk.task_results], args) == 0
    assert redis_client.hget(key, "status") == b"SUCCESSFUL"
