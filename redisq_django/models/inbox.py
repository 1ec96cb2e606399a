"""The transactional inbox: which messages an ``atomic=True`` consumer has handled."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class InboxEntry(models.Model):
    """Logical consumer ``consumer`` of ``queue`` handled message ``message_id``.

    Written first in the handler's transaction (``consuming/inbox.py``), committed or
    rolled back with the handler's own writes: a message whose row exists is not handled
    again by that consumer. Rows older than ``REDISQ['INBOX_RETENTION']`` are deleted by
    the workers.
    """

    queue = models.CharField(_("queue"), max_length=100)
    consumer = models.CharField(_("consumer"), max_length=100)
    message_id = models.CharField(_("message id"), max_length=64, db_index=True)
    handled_at = models.DateTimeField(_("handled"), auto_now_add=True, db_index=True)
    #: What the handling returned, as JSON, where it is needed again when the message
    #: comes back: a task's return value (its result is rebuilt from it on a skip).
    #: None for consumers' handlers.
    result = models.TextField(_("result"), null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["queue", "consumer", "message_id"], name="redisq_inbox_unique"
            )
        ]
        verbose_name = _("inbox entry")
        verbose_name_plural = _("inbox")

    def __str__(self) -> str:
        return f"{self.queue}/{self.consumer} {self.message_id}"
