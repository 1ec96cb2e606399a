"""History guarantees of the core: C6 replay, C7 retention, and the stats operators read."""

from __future__ import annotations

import datetime as dt
import re
import time

import pytest
import redis

from redisq_django.core import Broker, ConsumerNotFound, CoreConfig
from redisq_django.core.clock import ms_from_entry_id
from redisq_django.core.outcome import Outcome
from tests.core.guarantee_helpers import drain, fetch_nothing, ids


def make_broker(client: redis.Redis, **config: int) -> Broker:
    return Broker(client, CoreConfig(poll_interval_ms=20, **config))


pytestmark = pytest.mark.core_config(poll_interval_ms=20)


def log_ids(client: redis.Redis, queue: str) -> list[str]:
    return [i.decode() for i, _ in client.xrange(Broker(client).keys(queue).log)]


# -- C6: replay -------------------------------------------------------------------------


def test_c6_reset_to_earliest_time_and_id_delivers_again_in_order(
    queue_name: str, broker: Broker
) -> None:
    # Given 20 messages, published in two halves a little apart in time, all handled
    broker.consumers.ensure(queue_name, "billing")
    sub = broker.subscribe(queue_name, "billing", "i1")
    first = [broker.publish(queue_name, {"n": n}) for n in range(1, 11)]
    time.sleep(0.02)
    between = dt.datetime.now(dt.UTC)
    time.sleep(0.02)
    second = broker.publish_many(queue_name, [{"n": n} for n in range(11, 21)])
    published = first + second
    assert ids(drain(sub, expected=20)) == published
    assert fetch_nothing(sub, wait_ms=50) == []

    # When reset to earliest: the same 20 again, in order
    broker.consumers.reset(queue_name, "billing", "earliest")
    again = drain(sub, expected=20)
    assert ids(again) == published
    assert [m.payload["n"] for m in again] == list(range(1, 21))
    assert fetch_nothing(sub, wait_ms=50) == []

    # When reset to a time between message 10 and 11: messages 11..20, in order
    broker.consumers.reset(queue_name, "billing", between)
    assert ids(drain(sub, expected=10)) == second
    assert fetch_nothing(sub, wait_ms=50) == []

    # When reset to an id: from that id, inclusive
    broker.consumers.reset(queue_name, "billing", published[14])
    assert ids(drain(sub, expected=6)) == published[14:]
    assert fetch_nothing(sub, wait_ms=50) == []

    # When reset to latest: nothing old, only what comes next
    broker.consumers.reset(queue_name, "billing", published[0])
    broker.consumers.reset(queue_name, "billing", "latest")
    assert fetch_nothing(sub, wait_ms=50) == []
    new = broker.publish(queue_name, {"n": 21})
    assert ids(drain(sub, expected=1)) == [new]


def test_c6_reset_moves_one_consumer_only(queue_name: str, broker: Broker) -> None:
    # Given two consumers that handled everything
    for group in ("billing", "email"):
        broker.consumers.ensure(queue_name, group)
    published = broker.publish_many(queue_name, list(range(5)))
    billing = broker.subscribe(queue_name, "billing", "b")
    email = broker.subscribe(queue_name, "email", "e")
    drain(billing, expected=5)
    drain(email, expected=5)
    # When billing is reset to earliest
    broker.consumers.reset(queue_name, "billing", "earliest")
    # Then billing replays, email does not
    assert ids(drain(billing, expected=5)) == published
    assert fetch_nothing(email, wait_ms=100) == []


def test_c6_new_consumer_may_start_from_a_time_or_an_id(queue_name: str, broker: Broker) -> None:
    # Given history in the log
    old = broker.publish_many(queue_name, ["a", "b"])
    time.sleep(0.02)
    cut = dt.datetime.now(dt.UTC)
    time.sleep(0.02)
    recent = broker.publish_many(queue_name, ["c", "d"])
    # When new consumers start at a time and at an id
    broker.consumers.ensure(queue_name, "from-time", start=cut)
    broker.consumers.ensure(queue_name, "from-id", start=old[1])
    # Then they receive from there on
    assert ids(drain(broker.subscribe(queue_name, "from-time", "x"), expected=2)) == recent
    assert ids(drain(broker.subscribe(queue_name, "from-id", "x"), expected=3)) == [old[1], *recent]


def test_c6_reset_of_unknown_consumer_says_so(queue_name: str, broker: Broker) -> None:
    broker.publish(queue_name, 1)
    with pytest.raises(ConsumerNotFound, match=rf"'nobody'.*'{re.escape(queue_name)}'"):
        broker.consumers.reset(queue_name, "nobody", "earliest")


# -- C7: retention ------------------------------------------------------------------------


