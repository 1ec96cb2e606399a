"""Database mirrors of the queue configuration: ``Queue`` and ``Consumer`` rows.

Code declares consumers (``@consumer``); :func:`redisq_django.sync.sync_declarations`
writes what code says into the ``declared_*`` columns. Staff may override some values
in the admin (the nullable columns without prefix). The effective value is the
override when set, else the declared value, else the ``REDISQ`` default, and the
admin and ``runconsumer``'s banner both say which one applies.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone as django_timezone
from django.utils.translation import gettext_lazy as _

from redisq_django.core.clock import datetime_to_ms, ms_to_datetime
from redisq_django.core.config import CoreConfig
from redisq_django.core.handler import ConsumerSpec, Handler
from redisq_django.core.retry import RetryPolicy
from redisq_django.schedules.spec import ScheduleSpec, target_columns, target_of
from redisq_django.schedules.timing import Missed, ScheduleError, Timing, every_to_ms

#: Settings a consumer row can override: (field, declared field, default from config).
TUNABLES = ("max_retries", "backoff", "max_backoff", "visibility_timeout", "concurrency")

SOURCE_OVERRIDE = "admin override"
SOURCE_CODE = "code"
SOURCE_DEFAULT = "settings"


class Queue(models.Model):
    """A queue; pausing it pauses all its consumers."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    paused = models.BooleanField(
        _("paused"), default=False, help_text=_("No consumer of this queue fetches messages.")
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = _("queue")
        verbose_name_plural = _("queues")

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Effective:
    """An effective setting, where it comes from, and why an override was ignored."""

    value: Any
    source: str
    note: str = ""

    def __str__(self) -> str:
        note = f"; {self.note}" if self.note else ""
        return f"{self.value} ({self.source}{note})"


def override_problem(field: str, value: Any) -> str:
    """Why ``value`` is not a valid override of tunable ``field`` ("" when it is).

    The admin form refuses such a value; a worker that finds one in the database anyway
    (written before this check, or by other means) ignores it and says so.
    """
    if value is None:
        return ""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return f"{field} must be a number"
    if number != number or number in (float("inf"), float("-inf")):
        return f"{field} must be a finite number"
    if field == "concurrency" and number < 1:
        return "concurrency must be at least 1 (0 would run no handler at all)"
    if field == "visibility_timeout" and number < 1:
        return "visibility timeout must be at least 1 second"
    if number < 0:
        return f"{field.replace('_', ' ')} must not be negative"
    return ""


