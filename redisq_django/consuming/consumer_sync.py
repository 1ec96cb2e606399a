"""Keeping ``Queue``/``Consumer`` rows in step with the ``@consumer`` declarations.

Every ``runconsumer`` start synchronises the rows, often several processes at the same
moment. Rows are written only when they differ from the code (a restart writes nothing),
and a write that meets another process's lock (SQLite's "database is locked", a
PostgreSQL deadlock) or the row it was about to create is tried again, a bounded number
of times; the next attempt usually finds the rows already written by the other process.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from django.db import transaction

from redisq_django.consuming.declarations import ConsumerDeclaration, declarations
from redisq_django.database import retry_on_contention

if TYPE_CHECKING:
    from redisq_django.models import Consumer

logger = logging.getLogger("redisq.sync")


def _start_text(start: str | dt.datetime) -> str:
    return start.isoformat() if isinstance(start, dt.datetime) else str(start)


def _declared(d: ConsumerDeclaration) -> dict[str, Any]:
    return {
        "handler": d.handler_path,
        "declared": True,
        "start": _start_text(d.start),
        "declared_max_retries": d.max_retries,
        "declared_backoff": d.backoff,
        "declared_max_backoff": d.max_backoff,
        "declared_visibility_timeout": d.visibility_timeout,
        "declared_concurrency": d.concurrency,
        "declared_time_limit": d.time_limit,
        "declared_rate": d.rate or "",
        "declared_burst": d.burst,
        "declared_rate_per_key": d.rate_per_key or "",
        "declared_atomic": d.atomic or "",
        "declared_max_in_flight": d.max_in_flight,
    }


def sync_declarations(decls: list[ConsumerDeclaration] | None = None) -> list[Consumer]:
    """Create or update a ``Consumer`` row (and its ``Queue``) per declaration.

    Declared values are written to the ``declared_*`` columns; admin overrides, pause
    and enable flags are left alone. Rows whose declaration disappeared are marked
    ``declared=False`` (kept for their history and overrides, never run). Nothing is
    written when the rows already say what the code says.

    Returns:
        The ``Consumer`` rows of the declarations, in their order.

    Raises:
        OperationalError, IntegrityError: the database stayed locked (or contended)
            through every attempt (:func:`~redisq_django.database.retry_on_contention`),
            or failed otherwise.
    """
    decls = declarations() if decls is None else decls

    def sync() -> list[Consumer]:
        rows = _rows(decls)
        if _differs(decls, rows):
            with transaction.atomic():
                rows = _write(decls)
        return [rows[d.key] for d in decls]

    return retry_on_contention(sync, what="consumer rows", logger=logger)


def _rows(decls: list[ConsumerDeclaration]) -> dict[tuple[str, str], Consumer]:
    from redisq_django.models import Consumer

    rows = Consumer.objects.select_related("queue").filter(
        queue__name__in={d.queue for d in decls}, name__in={d.name for d in decls}
    )
    return {(r.queue.name, r.name): r for r in rows}


def _changed(row: Consumer, d: ConsumerDeclaration) -> dict[str, Any]:
    return {k: v for k, v in _declared(d).items() if getattr(row, k) != v}


def _differs(decls: list[ConsumerDeclaration], rows: dict[tuple[str, str], Consumer]) -> bool:
    """Whether any row needs writing (reads only: takes no write lock)."""
    from redisq_django.models import Consumer

    if any(d.key not in rows or _changed(rows[d.key], d) for d in decls):
        return True
    wanted = [rows[d.key].pk for d in decls]
    return Consumer.objects.exclude(pk__in=wanted).filter(declared=True).exists()


def _write(decls: list[ConsumerDeclaration]) -> dict[tuple[str, str], Consumer]:
    """Write what differs (in the caller's transaction); returns the rows."""
    from redisq_django.models import Consumer, Queue

    rows = _rows(decls)
    for d in decls:
        row = rows.get(d.key)
        if row is None:
            queue, _ = Queue.objects.get_or_create(name=d.queue)
            rows[d.key] = Consumer.objects.create(queue=queue, name=d.name, **_declared(d))
        elif changed := _changed(row, d):
            for field, value in changed.items():
                setattr(row, field, value)
            row.save(update_fields=[*changed, "updated_at"])
    wanted = [rows[d.key].pk for d in decls]
    Consumer.objects.exclude(pk__in=wanted).filter(declared=True).update(declared=False)
    return rows
