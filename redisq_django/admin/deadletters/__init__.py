"""The dead letters in the admin: the list, a dead letter's page, retry and discard, and
triage at any size. What the rest of the admin and its tests use is named here, and the
admin registers :class:`DeadLetterAdmin` from here.

* :mod:`.model_admin`: :class:`DeadLetterAdmin`, the list and detail pages, retry and
  discard of one dead letter or of the selected ones;
* :mod:`.list_columns`: the list's columns, its task filter, the detail page's folded
  texts;
* :mod:`.triage_pages`: dead letters by cause, and retry/discard of every one matching
  a filter.

The work is done by :mod:`redisq_django.deadletters`, which ``manage.py redisq dead``
calls too.
"""

from django.contrib import admin

from redisq_django.admin.deadletters.model_admin import (
    DELETE_NOTE,
    RETRY_PERMISSION,
    DeadLetterAdmin,
)
from redisq_django.models import DeadLetter

__all__ = ["DELETE_NOTE", "RETRY_PERMISSION", "DeadLetterAdmin"]

admin.site.register(DeadLetter, DeadLetterAdmin)
