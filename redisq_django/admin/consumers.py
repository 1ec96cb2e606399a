"""Admin for logical consumers: live stats, pause/resume, overrides and which value wins."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from redisq_django.admin.common import PauseActions, consumer_column, dead_letter_count
from redisq_django.admin.stats import age, consumer_stats
from redisq_django.conf import get_core_config
from redisq_django.models import TUNABLES, Consumer


class ConsumerInline(admin.TabularInline):  # type: ignore[type-arg]
    """A queue's consumers, on the queue's page."""

    model = Consumer
    fields = ("name", "handler", "enabled", "paused", "declared")
    readonly_fields = ("name", "handler", "declared")
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Consumer)
class ConsumerAdmin(PauseActions):
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
    list_select_related = ("queue",)  # __str__ and every stats column read queue.name
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
    paused_message = ngettext_lazy(
        "Paused %(count)d consumer.", "Paused %(count)d consumers.", "count"
    )
    resumed_message = ngettext_lazy(
        "Resumed %(count)d consumer.", "Resumed %(count)d consumers.", "count"
    )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # consumers are declared in code (@consumer)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Consumer]:
        consumers: QuerySet[Consumer] = super().get_queryset(request)
        return consumers.annotate(dead_rows=dead_letter_count(queue="queue__name", consumer="name"))

    lag = consumer_column("lag", _("lag"))
    in_flight = consumer_column("in_flight", _("in flight"))
    retrying = consumer_column("waiting_retry", _("retrying"))
    instances_alive = consumer_column("instances_alive", _("instances"))

    @admin.display(description=_("dead"), ordering="dead_rows")
    def dead(self, obj: Consumer) -> str:
        """Dead letters in the database plus those still in Redis (not yet sunk)."""
        s = consumer_stats(obj.queue.name, obj.name)
        return str(getattr(obj, "dead_rows", 0) + (s.dead if s else 0))

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
