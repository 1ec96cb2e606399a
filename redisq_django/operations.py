"""Operator actions shared by the admin and ``manage.py redisq``."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from django.utils.dateparse import parse_datetime

from redisq_django.connection import get_broker
from redisq_django.core.envelope import DeadLetter
from redisq_django.core.errors import ConsumerNotFound
from redisq_django.core.start import StartPoint
from redisq_django.core.stats import QueueStats


def all_queue_names() -> list[str]:
    """Queues known to Redis or declared in the database, sorted."""
    from redisq_django.models import Queue

    names = set(get_broker().queues()) | set(Queue.objects.values_list("name", flat=True))
    return sorted(names)


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


def dead_letters(queue: str, consumer: str | None = None, limit: int = 100) -> list[DeadLetter]:
    """Dead letters still in Redis for ``queue`` (one consumer or all), oldest first."""
    broker = get_broker()
    groups = [consumer] if consumer else broker.consumers(queue)
    out: list[DeadLetter] = []
    for group in groups:
        out += broker.dead_letters(queue, group, count=limit)
    return sorted(out, key=lambda d: d.entry_id)[:limit]


def retry_dead(queue: str, consumer: str, entry_ids: Iterable[str]) -> list[str]:
    """Re-drive dead letters to ``consumer`` only; returns the ids that were re-driven."""
    broker = get_broker()
    if consumer not in broker.consumers(queue):
        raise ConsumerNotFound(queue, consumer)
    return [eid for eid in entry_ids if broker.redrive(queue, consumer, eid)]


def discard_dead(queue: str, consumer: str, entry_ids: Iterable[str]) -> int:
    """Delete dead letters; returns how many existed."""
    return get_broker().delete_dead(queue, consumer, entry_ids)


def purge(queue: str) -> None:
    """Delete every message of ``queue``; its consumers stay registered."""
    get_broker().purge(queue)
