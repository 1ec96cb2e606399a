"""Database mirrors of the queue configuration: ``Queue`` and ``Consumer`` rows, and the
proxies that put the overview and the task results on the admin index.

Code declares consumers (``@consumer``);
:func:`redisq_django.consuming.consumer_sync.sync_declarations` writes what code says into the
``declared_*`` columns. Staff may override some values in the admin (the nullable
columns without prefix). The effective value is the override when set, else the
declared value, else the ``REDISQ`` default, and the admin and ``runconsumer``'s
banner both say which one applies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.utils.translation import gettext_lazy as _

from redisq_django.core import bounds
from redisq_django.core.config import CoreConfig
from redisq_django.core.handler import ConsumerSpec, Handler
from redisq_django.core.limits import Rate, RateError, rate_problem
from redisq_django.core.retry import RetryPolicy

#: Settings a consumer row can override: (field, declared field, default from config).


#: Flow control (``core/limits.py``, ``core/worker/time_limits.py``): no ``REDISQ``
#: default, so without an override or a declaration there is no limit.
LIMITS = ("time_limit", "rate", "burst", "rate_per_key", "max_in_flight")
TUNABLES = (
    "max_retries",
    "backoff",
    "max_backoff",
    "visibility_timeout",
    "concurrency",
    *LIMITS,
)
#: The override that lifts a limit the code declares.
NO_LIMIT: dict[str, object] = {
    "time_limit": 0,
    "rate": "off",
    "rate_per_key": "off",
    "max_in_flight": 0,
}

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
    """Why ``value`` is not a valid override of tunable ``field`` ("" when it is), in the
    words every other place uses for the setting (``core/bounds.py``).

    The admin form refuses such a value; a worker that finds one in the database anyway
    (written before this check, or by other means) ignores it and says so.
    """
    if value is None or value == "" or (field in NO_LIMIT and value == NO_LIMIT[field]):
        return ""
    if field in ("rate", "rate_per_key"):
        return rate_problem(value) or ""
    return bounds.problem(field, value, field.replace("_", " ")) or ""


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
    declared_time_limit = models.FloatField(null=True, editable=False)
    declared_rate = models.CharField(max_length=32, blank=True, default="", editable=False)
    declared_burst = models.PositiveIntegerField(null=True, editable=False)
    declared_rate_per_key = models.CharField(max_length=32, blank=True, default="", editable=False)
    declared_max_in_flight = models.PositiveIntegerField(null=True, editable=False)
    #: The database an atomic=True consumer's transaction and inbox use ("": not atomic).
    declared_atomic = models.CharField(max_length=100, blank=True, default="", editable=False)

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
    time_limit = models.FloatField(
        _("time limit override (s)"), null=True, blank=True, help_text=_empty
    )
    rate = models.CharField(_("rate override"), max_length=32, blank=True, help_text=_empty)
    burst = models.PositiveIntegerField(
        _("burst override"), null=True, blank=True, help_text=_empty
    )
    rate_per_key = models.CharField(
        _("rate per key override"), max_length=32, blank=True, help_text=_empty
    )
    max_in_flight = models.PositiveIntegerField(
        _("max in flight override"), null=True, blank=True, help_text=_empty
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
        if declared is not None and declared != "":
            return Effective(declared, SOURCE_CODE)
        if field in LIMITS:  # no setting: no limit (the burst: the rate's default)
            return Effective(None, SOURCE_DEFAULT)
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
            if override is None or override == "":
                out[field] = self._fallback(field, config)
            elif field in NO_LIMIT and override == NO_LIMIT[field]:
                out[field] = Effective(None, SOURCE_OVERRIDE)  # the code's limit lifted
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
        """Refuse invalid overrides (the admin form calls it): out of their bounds
        (:func:`override_problem`), or a max backoff below the backoff that applies."""
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
        rate = None
        if value["rate"]:
            try:
                rate = Rate.parse(value["rate"], value["burst"])
            except RateError:  # a declared rate with a burst override it refuses
                rate = Rate.parse(value["rate"])
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
            time_limit=value["time_limit"],
            rate=rate,
            rate_per_key=Rate.parse(value["rate_per_key"]) if value["rate_per_key"] else None,
            max_in_flight=value["max_in_flight"],
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
