"""Periodic schedules as rows the admin edits (declared in code, synchronised both ways)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone as django_timezone
from django.utils.translation import gettext_lazy as _

from redisq_django.core.clock import datetime_to_ms, ms_to_datetime
from redisq_django.schedules.spec import ScheduleSpec, target_columns, target_of
from redisq_django.schedules.timing import Missed, ScheduleError, Timing, every_to_ms

#: Settings a consumer row can override: (field, declared field, default from config).


def default_timezone() -> str:
    """A new schedule's time zone: the project's ``TIME_ZONE``."""
    return str(settings.TIME_ZONE or "UTC")


class Schedule(models.Model):
    """A periodic schedule: declared in code (``periodic``) or added in the admin; how
    both ways stay in step: ``redisq_django.schedules.schedule_sync``. Workers read it every 2 s."""

    class Origin(models.TextChoices):
        """Who created the row: the code's ``periodic`` or staff in the admin."""

        CODE = "code", _("code")
        ADMIN = "admin", _("admin")

    name = models.CharField(_("name"), max_length=100, unique=True)
    origin = models.CharField(
        _("origin"), max_length=8, choices=Origin.choices, default=Origin.ADMIN, editable=False
    )
    declared = models.BooleanField(
        _("declared in code"),
        default=True,
        editable=False,
        help_text=_("False when the code no longer declares it; it is then not run."),
    )
    declaration = models.JSONField(_("code's declaration"), null=True, editable=False)
    cron = models.CharField(
        _("cron"), max_length=200, blank=True, help_text=_("e.g. */5 * * * * (or use an interval)")
    )
    every = models.DurationField(
        _("interval"), null=True, blank=True, help_text=_("e.g. 00:05:00 (or use a cron)")
    )
    timezone = models.CharField(
        _("time zone"), max_length=64, default=default_timezone, help_text=_("Of the cron.")
    )
    queue = models.CharField(_("queue"), max_length=100, blank=True)
    task = models.CharField(
        _("task"), max_length=300, blank=True, help_text=_("Dotted path of a @task function.")
    )
    payload = models.JSONField(
        _("payload"),
        null=True,
        blank=True,
        help_text=_('The message (queue), or {"args": [...], "kwargs": {...}} (task).'),
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    missed = models.CharField(
        _("missed ticks"),
        max_length=8,
        choices=[(m.value, m.value) for m in Missed],
        default=Missed.LATEST.value,
        help_text=_(
            "After downtime: latest = the last missed tick once; skip = none later "
            "than the catch-up bound; all = each within the catch-up bound."
        ),
    )
    catch_up = models.DurationField(_("catch-up bound"), default=dt.timedelta(seconds=60))
    since = models.DateTimeField(_("ticking since"), default=django_timezone.now, editable=False)
    last_run_at = models.DateTimeField(_("last run"), null=True, editable=False)
    # A snapshot at the last save or fire, stale after downtime: the admin, the banner and
    # ``manage.py redisq schedules`` compute the next tick when shown (schedules.listing).
    next_run_at = models.DateTimeField(_("next run"), null=True, editable=False)
    last_message_id = models.CharField(
        _("last message id"), max_length=64, blank=True, editable=False
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")

    def __str__(self) -> str:
        return self.name

    @classmethod
    def from_db(  # remembers the timing read, for save()
        cls, db: str | None, field_names: Collection[str], values: Collection[Any], **kwargs: Any
    ) -> Schedule:
        row = super().from_db(db, field_names, values, **kwargs)
        row._loaded = row._timing_state()
        return row

    def _timing_state(self) -> tuple[Any, ...]:
        return (self.cron, self.every, self.timezone, self.enabled)

    def timing(self) -> Timing:
        """When it ticks. Raises ``ScheduleError`` when the columns are invalid."""
        every = every_to_ms(self.every) if self.every is not None else None
        return Timing(self.cron or None, every, self.timezone)

    def to_spec(self) -> ScheduleSpec:
        """The runtime description workers use. Raises ``ScheduleError`` when invalid."""
        return ScheduleSpec(
            name=self.name,
            timing=self.timing(),
            target=target_of(self.queue, self.task, self.payload),
            missed=Missed(self.missed),
            catch_up_ms=self.catch_up // dt.timedelta(milliseconds=1),
            enabled=self.enabled and (self.declared or self.origin == self.Origin.ADMIN),
            since_ms=datetime_to_ms(self.since),
            last_run_ms=datetime_to_ms(self.last_run_at) if self.last_run_at else 0,
        )

    def from_spec(self, spec: ScheduleSpec) -> None:
        """Set timing, target and catch-up columns from ``spec`` (not saved)."""
        self.cron = spec.timing.cron or ""
        every_ms = spec.timing.every_ms
        self.every = dt.timedelta(milliseconds=every_ms) if every_ms is not None else None
        self.timezone = spec.timing.timezone
        for column, value in target_columns(spec.target).items():
            setattr(self, column, value)
        self.missed = spec.missed.value
        self.catch_up = dt.timedelta(milliseconds=spec.catch_up_ms)

    def compute_next_run(self, now: dt.datetime) -> dt.datetime | None:
        """The first tick after ``now`` it would fire (None: disabled or invalid)."""
        try:
            tick = self.timing().next_after(datetime_to_ms(max(now, self.since)))
        except ScheduleError:
            return None
        return ms_to_datetime(tick) if tick is not None and self.enabled else None

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save; a new timing, time zone or re-enabling restarts the ticks from now (the
        ticks of a time it was off or timed otherwise are not "missed")."""
        now = django_timezone.now()
        loaded = getattr(self, "_loaded", None)
        state = self._timing_state()
        if loaded is not None and loaded != state and (loaded[:3] != state[:3] or self.enabled):
            self.since = now
        self.next_run_at = self.compute_next_run(now)
        if kwargs.get("update_fields") is not None:
            kwargs["update_fields"] = {*kwargs["update_fields"], "since", "next_run_at"}
        super().save(*args, **kwargs)
        self._loaded = state
