"""Contract tests: the scripts take "now" from Redis's clock (``TIME``), never the caller's.

Called directly as in tests/core/test_scripts.py. Each test reads Redis's ``TIME``
before and after the call and checks that what the script wrote falls between, whatever
"now" the caller might believe. They hold on Redis 6.2 (where a script must ask for
effects replication before writing after ``TIME``) and 7.x.
"""

from __future__ import annotations

import json

import pytest
import redis

from redisq_django.core.broker import Broker
from redisq_django.core.envelope import Envelope
from redisq_django.core.keys import GroupKeys, QueueKeys, schedule_keys
from redisq_django.core.tasks import result_wire as task_wire
from redisq_django.core.tasks import store as task_store
from tests.support.clock_steps import redis_ms

G = "billing"


def test_promote_decides_what_is_due_by_redis_clock(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given a delayed message due a second ago and one due in a minute, by Redis's clock
    t0 = redis_ms(redis_client)
    redis_client.zadd(qk.delayed, {'{"payload":"1"}': t0 - 1000, '{"payload":"2"}': t0 + 60_000})
    # When promote runs with "" as "now"
    moved, _, next_due, now = broker.scripts(
        "promote", [qk.delayed, qk.log, gk.retry, gk.direct], ["", 100]
    )
    t1 = redis_ms(redis_client)
    # Then only the due one moved, and the reply says which "now" was used
    assert (moved, next_due) == (1, t0 + 60_000)
    assert t0 <= now <= t1
    assert [f for _, f in redis_client.xrange(qk.log)] == [{b"payload": b"1"}]


def test_heartbeat_expiry_is_redis_time_plus_ttl(
    broker: Broker, redis_client: redis.Redis, gk: GroupKeys
) -> None:
    t0 = redis_ms(redis_client)
    expiry = broker.scripts("heartbeat", [gk.instances], ["worker-1", 15_000])
    t1 = redis_ms(redis_client)
    assert t0 + 15_000 <= expiry <= t1 + 15_000
    assert redis_client.zscore(gk.instances, "worker-1") == expiry
    # A negative TTL: expired at once
    assert broker.scripts("heartbeat", [gk.instances], ["worker-1", -1]) < redis_ms(redis_client)


def test_reclaim_compares_heartbeats_with_redis_clock(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given two instances holding one entry each: "alive" heartbeated for a minute,
    # "dead" whose heartbeat expired
    redis_client.xgroup_create(qk.log, G, id="0-0", mkstream=True)
    redis_client.xgroup_create(gk.direct, G, id="0-0", mkstream=True)
    alive_id = redis_client.xadd(qk.log, {"payload": "1"})
    redis_client.xreadgroup(G, "alive", {qk.log: ">"}, count=1)
    dead_id = redis_client.xadd(qk.log, {"payload": "2"})
    redis_client.xreadgroup(G, "dead", {qk.log: ">"}, count=1)
    broker.scripts("heartbeat", [gk.instances], ["alive", 60_000])
    broker.scripts("heartbeat", [gk.instances], ["dead", -1])
    # When a third instance reclaims with "" as "now" (visibility timeout: a minute)
    _, _, log, _ = broker.scripts(
        "reclaim", [qk.log, gk.direct, gk.instances], [G, "me", 60_000, 10, "", "0-0", "0-0"]
    )
    # Then it takes over only what the dead instance held
    assert [e[0] for e in log] == [dead_id]
    pending = redis_client.xpending_range(qk.log, G, "-", "+", 10)
    assert {(p["message_id"], p["consumer"]) for p in pending} == {
        (alive_id, b"alive"),
        (dead_id, b"me"),
    }


@pytest.mark.parametrize("history", [False, True])
def test_fail_with_a_relative_due_retries_by_redis_clock(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys, history: bool
) -> None:
    # Given an entry delivered to "c1"
    redis_client.xgroup_create(qk.log, G, id="0-0", mkstream=True)
    entry = redis_client.xadd(qk.log, {"payload": "1"})
    redis_client.xreadgroup(G, "c1", {qk.log: ">"}, count=1)
    # (the settle layout, PROTOCOL.md: its seven keys; one log entry, no ordering key)
    keys = [qk.log, gk.direct, gk.retry, gk.dead, gk.holders, gk.held_back, qk.events]
    event = ["e", "retried", "next_due", "0"] if history else []
    args = [G, "c1", "", 1, "log", entry, entry, "", len(event) // 2, *event, "retry", "+5000"]
    # When it fails with a retry due "+5000"
    t0 = redis_ms(redis_client)
    assert broker.scripts("fail", keys, [*args, "payload", "1", "attempts", "1"]) == 1
    t1 = redis_ms(redis_client)
    # Then the retry is due 5 s after now by Redis's clock
    ((member, score),) = redis_client.zrange(gk.retry, 0, -1, withscores=True)
    assert t0 + 5000 <= score <= t1 + 5000
    assert json.loads(member) == {"payload": "1", "attempts": "1"}
    if history:  # and the event names that due time
        ((_, event),) = redis_client.xrange(qk.events)
        assert event == {b"e": b"retried", b"next_due": b"%d" % int(score)}


def test_publish_once_with_a_relative_due_makes_the_member(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys
) -> None:
    t0 = redis_ms(redis_client)
    reply = broker.scripts(
        "publish_once",
        [qk.meta, qk.log, qk.delayed, qk.sent_marker("m1")],
        [1, 60_000, "+10000", "", "payload", '{"a":1}', "id", "m1", "published_at", "5"],
    )
    t1 = redis_ms(redis_client)
    assert reply == [1, b""]
    ((member, score),) = redis_client.zrange(qk.delayed, 0, -1, withscores=True)
    assert t0 + 10_000 <= score <= t1 + 10_000
    assert json.loads(member) == {
        "payload": '{"a":1}',
        "id": "m1",
        "published_at": "5",
        "due_at": str(int(score)),
    }


def test_publish_delayed_sends_a_mixed_batch(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys
) -> None:
    # Given a batch: one immediate message, one delay (+10 s), one eta (absolute)
    t0 = redis_ms(redis_client)
    eta = t0 + 3_600_000
    args = [1, 3, "0", 1, "payload", "1"]
    args += ["+10000", 2, "payload", "2", "id", "d2"]
    args += [str(eta), 3, "payload", "3", "id", "d3", "due_at", "0"]
    entry, due2, due3 = broker.scripts("publish_delayed", [qk.meta, qk.delayed, qk.log], args)
    t1 = redis_ms(redis_client)
    # Then the immediate one is in the log, the delayed ones due by Redis's clock
    assert [(i, f) for i, f in redis_client.xrange(qk.log)] == [(entry, {b"payload": b"1"})]
    assert t0 + 10_000 <= due2 <= t1 + 10_000
    assert due3 == eta
    members = {
        json.loads(m)["id"]: (json.loads(m), s)
        for m, s in redis_client.zrange(qk.delayed, 0, -1, withscores=True)
    }
    assert members["d2"] == ({"payload": "2", "id": "d2", "due_at": str(due2)}, due2)
    assert members["d3"] == ({"payload": "3", "id": "d3", "due_at": str(eta)}, eta)


def test_trim_counts_the_replay_window_from_redis_clock(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys
) -> None:
    # Given entries 20 s old and 1 s old (ids by Redis's clock), all acknowledged
    t0 = redis_ms(redis_client)
    redis_client.xadd(qk.log, {"payload": "old"}, id=f"{t0 - 20_000}-0")
    young = redis_client.xadd(qk.log, {"payload": "young"}, id=f"{t0 - 1_000}-0")
    redis_client.xgroup_create(qk.log, G, id="$")
    # When trimmed with a 10 s replay window and "" as "now"
    assert broker.scripts("trim", [qk.log, qk.meta, qk.archives], ["", 10_000, 0, 0, 0, 100]) == [
        1,
        0,
    ]
    # Then only the entry older than the window went
    assert [i for i, _ in redis_client.xrange(qk.log)] == [young]


def test_schedule_claim_claims_a_tick_once_and_only_when_redis_says_it_is_due(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    claimed = schedule_keys("redisq").claimed
    name = queue_name

    def claim(tick: int) -> list[int]:
        return list(broker.scripts("schedule_claim", [claimed], [name, tick]))

    # Given Redis's clock, and ticks of a schedule a second apart around it
    t0 = redis_ms(redis_client)
    tick = t0 // 1000 * 1000
    # When a worker whose clock runs ahead claims a tick 5 s in the future
    early, now = claim(tick + 5000)
    # Then it is refused, with Redis's "now", and nothing is written
    assert early == -1
    assert t0 <= now <= redis_ms(redis_client)
    assert redis_client.zscore(claimed, name) is None
    # And the ticks before it can still be claimed, each once, in order
    assert claim(tick - 1000)[0] == 1
    assert claim(tick - 1000)[0] == 0  # another worker, the same tick
    assert claim(tick)[0] == 1
    assert claim(tick - 1000)[0] == 0  # older than the one claimed
    assert redis_client.zscore(claimed, name) == tick
    # And a tick not due yet stays refused until Redis's clock reaches it
    assert claim(tick + 5000)[0] == -1
    assert redis_client.zscore(claimed, name) == tick


@pytest.mark.parametrize("skew_ms", [-2 * 86_400_000, 2 * 86_400_000])
def test_a_task_result_expires_by_redis_clock_whatever_the_host_clock_says(
    broker: Broker,
    redis_client: redis.Redis,
    qk: QueueKeys,
    monkeypatch: pytest.MonkeyPatch,
    skew_ms: int,
) -> None:
    # Given a host whose clock is two days off, keeping results for a day by its clock
    skewed = redis_ms(redis_client) + skew_ms
    for module in (task_store, task_wire):  # every "now" of this host
        monkeypatch.setattr(module, "now_ms", lambda: skewed)
    results = task_store.TaskResultStore(broker.client, broker.scripts, broker.keys)
    envelope = Envelope(queue=qk.queue, id="r1", payload_json=b"{}")
    # When it enqueues a task and settles nothing yet
    t0 = redis_ms(redis_client)
    results.enqueue(envelope, {"task": "t", "status": "READY"}, expire_at_ms=skewed + 86_400_000)
    t1 = redis_ms(redis_client)
    # Then the result lives a day by Redis's clock: neither gone at once nor for three days
    expiry = redis_client.zscore(qk.task_results, "r1")
    assert expiry is not None and t0 + 86_400_000 <= expiry <= t1 + 86_400_000
    assert 86_400_000 - 60_000 < redis_client.pttl(qk.task_result("r1")) <= 86_400_000
