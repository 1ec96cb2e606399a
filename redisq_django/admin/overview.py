"""The live overview: one auto-refreshing table of every queue and consumer."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext_lazy as _

from redisq_django.admin.common import BREADCRUMBS_OL
from redisq_django.admin.stats import queue_stats
from redisq_django.models import DeadLetter, Overview
from redisq_django.operations import all_queue_names
from redisq_django.publishing.outbox import pending_count


def dead_rows_by_consumer() -> dict[str, dict[str, int]]:
    """queue -> consumer -> dead letters in status *dead*, in one query."""
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    rows = (
        DeadLetter.objects.filter(status=DeadLetter.Status.DEAD)
        .order_by()
        .values_list("queue", "consumer")
        .annotate(n=Count("pk"))
    )
    for queue, consumer, n in rows:
        counts[queue][consumer] = n
    return dict(counts)  # plain: a template lookup must not add keys


@admin.register(Overview)
class OverviewAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """One auto-refreshing table of every queue and consumer (linked from the index)."""

    #: Seconds between refreshes of the overview page.
    refresh_seconds = 5

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("redisq_django.view_queue")

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        dead_rows = dead_rows_by_consumer()
        queues = [
            {"name": name, "stats": queue_stats(name), "dead_rows": dead_rows.get(name, {})}
            for name in all_queue_names()
        ]
        context = {
            **self.admin_site.each_context(request),
            "title": _("Queues overview"),
            "queues": queues,
            "outbox_waiting": pending_count(),
            "refresh_seconds": self.refresh_seconds,
            "opts": self.model._meta,
            "breadcrumbs_ol": BREADCRUMBS_OL,
        }
        return TemplateResponse(request, "admin/redisq_django/overview.html", context)
