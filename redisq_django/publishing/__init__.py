"""Publishing from Django code: now, after the transaction commits, or via the outbox.

Model events live in :mod:`~redisq_django.publishing.events`, the transactional outbox
in :mod:`~redisq_django.publishing.outbox`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from redisq_django.conf import check_queue_known, outbox_enabled
from redisq_django.connection import get_broker, loop_client
from redisq_django.core import async_publish
from redisq_django.core.envelope import Delay, Envelope
from redisq_django.core.ids import new_message_id
from redisq_django.publishing.commit import relay_after_commit, send_after_commit

__all__ = ["apublish", "apublish_many", "publish", "publish_many", "publish_on_commit"]


def publish(
    queue: str,
    payload: Any,
    *,
    headers: Mapping[str, Any] | None = None,
    delay: Delay = None,
    eta: dt.datetime | None = None,
    key: str | None = None,
) -> str:
    """Publish one message to ``queue`` now; every logical consumer of it receives it.

    Inside a database transaction the message is sent at once, even if the transaction
    later rolls back: use :func:`publish_on_commit` when the message describes
    database changes.

    Args:
        queue: queue name (letters, digits, ``_ . -``).
        payload: a JSON-serialisable value; datetime, date, time, timedelta, Decimal,
            UUID and lazy strings are encoded as Django's ``DjangoJSONEncoder`` does.
        headers: optional JSON-serialisable metadata dict.
        delay: seconds (or a ``timedelta``) to wait before delivery.
        eta: an aware datetime before which it is not delivered.
        key: an ordering key, the entity the message is about (``"order-42"``): a
            non-empty str of at most 256 bytes in UTF-8; the handler sees it as
            ``message.key``. An ordered consumer (``@consumer(..., ordered=True)``)
            handles the messages of one key one at a time, in publish order.

    Returns:
        The message id.

    Raises:
        PayloadTooLarge: the payload is over ``REDISQ['MAX_PAYLOAD_BYTES']``.
        PayloadNotSerializable: the payload or headers hold a non-JSON value.
        InvalidKey: ``key`` is not a str, is empty or is over 256 bytes.
        RedisUnavailable: Redis cannot be reached.
        RedisRefused: Redis refused the write for now; ``condition`` says why (``"oom"``,
            ``"readonly"``, ``"loading"``...). A ``RedisUnavailable`` too.
    """
    check_queue_known(queue)
    return get_broker().publish(queue, payload, headers=headers, delay=delay, eta=eta, key=key)


def publish_many(
    queue: str,
    payloads: Iterable[Any],
    *,
    headers: Mapping[str, Any] | None = None,
    delay: Delay = None,
    eta: dt.datetime | None = None,
    key: str | None = None,
) -> list[str]:
    """Publish several messages in one round trip, all or none (see :func:`publish`);
    ``headers``, ``delay``, ``eta`` and ``key`` (one ordering key for the batch) apply to
    every message.

    Returns:
        The message ids in the order of ``payloads``.
    """
    check_queue_known(queue)
    return get_broker().publish_many(
        queue, payloads, headers=headers, delay=delay, eta=eta, key=key
    )


async def apublish(
    queue: str,
    payload: Any,
    *,
    headers: Mapping[str, Any] | None = None,
    delay: Delay = None,
    eta: dt.datetime | None = None,
    key: str | None = None,
) -> str:
    """:func:`publish` for async code (an ``async def`` view, an async consumer): the
    same message, validation, errors, tracing and trends, sent on this event loop's own
    ``redis.asyncio`` client (``redisq_django/connection.py``), so the loop is never blocked
    on Redis.

    There is no ``apublish_on_commit``: Django runs no transaction in async code (the
    ORM's async methods each run in a thread), so an async caller is always in
    autocommit, where "on commit" means "now", which is ``apublish``. Publish what a
    transaction changes with :func:`publish_on_commit` inside the synchronous function
    that holds the transaction, run with ``sync_to_async`` (docs: "Publishing from
    async code").

    Returns:
        The message id.

    Raises:
        As :func:`publish`.
    """
    check_queue_known(queue)
    broker = get_broker()
    async with loop_client() as entry:
        return await async_publish.apublish(
            broker,
            entry.conn,
            entry.loaded,
            queue,
            payload,
            headers=headers,
            delay=delay,
            eta=eta,
            key=key,
        )


async def apublish_many(
    queue: str,
    payloads: Iterable[Any],
    *,
    headers: Mapping[str, Any] | None = None,
    delay: Delay = None,
    eta: dt.datetime | None = None,
    key: str | None = None,
) -> list[str]:
    """:func:`publish_many` for async code (see :func:`apublish`): one round trip, all
    or none, every payload encoded before anything is sent.

    Returns:
        The message ids in the order of ``payloads``.
    """
    check_queue_known(queue)
    broker = get_broker()
    async with loop_client() as entry:
        return await async_publish.apublish_many(
            broker,
            entry.conn,
            entry.loaded,
            queue,
            payloads,
            headers=headers,
            delay=delay,
            eta=eta,
            key=key,
        )


def publish_on_commit(
    queue: str,
    payload: Any,
    *,
    headers: Mapping[str, Any] | None = None,
    delay: Delay = None,
    eta: dt.datetime | None = None,
    using: str | None = None,
    key: str | None = None,
) -> str:
    """Publish once the current transaction of database ``using`` commits.

    Nothing is published if it rolls back. Outside a transaction (autocommit) the
    message is published at once, as Django's ``on_commit`` does. The payload is
    validated now, so encoding errors surface at the call. All the messages of one
    transaction leave together after the commit, in one round trip per queue.

    With the outbox enabled for ``queue`` (``REDISQ['OUTBOX']``), the message is stored
    as an ``OutboxMessage`` row in the same transaction and forwarded to Redis right
    after the commit, or later by the relay if Redis is unavailable: nothing is lost.
    Without the outbox, a send whose outcome is unknown (a timeout) is sent again, safely
    (Redis publishes each transaction's batch once), a few times within a second; a
    Redis outage or refusal past that loses the message; it is logged as an error
    naming the message. Nothing raises after the commit.

    Args:
        queue, payload, headers, delay, eta, key: as :func:`publish` (the key is kept
            in the outbox row too).
        using: the database alias whose transaction to follow (default: "default").

    Returns:
        The message id (chosen now, kept when it is published).

    Raises:
        PayloadTooLarge, PayloadNotSerializable, InvalidKey: the message is refused (at
            the call).
    """
    check_queue_known(queue)
    envelope = get_broker().prepare(
        queue, payload, headers=headers, delay=delay, eta=eta, id=new_message_id(), key=key
    )
    enqueue_on_commit(envelope, using=using)
    assert envelope.id is not None
    return envelope.id


def enqueue_on_commit(envelope: Envelope, *, using: str | None = None) -> None:
    """Send a prepared envelope (with an id of its own) after ``using``'s transaction
    commits: through the outbox when it covers the envelope's queue, else directly."""
    if outbox_enabled(envelope.queue):
        from redisq_django.publishing.outbox import store

        row = store(envelope, using=using)
        relay_after_commit(row.pk, using)
    else:
        send_after_commit(envelope, using)
