"""Keeping ``Queue``/``Consumer`` rows in step with the ``@consumer`` declarations."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction

from redisq_django.consuming.registry import Declaration, declarations


def _start_text(start: str | dt.datetime) -> str:
    return start.isoformat() if isinstance(start, dt.datetime) else str(start)


@transaction.atomic
def sync_declarations(decls: list[Declaration] | None = None) -> list[Any]:
    """Create or update a ``Consumer`` row (and its ``Queue``) per declaration.

    Declared values are written to the ``declared_*`` columns; admin overrides, pause
    and enable flags are left alone. Rows whose declaration disappeared are marked
    ``declared=False`` (kept for their history and overrides, never run).

    Returns:
        The ``Consumer`` rows of the declarations.
    """
    from redisq_django.models import Consumer, Queue

    decls = declarations() if decls is None else decls
    rows = []
    for d in decls:
        queue, _ = Queue.objects.get_or_create(name=d.queue)
        row, _ = Consumer.objects.update_or_create(
            queue=queue,
            name=d.name,
            defaults={
                "handler": d.handler_path,
                "declared": True,
                "start": _start_text(d.start),
                "declared_max_retries": d.max_retries,
                "declared_backoff": d.backoff,
                "declared_max_backoff": d.max_backoff,
                "declared_visibility_timeout": d.visibility_timeout,
                "declared_concurrency": d.concurrency,
            },
        )
        rows.append(row)
    declared_ids = [r.pk for r in rows]
    Consumer.objects.exclude(pk__in=declared_ids).filter(declared=True).update(declared=False)
    return rows
