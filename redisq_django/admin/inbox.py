"""The inbox of ``atomic=True`` consumers (``consuming/inbox.py``), read-only: which
messages each consumer handled exactly once, searchable by message id."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from redisq_django import figures
from redisq_django.models import InboxEntry


@admin.register(InboxEntry)
class InboxEntryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Rows are written by handlers' transactions and deleted by the workers after
    ``REDISQ['INBOX_RETENTION']``: nothing here changes them (deleting one would let its
    message's effects happen again; ``manage.py redisq inbox prune`` is the way)."""

    list_display = ("message_id", "queue", "consumer", "handled")
    list_filter = ("queue", "consumer")
    search_fields = ("message_id",)
    # A row's page shows what the form would leave out: when it was handled, and a
    # task's kept return value (``InboxEntry.result``).
    readonly_fields = ("queue", "consumer", "message_id", "handled_at", "result")
    date_hierarchy = "handled_at"
    show_full_result_count = False  # a large inbox: no COUNT(*) of the whole table

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[InboxEntry], search_term: str
    ) -> tuple[QuerySet[InboxEntry], bool]:
        """A message id, exactly (its index: a large inbox is not scanned)."""
        term = search_term.strip()
        return (queryset.filter(message_id=term) if term else queryset), False

    @admin.display(description=_("handled"), ordering="handled_at")
    def handled(self, obj: InboxEntry) -> SafeString:
        return figures.clock(obj.handled_at)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
