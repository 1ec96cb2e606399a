"""Publishing from asyncio code: the broker prepares and plans, an asyncio client sends.

What goes to Redis is what :meth:`Broker.publish` and :meth:`Broker.publish_many` send,
built by the same code (``Broker.prepare``, ``Broker.plan_send``): the same validation,
errors, publish hooks (tracing) and trend counters; only the client that sends it
differs (``redis.asyncio``, see ``core/asyncio_client.py``), so the event loop is never
blocked on a round trip.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import redis

from redisq_django.core import partitions
from redisq_django.core.asyncio_client import run_send
from redisq_django.core.envelope import Delay, Envelope
from redisq_django.core.errors import translated
from redisq_django.core.hooks import sending
from redisq_django.core.scripts import AsyncScripts
from redisq_django.core.types import AsyncRedisClient
from redisq_django.core.wire import to_str

if TYPE_CHECKING:
    from redisq_django.core.broker import Broker


async def asend(
    broker: Broker,
    conn: AsyncRedisClient,
    scripts: AsyncScripts,
    envelopes: Sequence[Envelope],
    *,
    once: bool = False,
    batch: str | None = None,
) -> list[str]:
    """:meth:`Broker.send` on asyncio client ``conn`` (``scripts``: its scripts): the
    plan runs as the synchronous send runs it, each write checking the layout it
    assumes where it happens (``partitions.aretried``).

    Raises:
        RedisUnavailable, RedisRefused: as :meth:`Broker.send`.
        PartitionsMismatch: Redis records another number of partitions.
    """
    ids, plans = broker.plan_send(envelopes, once=once, batch=batch, register=True)
    try:
        for indexes, plan in plans:
            replies = await partitions.aretried(
                conn,
                scripts,
                plan.keys,
                lambda: run_send(conn, scripts, plan),  # noqa: B023
            )
            broker.recorded(plan.keys.queue)
            for i, reply in zip(indexes, replies, strict=True):
                ids[i] = ids[i] or to_str(reply)
    except redis.RedisError as exc:
        ours = translated(exc, broker)
        if ours is exc:
            raise
        raise ours from exc
    return ids


async def apublish(
    broker: Broker,
    conn: AsyncRedisClient,
    scripts: AsyncScripts,
    queue: str,
    payload: Any,
    *,
    headers: Mapping[str, Any] | None = None,
    delay: Delay = None,
    eta: dt.datetime | None = None,
    key: str | None = None,
) -> str:
    """:meth:`Broker.publish` on asyncio client ``conn``: the message id."""
    with sending(broker.hooks, queue, 1):
        envelope = broker.prepare(queue, payload, headers=headers, delay=delay, eta=eta, key=key)
        return (await asend(broker, conn, scripts, [envelope]))[0]


async def apublish_many(
    broker: Broker,
    conn: AsyncRedisClient,
    scripts: AsyncScripts,
    queue: str,
    payloads: Iterable[Any],
    *,
    headers: Mapping[str, Any] | None = None,
    delay: Delay = None,
    eta: dt.datetime | None = None,
    key: str | None = None,
) -> list[str]:
    """:meth:`Broker.publish_many` on asyncio client ``conn``: the message ids in order,
    all or none (``key``: one ordering key for the batch)."""
    payloads = list(payloads)
    with sending(broker.hooks, queue, len(payloads)):
        envelopes = broker.prepare_many(
            queue, payloads, headers=headers, delay=delay, eta=eta, key=key
        )
        return await asend(broker, conn, scripts, envelopes)
