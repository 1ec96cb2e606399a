"""Admin for queues: live stats summed over their consumers, pause/resume."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from redisq_django.admin.common import PauseActions, dead_letter_count, queue_column, queue_total
from redisq_django.admin.consumers import ConsumerInline
from redisq_django.admin.stats import age, queue_stats
from redisq_django.conf import get_core_config
from redisq_django.models import Queue


@admin.register(Queue)
class QueueAdmin(PauseActions):
    list_display = (
        "name",
        "paused",
        "length",
        "lag",
        "in_flight",
        "delayed",
        "retrying",
        "dead",
        "oldest_unacked",
        "instances_alive",
    )
    list_filter = ("paused",)
    search_fields = ("name",)
    readonly_fields = ("name", "created_at", "updated_at")
    inlines = (ConsumerInline,)
    actions = ("pause", "resume")
    paused_message = ngettext_lazy("Paused %(count)d queue.", "Paused %(count)d queues.", "count")
    resumed_message = ngettext_lazy(
        "Resumed %(count)d queue.", "Resumed %(count)d queues.", "count"
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # queues come from code and publishing

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = list(super().get_list_display(request))
        if get_core_config().history:  # how far behind the Spark archive is
            shown.append("archive_lag")
        return shown

    def get_queryset(self, request: HttpRequest) -> QuerySet[Queue]:
        queues: QuerySet[Queue] = super().get_queryset(request)
        return queues.annotate(dead_rows=dead_letter_count(queue="name"))

    def _consumers(self, obj: Queue) -> list[Any]:
        stats = queue_stats(obj.name)
        return stats.consumers if stats else []

    length = queue_column("length", _("length"))
    lag = queue_column("lag", _("lag"))
    delayed = queue_column("delayed", _("delayed"))
    in_flight = queue_total("in_flight", _("in flight"))
    retrying = queue_total("waiting_retry", _("retrying"))
    instances_alive = queue_total("instances_alive", _("instances"))
    archive_lag = queue_column("archive_lag", _("archive lag"))

    @admin.display(description=_("dead"), ordering="dead_rows")
    def dead(self, obj: Queue) -> str:
        """Dead letters in the database plus those still in Redis (not yet sunk)."""
        return str(getattr(obj, "dead_rows", 0) + sum(c.dead for c in self._consumers(obj)))

    @admin.display(description=_("oldest unacked"))
    def oldest_unacked(self, obj: Queue) -> str:
        ages = [c.oldest_unacked_age_s for c in self._consumers(obj) if c.oldest_unacked_age_s]
        return age(max(ages) if ages else None)