def test_c7_slow_consumer_keeps_its_backlog_through_trimming(
    queue_name: str, redis_client: redis.Redis
) -> None:
    # Given no replay window, a fast consumer that acked all 20 messages and a slow one
    # that fetched them all and acked none
    broker = make_broker(redis_client, replay_window_ms=0, replay_window_len=0)
    broker.consumers.ensure(queue_name, "fast")
    broker.consumers.ensure(queue_name, "slow")
    published = broker.publish_many(queue_name, list(range(20)))
    drain(broker.subscribe(queue_name, "fast", "f"), expected=20)
    slow = broker.subscribe(queue_name, "slow", "s")
    backlog = drain(slow, expected=20, ack=False)
    assert ids(backlog) == published

    # When trimming: nothing the slow consumer needs is removed
    assert broker.trim(queue_name) == (0, 0)
    assert log_ids(redis_client, queue_name) == published

    # When the slow consumer acks the first half: exactly that half goes
    slow.ack(backlog[:10])
    assert broker.trim(queue_name) == (10, 0)
    assert log_ids(redis_client, queue_name) == published[10:]
    assert broker.trim(queue_name) == (0, 0)

    # And once it acks the rest, they go too
    slow.ack(backlog[10:])
    assert broker.trim(queue_name) == (10, 0)
    stats = broker.stats(queue_name)
    assert (stats.length, stats.dropped) == (0, 0)


def test_c7_consumer_that_has_not_fetched_yet_keeps_everything(
    queue_name: str, redis_client: redis.Redis
) -> None:
    # Given a consumer that is offline (never fetched) and one that handled all
    broker = make_broker(redis_client, replay_window_ms=0)
    broker.consumers.ensure(queue_name, "offline")
    broker.consumers.ensure(queue_name, "online")
    published = broker.publish_many(queue_name, list(range(15)))
    drain(broker.subscribe(queue_name, "online", "o"), expected=15)
    # When trimming
    assert broker.trim(queue_name) == (0, 0)
    # Then the offline one still receives all of them when it comes back
    assert ids(drain(broker.subscribe(queue_name, "offline", "x"), expected=15)) == published


def test_c7_queue_without_consumers_is_not_trimmed_safely(
    queue_name: str, redis_client: redis.Redis
) -> None:
    # Given messages and no consumer yet (one may still start at "earliest")
    broker = make_broker(redis_client, replay_window_ms=0)
    published = broker.publish_many(queue_name, list(range(5)))
    assert broker.trim(queue_name) == (0, 0)
    broker.consumers.ensure(queue_name, "later", start="earliest")
    assert ids(drain(broker.subscribe(queue_name, "later", "x"), expected=5)) == published


def test_c7_acked_history_outside_the_replay_window_is_trimmed(
    queue_name: str, redis_client: redis.Redis
) -> None:
    # Given a 1 s replay window and 20 acked messages published in two halves
    broker = make_broker(redis_client, replay_window_ms=1_000)
    broker.consumers.ensure(queue_name, "billing")
    older = broker.publish_many(queue_name, list(range(10)))
    time.sleep(0.01)
    newer = broker.publish_many(queue_name, list(range(10, 20)))
    drain(broker.subscribe(queue_name, "billing", "i1"), expected=20)
    first_newer_ms = ms_from_entry_id(newer[0])

    # When trimming "now" (within the window of everything): nothing goes
    assert broker.trim(queue_name, now=first_newer_ms + 500) == (0, 0)
    assert log_ids(redis_client, queue_name) == older + newer

    # When the older half falls out of the window: exactly it goes, the newer is kept
    assert broker.trim(queue_name, now=first_newer_ms + 1_000) == (10, 0)
    assert log_ids(redis_client, queue_name) == newer

    # And replay within the window still works
    broker.consumers.reset(queue_name, "billing", "earliest")
    assert ids(drain(broker.subscribe(queue_name, "billing", "i2"), expected=10)) == newer


def test_c7_replay_window_by_length_keeps_the_newest_entries(
    queue_name: str, redis_client: redis.Redis
) -> None:
    # Given a length window of 5 and 12 acked messages
    broker = make_broker(redis_client, replay_window_ms=0, replay_window_len=5)
    broker.consumers.ensure(queue_name, "billing")
    published = broker.publish_many(queue_name, list(range(12)))
    drain(broker.subscribe(queue_name, "billing", "i1"), expected=12)
    # When trimming: the newest 5 stay
    assert broker.trim(queue_name) == (7, 0)
    assert log_ids(redis_client, queue_name) == published[7:]


