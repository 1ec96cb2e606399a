"""Exactly-once effects on the site's database: the transactional inbox of ``atomic=True``
consumers (the outbox's pair on the consuming side).

A consumer declared ``@consumer(..., atomic=True)`` (or ``atomic="alias"``) runs its
handler inside ``transaction.atomic()`` on that database, and the first statement of that
transaction inserts the row (queue, consumer, message id) into the inbox table
(:class:`~redisq_django.models.InboxEntry`, unique on the three). So:

* the handler's rows and the inbox row commit together or not at all: a handler that
  raises rolls back both, and the message is retried as any failure;
* a message whose row exists was handled: delivered again (a crash between the commit
  and the acknowledgement, a lease taken over from a slow instance, a replay), it is not
  handled again — the handler is skipped and the delivery acknowledged;
* two instances handling the same message at once (a reclaim while the first one is only
  slow) serialize on the row's unique index: the second waits for the first's
  transaction, then skips when it committed or runs when it rolled back. On SQLite the
  lock is the database's own (one writer at a time).

The message id is the envelope's: it survives retries, reclaims, redeliveries after a
crash and a Redis restart with AOF, and a re-drive by staff keeps it (a dead letter's
transaction was rolled back: it runs again). Rows older than
``REDISQ['INBOX_RETENTION']`` are deleted by the workers (:func:`prune`), in bounded
batches.
"""

from __future__ import annotations

import datetime as dt
import functools
import inspect
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

# Django's database layer is imported where it is used: importing the package (its
# errors, its core) loads no Django (tests/test_public_api.py).
from redisq_django.core.errors import ConfigurationError
from redisq_django.core.handler import DUPLICATE, Handler
from redisq_django.core.message import Message

logger = logging.getLogger("redisq.inbox")

#: Rows deleted per statement by :func:`prune` (a short lock each).
PRUNE_BATCH = 1000
#: Statements per :func:`prune` call at most (the rest waits for the next round).
PRUNE_ROUNDS = 20
#: How often a worker with an ``atomic=True`` consumer prunes the inbox, seconds.
PRUNE_INTERVAL_S = 60.0

#: Messages skipped in this process as handled already, by (queue, consumer).
skipped: Counter[tuple[str, str]] = Counter()
_skipped_lock = threading.Lock()


def database_of(atomic: bool | str, where: str) -> str | None:
    """The database alias an ``atomic`` declaration means (None: not atomic).

    Raises:
        ConfigurationError: not a bool or an alias of ``settings.DATABASES``.
    """
    from django.db import connections

    if atomic is False or atomic is None:
        return None
    if atomic is True:
        return "default"
    if not isinstance(atomic, str) or atomic not in connections.settings:
        known = ", ".join(sorted(connections.settings)) or "none"
        raise ConfigurationError(
            f"{where} atomic={atomic!r}: give True (the default database) or the alias of "
            f"one of settings.DATABASES ({known})."
        )
    return atomic


def atomic_handler(handler: Handler, *, queue: str, consumer: str, using: str) -> Handler:
    """``handler`` run in a transaction on ``using`` that first records the message in
    the inbox, and skipped (the delivery acknowledged) when the record exists.

    Raises:
        ConfigurationError: ``handler`` is an ``async def`` function (Django's
            transactions are synchronous: keep the database work in a plain function).
    """
    if inspect.iscoroutinefunction(handler):
        raise ConfigurationError(
            f"@consumer {queue}/{consumer}: atomic=True needs a plain function, not an "
            "async def one: Django runs transaction.atomic() on one thread, and an async "
            "handler's awaits may run its queries on others. Declare a plain function (the "
            "worker runs it on a thread of its own), or keep atomic off and make the "
            "handler idempotent."
        )

    @functools.wraps(handler)
    def run(message: Message) -> Any:
        returned: list[Any] = []
        ran, _ = once(
            message,
            queue=queue,
            consumer=consumer,
            using=using,
            work=lambda: returned.append(handler(message)),
        )
        return returned[0] if ran else DUPLICATE

    run.redisq_inbox = using  # type: ignore[attr-defined]
    return run


def once(
    message: Message,
    *,
    queue: str,
    consumer: str,
    using: str,
    work: Callable[[], str | None],
) -> tuple[bool, str | None]:
    """Run ``work`` in a transaction on ``using`` whose first write records ``message``
    in the inbox of ``consumer``, unless the record exists (then skip it, counted).

    Returns:
        ``(True, what work returned)`` when it ran and committed; ``(False, what it
        returned when it ran before)`` when the message was handled already. A string
        ``work`` returns is kept in the row (``InboxEntry.result``): a task's return
        value, so that its result can be written again on a skip.
    """
    from django.db import transaction

    from redisq_django.models import InboxEntry

    with transaction.atomic(using=using):
        row = _record(message, queue, consumer, using)
        if row is not None:
            kept = work()
            if kept is not None:
                InboxEntry.objects.using(using).filter(pk=row).update(result=kept)
            return True, kept
    _skip(message, queue, consumer)  # after the transaction: it waits for no Redis
    rows = InboxEntry.objects.using(using).filter(
        queue=queue, consumer=consumer, message_id=message.id
    )
    return False, rows.values_list("result", flat=True).first()


