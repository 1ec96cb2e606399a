"""One word, one idea (docs/layout.md, "Words"): a handler's ``Message.consumer`` is the
logical consumer, ``Message.instance`` the running instance that got it; ``group`` is
only the Redis consumer group, and the old ``Message.group`` warns before it goes."""

from __future__ import annotations

import threading

import pytest
import redis

from redisq_django.core import Broker, ConsumerNotFound, ConsumerSpec, CoreConfig, Message
from redisq_django.core.worker import Worker, WorkerOptions

N = 20


def redis_instances(client: redis.Redis, broker: Broker, queue: str, consumer: str) -> set[str]:
    """The consumers Redis knows in the consumer group that implements ``consumer``."""
    log = broker.keys(queue).log
    return {c["name"].decode() for c in client.xinfo_consumers(log, consumer)}


def test_a_handler_run_by_a_worker_reads_its_consumer_and_its_instance(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given two logical consumers of one queue, each with two handler threads
    broker = Broker(redis_client, CoreConfig(poll_interval_ms=20))
    seen: list[tuple[str, str, str]] = []
    known: dict[str, set[str]] = {"billing": set(), "email": set()}  # read while running
    lock = threading.Lock()

    def handler(message: Message) -> None:
        members = redis_instances(redis_client, broker, queue_name, message.consumer)
        with lock:
            seen.append((message.id, message.consumer, message.instance))
            known[message.consumer] |= members

    specs = [
        ConsumerSpec(queue_name, name, handler, start="earliest", concurrency=2)
        for name in ("billing", "email")
    ]
    for spec in specs:
        broker.consumers.ensure(queue_name, spec.name, start="earliest")
    ids = broker.publish_many(queue_name, [{"n": i} for i in range(N)])

    # When a worker drains the queue
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0)
    assert Worker(broker, specs, options).run() == 0

    # Then each consumer got every message, named by the consumer's name...
    for name in ("billing", "email"):
        assert sorted(i for i, c, _ in seen if c == name) == sorted(ids)
    assert {c for _, c, _ in seen} == {"billing", "email"}
    # ...and by the instance that ran it: one Redis knew in that consumer's group (the
    # worker removes its instances from the group when it stops)
    for name in ("billing", "email"):
        instances = {inst for _, c, inst in seen if c == name}
        assert instances and all(inst and inst != name for inst in instances)
        assert instances <= known[name]


def test_subscribe_takes_the_consumer_then_the_instance(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a logical consumer
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    message_id = broker.publish(queue_name, {"n": 1})

    # When an instance of it named "w-7" fetches
    with broker.subscribe(queue_name, "billing", instance="w-7") as sub:
        (message,) = sub.fetch(count=1, block_ms=500)
        assert (sub.consumer, sub.instance) == ("billing", "w-7")
        known = redis_instances(redis_client, broker, queue_name, "billing")
        sub.ack([message])

    # Then the message names both, and Redis's group has that instance as its consumer
    assert (message.id, message.consumer, message.instance) == (message_id, "billing", "w-7")
    assert known == {"w-7"}


def test_the_old_keyword_for_the_instance_fails_loudly(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given the old call, where ``consumer=`` named the instance
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")

    # When it is made, Then it does not silently subscribe a consumer named "w-1"
    with pytest.raises(TypeError, match="consumer"):
        broker.subscribe(queue_name, "billing", consumer="w-1")  # type: ignore[misc]
    assert broker.consumers.names(queue_name) == ["billing"]


def test_message_group_still_reads_the_consumer_and_warns(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a message fetched by an instance of "billing"
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    broker.publish(queue_name, {"n": 1})
    with broker.subscribe(queue_name, "billing", "w-1") as sub:
        (delivery,) = sub.fetch(count=1, block_ms=500)
        sub.ack([delivery])
    message = delivery.message

    # When a handler written for the old name reads .group
    with pytest.warns(DeprecationWarning, match=r"Message\.consumer"):
        group = message.group

    # Then it gets the logical consumer, as before
    assert group == "billing" == message.consumer


def test_a_missing_consumer_is_named_as_the_consumer(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given an instance of a consumer never registered
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    sub = broker.subscribe(queue_name, "ghost", "w-1")

    # When it fetches
    with pytest.raises(ConsumerNotFound) as caught:
        sub.fetch(count=1, block_ms=0)

    # Then the error names the consumer (and its old attribute warns)
    assert (caught.value.queue, caught.value.consumer) == (queue_name, "ghost")
    with pytest.warns(DeprecationWarning, match=r"ConsumerNotFound\.consumer"):
        assert caught.value.group == "ghost"


def test_a_dead_letter_read_from_redis_names_its_consumer(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a message that "billing" rejected
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing")
    message_id = broker.publish(queue_name, {"n": 1})
    with broker.subscribe(queue_name, "billing", "w-1") as sub:
        (delivery,) = sub.fetch(count=1, block_ms=500)
        sub.reject(delivery, ValueError("bad"))

    # When its dead letter is read from Redis
    (dead,) = broker.dead_letters.read(queue_name, "billing")

    # Then it names the logical consumer as .consumer (the old .group warns)
    assert (dead.id, dead.queue, dead.consumer) == (message_id, queue_name, "billing")
    with pytest.warns(DeprecationWarning, match=r"\.consumer"):
        assert dead.group == "billing"


def test_the_settling_methods_still_take_their_keywords_of_0_1_and_say_the_new_ones(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a consumer with three messages fetched
    broker = Broker(redis_client)
    broker.consumers.ensure(queue_name, "billing", start="earliest")
    ids = broker.publish_many(queue_name, [{"n": i} for i in range(4)])
    with broker.subscribe(queue_name, "billing", instance="w1") as sub:
        first, second, third, fourth = sub.fetch(count=4, block_ms=100)

        # When they are settled with the keywords of 0.1 (a delivery was a "message")
        with pytest.warns(DeprecationWarning, match=r"pass deliveries="):
            acked = sub.ack(messages=[first])
        with pytest.warns(DeprecationWarning, match=r"pass deliveries="):
            lost = sub.extend(messages=[second])
        with pytest.warns(DeprecationWarning, match=r"pass delivery="):
            rejected = sub.reject(message=second, failure=ValueError("no"))
        with pytest.warns(DeprecationWarning, match=r"pass delivery="):
            failed = sub.fail(message=third, failure=ValueError("later"))
        with pytest.warns(DeprecationWarning, match=r"pass deliveries="):
            released = sub.release(messages=[fourth])

    # Then each did what the new keyword does
    assert (acked, lost, released) == (1, [], 1)
    assert rejected.outcome.value == "dead" and failed.outcome.value == "retried"
    dead = broker.dead_letters.read(queue_name, "billing")
    assert [d.id for d in dead] == [ids[1]]
    # ...and both names at once is a mistake, said as such
    with (
        broker.subscribe(queue_name, "billing", instance="w1") as sub,
        pytest.raises(TypeError, match="got both 'messages' and 'deliveries'"),
    ):
        sub.ack(messages=[first], deliveries=[first])
