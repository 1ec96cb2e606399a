"""Keeping ``Schedule`` rows in step with the ``periodic`` declarations (both ways).

Each ``runconsumer`` start (and ``migrate``) writes what the code declares: a new
declaration becomes a row; a declaration that changed since it was last written (the
row's ``declaration`` column keeps what code said) is written into the row's columns,
so a deploy applies; an unchanged one leaves the row alone, so what staff changed in the
admin (timing, time zone, enabled, missed ticks) stays. Rows whose declaration is gone
are marked not declared (kept, never run). Writes are retried on lock contention as the
consumer rows' are (:mod:`redisq_django.database`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.db import transaction

from redisq_django.conf import check_queue_known
from redisq_django.database import retry_on_contention
from redisq_django.schedules.declared import ScheduleDeclaration, declarations
from redisq_django.schedules.spec import QueueTarget, ScheduleSpec, target_columns, target_of
from redisq_django.schedules.timing import Missed, ScheduleError, Timing

if TYPE_CHECKING:
    from redisq_django.models import Schedule

logger = logging.getLogger("redisq.sync")


def snapshot(spec: ScheduleSpec) -> dict[str, Any]:
    """What code declares about a schedule, as stored in its row's ``declaration``."""
    return {
        "cron": spec.timing.cron,
        "every_ms": spec.timing.every_ms,
        "timezone": spec.timing.timezone,
        **target_columns(spec.target),
        "missed": spec.missed.value,
        "catch_up_ms": spec.catch_up_ms,
    }


def sync_schedules(decls: list[ScheduleDeclaration] | None = None) -> list[Schedule]:
    """Create or update a ``Schedule`` row per declaration; mark vanished ones.

    Returns:
        The rows of the declarations, in their order.

    Raises:
        SettingsError: a declared queue is not in ``REDISQ["QUEUES"]``.
        OperationalError, IntegrityError: the database stayed locked through every
            attempt (:func:`~redisq_django.database.retry_on_contention`), or failed
            otherwise.
    """
    from redisq_django.models import default_timezone

    decls = declarations() if decls is None else decls
    zone = default_timezone()
    specs = [d.spec(zone) for d in decls]
    for spec in specs:
        if isinstance(spec.target, QueueTarget):
            check_queue_known(spec.target.queue)

    def sync() -> list[Schedule]:
        rows = _rows(specs)
        if _differs(specs, rows):
            with transaction.atomic():
                rows = _write(specs)
        return [rows[s.name] for s in specs]

    return retry_on_contention(sync, what="schedule rows", logger=logger)


def _rows(specs: list[ScheduleSpec]) -> dict[str, Schedule]:
    from redisq_django.models import Schedule

    return {r.name: r for r in Schedule.objects.filter(name__in=[s.name for s in specs])}


def _stale(row: Schedule, spec: ScheduleSpec) -> bool:
    return row.origin != row.Origin.CODE or not row.declared or row.declaration != snapshot(spec)


def _differs(specs: list[ScheduleSpec], rows: dict[str, Schedule]) -> bool:
    """Whether any row needs writing (reads only)."""
    from redisq_django.models import Schedule

    if any(s.name not in rows or _stale(rows[s.name], s) for s in specs):
        return True
    vanished = Schedule.objects.filter(origin=Schedule.Origin.CODE, declared=True)
    return vanished.exclude(name__in=[s.name for s in specs]).exists()


def _write(specs: list[ScheduleSpec]) -> dict[str, Schedule]:
    """Write what differs (in the caller's transaction); returns the rows."""
    from redisq_django.models import Schedule

    rows = _rows(specs)
    for spec in specs:
        row = rows.get(spec.name)
        declared = snapshot(spec)
        if row is None:
            row = rows[spec.name] = Schedule(name=spec.name)
        elif not _stale(row, spec):
            continue
        if row.declaration != declared or row.origin != Schedule.Origin.CODE:
            row.from_spec(spec)  # the code changed (or takes over an admin row): it wins
        row.origin = Schedule.Origin.CODE
        row.declared = True
        row.declaration = declared
        row.save()
        logger.info("Schedule %s written from code", spec.describe())
    vanished = Schedule.objects.filter(origin=Schedule.Origin.CODE, declared=True)
    vanished.exclude(name__in=[s.name for s in specs]).update(declared=False)
    return rows


def spec_from_snapshot(name: str, declared: dict[str, Any]) -> ScheduleSpec:
    """The spec a row's ``declaration`` describes (to reset the row to the code's values).

    Raises:
        ScheduleError: the stored declaration is not valid any more.
    """
    return ScheduleSpec(
        name=name,
        timing=Timing(declared["cron"], declared["every_ms"], declared["timezone"]),
        target=target_of(declared["queue"], declared["task"], declared["payload"]),
        missed=Missed(declared["missed"]),
        catch_up_ms=int(declared["catch_up_ms"]),
    )


def differs_from_code(row: Schedule) -> bool:
    """Whether staff changed a declared schedule in the admin (its columns no longer say
    what the code's declaration says)."""
    if row.origin != row.Origin.CODE or not row.declaration:
        return False
    try:
        return bool(snapshot(row.to_spec()) != row.declaration)
    except (ScheduleError, ValueError):
        return True
