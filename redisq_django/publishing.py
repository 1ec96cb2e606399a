"""Publishing from Django code."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from redisq_django.connection import get_broker
from redisq_django.core.broker import Delay


def publish(
    queue: str,
    payload: Any,
    *,
    headers: Mapping[str, Any] | None = None,
    delay: Delay = None,
    eta: dt.datetime | None = None,
) -> str:
    """Publish one message to ``queue`` now; every logical consumer of it receives it.

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
    return get_broker().publish_many(queue, payloads, headers=headers, delay=delay, eta=eta)
