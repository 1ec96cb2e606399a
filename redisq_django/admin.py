"""The admin: queues and consumers with live stats, pause/resume and overrides; dead
letters with filters, search and Retry; a live overview of every queue.

Every mutation is POST-only, CSRF-protected, permission-checked and reported through
``messages``. Retrying or discarding dead letters needs the permission
``redisq_django.retry_deadletter``.
"""

from __future__ import annotations

import json
from typing import Any

import django
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext_lazy as _

from redisq_django import deadletters
from redisq_django.adminstats import age, consumer_stats, queue_stats
from redisq_django.conf import get_core_config
from redisq_django.models import TUNABLES, Consumer, DeadLetter, Overview, Queue
from redisq_django.outbox import pending_count

RETRY_PERMISSION = "redisq_django.retry_deadletter"

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


def _stat(value: object) -> str:
    return "?" if value is None else str(value)


# -- queues and consumers ------------------------------------------------------------


class ConsumerInline(admin.TabularInline):  # type: ignore[type-arg]
    model = Consumer
    fields = ("name", "handler", "enabled", "paused", "declared")
    readonly_fields = ("name", "handler", "declared")
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
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

    @admin.display(description=_("length"))
    def length(self, obj: Queue) -> str:
        stats = queue_stats(obj.name)
        return _stat(stats.length if stats else None)

    @admin.display(description=_("lag"))
    def lag(self, obj: Queue) -> str:
        stats = queue_stats(obj.name)
        return _stat(stats.lag if stats else None)

    @admin.display(description=_("in flight"))
    def in_flight(self, obj: Queue) -> str:
        return str(sum(c.in_flight for c in self._consumers(obj)))

    @admin.display(description=_("delayed"))
    def delayed(self, obj: Queue) -> str:
        stats = queue_stats(obj.name)
        return _stat(stats.delayed if stats else None)

    @admin.display(description=_("retrying"))
    def retrying(self, obj: Queue) -> str:
        return str(sum(c.waiting_retry for c in self._consumers(obj)))

    @admin.display(description=_("dead"))
    def dead(self, obj: Queue) -> str:
        rows = DeadLetter.objects.filter(queue=obj.name, status=DeadLetter.DEAD).count()
        return str(rows + sum(c.dead for c in self._consumers(obj)))

    @admin.display(description=_("oldest unacked"))
    def oldest_unacked(self, obj: Queue) -> str:
        ages = [c.oldest_unacked_age_s for c in self._consumers(obj) if c.oldest_unacked_age_s]
        return age(max(ages) if ages else None)

    @admin.display(description=_("instances"))
    def instances_alive(self, obj: Queue) -> str:
        return str(sum(c.instances_alive for c in self._consumers(obj)))

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

    def _stats(self, obj: Consumer) -> Any:
        return consumer_stats(obj.queue.name, obj.name)

    @admin.display(description=_("lag"))
    def lag(self, obj: Consumer) -> str:
        s = self._stats(obj)
        return _stat(s.lag if s else None)

    @admin.display(description=_("in flight"))
    def in_flight(self, obj: Consumer) -> str:
        s = self._stats(obj)
        return _stat(s.in_flight if s else None)

    @admin.display(description=_("retrying"))
    def retrying(self, obj: Consumer) -> str:
        s = self._stats(obj)
        return _stat(s.waiting_retry if s else None)

    @admin.display(description=_("dead"))
    def dead(self, obj: Consumer) -> str:
        s = self._stats(obj)
        rows = DeadLetter.objects.filter(
            queue=obj.queue.name, consumer=obj.name, status=DeadLetter.DEAD
        ).count()
        return str(rows + (s.dead if s else 0))

    @admin.display(description=_("oldest unacked"))
    def oldest_unacked(self, obj: Consumer) -> str:
        s = self._stats(obj)
        return age(s.oldest_unacked_age_s if s else None)

    @admin.display(description=_("instances"))
    def instances_alive(self, obj: Consumer) -> str:
        s = self._stats(obj)
        return _stat(s.instances_alive if s else None)

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
                for c, n in DeadLetter.objects.filter(queue=name, status=DeadLetter.DEAD)
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


# -- dead letters ------------------------------------------------------------------