def inbox_database(handler: Callable[..., Any]) -> str | None:
    """The database whose inbox ``handler`` (made by :func:`atomic_handler`) records in."""
    return getattr(handler, "redisq_inbox", None)


def _record(message: Message, queue: str, consumer: str, using: str) -> int | None:
    """Insert the message's inbox row (a savepoint, so that a duplicate leaves the
    transaction usable): its primary key, or None when it exists (committed by an
    earlier handling)."""
    from django.db import IntegrityError, transaction

    from redisq_django.models import InboxEntry

    try:
        with transaction.atomic(using=using):
            row = InboxEntry.objects.using(using).create(
                queue=queue, consumer=consumer, message_id=message.id
            )
    except IntegrityError:
        return None
    return int(row.pk)


def _skip(message: Message, queue: str, consumer: str) -> None:
    """Count a skip: here, in the trends the admin shows (best effort: Redis may be
    away; the worker's own count, the metric, comes from :data:`DUPLICATE`)."""
    from redisq_django.connection import get_broker

    with _skipped_lock:
        skipped[(queue, consumer)] += 1
    try:
        get_broker().operator.count_skipped(queue, consumer)
    except Exception as exc:  # a chart's counter: never worth failing the delivery
        logger.debug("Could not count the skip in the trends: %s", exc)
    logger.debug(
        "%s/%s: message %s was handled already (the inbox has it); acknowledged without "
        "running the handler again",
        queue,
        consumer,
        message.id,
    )


def retention() -> dt.timedelta:
    """How long inbox rows are kept (``REDISQ['INBOX_RETENTION']``)."""
    from redisq_django.conf import get_settings

    return dt.timedelta(seconds=float(get_settings()["INBOX_RETENTION"]))


def redelivery_horizon(declaration: Any, configured: dict[str, Any]) -> tuple[float, str]:
    """How long after its handler committed a message of ``declaration`` (a
    ``ConsumerDeclaration``) can still be delivered to it again, seconds, and what sets
    it. An inbox row exists only once the handler committed; after that only two things
    deliver the message again: a lost acknowledgement (the lease, ``visibility_timeout``,
    runs out) and a replay of the acknowledged history Redis keeps
    (``REDISQ['REPLAY_WINDOW']``). Retries and dead letters do not count: a failed
    attempt rolled its row back."""
    replay = float(configured["REPLAY_WINDOW"])
    lease = declaration.visibility_timeout
    lease = float(configured["VISIBILITY_TIMEOUT"] if lease is None else lease)
    if lease > replay:
        return lease, "its visibility_timeout"
    return replay, "REDISQ['REPLAY_WINDOW']"


def prune(
    using: str | None = None,
    *,
    older_than: dt.timedelta | None = None,
    rounds: int = PRUNE_ROUNDS,
    batch: int = PRUNE_BATCH,
) -> int:
    """Delete inbox rows older than ``older_than`` (default: the retention), ``batch``
    rows per statement, at most ``rounds`` statements; how many were deleted."""
    from django.db import router
    from django.utils import timezone

    from redisq_django.models import InboxEntry

    using = using or router.db_for_write(InboxEntry)
    cutoff = timezone.now() - (retention() if older_than is None else older_than)
    rows = InboxEntry.objects.using(using)
    deleted = 0
    for _ in range(rounds):
        ids = list(rows.filter(handled_at__lt=cutoff).values_list("pk", flat=True)[:batch])
        if not ids:
            break
        deleted += rows.filter(pk__in=ids).delete()[0]
        if len(ids) < batch:
            break
    return deleted


def count(using: str | None = None, queue: str | None = None) -> dict[tuple[str, str], int]:
    """Inbox rows per (queue, consumer), of ``queue`` only when given."""
    from django.db import router
    from django.db.models import Count

    from redisq_django.models import InboxEntry

    using = using or router.db_for_write(InboxEntry)
    rows = InboxEntry.objects.using(using)
    if queue:
        rows = rows.filter(queue=queue)
    grouped = rows.values("queue", "consumer").annotate(n=Count("pk")).order_by("queue", "consumer")
    return {(g["queue"], g["consumer"]): g["n"] for g in grouped}
