"""C12 at the end of a grace period: a deliberate stop is no failed delivery.

A handler still running when a warm stop's grace period ends is left behind (the process
exits), and its message is handed back without counting that delivery: it runs again
from the start on another instance, also when that was its last delivery
(``max_retries=0``), and an ordered consumer keeps its key for it (the key's next
message waits for it). A cold stop (a second signal) leaves its messages pending
instead: they come back by C3, counting the delivery, and the log says so.

Real ``runconsumer`` processes, real signals, a real Redis (tests/faultapp/consumers.py:
``handback``, ``ahandback``, ``ohandback``, each with ``max_retries=0`` and a 60 s
visibility timeout, so that a redelivery within the test was a hand-back).
"""

from __future__ import annotations

import signal

import pytest
import redis

from redisq_django.core import Broker
from tests.support.workers import GRACEFUL, PATIENT, Workers, read_done, wait_deliveries

pytestmark = [
    pytest.mark.slow,
    pytest.mark.servers,
    # The worker processes consume queues declared in code (tests/faultapp/consumers.py),
    # fixed names by nature: each test starts them on an empty server.
    pytest.mark.usefixtures("empty_redis"),
]

#: The words of a grace period's end (core/worker/worker.py).
HANDED_BACK = "handed back without counting this delivery"


@pytest.mark.parametrize(
    ("queue", "name"),
    [
        pytest.param("handback", "lastchance", id="threads"),
        pytest.param("ahandback", "alastchance", id="async"),
    ],
)
def test_a_handler_outliving_the_grace_period_runs_again_not_dead(
    workers: Workers, broker: Broker, redis_client: redis.Redis, queue: str, name: str
) -> None:
    # Given a consumer without retries whose handler takes 30 s on its first delivery
    mid = broker.publish(queue, {"sleep_first": 30})
    first = workers.start(queue, "--grace-period", "1")
    (started,) = wait_deliveries(redis_client, queue, name, 1, timeout=30)
    assert (started.id, started.attempts) == (mid, 1)

    # When its worker gets SIGTERM and the grace period (1 s) ends before the handler
    first.send(signal.SIGTERM)
    code = first.wait_exit(timeout=20)

    # Then the worker exits 1 and says that the message was handed back, uncounted
    assert code == 1, first.tail()
    assert "Grace period of 1 s over" in first.stderr
    assert f"their 1 unfinished message(s) were {HANDED_BACK}" in first.stderr, first.tail()

    # And another instance runs it again as the same attempt (no dead letter)
    second = workers.start(queue)
    deliveries = wait_deliveries(redis_client, queue, name, 2, timeout=40)
    assert [(d.id, d.attempts, d.pid) for d in deliveries] == [
        (mid, 1, first.pid),
        (mid, 1, second.pid),
    ]
    (done,) = wait_deliveries(redis_client, queue, name, 1, timeout=30, done=True)
    assert (done.id, done.pid) == (mid, second.pid)
    assert broker.dead_letters.read(queue, name) == []


def test_an_ordered_consumer_keeps_the_key_for_the_message_handed_back(
    workers: Workers, broker: Broker, redis_client: redis.Redis
) -> None:
    queue, name = "ohandback", "inorder"
    # Given an ordered consumer without retries, and two messages of one key: the first
    # takes 30 s on its first delivery
    first_id = broker.publish(queue, {"sleep_first": 30}, key="k")
    second_id = broker.publish(queue, {"n": 2}, key="k")
    first = workers.start(queue, "--grace-period", "1")
    wait_deliveries(redis_client, queue, name, 1, timeout=30)

    # When its worker's grace period ends with the first one running
    first.send(signal.SIGTERM)
    assert first.wait_exit(timeout=20) == 1, first.tail()
    assert f"their 1 unfinished message(s) were {HANDED_BACK}" in first.stderr, first.tail()

    # Then the next instance runs the first message again, then the second: in order,
    # none dead
    workers.start(queue)
    wait_deliveries(redis_client, queue, name, 2, timeout=30, done=True)
    done = read_done(redis_client, queue, name)
    assert [(d.id, d.attempts) for d in done] == [(first_id, 1), (second_id, 1)]
    assert broker.dead_letters.read(queue, name) == []


def test_a_cold_stop_says_that_the_delivery_counts(
    workers: Workers, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given an instance running a 60-second handler, with a long grace period
    broker.publish(GRACEFUL, {"sleep": 60})
    first = workers.start(GRACEFUL, "--grace-period", "60")
    wait_deliveries(redis_client, GRACEFUL, PATIENT, 1, timeout=30)

    # When it gets SIGTERM, then SIGTERM again
    first.send(signal.SIGTERM)
    first.wait_log("SIGTERM: finishing in-flight", timeout=10)
    first.send(signal.SIGTERM)
    first.wait_exit(timeout=10)

    # Then its log says what comes of the message: taken over, this delivery counted
    assert "their 1 unfinished message(s) stay pending" in first.stderr, first.tail()
    assert "counting this delivery" in first.stderr
    assert read_done(redis_client, GRACEFUL, PATIENT) == []
