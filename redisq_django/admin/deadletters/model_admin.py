"""The dead letters' ``ModelAdmin``: filters, search (payloads and headers too), the error
and a payload preview in the list (:mod:`.list_columns`), a detail page with the error and
Retry at the top, every death kept, and triage at any size (:mod:`.triage_pages`).

Retrying and discarding need the permission ``redisq_django.retry_deadletter``; every
change is a POST with CSRF protection (``admin_view``), is reported through
``messages`` and is recorded in the admin history of each row it changed.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
    JsonResponse,
)
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from redisq_django import deadletters
from redisq_django.admin import live
from redisq_django.admin.common import HonestDelete, NoPatternLookups
from redisq_django.admin.deadletters import filter_chips
from redisq_django.admin.deadletters.filter_chips import ErrorClassFilter
from redisq_django.admin.deadletters.list_columns import Columns, TaskFilter
from redisq_django.admin.deadletters.triage_pages import TriageViews
from redisq_django.admin.detail import FailureInline
from redisq_django.admin.live import admin_broker
from redisq_django.core.errors import RedisUnavailable
from redisq_django.models import Consumer, DeadLetter

RETRY_PERMISSION = "redisq_django.retry_deadletter"

#: The change messages recorded in the admin history (stored as is, read by anyone).
DISCARDED_LOG = deadletters.DISCARDED_LOG
retried_log = deadletters.retried_log

DELETE_NOTE = _(
    "Delete removes these records from the database for good: nothing is sent, nothing "
    "in Redis changes, and the history of what happened to these messages is gone. To "
    "set a dead letter aside while keeping its record, use “Discard” instead."
)


class DeadLetterAdmin(NoPatternLookups, TriageViews, Columns, HonestDelete):
    list_display = (
        "short_id",
        "where",
        "error_summary",
        "payload_preview",
        "status",
        "attempts",
        "deaths",
        "last_failure",
        "retry_count",
        "retry_button",
    )
    list_display_links = ("short_id",)
    list_filter = (
        "queue",
        "consumer",
        TaskFilter,
        ("error_class", ErrorClassFilter),
        "status",
        "reason",
        "last_failed_at",
    )
    search_fields = ("message_id", "task", "error_class", "error_message", "payload", "headers")
    date_hierarchy = "last_failed_at"
    readonly_fields = (
        "queue",
        "partition",
        "consumer",
        "task",
        "message_id",
        "status",
        "reason",
        "attempts",
        "deaths",
        "error_class",
        "error_text",
        "pretty_payload",
        "pretty_headers",
        "ordering_key",
        "formatted_traceback",
        "published",
        "first_failure",
        "last_failure",
        "retry_count",
        "retried",
        "retried_by",
    )
    fieldsets = (
        (
            _("Failure"),
            {
                "fields": (
                    "error_class",
                    "error_text",
                    "formatted_traceback",
                    "first_failure",
                    "last_failure",
                )
            },
        ),
        (
            _("Message"),
            {"fields": ("pretty_payload", "pretty_headers", "ordering_key", "published")},
        ),
        (
            None,
            {
                "fields": (
                    "task",
                    "queue",
                    "partition",
                    "consumer",
                    "message_id",
                    "status",
                    "reason",
                    "attempts",
                )
            },
        ),
        (_("Retries"), {"fields": ("deaths", "retry_count", "retried", "retried_by")}),
    )
    inlines = (FailureInline,)
    actions = ("retry_selected", "discard_selected", "delete_selected")
    change_form_template = "admin/redisq_django/deadletter/change_form.html"
    change_list_template = "admin/redisq_django/deadletter/change_list.html"
    delete_note = DELETE_NOTE

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

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        # Not a task's dead letter: no empty "task" line; not a partitioned queue's: no
        # empty "partition" line.
        hidden = set()
        if obj is None or not obj.task:
            hidden.add("task")
        if obj is None or obj.partition is None:
            hidden.add("partition")
        if not hidden:
            return self.fieldsets
        return [
            (name, {**opts, "fields": tuple(f for f in opts["fields"] if f not in hidden)})
            for name, opts in self.fieldsets
        ]

    def get_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        mine = [
            path(
                "<path:object_id>/retry/",
                view(self.retry_view),
                name="redisq_django_deadletter_retry",
            ),
            path(
                "<path:object_id>/discard/",
                view(self.discard_view),
                name="redisq_django_deadletter_discard",
            ),
            path("<path:object_id>/raw/", view(self.raw_view), name="redisq_django_deadletter_raw"),
        ]
        return [*self.triage_urls(), *mine, *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        query = request.GET.urlencode()
        context = {
            **(extra_context or {}),
            "causes_url": reverse("admin:redisq_django_deadletter_causes")
            + (f"?{query}" if query else ""),
            "matching_query": query,
            "can_retry": self.has_retry_permission(request),
            # Retry needs Redis: say so before anyone presses it (one PING, or none
            # while an outage is remembered).
            "redisq_error": live.status().error,
        }
        response = super().changelist_view(request, context)
        cl = (getattr(response, "context_data", None) or {}).get("cl")
        if cl is not None:  # the list (not an action's page, nor a redirect)
            base = reverse("admin:redisq_django_deadletter_changelist")
            found = filter_chips.chips(cl, request.GET, base)
            clear = filter_chips.clear_url(base, request.GET) if found else ""
            if found:
                # Django's "Clear all filters" keeps the lookups no sidebar filter owns (a
                # cause's error_key), and is not offered when only those are in force.
                cl.has_active_filters = True
                cl.clear_all_filters_qs = clear
            response.context_data.update(  # type: ignore[attr-defined]
                filter_chips=found, clear_filters_url=clear
            )
        return response

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        row = self.get_object(request, object_id) if object_id else None
        context = dict(extra_context or {})
        if row is not None:
            context.update(self.detail_context(row), redisq_error=live.status().error)
        return super().changeform_view(request, object_id, form_url, context)

    def detail_context(self, row: DeadLetter) -> dict[str, Any]:
        """Links and what can be done, for the box at the top of a dead letter's page."""
        consumer = (
            Consumer.objects.filter(queue__name=row.queue, name=row.consumer)
            .values_list("pk", "queue_id")
            .first()
        )
        changelist = reverse("admin:redisq_django_deadletter_changelist")
        cause = {
            "queue": row.queue,
            "consumer": row.consumer,
            "error_class": row.error_class,
            "error_key": row.error_key,
            "status__exact": "dead",
            **({"task": row.task} if row.task else {}),
        }
        return {
            "not_redrivable": deadletters.not_redrivable_reason(row),
            "consumer_url": reverse("admin:redisq_django_consumer_change", args=[consumer[0]])
            if consumer
            else "",
            "queue_url": reverse("admin:redisq_django_queue_change", args=[consumer[1]])
            if consumer
            else "",
            "consumer_dead_url": changelist
            + "?"
            + urlencode({"queue": row.queue, "consumer": row.consumer, "status__exact": "dead"}),
            "cause_url": changelist + "?" + urlencode(cause),
        }

    # -- one dead letter -----------------------------------------------------------------

    def _back(self, request: HttpRequest) -> HttpResponseRedirect:
        """Back where the button was pressed (the filtered list, the detail page)."""
        back = request.POST.get("next") or request.META.get("HTTP_REFERER", "")
        if not url_has_allowed_host_and_scheme(
            back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            back = reverse("admin:redisq_django_deadletter_changelist")
        return HttpResponseRedirect(back)

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: re-drive one dead letter to its consumer (permission required)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_retry_permission(request):
            raise PermissionDenied
        row = get_object_or_404(DeadLetter, pk=object_id)
        values = {
            "id": row.message_id,
            "queue": row.queue,
            "consumer": row.consumer,
            "status": row.get_status_display(),
        }
        try:
            done = deadletters.retry([row], request.user, broker=admin_broker())
        except RedisUnavailable as exc:
            text = gettext("Message %(id)s was not retried: %(error)s It is still dead.")
            self.message_user(request, text % {**values, "error": exc}, messages.ERROR)
            return self._back(request)
        if done:
            text = gettext("Message %(id)s sent again to %(queue)s/%(consumer)s.")
            level = messages.SUCCESS
        elif row.status == DeadLetter.Status.DEAD and not deadletters.redrivable(row):
            text = gettext("Message %(id)s was not retried. %(why)s")
            values["why"] = deadletters.not_redrivable_reason(row)
            level = messages.WARNING
        else:
            text = gettext("Message %(id)s is %(status)s; not retried.")
            level = messages.WARNING
        self.message_user(request, text % values, level)
        return self._back(request)

    def discard_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: discard one dead letter (kept for the record, never delivered)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_retry_permission(request):
            raise PermissionDenied
        row = get_object_or_404(DeadLetter, pk=object_id)
        if deadletters.discard([row], request.user):
            text = gettext("Message %(id)s discarded: its record is kept, it is not delivered.")
            level = messages.SUCCESS
        else:
            text = gettext("Message %(id)s is %(status)s; not discarded.")
            level = messages.WARNING
        values = {"id": row.message_id, "status": row.get_status_display()}
        self.message_user(request, text % values, level)
        return self._back(request)

    def raw_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: the dead letter as stored (raw fields of an undecodable one, envelope,
        every failure), as a JSON download."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        row = get_object_or_404(DeadLetter, pk=object_id)
        data = {
            "queue": row.queue,
            "consumer": row.consumer,
            "message_id": row.message_id,
            "reason": row.reason,
            "payload_as_stored": row.payload,
            "headers_as_stored": row.headers,
            "envelope": row.envelope,
            "failures": list(
                row.failures.values(
                    "entry_id", "failed_at", "reason", "attempts", "error_class", "error_message"
                )
            ),
        }
        response = JsonResponse(data, json_dumps_params={"indent": 2, "ensure_ascii": False})
        response["Content-Disposition"] = f'attachment; filename="dead-letter-{row.pk}.json"'
        return response

    # -- actions -------------------------------------------------------------------------

    @admin.action(description=_("Retry selected dead letters"), permissions=["retry"])
    def retry_selected(
        self, request: HttpRequest, queryset: QuerySet[DeadLetter]
    ) -> HttpResponse | None:
        page = self.confirm_action(request, queryset, "retry_selected", "retry")
        if page is None:
            self.run_bulk(request, queryset, "retry")
        return page

    @admin.action(
        description=_("Discard selected dead letters (keep the record, never deliver)"),
        permissions=["retry"],
    )
    def discard_selected(
        self, request: HttpRequest, queryset: QuerySet[DeadLetter]
    ) -> HttpResponse | None:
        page = self.confirm_action(request, queryset, "discard_selected", "discard")
        if page is None:
            self.run_bulk(request, queryset, "discard")
        return page

    @admin.action(
        description=_("Delete selected records from the database (gone for good)"),
        permissions=["delete"],
    )
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> Any:
        return self.noted_delete(request, queryset)
