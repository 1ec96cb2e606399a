"""The core's seam (docs/layout.md): what the broker hands out to the rest of the
package — the operator's reads and actions, many re-drives at once, and the script calls
the core builds for a client the caller runs itself (the asyncio one of the tasks)."""

from __future__ import annotations

import time
from typing import Any

import redis

from redisq_django.core import trends
from redisq_django.core.asyncio_client import run_call
from redisq_django.core.broker import Broker
from redisq_django.core.envelope import Envelope
from redisq_django.core.scripts import AsyncScripts, ScriptCall
from redisq_django.core.tasks.result_wire import PUBLISH, decode_hash
from tests.support.aio import run_async

C = "billing"


def _redis7(r: redis.Redis) -> bool:
    return int(str(r.info("server")["redis_version"]).split(".")[0]) >= 7


def test_the_operator_reads_and_acts_on_the_queue(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a consumer from the start, three messages in the log and two delayed ones
    broker.consumers.ensure(queue_name, C, "earliest")
    logged = broker.publish_many(queue_name, [{"n": i} for i in range(3)])
    delayed = broker.publish_many(queue_name, [{"n": 9}, {"n": 10}], delay=3600)
    operator = broker.operator
    # When an operator reads the queue through the broker's operator
    [stats] = operator.stats([queue_name])
    # Then it sees what is there: figures, lists, and the messages ever appended
    assert (stats.length, stats.delayed) == (3, 2)
    assert [c.name for c in stats.consumers] == [C]
    assert {e.message_id for e in operator.log(queue_name).entries} == set(logged)
    assert {e.message_id for e in operator.delayed(queue_name).entries} == set(delayed)
    assert {e.message_id for e in operator.waiting(queue_name, C).entries} == set(logged)
    assert operator.in_flight(queue_name, C).entries == []
    assert operator.instances(queue_name, C) == []
    added = operator.entries_added([queue_name])
    assert added == ({queue_name: 3} if _redis7(redis_client) else {})
    first = operator.delayed(queue_name).entries[0]
    found = operator.find(queue_name, None, first.ref)
    assert found is not None and found.message_id == first.message_id
    assert operator.ping() is True
    # When it delivers one delayed message now, then every other one
    assert operator.deliver_now(queue_name, None, first.ref) is not None
    rest = operator.deliver_waiting(queue_name, None)
    # Then none is delayed any more and the consumer has all five waiting
    assert rest.count == 1
    assert operator.delayed(queue_name).entries == []
    waiting = {e.message_id for e in operator.waiting(queue_name, C).entries}
    assert waiting == set(logged) | set(delayed)
    # When it purges the consumer, then nothing waits for it
    operator.purge_consumer(queue_name, C)
    assert operator.waiting(queue_name, C).entries == []


def test_the_operator_samples_and_reads_trends(broker: Broker, queue_name: str) -> None:
    # Given a consumer with two messages in its backlog
    broker.consumers.ensure(queue_name, C, "earliest")
    broker.publish_many(queue_name, [1, 2])
    # When a worker samples the queue and the admin reads its trends
    broker.operator.sample_trends([queue_name])
    [trend] = broker.operator.trends([queue_name], 5)
    # Then this minute holds the two published and the backlog of two
    [bucket] = trend.buckets(5)
    assert bucket.total(trends.PUBLISHED) == 2
    assert bucket.sample(trends.BACKLOG, [C]) == 2


def test_redrive_envelopes_sends_each_to_its_own_consumer_in_one_call(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given two consumers of a queue
    for consumer in ("a", "b"):
        broker.consumers.ensure(queue_name, consumer)
    # When three envelopes (kept in a database, say) are re-driven at once
    targets: list[tuple[str, str, dict[str | bytes, Any]]] = [
        (queue_name, "a", {"payload": "1", "id": "m1"}),
        (queue_name, "b", {"payload": "2", "id": "m2"}),
        (queue_name, "a", {b"payload": b"3", b"id": b"m3"}),
    ]
    replies = broker.dead_letters.redrive_envelopes(targets)
    # Then each went to its own consumer's private input only, and its entry id came back
    keys = broker.keys(queue_name)
    got = {
        c: [(eid.decode(), f[b"id"]) for eid, f in redis_client.xrange(keys.group(c).direct)]
        for c in ("a", "b")
    }
    assert got == {
        "a": [(replies[0], b"m1"), (replies[2], b"m3")],
        "b": [(replies[1], b"m2")],
    }


def _enqueued(broker: Broker, queue: str, result_id: str) -> ScriptCall:
    envelope = Envelope(queue=queue, id=result_id, payload_json=b'{"task": "t"}')
    result = {"task": "t", "status": "READY"}
    expire = time.time_ns() // 1_000_000 + 60_000
    return broker.task_results.enqueue_command(envelope, result, expire_at_ms=expire, mode=PUBLISH)


def test_the_asyncio_client_runs_the_calls_the_core_builds(
    broker: Broker, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given the core's calls: the tasks consumer from the start, and one task's enqueue
    # (trends on: its published count rides in the same round trip)
    ensure = broker.consumers.ensure_call(queue_name, "tasks", "earliest")
    enqueue = _enqueued(broker, queue_name, "r1")
    assert enqueue.quiet, "the trend counter rides along"

    # When an asyncio client of the broker's Redis runs them
    async def run() -> None:
        conn = broker.new_async_client()
        try:
            scripts = AsyncScripts(conn)
            await run_call(conn, scripts, ensure)
            await run_call(conn, scripts, enqueue)
        finally:
            await conn.aclose()

    run_async(run())
    # Then the consumer and the queue's name are registered, the task is in the log with
    # its READY result, and it counted in the queue's trends
    assert broker.consumers.names(queue_name) == ["tasks"]
    assert queue_name in broker.queues()
    keys = broker.keys(queue_name)
    [(_eid, fields)] = redis_client.xrange(keys.log)
    assert fields[b"id"] == b"r1"
    assert decode_hash(redis_client.hgetall(keys.task_result("r1")))["status"] == "READY"
    [trend] = broker.operator.trends([queue_name], 1)
    assert trend.buckets(1)[0].total(trends.PUBLISHED) == 1
