"""The task pipe: a thread's task writes sent without waiting, replies read later; after
a NOSCRIPT (Redis lost its scripts) the refused calls run again, in order."""

from __future__ import annotations

import time

import pytest
import redis

from redisq_django.core.broker import Broker
from redisq_django.core.delivery import Delivery, Stream
from redisq_django.core.tasks.pipe import TaskPipe
from redisq_django.core.tasks.store import TaskResultStore

G = "tasks"


def _delivered(broker: Broker, queue: str) -> Delivery:
    broker.consumers.ensure(queue, G, "earliest")
    broker.client.xadd(broker.keys(queue).log, {"payload": "{}", "id": "r1"})
    with broker.subscribe(queue, G, "c1") as sub:
        [message] = sub.fetch(count=1, block_ms=100)
        return message


@pytest.mark.parametrize("flush_scripts", [False, True])
def test_start_and_settle_are_applied_in_order(
    redis_client: redis.Redis, queue_name: str, flush_scripts: bool
) -> None:
    # Given a delivered task message and a pipe (with Redis's scripts flushed or not)
    broker = Broker(redis_client)
    message = _delivered(broker, queue_name)
    results = TaskResultStore(broker.client, broker.scripts, broker.keys)
    pipe = TaskPipe(broker.client, broker.scripts)
    if flush_scripts:  # after the pipe loaded its scripts: Redis restarted meanwhile
        pipe.write("task_start", *results.start_call(message, "w0", 2**41, {}, 50))
        pipe.close()
        redis_client.script_flush()
    # When its start and its settle are written without waiting, then read
    pipe.write("task_start", *results.start_call(message, "w1", 2**41, {"task": "t"}, 100))
    pipe.write("task_settle", *results.succeed_call(message, {"status": "SUCCESSFUL"},
                                                     expire_at_ms=2**41))  # fmt: skip
    pipe.close()
    # Then the message is acknowledged and its result SUCCESSFUL, started by w1
    keys = broker.keys(queue_name)
    assert redis_client.xpending(keys.log, G)["pending"] == 0
    stored = redis_client.hgetall(keys.task_result("r1"))
    assert stored[b"status"] == b"SUCCESSFUL"
    workers = b'["w0","w1"]' if flush_scripts else b'["w1"]'
    assert stored[b"worker_ids"] == workers
    assert message.stream is Stream.LOG


def test_a_start_is_applied_before_its_reply_is_read_on_a_fresh_redis(
    redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a Redis that has none of our scripts yet (a fresh or restarted server)
    broker = Broker(redis_client)
    message = _delivered(broker, queue_name)
    redis_client.script_flush()
    results = TaskResultStore(broker.client, broker.scripts, broker.keys)
    pipe = TaskPipe(broker.client, broker.scripts)
    try:
        # When a task's start is written without waiting (the task then runs)
        pipe.write("task_start", *results.start_call(message, "w1", 2**41, {"task": "t"}, 100))
        # Then Redis applies it at once, without waiting for the reply to be read
        key = broker.keys(queue_name).task_result("r1")
        for _ in range(200):  # bounded: 2 s
            if redis_client.hget(key, "status") == b"RUNNING":
                break
            time.sleep(0.01)
        assert redis_client.hget(key, "status") == b"RUNNING"
    finally:
        pipe.close()