@admin.register(DeadLetter)
class DeadLetterAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = (
        "message_id",
        "queue",
        "consumer",
        "error_class",
        "status",
        "attempts",
        "last_failed_at",
        "retry_count",
        "retry_button",
    )
    list_filter = ("queue", "consumer", "error_class", "status", "reason", "last_failed_at")
    search_fields = ("message_id", "error_message", "payload")
    date_hierarchy = "last_failed_at"
    readonly_fields = (
        "queue",
        "consumer",
        "message_id",
        "status",
        "reason",
        "attempts",
        "error_class",
        "error_message",
        "pretty_payload",
        "pretty_headers",
        "formatted_traceback",
        "published_at",
        "first_failed_at",
        "last_failed_at",
        "retry_count",
        "retried_at",
        "retried_by",
    )
    fieldsets = (
        (None, {"fields": ("queue", "consumer", "message_id", "status", "reason", "attempts")}),
        (_("Message"), {"fields": ("pretty_payload", "pretty_headers", "published_at")}),
        (
            _("Failure"),
            {
                "fields": (
                    "error_class",
                    "error_message",
                    "formatted_traceback",
                    "first_failed_at",
                    "last_failed_at",
                )
            },
        ),
        (_("Retries"), {"fields": ("retry_count", "retried_at", "retried_by")}),
    )
    actions = ("retry_selected", "discard_selected")
    change_form_template = "admin/redisq_django/deadletter/change_form.html"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # dead letters come from the consumers

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # read-only; retry/discard are the only changes

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(RETRY_PERMISSION))

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = list(super().get_list_display(request))
        if not self.has_retry_permission(request):
            shown.remove("retry_button")
        return shown

    def get_urls(self) -> list[URLPattern]:
        retry = path(
            "<path:object_id>/retry/",
            self.admin_site.admin_view(self.retry_view),
            name="redisq_django_deadletter_retry",
        )
        return [retry, *super().get_urls()]

    # -- display -------------------------------------------------------------------

    @admin.display(description=_("payload"))
    def pretty_payload(self, obj: DeadLetter) -> str:
        return format_html('<pre class="redisq-json">{}</pre>', _pretty_json(obj.payload))

    @admin.display(description=_("headers"))
    def pretty_headers(self, obj: DeadLetter) -> str:
        return format_html('<pre class="redisq-json">{}</pre>', _pretty_json(obj.headers))

    @admin.display(description=_("traceback"))
    def formatted_traceback(self, obj: DeadLetter) -> str:
        return format_html('<pre class="redisq-traceback">{}</pre>', obj.traceback or "-")

    @admin.display(description=_("retry"))
    def retry_button(self, obj: DeadLetter) -> str:
        if obj.status != DeadLetter.DEAD:
            return "-"
        url = reverse("admin:redisq_django_deadletter_retry", args=[obj.pk])
        # Inside the changelist form, which carries the CSRF token: formaction posts the
        # whole form (token included) to the retry view.
        return format_html(
            '<button type="submit" class="button redisq-retry" formaction="{}" '
            'name="redisq_retry" value="{}">{}</button>',
            url,
            obj.pk,
            _("Retry"),
        )

    # -- mutations -------------------------------------------------------------------

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: re-drive one dead letter to its consumer (permission required)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_retry_permission(request):
            raise PermissionDenied
        row = get_object_or_404(DeadLetter, pk=object_id)
        if deadletters.retry([row], request.user):
            messages.success(
                request, f"Message {row.message_id} sent again to {row.queue}/{row.consumer}."
            )
        else:
            messages.warning(request, f"Message {row.message_id} is {row.status}; not retried.")
        # Back where the button was pressed (the filtered list, the detail page).
        back = request.POST.get("next") or request.META.get("HTTP_REFERER", "")
        if not url_has_allowed_host_and_scheme(
            back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            back = reverse("admin:redisq_django_deadletter_changelist")
        return HttpResponseRedirect(back)

    def _confirm(
        self, request: HttpRequest, queryset: QuerySet[DeadLetter], action: str, verb: str
    ) -> HttpResponse | None:
        """The confirmation page, or None once confirmed."""
        if request.POST.get("post") == "yes":
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": _("Are you sure?"),
            "verb": verb,
            "action": action,
            "rows": queryset,
            "opts": self.model._meta,
            "breadcrumbs_ol": BREADCRUMBS_OL,
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/redisq_django/deadletter/confirm.html", context)

    @admin.action(description=_("Retry selected dead letters"), permissions=["retry"])
    def retry_selected(
        self, request: HttpRequest, queryset: QuerySet[DeadLetter]
    ) -> HttpResponse | None:
        page = self._confirm(request, queryset, "retry_selected", "retry")
        if page is not None:
            return page
        n = deadletters.retry(queryset, request.user)
        messages.success(request, f"Sent {n} dead letter(s) again, each to its own consumer.")
        return None

    @admin.action(description=_("Discard selected dead letters"), permissions=["retry"])
    def discard_selected(
        self, request: HttpRequest, queryset: QuerySet[DeadLetter]
    ) -> HttpResponse | None:
        page = self._confirm(request, queryset, "discard_selected", "discard")
        if page is not None:
            return page
        n = deadletters.discard(queryset, request.user)
        messages.success(request, f"Discarded {n} dead letter(s).")
        return None


def _pretty_json(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return text  # undecodable payloads are shown as stored (escaped by format_html)
