"""Admin for queues and consumers: pause, resume and override settings of running
workers (they pick changes up within seconds)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _

from redisq_django.conf import get_core_config
from redisq_django.models import TUNABLES, Consumer, Queue


def _set_paused(request: HttpRequest, queryset: QuerySet[Any], paused: bool) -> None:
    updated = 0
    for obj in queryset:  # save() keeps auto_now fields and signals working
        if obj.paused != paused:
            obj.paused = paused
            obj.save(update_fields=["paused", "updated_at"])
            updated += 1
    verb = "Paused" if paused else "Resumed"
    messages.success(request, f"{verb} {updated}; running workers apply it within seconds.")


class ConsumerInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Consumer
    fields = ("name", "handler", "enabled", "paused", "declared")
    readonly_fields = ("name", "handler", "declared")
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "paused", "updated_at")
    list_filter = ("paused",)
    search_fields = ("name",)
    readonly_fields = ("name", "created_at", "updated_at")
    inlines = (ConsumerInline,)
    actions = ("pause", "resume")

    @admin.action(description=_("Pause selected queues"), permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        _set_paused(request, queryset, True)

    @admin.action(description=_("Resume selected queues"), permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        _set_paused(request, queryset, False)


@admin.register(Consumer)
class ConsumerAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "__str__",
        "handler",
        "enabled",
        "paused",
        "declared",
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

    @admin.action(description=_("Pause selected consumers"), permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Consumer]) -> None:
        _set_paused(request, queryset, True)

    @admin.action(description=_("Resume selected consumers"), permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Consumer]) -> None:
        _set_paused(request, queryset, False)
