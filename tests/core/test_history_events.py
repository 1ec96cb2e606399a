"""Lifecycle events (history on): every settle records its event in the same script.

Each test drives the real scripts on a real redis-server and reads the ``events`` stream
back, as the pipeline's data source does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, CoreConfig, Failure
from redisq_django.core.outcome import Outcome

pytestmark = pytest.mark.core_config(poll_interval_ms=20, history=True)


def events(broker: Broker, queue: str) -> list[dict[str, Any]]:
    """The events stream as dicts, ``m`` decoded, in order."""
    out = []
    for entry_id, fields in broker.client.xrange(broker.keys(queue).events):
        event = {k.decode(): v.decode() for k, v in fields.items()}
        event["m"] = json.loads(event["m"])
        event["id"] = entry_id.decode()
        out.append(event)
    return out


def summary(broker: Broker, queue: str) -> list[tuple[str, str, list[Any]]]:
    return [(e["e"], e["g"], e["m"]) for e in events(broker, queue)]


def test_handled_after_two_failures_records_exactly_these_events_in_order(
    queue_name: str,
    broker: Broker,
) -> None:
    # Given a consumer and one message
    broker.consumers.ensure(queue_name, "billing")
    mid = broker.publish(queue_name, {"order": 1})
    sub = broker.subscribe(queue_name, "billing", "w1", backoff_s=0.001, max_backoff_s=0.001)
    # When its handler fails twice, then succeeds in 7 ms
    for _ in range(2):
        (m,) = sub.fetch(count=1, block_ms=500)
        m.duration_ms = 3
        assert sub.fail(m, Failure("KeyError", "customer")).outcome is Outcome.RETRIED
    (m,) = sub.fetch(count=1, block_ms=500)
    m.duration_ms = 7
    assert sub.ack([m]) == 1
    # Then the events are two retries and one handled, in order, with attempts
    recorded = events(broker, queue_name)
    assert [(e["e"], e["g"], e["c"], e["m"]) for e in recorded] == [
        ("retried", "billing", "w1", [[mid, 1, 3]]),
        ("retried", "billing", "w1", [[mid, 2, 3]]),
        ("handled", "billing", "w1", [[mid, 3, 7]]),
    ]
    assert recorded[0]["error_class"] == "KeyError"
    assert recorded[0]["error_message"] == "customer"
    assert int(recorded[0]["next_due"]) >= int(recorded[0]["id"].split("-")[0])


def test_a_batch_ack_is_one_event_and_skips_what_another_instance_settled(
    queue_name: str,
    broker: Broker,
) -> None:
    broker.consumers.ensure(queue_name, "billing")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(5)])
    sub = broker.subscribe(queue_name, "billing", "w1")
    batch = sub.fetch(count=10, block_ms=500)
    assert [m.id for m in batch] == ids
    # Given the first message was settled meanwhile (e.g. by an instance that took it over)
    broker.client.xack(broker.keys(queue_name).log, "billing", batch[0].entry_id)
    # When the batch is acked
    assert sub.ack(batch) == 4
    # Then one `handled` event lists exactly the four this call acknowledged
    assert summary(broker, queue_name) == [("handled", "billing", [[i, 1, None] for i in ids[1:]])]


def test_dead_rejected_released_and_undecodable_are_recorded(
    queue_name: str, broker: Broker
) -> None:
    broker.consumers.ensure(queue_name, "billing")
    a, b = broker.publish_many(queue_name, [{"n": 1}, {"n": 2}])
    broker.client.xadd(broker.keys(queue_name).log, {"garbage": "no payload"})
    sub = broker.subscribe(queue_name, "billing", "w1")
    fetched = sub.fetch(count=10, block_ms=500)  # the garbage entry dies on the way
    assert [m.id for m in fetched] == [a, b]
    assert sub.reject(fetched[0], ValueError("bad order")).outcome is Outcome.DEAD
    assert sub.release([fetched[1]]) == 1
    recorded = events(broker, queue_name)
    assert [e["e"] for e in recorded] == ["dead", "dead", "released"]
    undecodable, rejected, released = recorded
    assert undecodable["reason"] == "undecodable" and undecodable["m"][0][1] == 1
    assert rejected["reason"] == "rejected" and rejected["m"] == [[a, 1, None]]
    assert rejected["error_class"] == "ValueError"
    assert released["m"] == [[b, 0, None]]  # handed back unstarted: no attempt counted


def test_reclaim_redrive_and_reset_are_recorded(queue_name: str, broker: Broker) -> None:
    broker.consumers.ensure(queue_name, "billing")
    mid = broker.publish(queue_name, {"n": 1})
    crashed = broker.subscribe(queue_name, "billing", "crashed", visibility_timeout_ms=0)
    assert [m.id for m in crashed.fetch(count=1, block_ms=500)] == [mid]
    # When another instance takes the message over, fails it for good, and staff re-drive
    # it, then the consumer is reset to replay from the start
    rescuer = broker.subscribe(
        queue_name, "billing", "rescuer", max_retries=1, visibility_timeout_ms=0
    )
    (taken,) = rescuer.reclaim()
    assert taken.id == mid and taken.attempts == 2
    assert rescuer.fail(taken, RuntimeError("still broken")).outcome is Outcome.DEAD
    (dead,) = broker.dead_letters.read(queue_name, "billing")
    assert broker.dead_letters.redrive(queue_name, "billing", dead.entry_id)
    broker.consumers.reset(queue_name, "billing", "earliest")
    # Then each step has its event
    recorded = events(broker, queue_name)
    assert [(e["e"], e["c"], e["m"]) for e in recorded] == [
        ("reclaimed", "rescuer", [[mid, 2, None]]),
        ("dead", "rescuer", [[mid, 2, None]]),
        ("redriven", "", [[mid, 0, None]]),
        ("reset", "", []),
    ]
    assert recorded[1]["reason"] == "failed"
    assert recorded[3]["start"] == "0-0"


def test_history_off_writes_no_events(queue_name: str, redis_client: redis.Redis) -> None:
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20))
    broker.consumers.ensure(queue_name, "billing")
    broker.publish(queue_name, {"n": 1})
    sub = broker.subscribe(queue_name, "billing", "w1")
    sub.ack(sub.fetch(count=1, block_ms=500))
    assert redis_client.exists(broker.keys(queue_name).events) == 0


def test_retention_waits_for_the_archive_then_trims_behind_it(
    queue_name: str,
    redis_client: redis.Redis,
) -> None:
    # Given history on, no replay window, and a consumer that handled every message
    broker = Broker(redis_client, CoreConfig(history=True, replay_window_ms=0))
    broker.consumers.ensure(queue_name, "billing")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(10)])
    sub = broker.subscribe(queue_name, "billing", "w1")
    sub.ack(sub.fetch(count=20, block_ms=500))
    assert len(events(broker, queue_name)) == 1
    # When retention runs before the archive stored anything: nothing goes
    assert broker.trim(queue_name) == (0, 0)
    assert redis_client.xlen(broker.keys(queue_name).log) == 10
    # When an archive registers and commits the first 6 messages and the events
    broker.archives.register(queue_name, "default", "messages")
    broker.archives.register(queue_name, "default", "events")
    assert broker.trim(queue_name) == (0, 0)  # registered at the start: it needs them all
    broker.archives.commit(queue_name, "default", "messages", ids[5])
    broker.archives.commit(queue_name, "default", "events", events(broker, queue_name)[0]["id"])
    removed, dropped = broker.trim(queue_name)
    # Then exactly those are trimmed, and the archived events go too
    assert (removed, dropped) == (6, 0)
    assert [i.decode() for i, _ in redis_client.xrange(broker.keys(queue_name).log)] == ids[6:]
    assert redis_client.xlen(broker.keys(queue_name).events) == 0
    # And once it commits the rest, the log empties
    broker.archives.commit(queue_name, "default", "messages", ids[-1])
    assert broker.trim(queue_name) == (4, 0)
    assert events(broker, queue_name) == []


@pytest.mark.parametrize(
    ("message_id", "expected"),
    [
        ("1700000000000-0", b'["1700000000000-0",2,15]'),
        ("9f0c2e", b'["9f0c2e",2,15]'),
        ('a"quote\\and\nnewline', b'["a\\"quote\\\\and\\nnewline",2,15]'),
        ("caf\u00e9", b'["caf\\u00e9",2,15]'),
    ],
)
def test_event_records_are_json_whatever_the_message_id(message_id: str, expected: bytes) -> None:
    from redisq_django.core.lifecycle import record

    assert record(message_id, 2, 15) == expected
    assert json.loads(record(message_id, 2, 15)) == [message_id, 2, 15]
    assert json.loads(record(message_id, 1)) == [message_id, 1, None]


def test_a_batch_of_records_is_one_json_array_whatever_the_message_ids() -> None:
    from redisq_django.core.lifecycle import records_array

    plain = [("1700000000000-0", 1, 12), ("9f0c2e", 3, None)]
    assert records_array(plain) == b'[["1700000000000-0",1,12],["9f0c2e",3,null]]'
    odd = [('a"quote\\and\nnewline', 2, 15), ("caf\u00e9", 1, None), ("x:y", 1, 0)]
    assert json.loads(records_array(odd)) == [list(r) for r in odd]
    assert records_array([]) == b"[]"


def test_a_partial_batch_ack_keeps_the_records_of_odd_ids_intact(
    queue_name: str,
    broker: Broker,
) -> None:
    # Given messages with ids that need JSON escaping, one of them settled elsewhere
    broker.consumers.ensure(queue_name, "billing")
    odd = ['a"quote\\and\nnewline', "caf\u00e9/slash", "x" * 40]
    envelopes = [broker.prepare(queue_name, {"n": n}, id=i) for n, i in enumerate(odd)]
    broker.send(envelopes)
    sub = broker.subscribe(queue_name, "billing", "w1")
    batch = sub.fetch(count=10, block_ms=500)
    for n, m in enumerate(batch):
        m.duration_ms = 10_000_000 + n  # a long handler: integers survive the round trip
    broker.client.xack(broker.keys(queue_name).log, "billing", batch[1].entry_id)
    # When the batch is acked, then the event lists the other two exactly
    assert sub.ack(batch) == 2
    assert summary(broker, queue_name) == [
        ("handled", "billing", [[odd[0], 1, 10_000_000], [odd[2], 1, 10_000_002]])
    ]