def test_c7_hard_cap_drops_are_counted(queue_name: str, redis_client: redis.Redis) -> None:
    # Given a hard cap of 5 entries, a consumer that acked the first 3 of 12
    broker = make_broker(redis_client, replay_window_ms=0, max_len=5)
    broker.consumers.ensure(queue_name, "billing")
    published = broker.publish_many(queue_name, list(range(12)))
    sub = broker.subscribe(queue_name, "billing", "i1")
    fetched = drain(sub, expected=12, ack=False)
    sub.ack(fetched[:3])

    # When trimming: 3 acked entries removed safely, 4 unacked ones dropped by the cap
    assert broker.trim(queue_name) == (3, 4)

    # Then the log holds the newest 5, and the drops are shown in stats
    assert log_ids(redis_client, queue_name) == published[7:]
    stats = broker.stats(queue_name)
    assert (stats.length, stats.dropped) == (5, 4)

    # And a second round of drops adds to the count
    broker.publish_many(queue_name, list(range(3)))
    assert broker.trim(queue_name) == (0, 3)
    assert broker.stats(queue_name).dropped == 7


def test_c7_hard_age_cap_drops_are_counted(queue_name: str, redis_client: redis.Redis) -> None:
    # Given a 1 s age cap and a consumer that has not handled anything
    broker = make_broker(redis_client, replay_window_ms=0, max_age_ms=1_000)
    broker.consumers.ensure(queue_name, "billing")
    old = broker.publish_many(queue_name, list(range(4)))
    time.sleep(0.01)
    young = broker.publish_many(queue_name, list(range(4)))
    # When trimming at a time when only the old ones are over the age
    assert broker.trim(queue_name, now=ms_from_entry_id(young[0]) + 1_000) == (0, 4)
    # Then they are dropped and counted; the young ones are still delivered
    assert broker.stats(queue_name).dropped == 4
    assert ids(drain(broker.subscribe(queue_name, "billing", "i1"), expected=4)) == young
    assert old[0] not in log_ids(redis_client, queue_name)


# -- stats --------------------------------------------------------------------------------


def test_stats_reflect_a_constructed_situation(queue_name: str, broker: Broker) -> None:
    # Given a queue with two consumers and messages in every state
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    published = broker.publish_many(queue_name, [{"n": n} for n in range(10)])
    broker.publish(queue_name, "later", delay=60)
    broker.publish_many(queue_name, ["later", "later"], delay=120)
    time.sleep(0.2)  # the oldest unacked message is at least this old

    sub = broker.subscribe(queue_name, "billing", "alive", max_retries=5, backoff_s=60)
    sub.heartbeat(60_000)
    broker.subscribe(queue_name, "billing", "gone").heartbeat(-1)  # heartbeat already expired
    fetched = drain(sub, expected=6, count=6, ack=False)
    assert ids(fetched) == published[:6]
    sub.ack([fetched[1]])  # acked
    assert sub.fail(fetched[2], RuntimeError("x")).outcome is Outcome.RETRIED  # waiting 30-60 s
    assert sub.reject(fetched[3], RuntimeError("y")).outcome is Outcome.DEAD
    assert sub.reject(fetched[4], RuntimeError("z")).outcome is Outcome.DEAD
    [dead, _] = broker.dead_letters.read(queue_name, "billing")
    broker.dead_letters.redrive(
        queue_name, "billing", dead.entry_id
    )  # waits in billing's direct input
    # fetched[0] and fetched[5] stay in flight

    # When reading the stats
    stats = broker.stats(queue_name)

    # Then every figure matches
    assert (stats.name, stats.length, stats.delayed, stats.dropped) == (queue_name, 10, 3, 0)
    assert stats.oldest_id == published[0]
    billing, email = stats.consumers
    assert (billing.name, email.name) == ("billing", "email")
    assert billing.lag == 4
    assert billing.in_flight == 2
    assert billing.waiting_retry == 1
    assert billing.direct == 1
    assert billing.dead == 1
    assert billing.instances_alive == 1
    assert billing.last_delivered_id == published[5]
    assert billing.oldest_unacked_age_s is not None
    assert 0.2 <= billing.oldest_unacked_age_s < 5
    # email has handled nothing: everything is lag, its oldest unacked is the first message
    assert (email.lag, email.in_flight, email.waiting_retry, email.direct, email.dead) == (
        10,
        0,
        0,
        0,
        0,
    )
    assert email.instances_alive == 0
    assert email.oldest_unacked_age_s is not None and email.oldest_unacked_age_s >= 0.2
    assert stats.lag == 10

    # And once billing handled everything, its figures go to zero
    sub.ack([fetched[0], fetched[5]])
    sub.ack(drain(sub, expected=5, ack=False))  # 4 from the log + the re-driven one
    billing = broker.stats(queue_name).consumers[0]
    assert (billing.lag, billing.in_flight, billing.direct, billing.waiting_retry) == (0, 0, 0, 1)


def test_stats_of_unknown_queue_are_empty(broker: Broker, queue_name: str) -> None:
    stats = broker.stats(queue_name)  # never published to nor consumed
    assert (stats.length, stats.delayed, stats.dropped, stats.consumers) == (0, 0, 0, [])
    assert stats.oldest_id is None
