"""``apublish`` and ``apublish_many``: the messages ``publish``/``publish_many`` send, with
their validation, errors, tracing and trends, sent on the event loop's own asyncio client
without blocking the loop; on a standalone server, a 3-master cluster and behind
Sentinel. Real redis-server (and sentinel) processes."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

from redisq_django import (
    PayloadNotSerializable,
    PayloadTooLarge,
    RedisUnavailable,
    apublish,
    apublish_many,
    publish,
    publish_many,
)
from redisq_django.conf import SettingsError
from redisq_django.connection import get_broker
from redisq_django.core import trends
from redisq_django.core.keys import queue_keys, registry_key
from tests.support.aio import run_async
from tests.support.databases import Rollback
from tests.support.redis_server import RedisServer
from tests.support.sentinel import SentinelProcess
from tests.support.tracing import global_exporter  # noqa: F401  (a fixture)

T = TypeVar("T")

#: Bounds the ticking coroutine (it stops long before, when told).
MAX_TICKS = 10_000_000


def _log(client: Any, queue: str) -> list[tuple[str, dict[bytes, bytes]]]:
    return [(i.decode(), f) for i, f in client.xrange(queue_keys("redisq", queue).log)]


def _payloads(client: Any, queue: str) -> list[Any]:
    return [json.loads(fields[b"payload"]) for _, fields in _log(client, queue)]


def _ticks_during(work: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    """Run ``work`` on a fresh event loop beside a coroutine that counts its turns; what
    ``work`` returned and how many turns the other coroutine got meanwhile."""

    async def scenario() -> tuple[T, int]:
        ticks = 0
        done = False

        async def tick() -> None:
            nonlocal ticks
            for _ in range(MAX_TICKS):
                if done:
                    return
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        await asyncio.sleep(0)  # the ticker is running
        before = ticks
        result = await work()
        during = ticks - before
        done = True
        await ticker
        return result, during

    return run_async(scenario())


def test_apublish_sends_what_publish_sends(
    redisq_settings: Any, redis_client: redis.Redis, queue_name: str
) -> None:
    # Given a message published with publish, and the same with apublish
    sync_id = publish(queue_name, {"order": 1}, headers={"k": "v"})
    async_id = run_async(apublish(queue_name, {"order": 1}, headers={"k": "v"}))

    # Then both are entries of the log, with the same fields but the entry id and time
    (first, sync_fields), (second, async_fields) = _log(redis_client, queue_name)
    assert (first, second) == (sync_id, async_id)
    assert sync_fields.keys() == async_fields.keys()
    for name in sync_fields.keys() - {b"published_at"}:
        assert sync_fields[name] == async_fields[name], name
    # And the queue is recorded for the operator's views, and counted in its trends
    assert queue_name.encode() in redis_client.smembers(registry_key("redisq"))
    (trend,) = trends.read_trends(redis_client, [queue_keys("redisq", queue_name)], 2)
    assert sum(b.total(trends.PUBLISHED) for b in trend.buckets(1)) == 2


def test_apublish_many_is_one_batch_in_order_delayed_too(
    redisq_settings: Any, redis_client: redis.Redis, queue_name: str
) -> None:
    # When 50 messages are published at once, then 3 delayed ones
    ids = run_async(apublish_many(queue_name, [{"n": n} for n in range(50)]))
    delayed = run_async(apublish_many(queue_name, ["a", "b", "c"], delay=60))

    # Then the 50 are in the log in order under the ids returned...
    assert [i for i, _ in _log(redis_client, queue_name)] == ids
    assert _payloads(redis_client, queue_name) == [{"n": n} for n in range(50)]
    # ...and the delayed ones wait in the delayed set (due by Redis's clock), not the log
    members = redis_client.zrange(queue_keys("redisq", queue_name).delayed, 0, -1)
    assert len(members) == 3 and len(set(delayed)) == 3
    assert all(len(i) == 32 for i in delayed)
    # And the sync publish_many of the same payloads returns ids the same way
    assert len(publish_many(queue_name, [{"n": n} for n in range(50)])) == 50


def test_apublish_refuses_what_publish_refuses_and_sends_nothing(
    redisq_settings: Any, redis_client: redis.Redis, queue_name: str
) -> None:
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "MAX_PAYLOAD_BYTES": 1000}
    # A payload that is no JSON, one over the limit, a batch with one bad payload...
    with pytest.raises(PayloadNotSerializable) as sync_error:
        publish(queue_name, {"x": object()})
    with pytest.raises(PayloadNotSerializable) as async_error:
        run_async(apublish(queue_name, {"x": object()}))
    assert str(async_error.value) == str(sync_error.value)
    with pytest.raises(PayloadTooLarge):
        run_async(apublish(queue_name, "x" * 2000))
    with pytest.raises(PayloadTooLarge):
        run_async(apublish_many(queue_name, ["ok", "x" * 2000]))
    # ...and a queue the settings do not list
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "QUEUES": ["other"]}
    with pytest.raises(SettingsError, match=queue_name):
        run_async(apublish(queue_name, 1))
    # Then nothing was published
    assert _log(redis_client, queue_name) == []


def test_apublish_raises_redis_unavailable_naming_the_server(
    settings: Any, volatile_redis_server: RedisServer, queue_name: str
) -> None:
    settings.REDISQ = {"URL": volatile_redis_server.url}
    assert run_async(apublish(queue_name, 1))
    volatile_redis_server.stop()
    with pytest.raises(RedisUnavailable, match=str(volatile_redis_server.port)):
        run_async(apublish(queue_name, 2))
    with pytest.raises(RedisUnavailable):
        run_async(apublish_many(queue_name, [3, 4]))


def test_the_event_loop_runs_on_while_apublish_waits_for_redis(
    redisq_settings: Any, redis_client: redis.Redis, queue_name: str
) -> None:
    async def hundred_apublish() -> list[str]:
        return [await apublish(queue_name, {"n": n}) for n in range(100)]

    async def hundred_publish() -> list[str]:
        return [publish(queue_name, {"n": n}) for n in range(100)]

    async def big_batch() -> list[str]:
        return await apublish_many(queue_name, [{"n": n, "pad": "x" * 100} for n in range(5000)])

    # When 100 messages are published one by one with apublish beside a ticking coroutine
    ids, ticks = _ticks_during(hundred_apublish)
    # Then the other coroutine ran while each publish waited for Redis
    assert len(ids) == 100
    assert ticks >= 100
    # (where publish, which blocks the loop, lets it run not once)
    sync_ids, sync_ticks = _ticks_during(hundred_publish)
    assert len(sync_ids) == 100
    assert sync_ticks == 0
    # And a batch of 5,000 lets it run too
    batch_ids, batch_ticks = _ticks_during(big_batch)
    assert len(batch_ids) == 5000
    assert batch_ticks >= 1
    assert len(_log(redis_client, queue_name)) == 5200


def test_apublish_carries_the_trace_context_in_a_send_span(
    settings: Any,
    redis_url: str,
    redis_client: redis.Redis,
    queue_name: str,
    global_exporter: Any,  # noqa: F811  (the fixture imported above)
) -> None:
    from opentelemetry import trace

    settings.REDISQ = {"URL": redis_url, "TRACING": True}

    async def in_a_request() -> None:
        with trace.get_tracer("test").start_as_current_span("request"):
            await apublish(queue_name, 1)
            await apublish_many(queue_name, [2, 3])

    run_async(in_a_request())
    # Then each send made a span of the request's trace, whose context the messages carry
    sends = [s for s in global_exporter.get_finished_spans() if s.name == f"send {queue_name}"]
    (request,) = [s for s in global_exporter.get_finished_spans() if s.name == "request"]
    assert len(sends) == 2
    assert {s.context.trace_id for s in sends} == {request.context.trace_id}
    carried = [json.loads(f[b"headers"])["traceparent"] for _, f in _log(redis_client, queue_name)]
    span_ids = {f"{s.context.span_id:016x}" for s in sends}
    assert len(carried) == 3
    assert {c.split("-")[2] for c in carried} == span_ids


@pytest.mark.cluster
def test_apublish_on_a_cluster(settings: Any, redis_cluster: Any, queue_name: str) -> None:
    settings.REDISQ = {"URL": redis_cluster.nodes[0].url, "CLUSTER": True}
    assert type(get_broker().client).__name__ == "RedisCluster"
    # When messages go to queues whose keys are on different nodes
    queues = [f"{queue_name}-{i}" for i in range(6)]

    async def publish_all() -> dict[str, list[str]]:
        out = {}
        for q in queues:
            out[q] = [await apublish(q, {"q": q}), *await apublish_many(q, [1, 2])]
            await apublish_many(q, ["later"], delay=60)
        return out

    ids = run_async(publish_all())
    # Then each queue's log holds its three messages in order, the delayed one waits
    client = redis_cluster.client()
    try:
        nodes = {client.get_node_from_key(queue_keys("redisq", q).log).name for q in queues}
        assert len(nodes) > 1
        for q in queues:
            assert [i for i, _ in _log(client, q)] == ids[q]
            assert _payloads(client, q) == [{"q": q}, 1, 2]
            assert client.zcard(queue_keys("redisq", q).delayed) == 1
    finally:
        client.close()


@pytest.fixture
def sentinel_service(
    redis_server_binary: str, tmp_path: Path, settings: Any
) -> Iterator[RedisServer]:
    """REDISQ on a django-redis cache that finds its master through a real sentinel."""
    master = RedisServer(redis_server_binary, tmp_path / "master").start()
    sentinel = SentinelProcess(redis_server_binary, tmp_path / "sentinel", master.port).start()
    settings.CACHES = {**settings.CACHES, "queues": sentinel.cache()}
    settings.REDISQ = {"CONNECTION": "queues"}
    try:
        yield master
    finally:
        sentinel.stop()
        master.stop()


@pytest.mark.slow
def test_apublish_behind_sentinel_reaches_the_master(
    sentinel_service: RedisServer, queue_name: str
) -> None:
    # When messages are published from async code through the Sentinel-backed settings
    ids = run_async(apublish_many(queue_name, [1, 2]))
    ids.append(run_async(apublish(queue_name, 3)))
    # Then they are on the master the sentinel names
    with sentinel_service.client() as direct:
        assert [i for i, _ in _log(direct, queue_name)] == ids
        assert _payloads(direct, queue_name) == [1, 2, 3]


@pytest.mark.django_db(transaction=True)
def test_from_async_code_a_transaction_publishes_on_commit_through_sync_to_async(
    redisq_settings: Any, redis_client: redis.Redis, queue_name: str
) -> None:
    from asgiref.sync import sync_to_async
    from django.db import transaction

    from redisq_django import publish_on_commit
    from tests.shopapp.models import Order

    # The pattern docs/howto/publishing.md shows instead of an apublish_on_commit
    @sync_to_async
    def place_order(total: int, fail: bool) -> None:
        with transaction.atomic():
            order = Order.objects.create(total=total)
            publish_on_commit(queue_name, {"order": order.pk})
            if fail:
                raise Rollback

    async def checkout() -> None:
        await place_order(1, fail=False)
        with pytest.raises(Rollback):
            await place_order(2, fail=True)

    run_async(checkout())
    # Then the committed order was published, the rolled-back one not
    (order,) = Order.objects.all()
    assert _payloads(redis_client, queue_name) == [{"order": order.pk}]
