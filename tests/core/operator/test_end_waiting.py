"""Ending a message that waits in the shared log for one logical consumer (issue 36, the
gap; ``end_waiting.lua``, ``ended_marks.lua``, ``core/ended.py``): it is marked for that
consumer, whose instances make it a dead letter (reason ``ended``) or delete it when they
read it, without running it; every other consumer still receives it; an ordered
consumer's other messages of its key keep their order; partitioned queues per
partition; marks that can no longer apply are swept. Real redis-server."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from redisq_django.core import Broker, RetryPolicy
from redisq_django.core.dead_entry import DeadEntry
from redisq_django.core.operator import browse
from tests.core.guarantee_helpers import drain
from tests.support.ordered import handle_all, ordered

pytestmark = pytest.mark.core_config(retry=RetryPolicy(max_retries=30, backoff_s=60))


def dead(client: redis.Redis, broker: Broker, queue: str, consumer: str) -> list[DeadEntry]:
    stream = broker.keys(queue).group(consumer).dead
    return [DeadEntry.from_entry(queue, i, dict(f)) for i, f in client.xrange(stream)]


def waiting_entry(broker: Broker, queue: str, consumer: str, n: int) -> browse.Entry:
    page = broker.operator.waiting(queue, consumer, None, 100)
    return next(
        e for e in page.entries if e.where == "log" and e.fields[b"payload"] == (b'{"n":%d}' % n)
    )


def payloads(messages: list) -> list[int]:
    return sorted(m.payload["n"] for m in messages)


def test_a_waiting_message_ended_for_one_consumer_dies_there_and_reaches_the_others(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given billing and email, and 5 messages neither has read
    for name in ("billing", "email"):
        broker.consumers.ensure(queue_name, name)
    ids = broker.publish_many(queue_name, [{"n": i} for i in range(5)])
    chosen = waiting_entry(broker, queue_name, "billing", 2)

    # When staff end the third message for billing
    got = broker.operator.end_message(queue_name, "billing", chosen.ref, by="ann")

    # Then it is marked (it takes effect when billing reads it), for billing alone
    assert (got.outcome, got.consumers) == ("marked", ("billing",))
    assert dead(redis_client, broker, queue_name, "billing") == []
    # ... billing's instance never handles it: it is billing's dead letter instead
    with broker.subscribe(queue_name, "billing") as sub:
        handled = drain(sub, expected=4)
        assert drain(sub, expected=1, timeout_s=0.3) == []
    assert payloads(handled) == [0, 1, 3, 4]
    (letter,) = dead(redis_client, broker, queue_name, "billing")
    assert (letter.id, letter.reason, letter.error_class) == (ids[2], "ended", "Ended")
    assert letter.error_message == "ended by ann before its time"
    assert letter.payload == {"n": 2} and letter.attempts == 0
    # ... its mark is gone, nothing is pending
    assert redis_client.exists(broker.keys(queue_name).group("billing").ended) == 0
    assert redis_client.xpending(broker.keys(queue_name).log, "billing")["pending"] == 0
    # ... and email still receives all five
    with broker.subscribe(queue_name, "email") as sub:
        assert payloads(drain(sub, expected=5)) == [0, 1, 2, 3, 4]
    assert dead(redis_client, broker, queue_name, "email") == []


def test_a_deleted_waiting_message_is_acknowledged_without_a_dead_letter(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "billing")
    broker.publish_many(queue_name, [{"n": i} for i in range(3)])
    chosen = waiting_entry(broker, queue_name, "billing", 0)
    got = broker.operator.end_message(queue_name, "billing", chosen.ref, delete=True)
    assert got.outcome == "marked"
    with broker.subscribe(queue_name, "billing") as sub:
        assert payloads(drain(sub, expected=2)) == [1, 2]
        assert sub.ended == 1
    assert dead(redis_client, broker, queue_name, "billing") == []
    assert redis_client.xpending(broker.keys(queue_name).log, "billing")["pending"] == 0


def test_ending_for_all_consumers_marks_those_that_have_not_read_it(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given billing read everything already, email nothing
    for name in ("billing", "email"):
        broker.consumers.ensure(queue_name, name)
    broker.publish_many(queue_name, [{"n": i} for i in range(3)])
    with broker.subscribe(queue_name, "billing") as sub:
        assert len(drain(sub, expected=3)) == 3
    entry = waiting_entry(broker, queue_name, "email", 1)

    # When staff end it for the whole queue, it is marked for email only
    got = broker.operator.end_message(queue_name, None, entry.ref, by="bo")
    assert (got.outcome, got.consumers) == ("marked", ("email",))
    # ... and for billing alone it was read already
    assert broker.operator.end_message(queue_name, "billing", entry.ref).outcome == "read"
    with broker.subscribe(queue_name, "email") as sub:
        assert payloads(drain(sub, expected=2)) == [0, 2]
    assert [d.reason for d in dead(redis_client, broker, queue_name, "email")] == ["ended"]


def test_a_message_read_already_cannot_be_marked(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    broker.consumers.ensure(queue_name, "billing")
    broker.publish(queue_name, {"n": 0})
    entry = waiting_entry(broker, queue_name, "billing", 0)
    with broker.subscribe(queue_name, "billing") as sub:
        (m,) = sub.fetch(count=10, block_ms=200)
        # in flight: the operator is told so, nothing is marked
        assert broker.operator.end_message(queue_name, "billing", entry.ref).outcome == "read"
        sub.ack([m])
    assert redis_client.exists(broker.keys(queue_name).group("billing").ended) == 0


def test_a_marked_entry_taken_over_from_a_crashed_instance_is_ended_not_run(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a marked entry that an instance read and then died holding (no settle)
    broker.consumers.ensure(queue_name, "billing")
    broker.publish_many(queue_name, [{"n": i} for i in range(2)])
    gkeys = broker.keys(queue_name).group("billing")
    entry = waiting_entry(broker, queue_name, "billing", 1)
    assert broker.operator.end_message(queue_name, "billing", entry.ref).outcome == "marked"
    # a raw read, as a crashed instance left it: both pending, the mark still there
    redis_client.execute_command(
        "XREADGROUP",
        "GROUP",
        "billing",
        "dead-1",
        "COUNT",
        10,
        "STREAMS",
        broker.keys(queue_name).log,
        ">",
    )
    time.sleep(0.02)  # idle past the 1 ms visibility timeout below
    # When another instance takes them over
    with broker.subscribe(queue_name, "billing", "live-1", visibility_timeout_ms=1) as sub:
        taken = sub.reclaim()
        # Then it runs only the unmarked one; the marked one is billing's dead letter
        assert payloads([d.message for d in taken]) == [0]
        sub.ack(taken)
    assert [d.payload for d in dead(redis_client, broker, queue_name, "billing")] == [{"n": 1}]
    assert redis_client.exists(gkeys.ended) == 0


def test_an_ordered_consumer_ends_a_marked_message_and_keeps_its_key_in_order(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given an ordered consumer and key k's messages 0..4, the third one marked
    broker.consumers.ensure(queue_name, "ledger")
    for i in range(5):
        broker.publish(queue_name, {"n": i}, key="k")
    entry = waiting_entry(broker, queue_name, "ledger", 2)
    assert broker.operator.end_message(queue_name, "ledger", entry.ref).outcome == "marked"

    # When its instance handles the key one message at a time
    with ordered(broker, queue_name, "i1") as sub:
        handled = handle_all(sub, expected=4)
        assert handle_all(sub, expected=1, timeout_s=0.3) == []

    # Then the others ran in order, the marked one died, no key stays held
    assert [d.payload["n"] for d in handled] == [0, 1, 3, 4]
    assert [d.payload for d in dead(redis_client, broker, queue_name, "ledger")] == [{"n": 2}]
    gkeys = broker.keys(queue_name).group("ledger")
    assert redis_client.hgetall(gkeys.holders) == {}
    assert redis_client.exists(gkeys.ended) == 0


def test_stale_marks_are_swept(broker: Broker, redis_client: redis.Redis, queue_name: str) -> None:
    # Given marks on entries billing will never read as marked: a purge skips them
    broker.consumers.ensure(queue_name, "billing")
    broker.publish_many(queue_name, [{"n": i} for i in range(3)])
    for n in range(3):
        entry = waiting_entry(broker, queue_name, "billing", n)
        assert broker.operator.end_message(queue_name, "billing", entry.ref).outcome == "marked"
    broker.operator.purge_consumer(queue_name, "billing")
    gkeys = broker.keys(queue_name).group("billing")
    assert redis_client.hlen(gkeys.ended) == 3

    # When billing's instance next reads log entries
    broker.publish(queue_name, {"n": 9})
    with broker.subscribe(queue_name, "billing") as sub:
        assert payloads(drain(sub, expected=1)) == [9]
    # Then the stale marks are gone
    assert redis_client.exists(gkeys.ended) == 0


def test_a_consumer_holds_a_bounded_number_of_marks(
    broker: Broker, redis_client: redis.Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from redisq_django.core import ended

    monkeypatch.setattr(ended, "MOST", 2)
    broker.consumers.ensure(queue_name, "billing")
    broker.publish_many(queue_name, [{"n": i} for i in range(3)])
    for n in range(2):
        entry = waiting_entry(broker, queue_name, "billing", n)
        assert broker.operator.end_message(queue_name, "billing", entry.ref).outcome == "marked"
    entry = waiting_entry(broker, queue_name, "billing", 2)
    with pytest.raises(ValueError, match="holds 2 messages ended"):
        broker.operator.end_message(queue_name, "billing", entry.ref)
    assert redis_client.hlen(broker.keys(queue_name).group("billing").ended) == 2


def test_on_a_partitioned_queue_each_mark_is_in_its_messages_partition(
    redis_client: redis.Redis, queue_name: str
) -> None:
    from redisq_django.core import ConsumerSpec, CoreConfig, Message
    from redisq_django.core.worker import Worker, WorkerOptions

    # Given a queue of 3 partitions, billing and audit, 60 messages keyed over 7 keys
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20, partitions={queue_name: 3}))
    for name in ("billing", "audit"):
        broker.consumers.ensure(queue_name, name, "earliest")
    sent = [broker.publish(queue_name, {"n": n}, key=f"k{n % 7}") for n in range(60)]
    # When staff end 6 of them for billing, from its waiting list (refs name the partition)
    entries: list[browse.Entry] = []
    cursor = None
    for _ in range(10):
        page = broker.operator.waiting(queue_name, "billing", cursor, 200)
        entries += page.entries
        cursor = page.next
        if cursor is None:
            break
    chosen = [e for e in entries if e.payload_text and int(e.payload_text[5:-1]) % 10 == 3]
    assert len(chosen) == 6 and all("@" in e.ref for e in chosen)
    for e in chosen:
        assert broker.operator.end_message(queue_name, "billing", e.ref).outcome == "marked"
    ended_ids = {e.message_id for e in chosen}

    # ... and a worker runs both consumers (billing ordered) to the end
    seen: dict[str, list[tuple[str, int]]] = {"billing": [], "audit": []}

    def handler(name: str) -> Callable[[Message], None]:
        def handle(message: Message) -> None:
            seen[name].append((message.key or "", message.payload["n"]))

        return handle

    specs = [
        ConsumerSpec(queue_name, "billing", handler("billing"), ordered=True, start="earliest"),
        ConsumerSpec(queue_name, "audit", handler("audit"), start="earliest"),
    ]
    worker = Worker(broker, specs, WorkerOptions(block_ms=50, burst=True, stats_interval=0))
    assert worker.run() == 0

    # Then billing ran every other message, each key in order; audit ran all 60
    ran = [n for _, n in seen["billing"]]
    assert sorted(ran) == [n for n in range(60) if n % 10 != 3]
    for k in range(7):
        of_key = [n for key, n in seen["billing"] if key == f"k{k}"]
        assert of_key == sorted(of_key)
    assert sorted(n for _, n in seen["audit"]) == list(range(60))
    # ... billing's 6 dead letters (reason ended) sit in their partitions, no mark is left
    letters, marks = [], 0
    for part in broker.partitions.layout(queue_name):
        gkeys = part.group("billing")
        letters += [
            DeadEntry.from_entry(queue_name, i, dict(f)) for i, f in redis_client.xrange(gkeys.dead)
        ]
        marks += redis_client.hlen(gkeys.ended)
    assert {d.id for d in letters} == ended_ids and {d.reason for d in letters} == {"ended"}
    assert marks == 0 and set(sent) >= ended_ids


def test_end_waiting_and_ended_marks_contract(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    """The two scripts called directly (PROTOCOL.md, *The scripts*)."""
    broker.consumers.ensure(queue_name, "billing")
    keys = broker.keys(queue_name)
    gkeys = keys.group("billing")
    a, b = broker.publish_many(queue_name, [{"n": 0}, {"n": 1}])
    mark = '{"mode":"delete"}'
    call = broker.scripts
    assert call("end_waiting", [keys.log, gkeys.ended], ["billing", b, mark, 10]) == 1
    assert call("end_waiting", [keys.log, gkeys.ended], ["billing", "9-9", mark, 10]) == 0
    assert call("end_waiting", [keys.log, gkeys.ended], ["nobody", b, mark, 10]) == -2
    assert call("end_waiting", [keys.log, gkeys.ended], ["billing", a, mark, 1]) == -3
    marks, left = call("ended_marks", [keys.log, gkeys.ended], ["billing", 0, a, b])
    assert (marks, left) == ([None, mark.encode()], 1)
    redis_client.xreadgroup("billing", "i1", {keys.log: ">"})  # both read now
    assert call("end_waiting", [keys.log, gkeys.ended], ["billing", a, mark, 10]) == -1
    # pending: the sweep keeps it; acknowledged: it goes
    assert call("ended_marks", [keys.log, gkeys.ended], ["billing", 20])[1] == 1
    redis_client.xack(keys.log, "billing", a, b)
    assert call("ended_marks", [keys.log, gkeys.ended], ["billing", 20])[1] == 0
    # a hash written by another client is refused, nothing done
    redis_client.set(gkeys.ended, "x")
    with pytest.raises(redis.ResponseError, match="REDISQ_CORRUPT"):
        call("end_waiting", [keys.log, gkeys.ended], ["billing", b, mark, 10])
