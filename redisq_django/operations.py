"""Operator actions shared by the admin and ``manage.py redisq`` (the dead letters'
are :mod:`redisq_django.deadletters`)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from typing import Any

from django.utils.dateparse import parse_datetime

from redisq_django import admin_log
from redisq_django.connection import get_broker
from redisq_django.core import Broker, actions, browse
from redisq_django.core.keys import readable_names
from redisq_django.core.ordered import HELD_LIMIT, HeldKey
from redisq_django.core.start import StartPoint
from redisq_django.core.stats import QueueStats

logger = logging.getLogger(__name__)


def all_queue_names() -> list[str]:
    """Queues known to Redis or declared in the database, sorted. A registry member
    that is no queue name (any Redis client may write one) is left out with a warning,
    so that one bad record does not stop every command that lists the queues."""
    from redisq_django.models import Queue

    names = set(get_broker().queues()) | set(Queue.objects.values_list("name", flat=True))
    readable, others = readable_names(sorted(names))
    for name in others:
        logger.warning("Skipping %r in the queue registry: it is no queue name.", name)
    return readable


def queue_stats(queues: Iterable[str] | None = None) -> list[QueueStats]:
    """Live stats of ``queues`` (default: all)."""
    broker = get_broker()
    return [broker.stats(q) for q in (all_queue_names() if queues is None else queues)]


def parse_start(text: str) -> StartPoint:
    """``earliest``, ``latest``, an ISO 8601 datetime (UTC when no zone) or an id.

    Raises:
        ValueError: with a message saying what is accepted.
    """
    when = parse_datetime(text) if "T" in text or " " in text or text.count("-") >= 2 else None
    if when is not None:
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return StartPoint.parse(when)
    return StartPoint.parse(text)


def replay(queue: str, consumer: str, start: str | StartPoint) -> None:
    """Move logical consumer ``consumer`` of ``queue`` to ``start`` (see ``Broker.reset``).

    Raises:
        ConsumerNotFound: no such consumer registered in Redis.
    """
    point = start if isinstance(start, StartPoint) else parse_start(start)
    get_broker().reset(queue, consumer, point)


def purge(queue: str, *, broker: Broker | None = None) -> None:
    """Delete every message of ``queue``; its consumers stay registered."""
    (broker or get_broker()).purge(queue)


# -- the live pages' actions (also ``redisq deliver-now`` and ``redisq purge --consumer``)

#: The admin-history texts of the actions (stored as is, read by anyone).
PURGED_QUEUE_LOG = "Purged the queue's messages in Redis"


def delivered_log(where: str, message_id: str) -> str:
    """The history text of delivering one delayed message (``where``: ``delayed``) or
    retry (``retry``) now."""
    return f"Delivered now: {'delayed message' if where == browse.S_DELAYED else 'retry'} " + (
        message_id
    )


def purged_consumer_log(retries: int, direct: int) -> str:
    """The history text of purging a logical consumer."""
    return f"Purged: skipped its backlog, discarded {retries} retries and {direct} re-driven"


def deliver_now(
    queue: str, consumer: str | None, ref: str, *, broker: Broker | None = None
) -> str | None:
    """Deliver one delayed message or retry of ``consumer`` now (``core.actions.deliver_now``).

    Returns:
        Its new entry id, or None when it is no longer waiting.
    """
    return (broker or get_broker()).operator.deliver_now(queue, consumer, ref)


def deliver_waiting(
    queue: str,
    consumer: str | None,
    ids: list[str] | None = None,
    *,
    broker: Broker | None = None,
) -> actions.Delivered:
    """Deliver now the queue's delayed messages (``consumer`` None) or ``consumer``'s
    retries: those with these message ids, or all (``ids`` None). See
    ``core.actions.deliver_waiting``."""
    return (broker or get_broker()).operator.deliver_waiting(queue, consumer, ids)


def purge_consumer(queue: str, consumer: str, *, broker: Broker | None = None) -> tuple[int, int]:
    """Skip ``consumer``'s backlog, discard its retries and private input; its messages in
    flight finish (``core.actions.purge_consumer``).

    Returns:
        ``(retries removed, private-input entries removed)``.
    """
    return (broker or get_broker()).operator.purge_consumer(queue, consumer)


def held_keys(
    queue: str, consumer: str, limit: int = HELD_LIMIT, *, broker: Broker | None = None
) -> list[HeldKey]:
    """The ordering keys of ordered consumer ``consumer`` that hold back later messages,
    most waiting first, at most ``limit``, each with its holder and why it holds
    (``core.ordered.held_keys``)."""
    return (broker or get_broker()).operator.held_keys(queue, consumer, limit)


def release_key(queue: str, consumer: str, key: str, *, broker: Broker | None = None) -> bool:
    """Free ordering ``key`` of ``consumer`` by hand: the first of its waiting messages
    goes to the consumer's input now and holds it (``core.ordered.release_key``).

    Returns:
        False when nothing held the key.
    """
    return (broker or get_broker()).operator.release_key(queue, consumer, key)


def released_key_log(key: str) -> str:
    """The history text of releasing ordering key ``key`` by hand."""
    return f"Released ordering key {key!r} by hand"


def record_change(user: Any, queue: str, consumer: str | None, text: str) -> bool:
    """Write ``text`` to the admin history of ``consumer``'s row (else its queue's) as
    ``user``, as the live pages do. False when there is no row to write it to (or no
    ``django.contrib.admin``: see :mod:`~redisq_django.admin_log`)."""
    from redisq_django.models import Consumer, Queue

    row: Any = None
    if consumer is not None:
        row = Consumer.objects.filter(queue__name=queue, name=consumer).first()
    row = row or Queue.objects.filter(name=queue).first()
    if row is None:
        return False
    return admin_log.log_change(user, [row], text, single_object=True)
