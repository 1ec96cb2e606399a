"""Admin for queues and consumers (live stats, pause/resume, overrides) and the live
overview page."""

from __future__ import annotations

from typing import Any

import django
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from redisq_django.admin.stats import age, consumer_stats, queue_stats
from redisq_django.conf import get_core_config
from redisq_django.models import TUNABLES, Consumer, DeadLetter, Overview, Queue
from redisq_django.publishing.outbox import pending_count

#: Django 6 styles the admin's breadcrumbs as ``<ol class="breadcrumbs">`` of ``<li>``,
#: Django 5.2 as ``<div class="breadcrumbs">``: our pages render the one that is styled.
BREADCRUMBS_OL = django.VERSION >= (6, 0)


def _set_paused(request: HttpRequest, queryset: QuerySet[Any], paused: bool) -> None:
    updated = 0
    for obj in queryset:  # save() keeps auto_now fields and signals working
        if obj.paused != paused:
            obj.paused = paused
            obj.save(update_fields=["paused", "updated_at"])
            updated += 1
    verb = "Paused" if paused else "Resumed"
    messages.success(request, f"{verb} {updated}; running workers apply it within seconds.")


class PauseActions:
    """*Pause selected* / *Resume selected* for models with a ``paused`` flag (queues,
    consumers); running workers apply the change within seconds."""

    @admin.action(description=_("Pause selected"), permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _set_paused(request, queryset, True)

    @admin.action(description=_("Resume selected"), permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        _set_paused(request, queryset, False)


def _stat(value: object) -> str:
    return "?" if value is None else str(value)  # "?": Redis unreachable


# Live figures as list columns; each reads the (one-second cached) stats of its queue.


def _queue_column(field: str, title: Any) -> Any:
    @admin.display(description=title)
    def column(self: Any, obj: Queue) -> str:
        stats = queue_stats(obj.name)
        return _stat(getattr(stats, field) if stats else None)

    return column


def _queue_total(field: str, title: Any) -> Any:
    """The sum of a per-consumer figure over the queue's consumers."""

    @admin.display(description=title)
    def column(self: Any, obj: Queue) -> str:
        stats = queue_stats(obj.name)
        return _stat(sum(getattr(c, field) for c in stats.consumers) if stats else None)

    return column


def _consumer_column(field: str, title: Any) -> Any:
    @admin.display(description=title)
    def column(self: Any, obj: Consumer) -> str:
        stats = consumer_stats(obj.queue.name, obj.name)
        return _stat(getattr(stats, field) if stats else None)

    return column


# -- queues and consumers ------------------------------------------------------------


class ConsumerInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Consumer
    fields = ("name", "handler", "enabled", "paused", "declared")
    readonly_fields = ("name", "handler", "declared")
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Queue)
class QueueAdmin(PauseActions, admin.ModelAdmin):  # type: ignore[type-arg]
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # queues come from code and publishing

    def _consumers(self, obj: Queue) -> list[Any]:
        stats = queue_stats(obj.name)
        return stats.consumers if stats else []

    length = _queue_column("length", _("length"))
    lag = _queue_column("lag", _("lag"))
    delayed = _queue_column("delayed", _("delayed"))
    in_flight = _queue_total("in_flight", _("in flight"))
    retrying = _queue_total("waiting_retry", _("retrying"))
    instances_alive = _queue_total("instances_alive", _("instances"))

    @admin.display(description=_("dead"))
    def dead(self, obj: Queue) -> str:
        rows = DeadLetter.objects.filter(queue=obj.name, status=DeadLetter.Status.DEAD).count()
        return str(rows + sum(c.dead for c in self._consumers(obj)))

    @admin.display(description=_("oldest unacked"))
    def oldest_unacked(self, obj: Queue) -> str:
        ages = [c.oldest_unacked_age_s for c in self._consumers(obj) if c.oldest_unacked_age_s]
        return age(max(ages) if ages else None)


@admin.register(Consumer)
class ConsumerAdmin(PauseActions, admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "__str__",
        "enabled",
        "paused",
        "declared",
        "lag",
        "in_flight",
        "retrying",
        "dead",
        "oldest_unacked",
        "instances_alive",
        "effective_max_retries",
        "effective_concurrency",
    )
    list_filter = ("queue", "paused", "enabled", "declared")
    search_fields = ("name", "queue__name", "handler")
    readonly_fields = ("queue", "name", "handler", "declared", "start", "effective_settings")
    fieldsets = (
        (None, {"fields": ("queue", "name", "handler", "declared", "start")}),
        (_("State"), {"fields": ("enabled", "paused")}),
        (
            _("Overrides (empty: the code's value applies)"),
            {"fields": (*TUNABLES, "effective_settings")},
        ),
    )
    actions = ("pause", "resume")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # consumers are declared in code (@consumer)

    lag = _consumer_column("lag", _("lag"))
    in_flight = _consumer_column("in_flight", _("in flight"))
    retrying = _consumer_column("waiting_retry", _("retrying"))
    instances_alive = _consumer_column("instances_alive", _("instances"))

    @admin.display(description=_("dead"))
    def dead(self, obj: Consumer) -> str:
        s = consumer_stats(obj.queue.name, obj.name)
        rows = DeadLetter.objects.filter(
            queue=obj.queue.name, consumer=obj.name, status=DeadLetter.Status.DEAD
        ).count()
        return str(rows + (s.dead if s else 0))

    @admin.display(description=_("oldest unacked"))
    def oldest_unacked(self, obj: Consumer) -> str:
        s = consumer_stats(obj.queue.name, obj.name)
        return age(s.oldest_unacked_age_s if s else None)

    @admin.display(description=_("max retries"))
    def effective_max_retries(self, obj: Consumer) -> str:
        return str(obj.effective("max_retries", get_core_config()))

    @admin.display(description=_("concurrency"))
    def effective_concurrency(self, obj: Consumer) -> str:
        return str(obj.effective("concurrency", get_core_config()))

    @admin.display(description=_("effective settings (and which value wins)"))
    def effective_settings(self, obj: Consumer) -> str:
        config = get_core_config()
        rows = ((f, obj.effective(f, config)) for f in TUNABLES)
        return format_html(
            "<table>{}</table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                ((f, e.value, e.source) for f, e in rows),
            ),
        )


# -- the live overview -----------------------------------------------------------------


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
        from redisq_django.operations import all_queue_names

        queues = []
        for name in all_queue_names():
            stats = queue_stats(name)
            dead_rows = {
                c: n
                for c, n in DeadLetter.objects.filter(queue=name, status=DeadLetter.Status.DEAD)
                .values_list("consumer")
                .annotate(n=Count("id"))
            }
            queues.append({"name": name, "stats": stats, "dead_rows": dead_rows})
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
