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

from django.db import models
from django.utils.translation import gettext_lazy as _

from redisq_django.core.config import CoreConfig
from redisq_django.core.handler import ConsumerSpec, Handler

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
        defaults = {
            "max_retries": config.max_retries,
            "backoff": config.backoff_s,
            "max_backoff": config.max_backoff_s,
            "visibility_timeout": config.visibility_timeout_ms / 1000,
        }
        return Effective(defaults[field], SOURCE_DEFAULT)

    def to_spec(self, handler: Handler, config: CoreConfig) -> ConsumerSpec:
        """The runtime description the worker uses (effective values)."""
        value = {f: self.effective(f, config).value for f in TUNABLES}
        return ConsumerSpec(
            queue=self.queue.name,
            name=self.name,
            handler=handler,
            max_retries=int(value["max_retries"]),
            backoff_s=float(value["backoff"]),
            max_backoff_s=float(value["max_backoff"]),
            visibility_timeout_ms=int(float(value["visibility_timeout"]) * 1000),
            concurrency=int(value["concurrency"]),
            start=self.start,
            paused=self.paused or self.queue.paused,
            enabled=self.enabled and self.declared,
        )
