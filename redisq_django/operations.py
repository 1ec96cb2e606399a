"""What the admin and ``manage.py redisq`` share beyond the broker: the queues they list
(Redis's and the database's), a start point read from text, and the admin-history texts
of their actions and where they are written.

What they do to Redis they ask of the broker and the objects it hands out
(``broker.operator.deliver_now``, ``broker.reset``, ``broker.purge`` …: docs/layout.md,
"The core's seam"); the dead letters' are :mod:`redisq_django.deadletters`."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from typing import Any

from django.utils.dateparse import parse_datetime
from django.utils.translation import ngettext

from redisq_django import admin_log
from redisq_django.connection import get_broker
from redisq_django.core.keys import readable_names
from redisq_django.core.operator import S_DELAYED
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


def purge_costs(queue: str, broker: Any = None) -> list[str]:
    """What purging ``queue`` would cost its registered archives, one line each:
    ``500 messages not yet archived by 'default' will be lost`` (counted like an
    archive's lag, shown ``10000+`` above its cap); empty when every archive has stored
    every message (the admin's Purge and ``redisq purge`` say it, and ask for more).
    ``broker``: the one to ask (the admin's, with its short timeouts; default: the
    site's)."""
    return [
        ngettext(
            "%(count)s message not yet archived by '%(name)s' will be lost",
            "%(count)s messages not yet archived by '%(name)s' will be lost",
            u.count,
        )
        % {"count": u.shown, "name": u.name}
        for u in (broker or get_broker()).archives.unarchived(queue)
    ]


# -- the admin-history texts of the actions of the live pages, ``redisq purge``,
# ``deliver-now`` and ``release-key`` (stored as is, read by anyone)

#: The history text of purging a queue's messages.
PURGED_QUEUE_LOG = "Purged the queue's messages in Redis"


def delivered_log(where: str, message_id: str) -> str:
    """The history text of delivering one delayed message (``where``: ``delayed``) or
    retry (``retry``) now."""
    return f"Delivered now: {'delayed message' if where == S_DELAYED else 'retry'} " + (message_id)


def purged_consumer_log(retries: int, direct: int) -> str:
    """The history text of purging a logical consumer."""
    return f"Purged: skipped its backlog, discarded {retries} retries and {direct} re-driven"


def released_key_log(key: str) -> str:
    """The history text of releasing ordering key ``key`` by hand."""
    return f"Released ordering key {key!r} by hand"


def ended_log(message_ids: list[str], *, delete: bool) -> str:
    """The history text of ending messages before their time (dead letters, or deleted
    with ``delete``): every id, so that the history says which."""
    what = "Deleted" if delete else "Ended (dead letters now)"
    return f"{what}: {len(message_ids)} message(s): {', '.join(message_ids)}"


def marked_log(message_ids: list[str], consumers: list[str], *, delete: bool) -> str:
    """The history text of ending messages that wait in the log (``core/ended.py``):
    every id and the consumers they were marked for, and that it happens at their read."""
    what = "deleted" if delete else "dead letters (reason ended)"
    return (
        f"Ended before their consumers read them ({what} when read, never run): "
        f"{len(message_ids)} message(s): {', '.join(message_ids)}; for {', '.join(consumers)}"
    )


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
