"""Batches sent ahead (core/ahead.py): written one after another on one connection, each
confirmed when the next is sent; what cannot go ahead goes through ``Broker.send`` in
its place; a refusal and a lost connection say what happened to which batch."""

from __future__ import annotations

import json

import pytest
import redis

from redisq_django.core import Broker, CoreConfig
from redisq_django.core.ahead import SendAhead
from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import RedisUnavailable


def batch(broker: Broker, queue: str, numbers: range, **more: object) -> list[Envelope]:
    return [broker.prepare(queue, {"n": n}, **more) for n in numbers]  # type: ignore[arg-type]


def numbers(client: redis.Redis, broker: Broker, queue: str) -> list[int]:
    log = broker.keys(queue).log
    return [json.loads(f[b"payload"])["n"] for _, f in client.xrange(log)]


def test_batches_arrive_in_order_each_confirmed_by_the_next(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a broker on a queue it never sent to
    broker = Broker(redis_client, CoreConfig(trends=True))
    ahead = SendAhead(broker)

    # When batches are sent: the first checks the queue's layout through Broker.send,
    # the next ones are written without waiting
    ahead.send(batch(broker, queue_name, range(0, 100)))
    assert ahead._flight is None  # sent and confirmed
    for lo in range(100, 1000, 100):
        ahead.send(batch(broker, queue_name, range(lo, lo + 100)))
        assert ahead._flight is not None  # written, its replies read by the next send
    ahead.settle()
    ahead.close()

    # Then every message is in the log once, in the order sent, the queue is listed
    # and counted as published
    assert numbers(redis_client, broker, queue_name) == list(range(1000))
    assert queue_name in broker.queues()
    assert ahead.unsure is None


def test_what_cannot_go_ahead_goes_through_send_in_its_place(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given batches sent ahead, between them one sent once per id and a delayed one
    broker = Broker(redis_client)
    ahead = SendAhead(broker)
    ahead.send(batch(broker, queue_name, range(0, 10)))
    ahead.send(batch(broker, queue_name, range(10, 20)))
    ahead.send(batch(broker, queue_name, range(20, 30), id=None), once=True)
    ahead.send(batch(broker, queue_name, range(30, 40)))
    ahead.send([broker.prepare(queue_name, {"n": 99}, delay=3600)])
    ahead.send(batch(broker, queue_name, range(40, 50)))
    ahead.settle()
    ahead.close()

    # Then the immediate ones are in the log in the order sent, the delayed one waits
    assert numbers(redis_client, broker, queue_name) == list(range(50))
    assert broker.stats(queue_name).delayed == 1


def started(client: redis.Redis, queue: str) -> tuple[Broker, SendAhead]:
    """A broker and its sender ahead, past the first batch (sent through Broker.send)."""
    broker = Broker(client)
    ahead = SendAhead(broker)
    ahead.send(batch(broker, queue, range(0, 10)))
    return broker, ahead


def test_a_refused_batch_raises_did_nothing_and_nothing_follows_it(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a batch written ahead after the queue's log was replaced by a string
    broker, ahead = started(redis_client, queue_name)
    log = broker.keys(queue_name).log
    redis_client.delete(log)
    redis_client.set(log, "not a stream")
    ahead.send(batch(broker, queue_name, range(10, 20)))

    # When the next one is sent, then the refusal comes out, naming Redis's reason,
    # and the refused batch is not unsure (it did nothing); the next was not written
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        ahead.send(batch(broker, queue_name, range(20, 30)))
    assert ahead.unsure is None and ahead._flight is None
    ahead.close()
    assert redis_client.get(log) == b"not a stream"


def test_a_lost_connection_leaves_the_batch_in_flight_unsure(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a batch written ahead while Redis runs no write (paused), and the sender's
    # connection then closed by Redis: the batch never ran
    broker, ahead = started(redis_client, queue_name)
    redis_client.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
    try:
        second = batch(broker, queue_name, range(10, 20))
        ahead.send(second)
        redis_client.client_kill_filter(_type="normal", skipme=True)
    finally:
        redis_client.execute_command("CLIENT", "UNPAUSE")

    # When it is confirmed, then the failure says so, and the batch is the one whose
    # outcome is unknown
    with pytest.raises(RedisUnavailable):
        ahead.settle()
    assert ahead.unsure is second
    assert numbers(redis_client, broker, queue_name) == list(range(10))

    # And sent again, it is published, and the sender goes on after it
    ahead.unsure = None
    ahead.send(second)
    ahead.send(batch(broker, queue_name, range(20, 30)))
    ahead.settle()
    ahead.close()
    assert numbers(redis_client, broker, queue_name) == list(range(30))