class Consumer(models.Model):
    """A logical consumer of a queue: what code declared, and what staff changed."""

    queue = models.ForeignKey(
        Queue, on_delete=models.CASCADE, related_name="consumers", verbose_name=_("queue")
    )
    name = models.CharField(_("name"), max_length=100)
    handler = models.CharField(_("handler"), max_length=300, help_text=_("Declared in code."))
    declared = models.BooleanField(
        _("declared in code"),
        default=True,
        help_text=_("False when the code no longer declares it; it is then not run."),
    )
    enabled = models.BooleanField(
        _("enabled"), default=True, help_text=_("Disabled consumers are not run at all.")
    )
    paused = models.BooleanField(
        _("paused"),
        default=False,
        help_text=_("Running workers stop fetching within seconds; messages wait in Redis."),
    )
    start = models.CharField(_("start point"), max_length=64, default="latest")

    declared_max_retries = models.PositiveIntegerField(null=True, editable=False)
    declared_backoff = models.FloatField(null=True, editable=False)
    declared_max_backoff = models.FloatField(null=True, editable=False)
    declared_visibility_timeout = models.FloatField(null=True, editable=False)
    declared_concurrency = models.PositiveIntegerField(default=1, editable=False)

    _empty = _("Empty: the value declared in code (or the REDISQ default) applies.")
    max_retries = models.PositiveIntegerField(
        _("max retries override"), null=True, blank=True, help_text=_empty
    )
    backoff = models.FloatField(_("backoff override (s)"), null=True, blank=True, help_text=_empty)
    max_backoff = models.FloatField(
        _("max backoff override (s)"), null=True, blank=True, help_text=_empty
    )
    visibility_timeout = models.FloatField(
        _("visibility timeout override (s)"), null=True, blank=True, help_text=_empty
    )
    concurrency = models.PositiveIntegerField(
        _("concurrency override"), null=True, blank=True, help_text=_empty
    )
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["queue__name", "name"]
        constraints = [
            models.UniqueConstraint(fields=["queue", "name"], name="redisq_consumer_unique")
        ]
        verbose_name = _("consumer")
        verbose_name_plural = _("consumers")

    def __str__(self) -> str:
        return f"{self.queue.name}/{self.name}"

    def effective(self, field: str, config: CoreConfig) -> Effective:
        """The value of tunable ``field`` that applies, and its source."""
        return self.effective_all(config)[field]

    def _fallback(self, field: str, config: CoreConfig) -> Effective:
        declared = getattr(self, f"declared_{field}")
        if declared is not None:
            return Effective(declared, SOURCE_CODE)
        return Effective(config.retry.to_seconds()[field], SOURCE_DEFAULT)

    def effective_all(self, config: CoreConfig) -> dict[str, Effective]:
        """Every tunable's effective value: the override when it is valid, else the
        code's value, else the ``REDISQ`` default. An invalid override (see
        :func:`override_problem`, and a max backoff below the backoff) is ignored, and
        its :attr:`Effective.note` says so."""
        out: dict[str, Effective] = {}
        for field in TUNABLES:
            override = getattr(self, field)
            problem = override_problem(field, override)
            if override is None:
                out[field] = self._fallback(field, config)
            elif problem:
                base = self._fallback(field, config)
                out[field] = Effective(
                    base.value, base.source, f"override {override} ignored: {problem}"
                )
            else:
                out[field] = Effective(override, SOURCE_OVERRIDE)
        for field in ("max_backoff", "backoff"):  # the cap first: it is the usual typo
            low = out["max_backoff"].value < out["backoff"].value
            if low and out[field].source == SOURCE_OVERRIDE:
                base = self._fallback(field, config)
                out[field] = Effective(
                    base.value,
                    base.source,
                    f"override {getattr(self, field)} ignored: max backoff must be at least "
                    "the backoff",
                )
        return out

    def clean(self) -> None:
        """Refuse invalid overrides (the admin form calls it): concurrency ≥ 1,
        backoff ≥ 0, max backoff ≥ 0 and ≥ the backoff that applies, visibility
        timeout ≥ 1 s, max retries ≥ 0."""
        errors = {f: p for f in TUNABLES if (p := override_problem(f, getattr(self, f)))}
        if not errors and (self.backoff is not None or self.max_backoff is not None):
            from redisq_django.conf import get_core_config

            config = get_core_config()
            backoff = (
                self.backoff
                if self.backoff is not None
                else self._fallback("backoff", config).value
            )
            cap = (
                self.max_backoff
                if self.max_backoff is not None
                else self._fallback("max_backoff", config).value
            )
            if cap < backoff:
                field = "max_backoff" if self.max_backoff is not None else "backoff"
                errors[field] = f"max backoff ({cap} s) must be at least the backoff ({backoff} s)"
        if errors:
            raise ValidationError(errors)

    def to_spec(self, handler: Handler, config: CoreConfig) -> ConsumerSpec:
        """The runtime description the worker uses (effective values)."""
        value = {f: e.value for f, e in self.effective_all(config).items()}
        return ConsumerSpec(
            queue=self.queue.name,
            name=self.name,
            handler=handler,
            policy=RetryPolicy.from_seconds(
                max_retries=value["max_retries"],
                backoff=value["backoff"],
                max_backoff=value["max_backoff"],
                visibility_timeout=value["visibility_timeout"],
            ),
            concurrency=int(value["concurrency"]),
            start=self.start,
            paused=self.paused or self.queue.paused,
            enabled=self.enabled and self.declared,
        )


class Overview(Queue):
    """Proxy that puts the live overview page on the admin index."""

    class Meta:
        proxy = True
        verbose_name = _("overview (live)")
        verbose_name_plural = _("overview (live)")


class TaskResults(Queue):
    """Proxy that puts the results of Django tasks (``redisq_django.tasks``, kept in
    Redis) on the admin index; the page reads them from Redis, never from this table."""

    class Meta:
        proxy = True
        verbose_name = _("task result")
        verbose_name_plural = _("task results")


