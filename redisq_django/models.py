"""Database mirrors of the queue configuration: ``Queue`` and ``Consumer`` rows.

Code declares consumers (``@consumer``); :func:`redisq_django.sync.sync_declarations`
writes what code says into the ``declared_*`` columns. Staff may override some values
in the admin (the nullable columns without prefix). The effective value is the
override when set, else the declared value, else the ``REDISQ`` default, and the
admin and ``runconsumer``'s banner both say which one applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

from redisq_django.core.config import CoreConfig
from redisq_django.core.handler import ConsumerSpec, Handler
from redisq_django.core.retry import RetryPolicy

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
    """An effective setting and where it comes from."""

    value: Any
    source: str

    def __str__(self) -> str:
        return f"{self.value} ({self.source})"


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
        override = getattr(self, field)
        if override is not None:
            return Effective(override, SOURCE_OVERRIDE)
        declared = getattr(self, f"declared_{field}")
        if declared is not None:
            return Effective(declared, SOURCE_CODE)
        return Effective(config.retry.to_seconds()[field], SOURCE_DEFAULT)

    def to_spec(self, handler: Handler, config: CoreConfig) -> ConsumerSpec:
        """The runtime description the worker uses (effective values)."""
        value = {f: self.effective(f, config).value for f in TUNABLES}
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

    One row per (queue, consumer, message id): a message that dies again after a retry
    updates its row (``retry_count`` keeps the history).
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
        permissions = [("retry_deadletter", "Can retry or discard dead letters")]
        verbose_name = _("dead letter")
        verbose_name_plural = _("dead letters")

    def __str__(self) -> str:
        return f"{self.queue}/{self.consumer} {self.message_id}"


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
