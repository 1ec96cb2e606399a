"""The dead-letter sink: moving dead letters from Redis into database rows (retry and
discard are :mod:`redisq_django.deadletters.triage`'s).

A logical consumer's dead letters first land in its Redis ``dead`` stream. The sink
(run by every ``runconsumer`` and by ``manage.py redisq dead sink``) moves them into
:class:`~redisq_django.models.DeadLetter` rows and only then deletes them from Redis,
upserting on (queue, consumer, message id), and records each death as a
:class:`~redisq_django.models.DeadLetterFailure` keyed by its dead-stream entry: a
message that dies again adds a failure instead of overwriting the first; if the
database is down they stay in Redis and move on the next round; running the sink twice
creates no duplicates.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from typing import Any

from django.db import InterfaceError, OperationalError, transaction

from redisq_django.connection import get_broker
from redisq_django.core.dead_entry import DeadEntry, normalise_error
from redisq_django.core.envelope import CARRIED_FIELDS, MAX_ID_LENGTH, describe_raw
from redisq_django.core.errors import RedisUnavailable
from redisq_django.core.keys import readable_names
from redisq_django.core.tasks import task_of
from redisq_django.models import DeadLetter, DeadLetterFailure

logger = logging.getLogger("redisq.deadletters")

#: Dead letters moved per consumer and round.
SINK_BATCH = 200


def _text(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")


def _row_values(d: DeadEntry) -> dict[str, Any]:
    raw_payload = d.fields.get(b"payload")
    payload = _text(raw_payload) if raw_payload is not None else _text(d.fields.get(b"raw", b""))
    return {
        "payload": payload,
        "headers": _text(d.fields.get(b"headers", b"{}")),
        "envelope": {_text(k): _text(v) for k, v in d.fields.items() if k in CARRIED_FIELDS},
        "attempts": d.attempts,
        "reason": d.reason,
        "error_class": d.error_class[:200],
        "error_message": d.error_message,
        "error_key": normalise_error(d.error_message),
        "task": task_of(d.consumer, d.payload),
        "traceback": d.traceback,
        "published_at": d.published_at,
        "first_failed_at": d.first_failed_at,
        "last_failed_at": d.last_failed_at,
        "status": DeadLetter.Status.DEAD,
        "partition": d.partition,
    }


#: Database errors about the connection rather than one row: the sink stops, and the
#: dead letters wait in Redis for the next round.
_DATABASE_DOWN = (OperationalError, InterfaceError)


def sink(queue: str, consumer: str, *, batch: int = SINK_BATCH) -> int:
    """Move up to ``batch`` dead letters of ``consumer`` from Redis into rows (up to
    ``batch`` from each partition of a partitioned queue, each row recording its
    partition so that a retry sends it back there).

    Each entry is stored in a savepoint of its own: one the database refuses is stored
    as a bare record of its raw fields instead (or, if even that fails, logged and left
    in Redis), and never keeps the others from their rows.

    Returns:
        How many were moved.

    Raises:
        OperationalError, InterfaceError: the database is unreachable; nothing was deleted
            from Redis (of the partition it met; earlier partitions' stay moved).
    """
    broker = get_broker()
    moved = 0
    for place in broker.partitions.places(queue):
        letters = broker.dead_letters.read(place, consumer, count=batch)
        if not letters:
            continue
        with transaction.atomic():
            stored = [d.entry_id for d in letters if _store(queue, consumer, d)]
        # Only after the rows are committed: a crash in between leaves them in Redis, and
        # the next round updates the same rows.
        broker.dead_letters.delete(place, consumer, stored)
        moved += len(stored)
    return moved


def row_message_id(message_id: str) -> str:
    """The id a dead letter's row is stored under: the message id itself, or, for one
    longer than the column (left by an older version or another client; undecodable
    since), its first 47 characters, ``~`` and 16 hex digits of its SHA-256, so that two
    ids never share a row. The full id stays in the row's ``envelope``."""
    if len(message_id) <= MAX_ID_LENGTH:
        return message_id
    digest = hashlib.sha256(message_id.encode("utf-8", "backslashreplace")).hexdigest()
    return f"{message_id[: MAX_ID_LENGTH - 17]}~{digest[:16]}"


def _store(queue: str, consumer: str, d: DeadEntry) -> bool:
    """Upsert ``d``'s row (or a bare record of it) and record this death; False when
    neither could be stored."""
    for values in (_row_values, _bare_values):
        try:
            with transaction.atomic():
                _upsert(queue, consumer, d, values(d))
            return True
        except _DATABASE_DOWN:
            raise
        except Exception:
            logger.exception(
                "Dead letter %r (entry %s of %s/%s) could not be stored%s",
                d.id[:200],
                d.entry_id,
                queue,
                consumer,
                " with its details" if values is _row_values else "; it stays in Redis",
            )
    return False


def _upsert(queue: str, consumer: str, d: DeadEntry, values: dict[str, Any]) -> None:
    """The row shows the latest death (its first failure time is the earliest seen);
    each death, keyed by its dead-stream entry, is added once to its failures."""
    this_first = values["first_failed_at"]
    row, created = DeadLetter.objects.get_or_create(
        queue=queue, consumer=consumer, message_id=row_message_id(d.id), defaults=values
    )
    if not created:
        if row.failures.filter(entry_id=d.entry_id).exists():
            return  # stored before a crash kept it in Redis: this death is known
        if row.first_failed_at and (this_first is None or row.first_failed_at < this_first):
            values["first_failed_at"] = row.first_failed_at
        for field, value in values.items():
            setattr(row, field, value)
        row.deaths += 1
        row.save()
    DeadLetterFailure.objects.create(
        dead_letter=row,
        entry_id=d.entry_id,
        reason=values["reason"],
        attempts=values["attempts"],
        error_class=values["error_class"],
        error_message=values["error_message"],
        traceback=values["traceback"],
        first_failed_at=this_first,
        failed_at=values["last_failed_at"],
    )


def _bare_values(d: DeadEntry) -> dict[str, Any]:
    """A row that keeps what the entry held as text, for one the database refused."""
    return {
        "payload": _text(describe_raw(d.fields)),
        "headers": "{}",
        "envelope": {},
        "attempts": d.attempts,
        "reason": d.reason[:32],
        "error_class": d.error_class[:200],
        "error_message": "The database refused this dead letter's details; the payload "
        "field holds the entry's raw fields.",
        "error_key": "The database refused this dead letter's details",
        "traceback": "",
        "published_at": None,
        "first_failed_at": None,
        "last_failed_at": None,
        "status": DeadLetter.Status.DEAD,
        "partition": d.partition,
    }


def sink_all(pairs: Iterable[tuple[str, str]] | None = None) -> int:
    """Run :func:`sink` for ``(queue, consumer)`` pairs (default: every consumer known to
    Redis), until each is empty or has moved 10 batches. A consumer whose sink fails is
    logged and the others still run; the first such error is raised at the end.

    Returns:
        How many were moved.
    """
    broker = get_broker()
    if pairs is None:
        # A registry member that is no queue name (another client's) is no queue to sink.
        queues, _ = readable_names(broker.queues())
        pairs = [(q, c) for q in queues for c in broker.consumers.names(q)]
    moved = 0
    failed: Exception | None = None
    for queue, consumer in pairs:
        try:
            for _ in range(10):
                n = sink(queue, consumer)
                moved += n
                if n < SINK_BATCH:
                    break
        except (*_DATABASE_DOWN, RedisUnavailable):
            raise  # every other consumer would fail the same way (the caller says it once)
        except Exception as exc:
            logger.exception("Dead letters of %s/%s could not be sunk", queue, consumer)
            failed = failed or exc
    if failed is not None:
        raise failed
    return moved
