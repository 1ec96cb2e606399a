"""The transactional outbox: messages stored with the data, relayed to Redis after.

``publish_on_commit`` (and model events) write an :class:`OutboxMessage` row in the
caller's transaction when ``REDISQ['OUTBOX']`` covers the queue. After the commit the
row is sent at once; rows that could not be sent (Redis down, a crash) are sent by the
relay, which runs inside every ``runconsumer`` and as ``manage.py redisq relay``.
Concurrent relays never send a row twice: rows are locked with
``SELECT ... FOR UPDATE SKIP LOCKED`` where the database supports it, and claimed
with a single conditional ``UPDATE`` elsewhere (SQLite). The message id is fixed in
the row and Redis remembers which ids were published, so a relay that crashes between
publishing and marking the row sent does not publish it twice.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid

from django.db import connections, router, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from redisq_django.conf import get_settings
from redisq_django.connection import get_broker
from redisq_django.core.clock import datetime_to_ms, ms_to_datetime
from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import RedisqError
from redisq_django.models import OutboxMessage

logger = logging.getLogger("redisq.outbox")

#: A claim older than this is taken over (its relay crashed), seconds.
CLAIM_TIMEOUT_S = 60.0
#: Rows sent per relay round.
RELAY_BATCH = 100


def store(envelope: Envelope, *, using: str | None = None) -> OutboxMessage:
    """Write an outbox row for ``envelope`` (which has an id of its own) in the current
    transaction of ``using``."""
    if envelope.id is None:
        raise ValueError("An outbox message needs a message id of its own.")
    return OutboxMessage.objects.using(using or router.db_for_write(OutboxMessage)).create(
        queue=envelope.queue,
        message_id=envelope.id,
        payload=envelope.payload_json.decode("utf-8"),
        headers=(envelope.headers_json or b"").decode("utf-8"),
        due_at=ms_to_datetime(envelope.due_at_ms) if envelope.due_at_ms else None,
        key=envelope.key or "",
    )


def envelope_of(row: OutboxMessage) -> Envelope:
    """The message an outbox row holds, published at the row's creation time, due at
    the row's due time (one already passed too: Redis's clock, not this host's, says
    whether it has), with its ordering key."""
    due = datetime_to_ms(row.due_at) if row.due_at is not None else None
    return Envelope(
        queue=row.queue,
        id=row.message_id,
        payload_json=row.payload.encode("utf-8"),
        headers_json=row.headers.encode("utf-8") or None,
        published_at_ms=datetime_to_ms(row.created_at),
        due_at_ms=due,
        key=row.key or None,
    )


def _unsent(using: str) -> QuerySet[OutboxMessage]:
    stale = timezone.now() - dt.timedelta(seconds=CLAIM_TIMEOUT_S)
    return (
        OutboxMessage.objects.using(using)
        .filter(sent_at__isnull=True)
        .filter(Q(claimed_at__isnull=True) | Q(claimed_at__lt=stale))
        .order_by("id")
    )


def _send(rows: list[OutboxMessage], using: str) -> int:
    """Publish rows at most once each, in one round trip per queue; mark them sent.

    Returns:
        How many were sent (all, or none when Redis refused: they are retried later,
        and those that did reach Redis are then no-ops thanks to publish-once).
    """
    if not rows:
        return 0
    pks = [row.pk for row in rows]
    error: BaseException | None = None
    try:
        get_broker().send([envelope_of(row) for row in rows], once=True)
    except RedisqError as exc:
        error = exc
        logger.warning("Outbox relay: %s; %d message(s) will be sent later", exc, len(rows))
    except BaseException as exc:  # unexpected: the caller logs it
        error = exc
        raise
    finally:
        # Release the claims whatever happened, so the next relay need not wait for
        # CLAIM_TIMEOUT_S; the rows stay unsent unless Redis took them.
        unsent = OutboxMessage.objects.using(using).filter(pk__in=pks)
        if error is None:
            unsent.update(sent_at=timezone.now(), claimed_at=None, claimed_by="")
        else:
            unsent.update(
                attempts=F("attempts") + 1,
                last_error=str(error)[:2000] or type(error).__name__,
                claimed_at=None,
                claimed_by="",
            )
    return 0 if error is not None else len(rows)


def relay_rows(
    pks: list[int] | None = None, *, using: str | None = None, batch: int = RELAY_BATCH
) -> int:
    """Send unsent outbox rows (``pks`` only, or the oldest ``batch``) to Redis.

    Returns:
        How many rows were sent.
    """
    using = using or router.db_for_write(OutboxMessage)
    candidates = _unsent(using)
    if pks is not None:
        candidates = candidates.filter(pk__in=pks)
    if connections[using].features.has_select_for_update_skip_locked:
        with transaction.atomic(using=using):
            rows = list(candidates.select_for_update(skip_locked=True)[:batch])
            return _send(rows, using)
    # No row locks (SQLite): claim rows with one conditional UPDATE, which the database
    # serialises, so two relays never claim the same row.
    token = uuid.uuid4().hex
    ids = list(candidates.values_list("pk", flat=True)[:batch])
    claimed = candidates.filter(pk__in=ids).update(claimed_by=token, claimed_at=timezone.now())
    if not claimed:
        return 0
    rows = list(
        OutboxMessage.objects.using(using)
        .filter(claimed_by=token, sent_at__isnull=True)
        .order_by("id")
    )
    return _send(rows, using)


def relay_once(*, using: str | None = None, rounds: int = 20) -> int:
    """Send what is waiting (bounded by ``rounds`` batches), then delete old sent rows.

    Returns:
        How many rows were sent.
    """
    using = using or router.db_for_write(OutboxMessage)
    total = 0
    for _ in range(rounds):
        sent = relay_rows(using=using)
        total += sent
        if sent < RELAY_BATCH:
            break
    keep = dt.timedelta(seconds=get_settings()["OUTBOX_RETENTION"])
    OutboxMessage.objects.using(using).filter(sent_at__lt=timezone.now() - keep).delete()
    return total


def pending_count(using: str | None = None) -> int:
    """Outbox rows not yet sent."""
    using = using or router.db_for_write(OutboxMessage)
    return OutboxMessage.objects.using(using).filter(sent_at__isnull=True).count()
