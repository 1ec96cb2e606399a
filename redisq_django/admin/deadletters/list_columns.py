"""The dead-letter list's columns (one line per row: each cell cut with an ellipsis,
the full value in its tooltip), its task filter and the detail page's folded texts."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _

from redisq_django import deadletters, figures
from redisq_django.admin.detail import fold, pretty_json
from redisq_django.core.wire import visible
from redisq_django.models import DeadLetter

#: Characters of an error message or payload written into a list cell (the cell shows
#: what fits) and into its tooltip.
CELL_CHARS = 200
TOOLTIP_CHARS = 1000


def ordering_key_of(row: DeadLetter) -> str | None:
    """The ordering key in a dead letter's envelope (the fields a retry sends), or None."""
    key = row.envelope.get("key") if isinstance(row.envelope, dict) else None
    return key if isinstance(key, str) else None


class TaskFilter(admin.SimpleListFilter):
    """By task, for the dead letters of task queues (shown only when there are some)."""

    title = _("task")
    parameter_name = "task"
    #: The most tasks the filter lists (by name).
    limit = 100

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = (
            DeadLetter.objects.exclude(task="")
            .order_by("task")
            .values_list("task", flat=True)
            .distinct()[: self.limit]
        )
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> Any:
        value = self.value()
        return queryset.filter(task=value) if value else queryset


class Columns(admin.ModelAdmin):  # type: ignore[type-arg]
    """What the dead-letter admin shows of a row, in the list and on its page."""

    # -- display -------------------------------------------------------------------------

    # The list's cells stay on one line: each is cut with an ellipsis at a width of its
    # own (styles in deadletter/change_list.html), the full value in its tooltip.

    # Text another client may have written (ids, keys, names, errors) goes through
    # core.wire.visible: an invisible or right-to-left character reads as its escape.

    @admin.display(description=_("message id"), ordering="message_id")
    def short_id(self, obj: DeadLetter) -> SafeString:
        # The whole id is written, and cut on its left by the styles: ids of one producer
        # share their beginning, their ends tell them apart; selected, it copies whole.
        key = ordering_key_of(obj)
        message_id = visible(obj.message_id)
        if key is None:
            return format_html(
                '<span class="redisq-id" title="{}"><span class="redisq-id-end">'
                "<bdi>{}</bdi></span></span>",
                message_id,
                message_id,
            )
        key = visible(key)
        # Still one line: the key after the id, both whole in the tooltip.
        return format_html(
            '<span class="redisq-id" title="{} ({}: {})"><span class="redisq-id-end">'
            '<bdi>{}</bdi></span><span class="redisq-key">{}</span></span>',
            message_id,
            _("ordering key"),
            key,
            message_id,
            key,
        )

    @admin.display(description=_("ordering key"))
    def ordering_key(self, obj: DeadLetter) -> str:
        return visible(ordering_key_of(obj) or "-")

    @admin.display(description=_("error message"))
    def error_text(self, obj: DeadLetter) -> str:
        return visible(obj.error_message)

    @admin.display(description=_("where"), ordering="consumer")
    def where(self, obj: DeadLetter) -> SafeString:
        where = visible(f"{obj.queue}/{obj.consumer}")
        if obj.partition is not None:  # shown where it matters: a partitioned queue's
            where = visible(f"{obj.queue}#{obj.partition}/{obj.consumer}")
        if obj.task:  # a task's dead letter: every one is in tasks.<queue>/tasks
            return format_html(
                '<span class="redisq-cut redisq-where" title="{} ({})">'
                '<span class="redisq-task">{}</span></span>',
                visible(obj.task),
                where,
                visible(obj.task),
            )
        return format_html(
            '<span class="redisq-cut redisq-where" title="{}">{}</span>', where, where
        )

    @admin.display(description=_("error"), ordering="error_class")
    def error_summary(self, obj: DeadLetter) -> SafeString:
        return format_html(
            '<span class="redisq-cut redisq-error" title="{}: {}">'
            '<span class="redisq-error-class">{}</span> {}</span>',
            visible(obj.error_class or "-"),
            Truncator(visible(obj.error_message)).chars(TOOLTIP_CHARS),
            visible(obj.error_class or "-"),
            Truncator(visible(obj.error_message)).chars(CELL_CHARS),
        )

    # Times as every table of the console shows them (figures.clock), on the row's page
    # too: Django would write the fields as "May 3, 2024, 10:22 p.m.".

    @admin.display(description=_("last failure"), ordering="last_failed_at")
    def last_failure(self, obj: DeadLetter) -> SafeString:
        return figures.clock(obj.last_failed_at)

    @admin.display(description=_("first failure"))
    def first_failure(self, obj: DeadLetter) -> SafeString:
        return figures.clock(obj.first_failed_at)

    @admin.display(description=_("published"))
    def published(self, obj: DeadLetter) -> SafeString:
        return figures.clock(obj.published_at)

    @admin.display(description=_("last retried"))
    def retried(self, obj: DeadLetter) -> SafeString:
        return figures.clock(obj.retried_at)

    @admin.display(description=_("payload"))
    def payload_preview(self, obj: DeadLetter) -> SafeString:
        return format_html(
            '<code class="redisq-cut redisq-payload" title="{}">{}</code>',
            Truncator(obj.payload).chars(TOOLTIP_CHARS),
            Truncator(obj.payload).chars(CELL_CHARS),
        )

    @admin.display(description=_("payload"))
    def pretty_payload(self, obj: DeadLetter) -> SafeString:
        return fold(_("payload"), pretty_json(obj.payload), "redisq-json")

    @admin.display(description=_("headers"))
    def pretty_headers(self, obj: DeadLetter) -> SafeString:
        return format_html('<pre class="redisq-json">{}</pre>', pretty_json(obj.headers))

    @admin.display(description=_("traceback"))
    def formatted_traceback(self, obj: DeadLetter) -> SafeString:
        return fold(_("traceback"), obj.traceback, "redisq-traceback")

    @admin.display(description=_("retry"))
    def retry_button(self, obj: DeadLetter) -> str:
        if obj.status != DeadLetter.Status.DEAD:
            return "-"
        if not deadletters.redrivable(obj):
            return format_html(
                '<span class="redisq-warning" title="{}">{}</span>',
                deadletters.not_redrivable_reason(obj),
                _("cannot retry"),
            )
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
