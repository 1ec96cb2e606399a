"""The transactional outbox: messages written in the publishing transaction."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

#: Settings a consumer row can override: (field, declared field, default from config).


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
    #: The ordering key ("" for none: an empty key is never valid). 256 characters hold
    #: any key of at most 256 bytes in UTF-8.
    key = models.CharField(_("ordering key"), max_length=256, blank=True, default="")
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
