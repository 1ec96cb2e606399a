"""Every message before it dies (``core/operator/browse.py``,
``core/operator/actions.py``): the listed ids equal what is waiting, delayed, retrying
and in flight, page by page through 100,000 entries at a constant number of round trips
per page; "deliver now" makes exactly that message delivered next; a consumer's purge
discards what waits for it alone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, RetryPolicy
from redisq_django.core.keys import GroupKeys
from redisq_django.core.operator import actions, browse
from redisq_django.core.operator.browse import Page
from tests.core.guarantee_helpers import drain
from tests.support.round_trips import round_trips

BIG = 100_000
PAGE = 200


def every_page(read: Any, *, max_pages: int = 10_000) -> Iterator[tuple[Page, int]]:
    """Each page of ``read(cursor)`` with the round trips it took, following cursors."""
    cursor = None
    for _ in range(max_pages):
        page, trips = read(cursor)
        yield page, trips
        if page.next is None:
            return
        cursor = page.next
    raise AssertionError("more pages than expected")


def counted(client: redis.Redis, fn: Any) -> Any:
    def read(cursor: str | None) -> tuple[Page, int]:
        with round_trips(client) as trips:
            page = fn(cursor)
        return page, trips[0]

    return read


pytestmark = pytest.mark.core_config(retry=RetryPolicy(max_retries=3, backoff_s=60))


@pytest.mark.slow
def test_waiting_lists_100000_messages_in_order_at_one_round_trip_per_log_page(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given 100,000 published messages of which billing took the first 10 (in flight)
    broker.consumers.ensure(queue_name, "billing")
    ids = []
    for start in range(0, BIG, 5_000):
        ids += broker.publish_many(queue_name, [{"n": n} for n in range(start, start + 5_000)])
    sub = broker.subscribe(queue_name, "billing")
    taken = sub.fetch(count=10, block_ms=100)
    gkeys = broker.keys(queue_name).group("billing")

    # When staff page through what waits for billing
    pages = list(
        every_page(counted(redis_client, lambda c: browse.waiting(redis_client, gkeys, c, PAGE)))
    )

    # Then every waiting message is listed once, in delivery order
    listed = [e.message_id for page, _ in pages for e in page.entries]
    assert [m.id for m in taken] == ids[:10]
    assert listed == ids[10:]
    assert all(len(page.entries) == PAGE for page, _ in pages[:-1])
    # ... the first page in two round trips, every later one in one, however deep
    assert pages[0][1] == 2
    assert {trips for _, trips in pages[1:]} == {1}
    # ... each row with its payload preview
    assert pages[-1][0].entries[-1].preview == '{"n":99999}'
    redis_client.delete(broker.keys(queue_name).log)  # the session's Redis is shared


def test_waiting_lists_the_private_input_first_then_the_log(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "billing")
    gkeys = broker.keys(queue_name).group("billing")
    first = broker.publish(queue_name, {"n": "retried"})
    with broker.subscribe(queue_name, "billing") as sub:
        (m,) = drain(sub, expected=1, ack=False)
        sub.release([m])  # handed back: due now in its retries
        sub.promote()  # ... and promoted into its private input
    log_ids = broker.publish_many(queue_name, [{"n": n} for n in range(5)])

    page = browse.waiting(redis_client, gkeys, None, 3)
    assert [(e.where, e.message_id) for e in page.entries] == [
        ("direct", first),
        ("log", log_ids[0]),
        ("log", log_ids[1]),
    ]
    rest = browse.waiting(redis_client, gkeys, page.next, 3)
    assert [e.message_id for e in rest.entries] == log_ids[2:]
    assert rest.next is None
    # A page of the private input only goes on with the log
    only = browse.waiting(redis_client, gkeys, None, 1)
    assert [e.message_id for e in only.entries] == [first]
    assert [
        e.message_id for e in browse.waiting(redis_client, gkeys, only.next, 9).entries
    ] == log_ids


def test_waiting_of_a_consumer_not_registered_lists_nothing(
    redis_client: redis.Redis, queue_name: str, broker: Broker
) -> None:
    broker.publish(queue_name, {"n": 1})
    page = browse.waiting(redis_client, broker.keys(queue_name).group("nobody"), None)
    assert page.entries == [] and page.next is None


@pytest.mark.slow
def test_delayed_lists_100000_messages_soonest_first_through_tied_due_times(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given 100,000 delayed messages, many of them due at the same millisecond
    keys = broker.keys(queue_name)
    due = int(time.time() * 1000) + 3_600_000
    with redis_client.pipeline(transaction=False) as pipe:
        for n in range(BIG):
            member = f'{{"payload":"{{\\"n\\":{n}}}","id":"m-{n:06d}"}}'
            pipe.zadd(keys.delayed, {member: due + n // 1000})  # 1,000 per due time
        pipe.execute()

    pages = list(
        every_page(counted(redis_client, lambda c: browse.delayed(redis_client, keys, c, PAGE)))
    )

    listed = [e.message_id for page, _ in pages for e in page.entries]
    in_redis = [
        browse.member_fields(m)[b"id"].decode() for m in redis_client.zrange(keys.delayed, 0, -1)
    ]
    assert listed == in_redis and len(set(listed)) == BIG
    assert {trips for _, trips in pages} == {1}
    first = pages[0][0].entries[0]
    assert (first.due_ms, first.preview) == (due, '{"n":0}')
    redis_client.delete(keys.delayed)  # the session's Redis is shared


def test_retrying_lists_next_attempt_attempt_and_last_error(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "billing")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(3)])
    before = int(time.time() * 1000)
    with broker.subscribe(queue_name, "billing") as sub:
        got = drain(sub, expected=3, ack=False)
        for m in got:
            sub.fail(m, ValueError(f"card declined for {m.payload['n']}"))
    page = browse.retrying(redis_client, broker.keys(queue_name).group("billing"), None, 2)
    more = browse.retrying(redis_client, broker.keys(queue_name).group("billing"), page.next, 2)
    entries = page.entries + more.entries
    assert sorted(e.message_id for e in entries) == sorted(ids) and more.next is None
    assert all(e.attempts == 1 and e.due_ms and e.due_ms >= before + 30_000 for e in entries)
    assert {e.last_error for e in entries} == {
        f"ValueError: card declined for {n}" for n in range(3)
    }
    assert [e.due_ms for e in entries] == sorted(e.due_ms for e in entries)  # type: ignore[type-var]


def test_in_flight_lists_instance_delivery_count_and_since_when(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given two instances holding messages, one of them running its first
    broker.consumers.ensure(queue_name, "billing")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(5)])
    one = broker.subscribe(queue_name, "billing", "w-1")
    two = broker.subscribe(queue_name, "billing", "w-2")
    a = one.fetch(count=3, block_ms=100)
    b = two.fetch(count=2, block_ms=100)
    one.heartbeat(15_000, running=a[0])
    gkeys: GroupKeys = broker.keys(queue_name).group("billing")

    # When staff list what is in flight, two at a time
    pages = list(
        every_page(counted(redis_client, lambda c: browse.in_flight(redis_client, gkeys, c, 2)))
    )

    # Then every delivery is listed with its instance, in two round trips per page
    entries = [e for page, _ in pages for e in page.entries]
    assert [(e.message_id, e.owner) for e in entries] == [(m.id, "w-1") for m in a] + [
        (m.id, "w-2") for m in b
    ]
    assert [e.message_id for e in entries] == ids
    assert {trips for _, trips in pages} == {2}
    assert all(e.deliveries == 1 and e.idle_ms is not None for e in entries)
    # ... and the one w-1 runs says since when
    assert entries[0].since_ms is not None and entries[1].since_ms is None
    assert entries[0].preview == '{"n":0}'


def test_deliver_now_makes_exactly_that_delayed_message_delivered_next(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given three messages delayed by an hour
    broker.consumers.ensure(queue_name, "billing")
    ids = [broker.publish(queue_name, {"n": n}, delay=3600) for n in range(3)]
    keys = broker.keys(queue_name)
    (chosen,) = [
        e for e in browse.delayed(redis_client, keys, None).entries if e.message_id == ids[1]
    ]

    # When staff deliver the second one now
    new_id = actions.deliver_now(redis_client, broker.scripts, keys, None, chosen.ref)

    # Then billing's next fetch receives exactly that one, and the others stay delayed
    assert new_id is not None
    with broker.subscribe(queue_name, "billing") as sub:
        got = sub.fetch(count=10, block_ms=200)
        sub.ack(got)
    assert [(m.id, m.payload) for m in got] == [(ids[1], {"n": 1})]
    left = browse.delayed(redis_client, keys, None).entries
    assert sorted(e.message_id for e in left) == sorted([ids[0], ids[2]])
    # ... and delivering it again finds it gone
    assert actions.deliver_now(redis_client, broker.scripts, keys, None, chosen.ref) is None


def test_deliver_now_sends_a_retry_to_its_own_consumer_only(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(2)])
    with broker.subscribe(queue_name, "billing") as sub:
        for m in drain(sub, expected=2, ack=False):
            sub.fail(m, ValueError("later"))
    gkeys = broker.keys(queue_name).group("billing")
    retry = [
        e for e in browse.retrying(redis_client, gkeys, None).entries if e.message_id == ids[0]
    ]

    actions.deliver_now(
        redis_client, broker.scripts, broker.keys(queue_name), "billing", retry[0].ref
    )

    with broker.subscribe(queue_name, "billing") as sub:
        got = sub.fetch(count=10, block_ms=200)
        sub.ack(got)
    assert [(m.id, m.attempts) for m in got] == [(ids[0], 2)]  # its second attempt
    assert [e.message_id for e in browse.retrying(redis_client, gkeys, None).entries] == [ids[1]]
    with broker.subscribe(queue_name, "email") as sub:
        assert sorted(m.id for m in drain(sub, expected=2)) == sorted(ids)  # as published


def test_deliver_now_refuses_what_is_not_delayed_or_retrying(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    with pytest.raises(ValueError, match="Only a delayed message or a retry"):
        actions.deliver_now(redis_client, broker.scripts, broker.keys(queue_name), None, "log:1-0")
    with pytest.raises(ValueError, match="Not a message reference"):
        browse.find(redis_client, broker.keys(queue_name), None, "delayed:soon")


def test_purge_of_a_consumer_discards_what_waits_for_it_alone(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given billing with a backlog, retries, re-driven input and one message in flight,
    # and email with its own backlog
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    broker.publish_many(queue_name, [{"n": n} for n in range(4)])
    sub = broker.subscribe(queue_name, "billing", "w-1")
    got = drain(sub, expected=4, ack=False)
    sub.fail(got[0], ValueError("later"))
    sub.release([got[1]])
    sub.promote()  # the released one is in its private input now
    backlog = broker.publish_many(queue_name, [{"n": n} for n in range(4, 10)])
    gkeys = broker.keys(queue_name).group("billing")

    # When staff purge billing
    removed = actions.purge_consumer(
        redis_client, broker.scripts, broker.keys(queue_name), "billing"
    )

    # Then nothing waits for billing, what it runs stays in flight, email keeps everything
    assert removed == (1, 1)
    stats = {c.name: c for c in broker.stats(queue_name).consumers}
    assert (stats["billing"].backlog, stats["billing"].waiting_retry) == (0, 0)
    assert stats["billing"].in_flight == 2
    assert browse.waiting(redis_client, gkeys, None).entries == []
    sub.ack(got[2:])
    assert stats["email"].backlog == 10
    # ... and billing receives what is published next
    new = broker.publish(queue_name, {"n": "after"})
    assert [m.id for m in drain(sub, expected=1)] == [new]
    assert backlog  # (published before the purge, never delivered to billing)


def test_the_log_lists_newest_first(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(5)])
    keys = broker.keys(queue_name)
    first = browse.log(redis_client, keys, None, 3)
    second = browse.log(redis_client, keys, first.next, 3)
    assert [e.message_id for e in first.entries + second.entries] == ids[::-1]
    assert second.next is None


def test_a_member_that_is_not_a_json_object_of_strings_shows_raw() -> None:
    assert browse.member_fields(b'{"payload":"1","id":"a","x":null}') == {
        b"payload": b"1",
        b"id": b"a",
    }
    assert browse.member_fields(b'{"payload":1}') == {b"raw": b'{"payload":1}'}
    assert browse.member_fields(b"[1]") == {b"raw": b"[1]"}
    assert browse.member_fields(b"nope") == {b"raw": b"nope"}
    # A byte order mark: not JSON text for promote.lua's cjson either
    assert browse.member_fields(b'\xef\xbb\xbf{"payload":"1"}') == {
        b"raw": b'\xef\xbb\xbf{"payload":"1"}'
    }
    # A lone surrogate escape: shown, not a UnicodeEncodeError that breaks the page
    assert browse.member_fields(b'{"payload":"\\udc80"}') == {b"payload": b"\xed\xb2\x80"}


def test_deliver_waiting_finds_ids_and_delivers_all_across_pages(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given 450 messages delayed by an hour (more than two pages of browse.MAX_PAGE)
    broker.consumers.ensure(queue_name, "billing")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(450)], delay=3600)
    keys = broker.keys(queue_name)
    assert browse.MAX_PAGE < 450

    # When two ids (one on the third page) and one that is not waiting are delivered now
    done = actions.deliver_waiting(
        redis_client, broker.scripts, keys, None, [ids[420], ids[5], "no-such-id"]
    )

    # Then exactly those two reach the log, and the unknown id is reported missing
    assert (done.count, sorted(done.ids), done.missing) == (
        2,
        sorted([ids[5], ids[420]]),
        ["no-such-id"],
    )
    with broker.subscribe(queue_name, "billing") as sub:
        got = sub.fetch(count=10, block_ms=200)
        sub.ack(got)
    assert sorted(m.id for m in got) == sorted([ids[5], ids[420]])
    assert redis_client.zcard(keys.delayed) == 448

    # When all the rest are delivered now
    rest = actions.deliver_waiting(redis_client, broker.scripts, keys, None, None)

    # Then all 448 are delivered once, and none waits any longer
    assert (rest.count, rest.ids, rest.missing) == (448, [], [])
    assert redis_client.zcard(keys.delayed) == 0
    with broker.subscribe(queue_name, "billing") as sub:
        got = drain(sub, expected=448)
    assert sorted(m.id for m in got) == sorted(set(ids) - {ids[5], ids[420]})


def test_deliver_waiting_delivers_the_retries_of_that_consumer_only(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given billing with 3 retries waiting an hour, and email that handled everything
    policy = RetryPolicy.from_seconds(
        max_retries=5, backoff=3600, max_backoff=3600, visibility_timeout=60
    )
    broker.consumers.ensure(queue_name, "billing")
    broker.consumers.ensure(queue_name, "email")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(3)])
    with broker.subscribe(queue_name, "billing", policy=policy) as sub:
        for m in drain(sub, expected=3, ack=False):
            sub.fail(m, ValueError("later"))
    with broker.subscribe(queue_name, "email") as sub:
        drain(sub, expected=3)

    # When all of billing's retries are delivered now
    done = actions.deliver_waiting(
        redis_client, broker.scripts, broker.keys(queue_name), "billing", None
    )

    # Then billing receives the three (second attempts) and email nothing
    assert done.count == 3
    with broker.subscribe(queue_name, "billing") as sub:
        got = drain(sub, expected=3)
    assert sorted((m.id, m.attempts) for m in got) == sorted((i, 2) for i in ids)
    with broker.subscribe(queue_name, "email") as sub:
        assert sub.fetch(count=10, block_ms=100) == []
