"""The worker's two ways of acknowledging: as each handler returns (the default: a
crash repeats at most what was running), or once per batch (``batch_ack``: fewer writes,
no start records). Shown by what reaches Redis: with history on, each acknowledging
call writes one ``handled`` event."""

from __future__ import annotations

import json
import threading

import pytest
import redis

from redisq_django.core import Broker, ConsumerSpec, CoreConfig, Message
from redisq_django.core.worker import Worker, WorkerOptions

N = 300


def drain(client: redis.Redis, queue: str, *, batch_ack: bool) -> tuple[list[str], Broker]:
    broker = Broker(client, CoreConfig(poll_interval_ms=20, history=True))
    ids = broker.publish_many(queue, [{"n": i} for i in range(N)])
    seen: list[str] = []
    lock = threading.Lock()

    def handler(message: Message) -> None:
        with lock:
            seen.append(message.id)

    spec = ConsumerSpec(queue, "billing", handler, start="earliest")
    options = WorkerOptions(block_ms=50, burst=True, stats_interval=0, batch_ack=batch_ack)
    assert Worker(broker, [spec], options).run() == 0
    assert sorted(seen) == sorted(ids)  # each handled once
    log = broker.keys(queue).log
    assert client.xpending(log, "billing")["pending"] == 0
    return ids, broker


def handled_events(client: redis.Redis, broker: Broker, queue: str) -> list[list[str]]:
    entries = client.xrange(broker.keys(queue).events)
    return [[r[0] for r in json.loads(f[b"m"])] for _, f in entries if f[b"e"] == b"handled"]


@pytest.mark.parametrize("batch_ack", [False, True], ids=["per-message", "per-batch"])
def test_every_message_is_acknowledged_once_either_way(
    redis_client: redis.Redis, queue_name: str, batch_ack: bool
) -> None:
    ids, broker = drain(redis_client, queue_name, batch_ack=batch_ack)
    events = handled_events(redis_client, broker, queue_name)
    assert sorted(i for e in events for i in e) == sorted(ids)
    running = broker.keys(queue_name).group("billing").running
    if batch_ack:
        # One call per batch (batches grow from 10 to 100), and no start records
        assert len(events) <= N // 10
        assert redis_client.hlen(running) == 0
    else:
        # A write as each handler returns: (nearly) one message per call
        assert len(events) > N // 2


@pytest.mark.parametrize("history", [False, True])
@pytest.mark.parametrize("stream", ["log", "direct"])
def test_a_single_acknowledgement_is_packed_as_hiredis_would(
    redis_client: redis.Redis, queue_name: str, history: bool, stream: str
) -> None:
    from hiredis import pack_command

    from redisq_django.core.delivery import Stream
    from redisq_django.core.pipelining import SKIP_REPLY
    from redisq_django.core.worker.acks import AckPipe

    broker = Broker(redis_client, CoreConfig(history=history))
    broker.consumers.ensure(queue_name, "billing")
    broker.publish(queue_name, {"n": 1})
    sub = broker.subscribe(queue_name, "billing", "w\u00e9-1")
    (message,) = sub.fetch(count=1, block_ms=500)
    message.stream = Stream(stream)
    message.duration_ms = 12
    pipe = AckPipe(sub, lambda acked: None)
    command, script = pipe._ack_command([message])
    assert pipe._packed_command([message]) == (pack_command(command), script)
    mark = pipe._packed.marked(message)
    assert mark == SKIP_REPLY + pack_command(pipe._mark_command(message))
