"""Dead letters: one row per message a logical consumer gave up on, and one per death."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.translation import gettext_lazy as _

#: Settings a consumer row can override: (field, declared field, default from config).


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
        help_text=_(
            "The error message with what varies (addresses, ports, host names, ids, numbers, "
            "durations, times, quoted values) replaced: the grouping key."
        ),
    )
    task = models.CharField(
        _("task"),
        max_length=200,
        blank=True,
        default="",
        db_index=True,
        help_text=_("The Django task's module path, for a dead letter of a task queue."),
    )
    partition = models.PositiveSmallIntegerField(
        _("partition"),
        null=True,
        blank=True,
        help_text=_(
            "The partition of a partitioned queue it died in (empty: the queue has none); "
            "a retry sends it back there (a keyed message: to its key's partition)."
        ),
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
