"""Contract tests of deliveries with a lease of their own (a task's visibility timeout):
``lease.lua`` renews them, ``reclaim.lua`` takes them over once and only once their
lease has ended, whatever the heartbeat of their instance and the consumer's visibility
timeout say."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from redisq_django.core.broker import Broker
from redisq_django.core.keys import GroupKeys, QueueKeys
from tests.core.guarantee_helpers import age_pending
from tests.support.clock_steps import redis_ms

G = "tasks"


@pytest.fixture
def group_name() -> str:
    """``gk`` (tests/core/conftest.py) holds the keys of consumer :data:`G`."""
    return G


def deliver(r: redis.Redis, qk: QueueKeys, gk: GroupKeys, consumer: str, n: int) -> list[bytes]:
    """``n`` new log entries delivered to ``consumer``; their ids."""
    r.xgroup_create(qk.log, G, id="0-0", mkstream=True)
    r.xgroup_create(gk.direct, G, id="0-0", mkstream=True)
    for i in range(n):
        r.xadd(qk.log, {"payload": str(i)})
    reply = r.xreadgroup(G, consumer, {qk.log: ">"})
    return [entry_id for entry_id, _ in reply[0][1]]


def owners(r: redis.Redis, stream: str) -> dict[bytes, tuple[bytes, int]]:
    rows = r.xpending_range(stream, G, "-", "+", 100)
    return {x["message_id"]: (x["consumer"], x["times_delivered"]) for x in rows}


def reclaim(broker: Broker, qk: QueueKeys, gk: GroupKeys, me: str, now: int, **kw: Any) -> Any:
    """reclaim.lua with `running` and `leases`, "now" fixed; {entry id: delivery count}."""
    keys = [qk.log, gk.direct, gk.instances, gk.running, gk.leases]
    _, _, log, direct = broker.scripts(
        "reclaim", keys, [G, me, kw.get("min_idle", 60_000), kw.get("limit", 10), now,
                          "0-0", "0-0"],
    )  # fmt: skip
    return {e[0]: e[2] for e in [*log, *direct]}


def test_lease_renews_what_the_instance_holds_and_reports_what_it_lost(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given c1 holds L1 and L2 (idle for 5 s), L3 went to c2, L4 was settled already
    l1, l2 = deliver(redis_client, qk, gk, "c1", 2)
    redis_client.xadd(qk.log, {"payload": "3"})
    [(_, [(l3, _)])] = redis_client.xreadgroup(G, "c2", {qk.log: ">"})
    age_pending(redis_client, qk.log, G, 5_000)
    redis_client.zadd(gk.leases, {"log:4-4": 1})
    # When c1 renews L1 for 2 s and L2 for 4 s, and also L3 and L4
    before = redis_ms(redis_client)
    args = [G, "c1", "log", l1, 2000, "log", l2, 4000, "log", l3, 2000, "log", "4-4", 2000]
    lost = broker.scripts("lease", [qk.log, gk.direct, gk.leases], args)
    after = redis_ms(redis_client)
    # Then L1 and L2's leases end that long after Redis's now, their idle times restart
    ends = dict(redis_client.zrange(gk.leases, 0, -1, withscores=True))
    assert set(ends) == {b"log:" + l1, b"log:" + l2}
    assert before + 2000 <= ends[b"log:" + l1] <= after + 2000
    assert before + 4000 <= ends[b"log:" + l2] <= after + 4000
    idle = {x["message_id"]: x["time_since_delivered"] for x in redis_client.xpending_range(
        qk.log, G, "-", "+", 10)}  # fmt: skip
    assert idle[l1] < 1000 and idle[l2] < 1000 and idle[l3] >= 5000
    # And L3 is reported lost (c2 holds it), L4's stale lease is gone, no delivery counted
    assert lost == [l3]
    assert owners(redis_client, qk.log) == {l1: (b"c1", 1), l2: (b"c1", 1), l3: (b"c2", 1)}


def test_a_lease_holds_back_the_heartbeat_and_the_visibility_timeout_until_it_ends(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given dead c1 (heartbeat expired) holding L1 (started, with a lease ending at
    # T + 5 s) and L2 (fetched, not started), both idle past the visibility timeout
    l1, l2 = deliver(redis_client, qk, gk, "c1", 2)
    age_pending(redis_client, qk.log, G, 120_000)
    t = redis_ms(redis_client)
    redis_client.zadd(gk.instances, {"c1": t - 1000, "c2": t + 60_000})
    redis_client.hset(gk.running, "c1", b"log:" + l1)
    redis_client.zadd(gk.leases, {b"log:" + l1: t + 5000})
    # When c2 reclaims before the lease ends
    taken = reclaim(broker, qk, gk, "c2", t)
    # Then it takes L2 only (not counted: never started); c1 is no longer listed as an
    # instance but stays in the group, holding L1
    assert taken == {l2: 1}
    assert owners(redis_client, qk.log) == {l1: (b"c1", 1), l2: (b"c2", 1)}
    assert redis_client.zrange(gk.instances, 0, -1) == [b"c2"]
    assert b"c1" in {c["name"] for c in redis_client.xinfo_consumers(qk.log, G)}
    # When c2 reclaims just before the end, still nothing
    assert reclaim(broker, qk, gk, "c2", t + 4999) == {}
    # When c2 reclaims once it has ended
    taken = reclaim(broker, qk, gk, "c2", t + 5000)
    # Then it takes L1, counted (it was started), and c1 is forgotten
    assert taken == {l1: 2}
    assert owners(redis_client, qk.log) == {l1: (b"c2", 2), l2: (b"c2", 1)}
    assert {c["name"] for c in redis_client.xinfo_consumers(qk.log, G)} == {b"c2"}
    assert redis_client.hget(gk.running, "c1") is None
    assert redis_client.zcard(gk.leases) == 0


def test_an_ended_lease_is_taken_over_from_a_live_instance_before_the_visibility_timeout(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given live c1 holding L1 (started, lease ended at T) and L2 (started long ago by
    # another instance's reckoning: no lease), both idle for 1 s only
    l1, l2 = deliver(redis_client, qk, gk, "c1", 2)
    age_pending(redis_client, qk.log, G, 1_000)
    t = redis_ms(redis_client)
    redis_client.zadd(gk.instances, {"c1": t + 60_000})
    redis_client.hset(gk.running, "c1", b"log:" + l1)
    redis_client.zadd(gk.leases, {b"log:" + l1: t - 1})
    # When c2 reclaims with a visibility timeout of 60 s
    taken = reclaim(broker, qk, gk, "c2", t)
    # Then L1 is taken over (a delivery counted, c1's record used up), L2 stays with c1
    assert taken == {l1: 2}
    assert owners(redis_client, qk.log) == {l1: (b"c2", 2), l2: (b"c1", 1)}
    assert redis_client.hget(gk.running, "c1") == b""
    assert redis_client.zrange(gk.instances, 0, -1) == [b"c1"]


def test_idle_scan_skips_leased_deliveries_and_ended_leases_of_settled_ones_go(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given live c1 holding L1 with a lease running for 60 s more, idle for 2 minutes,
    # and a lease left behind by a delivery settled meanwhile
    [l1] = deliver(redis_client, qk, gk, "c1", 1)
    age_pending(redis_client, qk.log, G, 120_000)
    t = redis_ms(redis_client)
    redis_client.zadd(gk.instances, {"c1": t + 60_000})
    redis_client.zadd(gk.leases, {b"log:" + l1: t + 60_000, "log:1-1": t - 1})
    # When c2 reclaims entries idle for more than 1 s
    taken = reclaim(broker, qk, gk, "c2", t, min_idle=1000)
    # Then L1 stays with c1 and the stale lease is removed
    assert taken == {}
    assert owners(redis_client, qk.log) == {l1: (b"c1", 1)}
    assert redis_client.zrange(gk.leases, 0, -1) == [b"log:" + l1]


def test_reclaim_without_the_leases_key_works_as_before(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, gk: GroupKeys
) -> None:
    # Given an idle entry with a lease record, and a client that passes no `leases` key
    [l1] = deliver(redis_client, qk, gk, "c1", 1)
    age_pending(redis_client, qk.log, G, 2_000)
    redis_client.zadd(gk.leases, {b"log:" + l1: time.time() * 1000 + 60_000})
    keys = [qk.log, gk.direct, gk.instances, gk.running]
    # When it reclaims entries idle for 1 s
    _, _, log, _ = broker.scripts("reclaim", keys, [G, "c2", 1000, 10, "", "0-0", "0-0"])
    # Then the visibility timeout applies, as it always did
    assert [e[0] for e in log] == [l1]
