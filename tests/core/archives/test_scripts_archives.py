"""Contract tests of the named archives' scripts (``archive_register``, ``archive_commit``,
``archive_remove``, ``archive_gap``) and of what ``trim.lua`` does with archives: every
registered archive holds retention, a hard cap that passes one is written to its gap
record, and the greatest id ever removed is marked (C7, C14). Called directly with keys
from ``core/keys.py``; they hold on Redis 6.2 and 7.x, and on a cluster.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.archives.named import ArchiveRegistration, Gap, Registered
from redisq_django.core.errors import ArchiveNotRegistered, ArchiveOwned, InvalidName
from redisq_django.core.keys import QueueKeys

TEN = [f"{i * 1000}-0" for i in range(1, 11)]  # 1000-0 .. 10000-0


@pytest.fixture
def log10(redis_client: redis.Redis, qk: QueueKeys) -> list[str]:
    """A log holding ten entries, 1000-0 to 10000-0, all acknowledged by group A."""
    for entry_id in TEN:
        redis_client.xadd(qk.log, {"payload": "x"}, id=entry_id)
    redis_client.xgroup_create(qk.log, "A", id="0-0")
    read = redis_client.xreadgroup("A", "c", {qk.log: ">"}, count=100)
    redis_client.xack(qk.log, "A", *[i for i, _ in read[0][1]])
    return TEN


def trim(
    broker: Broker,
    qk: QueueKeys,
    *,
    history: bool = False,
    now: int = 10_500,
    max_len: int = 0,
    max_age: int = 0,
    batch: int = 1000,
) -> list[int]:
    """trim.lua with no replay window (everything acked may go)."""
    keys = [qk.log, qk.meta, qk.archives] + ([qk.events] if history else [])
    return broker.scripts("trim", keys, [now, 0, 0, max_len, max_age, batch])


def log_ids(r: redis.Redis, key: str) -> list[str]:
    return [i.decode() for i, _ in r.xrange(key)]


# == archive_register.lua ================================================================


def test_register_records_where_an_archive_starts_once(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str, log10: list[str]
) -> None:
    archives = broker.archives
    # When archives register from the earliest, the latest and a given id
    assert archives.register(queue_name, "full", "messages", "earliest") == ArchiveRegistration(
        Registered.NOW, "0-0"
    )
    assert archives.register(queue_name, "new", "messages", "latest").position == "10000-0"
    assert archives.register(queue_name, "mid", "messages", "4000-0").position == "4000-0"
    # Then registering again changes nothing, whatever start it asks for
    assert archives.register(queue_name, "full", "messages", "latest") == ArchiveRegistration(
        Registered.ALREADY, "0-0"
    )
    # And each has a position and a registration time (Redis's clock) per stream
    raw = redis_client.hgetall(qk.archives)
    assert raw[b"mid:messages"] == b"4000-0"
    assert int(raw[b"mid:messages:since"]) > 1_600_000_000_000
    assert archives.positions(queue_name, "mid") == {"messages": "4000-0"}
    # And "earliest" after retention removed entries starts after the last removed one
    assert trim(broker, qk) == [0, 0]  # held by "full" at 0-0
    archives.remove(queue_name, "full")
    assert trim(broker, qk) == [4, 0]  # now by "mid" at 4000-0
    assert archives.register(queue_name, "late", "messages").position == "4000-0"
    # And "latest" on an empty events stream starts after what was removed from it
    assert archives.register(queue_name, "late", "events", "latest").position == "0-0"


def test_register_refuses_bad_names_tables_and_starts(broker: Broker, queue_name: str) -> None:
    with pytest.raises(InvalidName):
        broker.archives.register(queue_name, "a:b", "messages")
    with pytest.raises(ValueError):
        broker.archives.register(queue_name, "a", "payloads")
    with pytest.raises(redis.ResponseError, match="invalid start"):
        broker.archives.register(queue_name, "a", "messages", "yesterday")
    assert broker.archives.states(queue_name) == []


# == archive_commit.lua ==================================================================


def test_commit_moves_a_registered_archive_forward_only(broker: Broker, queue_name: str) -> None:
    archives = broker.archives
    archives.register(queue_name, "nightly", "messages")
    archives.register(queue_name, "nightly", "events")
    # When the archive commits ids, late and repeated ones included
    assert archives.commit(queue_name, "nightly", "messages", "1700000000005-0") == (
        "1700000000005-0"
    )
    assert archives.commit(queue_name, "nightly", "messages", "1700000000004-9") == (
        "1700000000005-0"
    )
    assert archives.commit(queue_name, "nightly", "messages", "1700000000005-1") == (
        "1700000000005-1"
    )
    assert archives.commit(queue_name, "nightly", "events", "12-3") == "12-3"
    # Then each stream's position is the largest id committed
    assert archives.positions(queue_name, "nightly") == {
        "messages": "1700000000005-1",
        "events": "12-3",
    }
    # And garbage is refused, leaving the position alone
    with pytest.raises(redis.ResponseError, match="invalid entry id"):
        archives.commit(queue_name, "nightly", "messages", "not-an-id")
    with pytest.raises(ValueError):
        archives.commit(queue_name, "nightly", "payloads", "1-0")
    assert archives.positions(queue_name, "nightly")["messages"] == "1700000000005-1"


def test_commit_of_an_archive_not_registered_is_refused(broker: Broker, queue_name: str) -> None:
    # Given an archive that registered its messages only, and was then removed
    archives = broker.archives
    archives.register(queue_name, "nightly", "messages")
    with pytest.raises(ArchiveNotRegistered, match="not registered for the events"):
        archives.commit(queue_name, "nightly", "events", "5-0")
    assert archives.remove(queue_name, "nightly") == 1
    # When it commits: refused, and it stays removed (no position comes back)
    with pytest.raises(ArchiveNotRegistered, match="was removed"):
        archives.commit(queue_name, "nightly", "messages", "5-0")
    assert archives.positions(queue_name, "nightly") == {}


# == owners: a name is one reader's (fencing) ==============================================


def test_a_name_owned_by_a_reader_that_committed_is_refused_to_another(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str
) -> None:
    archives = broker.archives
    # Given reader "prod" registered and committed under "default" (which claims it)
    assert archives.register(queue_name, "default", "messages", owner="prod").status is (
        Registered.NOW
    )
    archives.commit(queue_name, "default", "messages", "5-0", owner="prod")
    # When a second reader (another checkpoint) registers under the same name
    with pytest.raises(ArchiveOwned) as refused:
        archives.register(queue_name, "default", "messages", owner="notebook")
    # Then it is refused, saying whose the name is and what to do, and nothing moved
    assert not refused.value.fenced and refused.value.owner == "prod"
    assert refused.value.committed_ms and refused.value.committed_ms > 1_600_000_000_000
    assert "--take-over" in str(refused.value) and "name of its own" in str(refused.value)
    # And a reader without a token (a job with no checkpoint yet) is refused the same way
    with pytest.raises(ArchiveOwned):
        archives.register(queue_name, "default", "messages")
    # And its commits are refused too: it can never move prod's position
    with pytest.raises(ArchiveOwned) as fenced:
        archives.commit(queue_name, "default", "messages", "9-0", owner="notebook")
    assert fenced.value.fenced
    assert archives.positions(queue_name, "default") == {"messages": "5-0"}
    # And the owner goes on as before; the other table is another name's matter
    assert archives.register(queue_name, "default", "messages", owner="prod").position == "5-0"
    assert archives.commit(queue_name, "default", "messages", "6-0", owner="prod") == "6-0"
    archives.register(queue_name, "default", "events", owner="events-reader")


def test_take_over_fences_the_old_owner_off(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str
) -> None:
    archives = broker.archives
    archives.register(queue_name, "default", "messages", owner="old")
    archives.commit(queue_name, "default", "messages", "5-0", owner="old")
    # When a new reader takes the name over, it goes on from the old one's position
    got = archives.register(queue_name, "default", "messages", owner="new", take_over=True)
    assert got.status is Registered.ALREADY and got.position == "5-0"
    assert got.taken_from_ms and got.taken_from_ms > 1_600_000_000_000
    # Then the old reader's next commit is refused, naming the take-over
    with pytest.raises(ArchiveOwned) as fenced:
        archives.commit(queue_name, "default", "messages", "7-0", owner="old")
    assert fenced.value.fenced and fenced.value.owner == "new"
    assert "taken over" in str(fenced.value)
    # And it cannot take the name back by registering again (a restart): it is told it
    # was taken over, as at a commit
    with pytest.raises(ArchiveOwned) as again_refused:
        archives.register(queue_name, "default", "messages", owner="old")
    assert again_refused.value.fenced
    # And the new owner commits
    assert archives.commit(queue_name, "default", "messages", "8-0", owner="new") == "8-0"
    # And taking over what one owns already takes nothing
    again = archives.register(queue_name, "default", "messages", owner="new", take_over=True)
    assert again.taken_from_ms is None


def test_registering_claims_nothing_the_first_commit_does(broker: Broker, queue_name: str) -> None:
    """A reader that died before Spark logged its first batch left no checkpoint: its
    next start comes with a new token, which must not be refused; so only a commit (of
    a logged offset) claims the name, and of two new readers the first to commit wins."""
    archives = broker.archives
    archives.register(queue_name, "a", "messages", owner="first-try")
    got = archives.register(queue_name, "a", "messages", owner="second-try")
    assert got.status is Registered.ALREADY and got.taken_from_ms is None
    assert archives.commit(queue_name, "a", "messages", "3-0", owner="second-try") == "3-0"
    with pytest.raises(ArchiveOwned):
        archives.commit(queue_name, "a", "messages", "4-0", owner="first-try")
    # And a commit that takes the name over (a reader started with take-over before
    # its checkpoint held a token) fences the owner off in turn
    assert archives.commit(queue_name, "a", "messages", "5-0", owner="t3", take_over=True) == "5-0"
    with pytest.raises(ArchiveOwned) as fenced:
        archives.register(queue_name, "a", "messages", owner="second-try")
    assert fenced.value.fenced


def test_a_name_nobody_owns_is_claimed_by_the_first_commit_with_a_token(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str
) -> None:
    """Registrations of earlier versions have no owner: the first reader with a token
    that commits claims them; commits without a token go on until then."""
    archives = broker.archives
    archives.register(queue_name, "default", "messages")
    assert archives.commit(queue_name, "default", "messages", "2-0") == "2-0"
    assert archives.commit(queue_name, "default", "messages", "3-0", owner="t1") == "3-0"
    raw = redis_client.hgetall(qk.archives)
    assert raw[b"default:messages:owner"] == b"t1"
    assert int(raw[b"default:messages:owner_committed"]) > 1_600_000_000_000
    with pytest.raises(ArchiveOwned):
        archives.commit(queue_name, "default", "messages", "4-0")
    # And removing the archive removes its owner with it
    archives.remove(queue_name, "default")
    assert not [f for f in redis_client.hkeys(qk.archives) if f.startswith(b"default:")]
    assert archives.register(queue_name, "default", "messages", owner="t2").status is (
        Registered.NOW
    )


# == trim.lua with archives ===============================================================


def test_a_registered_archive_holds_the_log_with_history_off(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str, log10: list[str]
) -> None:
    # Given everything acknowledged, and two archives: one has stored up to 3000-0,
    # the other up to 6000-0
    broker.archives.register(queue_name, "slow", "messages", "3000-0")
    broker.archives.register(queue_name, "fast", "messages", "6000-0")
    # When retention runs (history off)
    # Then only what both archives stored goes
    assert trim(broker, qk) == [3, 0]
    assert log_ids(redis_client, qk.log) == log10[3:]
    # And once the slow one catches up, the rest follows up to the fast one
    broker.archives.commit(queue_name, "slow", "messages", "9000-0")
    assert trim(broker, qk) == [3, 0]
    assert log_ids(redis_client, qk.log) == log10[6:]
    # And the mark records the greatest id removed
    assert broker.archives.trimmed(queue_name) == {"messages": "6000-0", "events": "0-0"}


def test_history_on_keeps_the_log_until_an_archive_registers(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str, log10: list[str]
) -> None:
    # Given history on and no archive: nothing goes
    assert trim(broker, qk, history=True) == [0, 0]
    # When one registers at 2000-0 and another at 5000-0: up to the first
    broker.archives.register(queue_name, "a", "messages", "2000-0")
    broker.archives.register(queue_name, "b", "messages", "5000-0")
    assert trim(broker, qk, history=True) == [2, 0]
    # When the first is removed: up to the second
    broker.archives.remove(queue_name, "a")
    assert trim(broker, qk, history=True) == [3, 0]
    assert log_ids(redis_client, qk.log) == log10[5:]


def test_a_hard_cap_past_an_archive_is_counted_and_written_to_its_gap_record(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str, log10: list[str]
) -> None:
    # Given archive "slow" at 2000-0 and archive "fast" at 7000-0 (all acked by group A)
    broker.archives.register(queue_name, "slow", "messages", "2000-0")
    broker.archives.register(queue_name, "fast", "messages", "7000-0")
    # When a hard cap of 2 entries trims
    assert trim(broker, qk, max_len=2) == [2, 6]
    assert log_ids(redis_client, qk.log) == log10[8:]
    # Then "slow" misses 3000-0..8000-0 (6), "fast" misses 8000-0 (1)
    assert broker.archives.gap(queue_name, "slow", "messages") == Gap("3000-0", "8000-0", 6)
    assert broker.archives.gap(queue_name, "fast", "messages") == Gap("8000-0", "8000-0", 1)
    assert redis_client.hget(qk.meta, "dropped") == b"6"
    assert broker.archives.trimmed(queue_name)["messages"] == "8000-0"
    # When more arrive and the cap drops again, the gap records add up
    redis_client.xadd(qk.log, {"payload": "x"}, id="11000-0")
    assert trim(broker, qk, max_len=2) == [0, 1]
    assert broker.archives.gap(queue_name, "slow", "messages") == Gap("3000-0", "9000-0", 7)
    assert broker.archives.gap(queue_name, "fast", "messages") == Gap("8000-0", "9000-0", 2)
    # And an archive past what the cap removes gets no gap record
    broker.archives.register(queue_name, "ahead", "messages", "10000-0")
    redis_client.xadd(qk.log, {"payload": "x"}, id="12000-0")
    assert trim(broker, qk, max_len=2) == [0, 1]
    assert broker.archives.gap(queue_name, "ahead", "messages") is None


def test_a_hard_cap_by_age_with_no_group_records_the_gap(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str
) -> None:
    # Given entries no group reads, and an archive that stored the first two
    for entry_id in TEN:
        redis_client.xadd(qk.log, {"payload": "x"}, id=entry_id)
    broker.archives.register(queue_name, "a", "messages", "2000-0")
    # When trimmed at 10500 with a max age of 3000 ms: 7 entries are dropped
    assert trim(broker, qk, max_age=3000) == [0, 7]
    # Then the archive misses the 5 after its position
    assert broker.archives.gap(queue_name, "a", "messages") == Gap("3000-0", "7000-0", 5)


def test_events_are_trimmed_behind_their_archives_and_by_the_age_cap(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str
) -> None:
    # Given ten events and no archive of the events
    for entry_id in TEN:
        redis_client.xadd(qk.events, {"e": "handled"}, id=entry_id)
    assert trim(broker, qk, history=True) == [0, 0]
    assert redis_client.xlen(qk.events) == 10
    # When an archive of the events registers at 3000-0: those three go (bounded per call)
    broker.archives.register(queue_name, "a", "events", "3000-0")
    assert trim(broker, qk, history=True, batch=2) == [0, 0]
    assert log_ids(redis_client, qk.events) == TEN[2:]
    trim(broker, qk, history=True, batch=2)
    assert log_ids(redis_client, qk.events) == TEN[3:]
    assert broker.archives.trimmed(queue_name)["events"] == "3000-0"
    # When the age cap (3000 ms at 10500) passes it: counted, and written to its gap record
    trim(broker, qk, history=True, max_age=3000)
    assert log_ids(redis_client, qk.events) == TEN[7:]
    assert redis_client.hget(qk.meta, "events_dropped") == b"4"
    assert broker.archives.gap(queue_name, "a", "events") == Gap("4000-0", "7000-0", 4)
    assert broker.archives.trimmed(queue_name)["events"] == "7000-0"


def test_trim_refuses_the_old_key_layout(broker: Broker, qk: QueueKeys) -> None:
    with pytest.raises(redis.ResponseError, match="log, meta, archives"):
        broker.scripts("trim", [qk.log, qk.meta], ["", 0, 0, 0, 0, 10])


# == upgrading: the unnamed archive of earlier versions ===================================


def test_an_earlier_versions_position_holds_until_default_adopts_it(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str, log10: list[str]
) -> None:
    # Given the position the unnamed archive of an earlier version recorded (3000-0)
    redis_client.hset(qk.meta, mapping={"archive:messages": "3000-0", "archive:events": "5-0"})
    # Then it holds retention (history on or off) and is listed as the archive "default"
    assert trim(broker, qk) == [3, 0]
    listed = {(s.name, s.table, s.position, s.legacy) for s in broker.archives.states(queue_name)}
    assert listed == {("default", "messages", "3000-0", True), ("default", "events", "5-0", True)}
    # When another archive registers, it does not take that position over
    assert broker.archives.register(queue_name, "other", "messages").position == "3000-0"
    assert redis_client.hget(qk.meta, "archive:messages") == b"3000-0"
    # When "default" registers: it starts where the earlier archive stopped, atomically
    got = broker.archives.register(queue_name, "default", "messages", "earliest")
    assert got == ArchiveRegistration(Registered.ADOPTED, "3000-0")
    assert redis_client.hget(qk.meta, "archive:messages") is None
    assert broker.archives.positions(queue_name, "default") == {"messages": "3000-0"}
    # And nothing was trimmed that the earlier archive had not stored
    broker.archives.remove(queue_name, "other")
    assert trim(broker, qk) == [0, 0]
    assert log_ids(redis_client, qk.log) == log10[3:]
    # And removing "default" removes what is left of the earlier version's too
    assert broker.archives.remove(queue_name, "default") == 2
    assert redis_client.hget(qk.meta, "archive:events") is None
    assert broker.archives.states(queue_name) == []


# == archive_gap.lua and archive_remove.lua ==============================================


def test_settling_a_gap_forgets_what_the_archive_passed_and_records_losses(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str
) -> None:
    archives = broker.archives
    archives.register(queue_name, "a", "messages")
    redis_client.hset(qk.archives, "a:messages:gap", "3000-0 8000-0 6")
    # When the archive has read up to 5000-0 only: the record stays
    assert archives.settle(queue_name, "a", "messages", "5000-0") is False
    assert archives.gap(queue_name, "a", "messages") == Gap("3000-0", "8000-0", 6)
    # When it records the loss and goes past it: the record goes, the loss is kept
    assert archives.settle(queue_name, "a", "messages", "8000-0", '{"first": "3000-0"}')
    assert archives.gap(queue_name, "a", "messages") is None
    assert archives.losses(queue_name, "a") == ['{"first": "3000-0"}']
    # When its job has reported it, it is forgotten
    archives.forget_losses(queue_name, "a", 1)
    assert archives.losses(queue_name, "a") == []


def test_remove_deletes_every_trace_of_one_archive_only(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str
) -> None:
    archives = broker.archives
    for name in ("a", "ab"):  # "ab" starts like "a": it must survive
        archives.register(queue_name, name, "messages")
        archives.register(queue_name, name, "events")
        archives.settle(queue_name, name, "messages", "1-0", "loss")
    redis_client.hset(qk.archives, "a:messages:gap", "1-0 2-0 2")
    assert archives.remove(queue_name, "a") == 2
    assert archives.remove(queue_name, "a") == 0
    assert sorted(k.decode() for k in redis_client.hkeys(qk.archives)) == [
        "ab:events",
        "ab:events:since",
        "ab:messages",
        "ab:messages:since",
    ]
    assert redis_client.exists(qk.archive_gaps("a")) == 0
    assert archives.losses(queue_name, "ab") == ["loss"]


def test_states_list_each_archive_with_its_lag_and_gap(
    broker: Broker, redis_client: redis.Redis, qk: QueueKeys, queue_name: str, log10: list[str]
) -> None:
    broker.archives.register(queue_name, "b", "messages", "7000-0")
    broker.archives.register(queue_name, "a", "messages", "2000-0")
    broker.archives.register(queue_name, "a", "events")
    redis_client.hset(qk.archives, "a:messages:gap", "1-0 2-0 2")
    states = broker.archives.states(queue_name)
    assert [(s.name, s.table, s.position, s.lag, s.gap) for s in states] == [
        ("a", "events", "0-0", 0, None),
        ("a", "messages", "2000-0", 8, Gap("1-0", "2-0", 2)),
        ("b", "messages", "7000-0", 3, None),
    ]
    assert all(not s.legacy for s in states)


def test_the_archive_lag_in_stats_is_the_worst_archives(
    redis_client: redis.Redis, queue_name: str, log10: list[str]
) -> None:
    broker = Broker(redis_client, CoreConfig())
    # History off, no archive: no archive lag
    assert broker.stats(queue_name).archive_lag is None
    broker.archives.register(queue_name, "b", "messages", "7000-0")
    broker.archives.register(queue_name, "a", "messages", "4000-0")
    assert broker.stats(queue_name).archive_lag == 6
    # History on, no archive: the whole log waits for one
    broker.archives.remove(queue_name, "a")
    broker.archives.remove(queue_name, "b")
    assert Broker(redis_client, CoreConfig(history=True)).stats(queue_name).archive_lag == 10


# == on a cluster =========================================================================


@pytest.mark.cluster
def test_archives_on_a_cluster(redis_cluster: Any) -> None:
    redis_cluster.flushall()
    client = redis_cluster.client()
    try:
        broker = Broker(client, CoreConfig(replay_window_ms=0, max_len=2))
        for queue in ("orders", "emails"):
            broker.consumers.ensure(queue, "billing", "earliest")
            ids = broker.publish_many(queue, [{"n": n} for n in range(6)])
            with broker.subscribe(queue, "billing") as sub:
                sub.ack(sub.fetch(count=10, block_ms=200))
            broker.archives.register(queue, "a", "messages")
            broker.archives.commit(queue, "a", "messages", ids[1])
            # The cap (2) drops 2 the archive needs; it holds the rest of its share
            assert broker.trim(queue) == (2, 2)
            assert broker.archives.gap(queue, "a", "messages") == Gap(ids[2], ids[3], 2)
            [state] = broker.archives.states(queue)
            assert (state.position, state.lag) == (ids[1], 2)
            assert broker.archives.settle(queue, "a", "messages", ids[3], "lost")
            assert broker.archives.losses(queue, "a") == ["lost"]
            assert broker.archives.remove(queue, "a") == 1
            assert broker.archives.states(queue) == []
    finally:
        client.close()