class DeadLetter(models.Model):
    """A message a logical consumer gave up on, moved here from Redis by the sink.

    One row per (queue, consumer, message id), showing its latest death; every death is
    kept as a :class:`DeadLetterFailure` (a message that dies again after a retry adds
    one, ``deaths`` counts them, ``retry_count`` counts the retries).
    """

    class Status(models.TextChoices):
        """Where a dead letter stands: still dead, sent again, or set aside."""

        DEAD = "dead", _("dead")
        RETRIED = "retried", _("retried")
        DISCARDED = "discarded", _("discarded")

    queue = models.CharField(_("queue"), max_length=100, db_index=True)
    consumer = models.CharField(_("consumer"), max_length=100, db_index=True)
    message_id = models.CharField(_("message id"), max_length=64)
    payload = models.TextField(_("payload (JSON)"))
    headers = models.TextField(_("headers (JSON)"), blank=True, default="{}")
    envelope = models.JSONField(
        _("envelope"), default=dict, help_text=_("The fields re-sent on retry.")
    )
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    reason = models.CharField(_("reason"), max_length=32)
    error_class = models.CharField(_("error class"), max_length=200, db_index=True, blank=True)
    error_message = models.TextField(_("error message"), blank=True)
    traceback = models.TextField(_("traceback"), blank=True)
    published_at = models.DateTimeField(_("published"), null=True)
    first_failed_at = models.DateTimeField(_("first failure"), null=True)
    last_failed_at = models.DateTimeField(_("last failure"), null=True, db_index=True)
    status = models.CharField(
        _("status"), max_length=16, choices=Status.choices, default=Status.DEAD, db_index=True
    )
    error_key = models.CharField(
        _("error (normalised)"),
        max_length=200,
        blank=True,
        default="",
        help_text=_("The error message with numbers, ids and times replaced: the grouping key."),
    )
    deaths = models.PositiveIntegerField(
        _("deaths"), default=1, help_text=_("How many times this message died.")
    )
    retry_count = models.PositiveIntegerField(_("times retried"), default=0)
    retried_at = models.DateTimeField(_("last retried"), null=True, blank=True)
    retried_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        verbose_name=_("last retried by"),
    )
    created_at = models.DateTimeField(_("stored"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated"), auto_now=True)

    class Meta:
        ordering = ["-last_failed_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "consumer", "message_id"], name="redisq_deadletter_unique"
            )
        ]
        indexes = [
            models.Index(
                fields=["status", "queue", "consumer", "error_class", "error_key"],
                name="redisq_deadletter_group",
            )
        ]
        permissions = [("retry_deadletter", "Can retry or discard dead letters")]
        verbose_name = _("dead letter")
        verbose_name_plural = _("dead letters")

    def __str__(self) -> str:
        return f"{self.queue}/{self.consumer} {self.message_id}"


class DeadLetterFailure(models.Model):
    """One death of a dead letter, as the sink found it: never overwritten, so a message
    that died, was retried and died again keeps both failures."""

    dead_letter = models.ForeignKey(
        DeadLetter,
        on_delete=models.CASCADE,
        related_name="failures",
        verbose_name=_("dead letter"),
    )
    entry_id = models.CharField(
        _("dead entry id"),
        max_length=64,
        help_text=_("Its entry in the Redis dead stream (storing it twice is a no-op)."),
    )
    reason = models.CharField(_("reason"), max_length=32)
    attempts = models.PositiveIntegerField(_("attempts"), default=0)
    error_class = models.CharField(_("error class"), max_length=200, blank=True)
    error_message = models.TextField(_("error message"), blank=True)
    traceback = models.TextField(_("traceback"), blank=True)
    first_failed_at = models.DateTimeField(_("first failure"), null=True)
    failed_at = models.DateTimeField(_("died"), null=True)
    created_at = models.DateTimeField(_("stored"), auto_now_add=True)

    class Meta:
        ordering = ["-failed_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["dead_letter", "entry_id"], name="redisq_deadletterfailure_unique"
            )
        ]
        verbose_name = _("failure")
        verbose_name_plural = _("failures (every death)")

    def __str__(self) -> str:
        return f"{self.error_class} at {self.failed_at}"


class OutboxMessage(models.Model):
    """A message written in the publishing transaction, forwarded to Redis by the relay.

    The message id is fixed when the row is written, so a relay that crashes after
    publishing and publishes the row again does not create a second message.
    """

    queue = models.CharField(_("queue"), max_length=100)
    message_id = models.CharField(_("message id"), max_length=64, unique=True)
    payload = models.TextField(_("payload (JSON)"))
    headers = models.TextField(_("headers (JSON)"), blank=True, default="")
    due_at = models.DateTimeField(_("due"), null=True, blank=True)
    created_at = models.DateTimeField(_("created"), auto_now_add=True, db_index=True)
    claimed_by = models.CharField(max_length=100, blank=True, default="", editable=False)
    claimed_at = models.DateTimeField(null=True, blank=True, editable=False)
    sent_at = models.DateTimeField(_("sent"), null=True, blank=True, db_index=True)
    attempts = models.PositiveIntegerField(_("send attempts"), default=0)
    last_error = models.TextField(_("last error"), blank=True, default="")

    class Meta:
        ordering = ["id"]
        verbose_name = _("outbox message")
        verbose_name_plural = _("outbox messages")

    def __str__(self) -> str:
        return f"{self.queue} {self.message_id}"


def default_timezone() -> str:
    """A new schedule's time zone: the project's ``TIME_ZONE``."""
    return str(settings.TIME_ZONE or "UTC")


class Schedule(models.Model):
    """A periodic schedule: declared in code (``periodic``) or added in the admin; how
    both ways stay in step: ``redisq_django.schedules.sync``. Workers read it every 2 s."""

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
