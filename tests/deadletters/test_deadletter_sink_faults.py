"""Dead letters that other clients (or older versions) left in odd shapes: one bad entry
never blocks the sink, ids are never merged, undecodable ones are not re-driven."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command

from redisq_django import deadletters
from redisq_django.connection import get_broker
from redisq_django.models import DeadLetter

pytestmark = [pytest.mark.django_db, pytest.mark.servers, pytest.mark.site_broker]

#: 10**17 ms since the epoch: the year 3170843, beyond what a datetime can hold.
FAR_FUTURE_MS = b"100000000000000000"


def dead_entry(broker: Any, queue: str, group: str, message_id: str, **extra: bytes) -> None:
    """A dead letter written straight into ``group``'s dead stream, as a script or another
    client may have left it."""
    broker.consumers.ensure(queue, group)
    fields: dict[bytes, bytes] = {
        b"id": message_id.encode(),
        b"payload": b'{"n":1}',
        b"published_at": b"1700000000000",
        b"reason": b"failed",
        b"error_class": b"ValueError",
        b"error_message": b"boom",
        b"attempts": b"6",
        b"last_failed_at": b"1700000000500",
        b"group": group.encode(),
    }
    fields.update({k.encode(): v for k, v in extra.items()})
    broker.client.xadd(broker.keys(queue).group(group).dead, fields)


def test_a_dead_letter_with_an_out_of_range_time_blocks_no_other(
    queue_name: str, broker: Any
) -> None:
    # Given consumer "a" with a dead letter dated in the year 3170843 between two good ones,
    # and consumer "b" (sunk after "a") with a good one
    dead_entry(broker, queue_name, "a", "good-1")
    dead_entry(broker, queue_name, "a", "bad", published_at=FAR_FUTURE_MS)
    dead_entry(broker, queue_name, "a", "good-2", last_failed_at=FAR_FUTURE_MS)
    dead_entry(broker, queue_name, "b", "good-3")

    # When the sink runs over both consumers
    moved = deadletters.sink_all([(queue_name, "a"), (queue_name, "b")])

    # Then every dead letter is a row (the odd times left empty) and Redis holds none
    assert moved == 4
    rows = {r.message_id: r for r in DeadLetter.objects.filter(queue=queue_name)}
    assert set(rows) == {"good-1", "bad", "good-2", "good-3"}
    assert rows["bad"].published_at is None and rows["bad"].last_failed_at is not None
    assert rows["good-2"].last_failed_at is None and rows["good-2"].published_at is not None
    assert broker.dead_letters.read(queue_name, "a") == []
    assert broker.dead_letters.read(queue_name, "b") == []


def test_a_consumer_whose_sink_fails_does_not_stop_the_others(queue_name: str, broker: Any) -> None:
    # Given consumer "a" whose dead stream is not a stream (a broken key), and consumer "b"
    broker.consumers.ensure(queue_name, "a")
    dead_entry(broker, queue_name, "b", "good-b")
    broken = broker.keys(queue_name).group("a").dead
    broker.client.set(broken, b"not a stream")

    # When the sink runs over both: "a" fails, and says so once all are done
    try:
        with pytest.raises(Exception, match="WRONGTYPE"):
            deadletters.sink_all([(queue_name, "a"), (queue_name, "b")])
    finally:
        broker.client.delete(broken)  # other tests list every queue of the server

    # Then "b"'s dead letter reached the database all the same
    stored = DeadLetter.objects.filter(queue=queue_name).values_list("message_id", flat=True)
    assert list(stored) == ["good-b"]
    assert broker.dead_letters.read(queue_name, "b") == []


def test_dead_letters_whose_ids_share_64_characters_stay_two_rows(
    queue_name: str, broker: Any
) -> None:
    # Given two dead letters (left by an older version, or by another client) whose
    # 65-character ids differ only in their last character
    long_ids = ["p" * 64 + "1", "p" * 64 + "2"]
    for message_id in long_ids:
        dead_entry(broker, queue_name, "a", message_id)

    # When the sink runs
    assert deadletters.sink(queue_name, "a") == 2

    # Then they are two rows, each keeping its full id for a retry
    rows = DeadLetter.objects.filter(queue=queue_name)
    assert sorted(r.envelope["id"] for r in rows) == long_ids
    assert len({r.message_id for r in rows}) == 2
    assert all(len(r.message_id) <= 64 for r in rows)
    assert broker.dead_letters.read(queue_name, "a") == []


def test_undecodable_dead_letters_are_not_retried_from_the_database(
    queue_name: str, broker: Any
) -> None:
    # Given an undecodable dead letter stored as a row, beside a rejected one
    dead_entry(broker, queue_name, "a", "rejected-1", reason=b"rejected")
    dead_entry(broker, queue_name, "a", "garbage", reason=b"undecodable")
    deadletters.sink(queue_name, "a")
    rows = {r.message_id: r for r in DeadLetter.objects.filter(queue=queue_name)}

    # When staff retry both
    assert deadletters.retry(rows.values()) == 1

    # Then only the rejected one is sent again; the undecodable one stays dead
    for row in rows.values():
        row.refresh_from_db()
    assert rows["rejected-1"].status == DeadLetter.Status.RETRIED
    assert rows["garbage"].status == DeadLetter.Status.DEAD
    assert rows["garbage"].retry_count == 0
    direct = broker.client.xrange(broker.keys(queue_name).group("a").direct)
    assert [f[b"id"] for _, f in direct] == [b"rejected-1"]


# The command sinks every queue in Redis first: no other test's (broken) keys, please.
@pytest.mark.usefixtures("empty_redis")
def test_the_command_says_why_undecodable_dead_letters_are_not_retried(
    queue_name: str, broker: Any
) -> None:
    dead_entry(broker, queue_name, "a", "garbage", reason=b"undecodable")
    out = io.StringIO()
    call_command("redisq", "dead", "retry", "--all", "--queue", queue_name, stdout=out)
    assert "Re-drove 0 dead letter(s)" in out.getvalue()
    assert "1 undecodable dead letter(s) cannot be re-driven" in out.getvalue()
    assert DeadLetter.objects.get(queue=queue_name).status == DeadLetter.Status.DEAD


def test_redis_down_stops_the_sink_at_once_with_one_error(
    settings: Any, fresh_redis_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from redisq_django.core.errors import RedisUnavailable

    # Given dead letters known to be in a Redis that then goes away
    settings.REDISQ = {"URL": fresh_redis_server.url}
    broker = get_broker()
    for queue in ("q1", "q2", "q3"):
        broker.consumers.ensure(queue, "billing")
    pairs = [(q, "billing") for q in ("q1", "q2", "q3")]
    fresh_redis_server.stop()
    # When the sink runs, then it raises RedisUnavailable once (the worker's ticker logs
    # it quietly and tries again) instead of an ERROR with a traceback per consumer
    with pytest.raises(RedisUnavailable):
        deadletters.sink_all(pairs)
    assert "could not be sunk" not in caplog.text


def test_a_registry_member_that_is_no_queue_name_does_not_stop_the_sink(
    queue_name: str, broker: Any
) -> None:
    # Given a dead letter in Redis, and a member of the queue registry that is no queue
    # name (another client's; removed after: the registry is shared by every test)
    dead_entry(broker, queue_name, "a", "good-a")
    broker.client.sadd("redisq:queues", f"{queue_name} x")
    try:
        # When the worker's sink runs over every queue Redis knows
        deadletters.sink_all()
    finally:
        broker.client.srem("redisq:queues", f"{queue_name} x")
    # Then the dead letter reached the database
    stored = DeadLetter.objects.filter(queue=queue_name).values_list("message_id", flat=True)
    assert list(stored) == ["good-a"]
    assert broker.dead_letters.read(queue_name, "a") == []
