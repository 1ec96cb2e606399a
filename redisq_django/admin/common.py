"""What the queue, consumer and overview admins share: pause/resume actions, live-stat
columns, dead-letter count annotations and the breadcrumbs flag."""

from __future__ import annotations

from typing import Any

import django
from django.contrib import admin, messages
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from redisq_django.admin.stats import consumer_stats, queue_stats
from redisq_django.models import DeadLetter

#: Django 6 styles the admin's breadcrumbs as ``<ol class="breadcrumbs">`` of ``<li>``,
#: Django 5.2 as ``<div class="breadcrumbs">``: our pages render the one that is styled.
BREADCRUMBS_OL = django.VERSION >= (6, 0)

#: The change message recorded in the admin history (stored as is, read by anyone).
PAUSED_LOG = "Paused"
RESUMED_LOG = "Resumed"


def dead_letter_count(**match: str) -> Coalesce:
    """An annotation: how many dead letters in status *dead* have the outer row's values.

    Args:
        match: DeadLetter field -> outer field, e.g. ``queue="queue__name"``.

    Returns:
        A correlated ``COUNT`` subquery (0 when none), so a changelist costs one query
        however many rows it shows, and the column can be sorted on.
    """
    rows = (
        DeadLetter.objects.filter(
            status=DeadLetter.Status.DEAD, **{f: OuterRef(o) for f, o in match.items()}
        )
        .order_by()
        .values(*match)  # GROUP BY the matched fields: one count per outer row
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(rows, output_field=IntegerField()), 0)


class PauseActions(admin.ModelAdmin):  # type: ignore[type-arg]
    """*Pause selected* / *Resume selected* for models with a ``paused`` flag (queues,
    consumers); running workers apply the change within seconds.

    Subclasses say what they paused with ``paused_message`` / ``resumed_message``
    (``ngettext_lazy`` with a ``%(count)d`` placeholder, plural chosen by ``count``).
    """

    paused_message: Any
    resumed_message: Any

    @admin.action(description=_("Pause selected"), permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._set_paused(request, queryset, True)

    @admin.action(description=_("Resume selected"), permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._set_paused(request, queryset, False)

    def _set_paused(self, request: HttpRequest, queryset: QuerySet[Any], paused: bool) -> None:
        updated = 0
        for obj in queryset:  # save() keeps auto_now fields and signals working
            if obj.paused != paused:
                obj.paused = paused
                obj.save(update_fields=["paused", "updated_at"])
                self.log_change(request, obj, PAUSED_LOG if paused else RESUMED_LOG)
                updated += 1
        done = self.paused_message if paused else self.resumed_message
        self.message_user(
            request,
            "{} {}".format(
                done % {"count": updated},
                gettext("Running workers apply the change within seconds."),
            ),
            messages.SUCCESS,
        )


def _stat(value: object) -> str:
    return "?" if value is None else str(value)  # "?": Redis unreachable


# Live figures as list columns; each reads the (one-second cached) stats of its queue.


def queue_column(field: str, title: Any) -> Any:
    """A column showing the queue's live figure ``field``."""

    @admin.display(description=title)
    def column(self: Any, obj: Any) -> str:
        stats = queue_stats(obj.name)
        return _stat(getattr(stats, field) if stats else None)

    return column


def queue_total(field: str, title: Any) -> Any:
    """A column: the sum of a per-consumer figure over the queue's consumers."""

    @admin.display(description=title)
    def column(self: Any, obj: Any) -> str:
        stats = queue_stats(obj.name)
        return _stat(sum(getattr(c, field) for c in stats.consumers) if stats else None)

    return column


def consumer_column(field: str, title: Any) -> Any:
    """A column showing the consumer's live figure ``field``."""

    @admin.display(description=title)
    def column(self: Any, obj: Any) -> str:
        stats = consumer_stats(obj.queue.name, obj.name)
        return _stat(getattr(stats, field) if stats else None)

    return column
