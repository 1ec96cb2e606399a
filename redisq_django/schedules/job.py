"""The schedules as a housekeeping job of every ``runconsumer`` (no beat process): the
``Schedule`` rows read every 2 s, each due tick fired once, its run written back."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import close_old_connections
from django.db.models import Q

from redisq_django.core.broker import Broker
from redisq_django.core.clock import ms_to_datetime
from redisq_django.core.worker import Every
from redisq_django.schedules.scheduler import Fired, Scheduler
from redisq_django.schedules.spec import ScheduleSpec
from redisq_django.schedules.targets import firer
from redisq_django.schedules.timing import ScheduleError

logger = logging.getLogger("redisq.schedules")


class RowLoader:
    """Reads the ``Schedule`` rows as specs; an invalid row (a bad cron typed in the
    shell, a time zone the host lacks) is logged once per problem and left out."""

    def __init__(self) -> None:
        self._reported: set[tuple[str, str]] = set()

    def __call__(self) -> list[ScheduleSpec]:
        from redisq_django.models import Schedule

        specs = []
        for row in Schedule.objects.all():
            try:
                specs.append(row.to_spec())
            except (ScheduleError, ValueError) as exc:
                if (row.name, str(exc)) not in self._reported:
                    self._reported.add((row.name, str(exc)))
                    logger.error("Schedule %s is not run: %s", row.name, exc)
        return specs


def record_run(spec: ScheduleSpec, fired: Fired) -> None:
    """Write a tick's run into its row (only ever forwards: a late writer changes
    nothing), with the next tick for the admin."""
    from redisq_django.models import Schedule

    tick = ms_to_datetime(fired.tick_ms)
    upcoming = spec.timing.next_after(fired.tick_ms)
    Schedule.objects.filter(name=spec.name).filter(
        Q(last_run_at__isnull=True) | Q(last_run_at__lt=tick)
    ).update(
        last_run_at=tick,
        next_run_at=ms_to_datetime(upcoming) if upcoming is not None else None,
        last_message_id=fired.message_id,
    )


def build_scheduler(broker: Broker, *, clock: Callable[[], int] | None = None) -> Scheduler:
    """A scheduler of the ``Schedule`` rows publishing through ``broker``."""
    return Scheduler(
        broker.schedule_ledger, RowLoader(), firer(broker), record=record_run, clock=clock
    )


def schedule_job(broker: Broker) -> Every:
    """The worker's ``schedules`` job: evaluated about every second, more often when a
    tick is near (within 0.05 s of it)."""
    scheduler = build_scheduler(broker)

    def run() -> object:
        close_old_connections()
        try:
            return scheduler.evaluate()
        finally:
            close_old_connections()

    return Every("schedules", scheduler.seconds_to_next, run)
