"""Admin for dead letters: filters, search, escaped payload and traceback, Retry.

Retrying and discarding need the permission ``redisq_django.retry_deadletter``; every
change is a POST with CSRF protection (``admin_view``), is reported through ``messages``
and is recorded in the admin history of each row it changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from redisq_django import deadletters, operations
from redisq_django.admin.common import BREADCRUMBS_OL
from redisq_django.core.deadletter import DeadReason
from redisq_django.models import DeadLetter

RETRY_PERMISSION = "redisq_django.retry_deadletter"

#: The change messages recorded in the admin history (stored as is, read by anyone).
DISCARDED_LOG = "Discarded"


def retried_log(row: DeadLetter) -> str:
    return f"Retried: sent again to {row.queue}/{row.consumer}"


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
        if obj.status != DeadLetter.Status.DEAD:
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
        if self._apply(request, [row], operations.retry_dead):
            text = gettext("Message %(id)s sent again to %(queue)s/%(consumer)s.")
            level = messages.SUCCESS
        elif row.status == DeadLetter.Status.DEAD and not deadletters.redrivable(row):
            text = gettext(
                "Message %(id)s is undecodable (not a valid envelope) and would only die "
                "again; not retried. Publish a corrected message and discard this one."
            )
            level = messages.WARNING
        else:
            text = gettext("Message %(id)s is %(status)s; not retried.")
            level = messages.WARNING
        values = {
            "id": row.message_id,
            "queue": row.queue,
            "consumer": row.consumer,
            "status": row.get_status_display(),
        }
        self.message_user(request, text % values, level)
        # Back where the button was pressed (the filtered list, the detail page).
        back = request.POST.get("next") or request.META.get("HTTP_REFERER", "")
        if not url_has_allowed_host_and_scheme(
            back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            back = reverse("admin:redisq_django_deadletter_changelist")
        return HttpResponseRedirect(back)

    def _apply(
        self,
        request: HttpRequest,
        rows: Iterable[DeadLetter],
        act: Callable[[Iterable[DeadLetter], Any], int],
    ) -> int:
        """Retry or discard ``rows`` (the functions ``manage.py redisq`` calls too) and
        record each row that changed in the admin history. Returns how many changed."""
        dead = [row for row in rows if row.status == DeadLetter.Status.DEAD]
        count = act(dead, request.user)
        for row in dead:  # retry/discard update the rows they change in place
            if row.status == DeadLetter.Status.RETRIED:
                self.log_change(request, row, retried_log(row))
            elif row.status == DeadLetter.Status.DISCARDED:
                self.log_change(request, row, DISCARDED_LOG)
        return count

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
        n = self._apply(request, queryset, operations.retry_dead)
        text = ngettext(
            "Sent %(count)d dead letter again, to its own consumer.",
            "Sent %(count)d dead letters again, each to its own consumer.",
            n,
        )
        self.message_user(request, text % {"count": n}, messages.SUCCESS)
        stuck = queryset.filter(status=DeadLetter.Status.DEAD, reason=DeadReason.UNDECODABLE)
        if skipped := stuck.count():
            text = ngettext(
                "%(count)d undecodable dead letter was not retried: it would only die again.",
                "%(count)d undecodable dead letters were not retried: they would only die again.",
                skipped,
            )
            self.message_user(request, text % {"count": skipped}, messages.WARNING)
        return None

    @admin.action(description=_("Discard selected dead letters"), permissions=["retry"])
    def discard_selected(
        self, request: HttpRequest, queryset: QuerySet[DeadLetter]
    ) -> HttpResponse | None:
        page = self._confirm(request, queryset, "discard_selected", "discard")
        if page is not None:
            return page
        n = self._apply(request, queryset, operations.discard_dead)
        text = ngettext("Discarded %(count)d dead letter.", "Discarded %(count)d dead letters.", n)
        self.message_user(request, text % {"count": n}, messages.SUCCESS)
        return None


def _pretty_json(text: str) -> str:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return text  # undecodable payloads are shown as stored (escaped by format_html)
