"""Publishing from Django code: now, after the transaction commits, or via the outbox."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import transaction

from redisq_django.conf import check_queue_known, get_core_config, outbox_enabled
from redisq_django.connection import get_broker
from redisq_django.core.broker import Broker, Delay, new_message_id
from redisq_django.core.codec import ms_to_datetime
from redisq_django.core.errors import RedisqError

logger = logging.getLogger("redisq.publish")

#: How much of a payload the "not published" error log shows.
LOG_PREVIEW_CHARS = 500


def publish(
    queue: str,
    payload: Any,
    *,
    headers: Mapping[str, Any] | None = None,
    delay: Delay = None,
    eta: dt.datetime | None = None,
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

    Returns:
        The message id.

    Raises:
        PayloadTooLarge: the payload is over ``REDISQ['MAX_PAYLOAD_BYTES']``.
        PayloadNotSerializable: the payload or headers hold a non-JSON value.
        RedisUnavailable: Redis cannot be reached.
    """
    check_queue_known(queue)
    return get_broker().publish(queue, payload, headers=headers, delay=delay, eta=eta)


def publish_many(
    queue: str,
    payloads: Iterable[Any],
    *,
    headers: Mapping[str, Any] | None = None,
    delay: Delay = None,
    eta: dt.datetime | None = None,
) -> list[str]:
    """Publish several messages in one round trip, all or none (see :func:`publish`).

    Returns:
        The message ids in the order of ``payloads``.
    """
    check_queue_known(queue)
    return get_broker().publish_many(queue, payloads, headers=headers, delay=delay, eta=eta)


def _due_at(broker: Broker, delay: Delay, eta: dt.datetime | None) -> dt.datetime | None:
    due = broker.due_ms(delay, eta)
    return ms_to_datetime(due) if due is not None else None


def publish_on_commit(
    queue: str,
    payload: Any,
    *,
    headers: Mapping[str, Any] | None = None,
    delay: Delay = None,
    eta: dt.datetime | None = None,
    using: str | None = None,
) -> str:
    """Publish once the current transaction of database ``using`` commits.

    Nothing is published if it rolls back. Outside a transaction (autocommit) the
    message is published at once, as Django's ``on_commit`` does. The payload is
    validated now, so encoding errors surface at the call.

    With the outbox enabled for ``queue`` (``REDISQ['OUTBOX']``), the message is stored
    as an ``OutboxMessage`` row in the same transaction and forwarded to Redis right
    after the commit, or later by the relay if Redis is unavailable: nothing is lost.
    Without the outbox, a Redis outage at commit time loses the message; it is logged
    as an error naming the message.

    Args:
        queue, payload, headers, delay, eta: as :func:`publish`.
        using: the database alias whose transaction to follow (default: "default").

    Returns:
        The message id (chosen now, kept when it is published).

    Raises:
        PayloadTooLarge, PayloadNotSerializable: the payload is refused (at the call).
    """
    check_queue_known(queue)
    broker = get_broker()
    message_id = new_message_id()
    payload_json = broker.codec.encode_payload(
        payload, queue=queue, limit=get_core_config().max_payload_bytes
    )
    headers_json = broker.codec.encode_headers(headers, queue=queue)
    due_at = _due_at(broker, delay, eta)

    if outbox_enabled(queue):
        from redisq_django.outbox import relay_rows, store

        row = store(queue, message_id, payload_json, headers_json, due_at, using=using)
        transaction.on_commit(lambda: relay_rows([row.pk], using=using), using=using)
        return message_id

    def send() -> None:
        try:
            broker.publish_encoded(
                queue, message_id, payload_json, headers_json=headers_json, due_at=due_at
            )
        except RedisqError as exc:
            preview = payload_json.decode("utf-8", "replace")[:LOG_PREVIEW_CHARS]
            logger.error(
                "Message %s for queue %r was NOT published after the commit: %s "
                "Payload: %s. Publish it again by hand; to keep messages through Redis "
                "outages, enable the outbox: REDISQ['OUTBOX'] = True (or a list of queues).",
                message_id,
                queue,
                exc,
                preview,
            )

    transaction.on_commit(send, using=using)
    return message_id
