"""A handler gets a ``Message``: what it needs, nothing of the worker's bookkeeping. The
entry id, raw fields, stream, lease and timings of that delivery are the ``Delivery``
the subscription fetches, settles and renews."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import threading

import pytest
import redis

from redisq_django.core import Broker, ConsumerSpec, CoreConfig, Delivery, Message, Reject
from redisq_django.core.delivery import Stream
from redisq_django.core.envelope import Envelope
from redisq_django.core.worker import Worker, WorkerOptions

#: What a handler reads from its message (docs/layout.md, issue 21).
MESSAGE_FIELDS = {
    "id",
    "queue",
    "payload",
    "headers",
    "attempts",
    "consumer",
    "instance",
    "published_at_ms",
    "due_at_ms",
    "first_failed_at_ms",
    "failures",
    "key",
}
#: What only the worker (and a handler that settles itself) uses.
BOOKKEEPING = {"entry_id", "fields", "stream", "lease_ms", "policy", "duration_ms", "failed"}


def test_a_handler_gets_a_message_without_the_workers_bookkeeping(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a consumer whose handler keeps what it got, rejecting one message
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20))
    got: list[object] = []
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            got.append(message)
        if message.payload["n"] == 0:
            raise Reject("the first one is bad")

    spec = ConsumerSpec(queue_name, "billing", handler, start="earliest")
    broker.consumers.ensure(queue_name, "billing", start="earliest")
    ids = broker.publish_many(queue_name, [{"n": i} for i in range(5)])

    # When a worker runs it
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0)
    assert Worker(broker, [spec], options).run() == 0

    # Then every message reached it as a plain Message, with no transport details
    assert sorted(m.id for m in got) == sorted(ids)  # type: ignore[attr-defined]
    for message in got:
        assert type(message) is Message
        assert {f.name for f in dataclasses.fields(message)} == MESSAGE_FIELDS
        assert not any(hasattr(message, name) for name in BOOKKEEPING)
    # ...and the worker still settled each: four acked, the rejected one dead
    assert redis_client.xpending(broker.keys(queue_name).log, "billing")["pending"] == 0
    dead = broker.dead_letters.read(queue_name, "billing")
    assert [d.id for d in dead] == [ids[0]]


def test_a_subscription_fetches_deliveries_that_read_as_their_message(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a published message
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    message_id = broker.publish(queue_name, {"n": 7}, headers={"k": "v"})

    # When an instance fetches it
    with broker.subscribe(queue_name, "billing", "w-1") as sub:
        (delivery,) = sub.fetch(count=1, block_ms=500)

        # Then it is a delivery of the log entry, holding the message a handler gets
        assert isinstance(delivery, Delivery)
        assert delivery.stream is Stream.LOG
        assert delivery.entry_id.decode() == message_id
        assert delivery.policy == sub.policy
        message = delivery.message
        assert (message.id, message.payload, message.headers) == (message_id, {"n": 7}, {"k": "v"})
        assert (message.consumer, message.instance, message.attempts) == ("billing", "w-1", 1)
        # ...and reads as it, so code written against fetch() and ack() keeps working
        assert (delivery.id, delivery.payload, delivery.attempts) == (message_id, {"n": 7}, 1)
        assert sub.ack([delivery]) == 1
    assert redis_client.xpending(broker.keys(queue_name).log, "billing")["pending"] == 0


def test_a_message_is_frozen_and_replace_builds_another(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given the message of a fetched delivery
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    message_id = broker.publish(queue_name, {"n": 7}, key="order-7")
    with broker.subscribe(queue_name, "billing", "w-1") as sub:
        (delivery,) = sub.fetch(count=1, block_ms=500)
        sub.ack([delivery])
    message = delivery.message
    assert type(message) is Message

    # When a handler tries to change it, then it is refused and nothing changed
    for name, value in (("attempts", 5), ("payload", {}), ("key", None), ("other", 1)):
        with pytest.raises(dataclasses.FrozenInstanceError, match=name):
            setattr(message, name, value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        del message.attempts
    assert (message.attempts, message.payload, message.key) == (1, {"n": 7}, "order-7")

    # And dataclasses.replace builds another, frozen too, leaving it as it was
    later = dataclasses.replace(message, attempts=2)
    assert type(later) is Message and later.attempts == 2 and message.attempts == 1
    assert later == dataclasses.replace(message, attempts=2) and later != message
    with pytest.raises(dataclasses.FrozenInstanceError):
        later.attempts = 3  # type: ignore[misc]
    # ...and a message built by hand, copied or pickled is the same frozen value
    by_hand = Message(
        id=message_id, queue=queue_name, payload={"n": 7}, headers={}, attempts=1,
        consumer="billing", published_at_ms=message.published_at_ms, instance="w-1",
        key="order-7",
    )  # fmt: skip
    assert by_hand == message and repr(by_hand).startswith("Message(id=")
    for again in (copy.copy(message), copy.deepcopy(message), pickle.loads(pickle.dumps(message))):
        assert again == message and type(again) is Message
        with pytest.raises(dataclasses.FrozenInstanceError):
            again.attempts = 9  # type: ignore[misc]


def test_an_envelope_is_frozen_hashable_and_checked_as_before(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given an envelope prepared for sending (built as its plain fields, then frozen)
    broker = Broker(redis_client)
    envelope = broker.prepare(queue_name, {"n": 1}, key="order-1")
    assert type(envelope) is Envelope

    # When it is changed, then that is refused; replace, copies and pickles stay frozen
    with pytest.raises(dataclasses.FrozenInstanceError, match="an Envelope is frozen"):
        envelope.key = "order-2"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del envelope.payload_json
    later = dataclasses.replace(envelope, key="order-2")
    assert type(later) is Envelope and (later.key, envelope.key) == ("order-2", "order-1")
    copies = (copy.copy(envelope), copy.deepcopy(envelope), pickle.loads(pickle.dumps(envelope)))
    for again in copies:
        assert again == envelope and type(again) is Envelope and hash(again) == hash(envelope)
        with pytest.raises(dataclasses.FrozenInstanceError):
            again.id = "x"  # type: ignore[misc]
    assert len({envelope, copy.copy(envelope), later}) == 2  # hashable, as a frozen dataclass

    # And its checks still run when it is built: a delayed one needs an id and a time
    with pytest.raises(ValueError, match="needs its own id"):
        Envelope(queue=queue_name, id=None, payload_json=b"1", due_at_ms=1)
    with pytest.raises(ValueError, match="at most 64"):
        Envelope(queue=queue_name, id="x" * 65, payload_json=b"1")

    # And it sends as before
    (sent,) = broker.send([envelope])
    assert redis_client.xlen(broker.keys(queue_name).log) == 1 and sent


def test_an_immediate_envelope_is_the_one_the_constructor_builds(queue_name: str) -> None:
    # Given the parts of immediate messages: with and without an id, headers and a key
    cases = [
        (queue_name, None, b'{"n":1}', None, None),
        (queue_name, "m-1", b"[1]", b'{"h":"v"}', "order-1"),
    ]
    for queue, id, payload, headers, key in cases:
        # When one is built the fast way (every publish and replayed row is)
        fast = Envelope.immediate(queue, id, payload, headers, key)
        # Then it is the constructor's, field for field (a field added later and not set
        # there fails here), frozen and hashable alike
        built = Envelope(queue=queue, id=id, payload_json=payload, headers_json=headers, key=key)
        assert type(fast) is Envelope
        for f in dataclasses.fields(Envelope):
            assert getattr(fast, f.name) == getattr(built, f.name), f.name
        assert fast == built and hash(fast) == hash(built)
        with pytest.raises(dataclasses.FrozenInstanceError):
            fast.id = "x"  # type: ignore[misc]
        assert pickle.loads(pickle.dumps(fast)) == built
    # And its id is checked as the constructor checks it
    with pytest.raises(ValueError, match="at most 64"):
        Envelope.immediate(queue_name, "x" * 65, b"1")
