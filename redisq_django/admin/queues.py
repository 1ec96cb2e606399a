"""Admin for queues: state, live figures summed over their consumers, pause/resume, and
on each queue's page its consumers with their figures."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy

from redisq_django import figures
from redisq_django.admin.common import (
    DELETE_CONFIRMATION_TEMPLATE,
    DELETE_SELECTED_CONFIRMATION_TEMPLATE,
    DeleteNote,
    dead_letter_count,
    old_and_new,
    pause_actions,
)
from redisq_django.admin.live import (
    CHANGE_LIST_TEMPLATE,
    QUEUE,
    LivePages,
    LiveRows,
    live_column,
)
from redisq_django.admin.queue_archives import QueueArchives
from redisq_django.conf import get_core_config
from redisq_django.models import Consumer, Queue

QUEUE_DELETE_NOTE = _(
    "Deleting a queue here deletes its row and its consumers' rows in the database "
    "(their pause flags and overrides) — not the queue: its messages stay in Redis and "
    "its consumers stay registered there, and a worker that declares them writes the "
    "rows again when it starts. To delete the messages, run "
    "“manage.py redisq purge NAME”."
)
#: The figures explained under the list and on a queue's live page (keys of
#: ``figures.HELP``).
GLOSSARY = (
    "state",
    "backlog",
    "in_flight",
    "retrying",
    "delayed",
    "dead",
    "oldest_unacked",
    "instances",
    "length",
)


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Queues: their live figures (:attr:`live_rows`), pause and resume, their live
    pages (:attr:`live_pages`) and archives (:attr:`archives`), held by the admin,
    each one concern."""

    list_display = (
        "queue_name",
        "live_link",
        "state",
        "backlog",
        "in_flight",
        "retrying",
        "delayed",
        "dead",
        "oldest_unacked",
        "instances_alive",
        "length",
    )
    list_filter = ("paused",)
    search_fields = ("name",)
    readonly_fields = (
        "name",
        "live_figures",
        "consumers_live",
        "archives_live",
        "created_at",
        "updated_at",
    )
    fields = (
        "live_figures",
        "consumers_live",
        "archives_live",
        "name",
        "paused",
        "created_at",
        "updated_at",
    )
    actions = (
        *pause_actions(
            paused=ngettext_lazy("Paused %(count)d queue.", "Paused %(count)d queues.", "count"),
            resumed=ngettext_lazy("Resumed %(count)d queue.", "Resumed %(count)d queues.", "count"),
        ),
        "delete_selected",
    )
    glossary = GLOSSARY
    #: Seconds between two refreshes of a live page.
    refresh_seconds = 5
    #: Seconds between two refreshes of a live page's charts (a point is a minute).
    chart_refresh_seconds = 30
    change_list_template = CHANGE_LIST_TEMPLATE
    change_form_template = "admin/redisq_django/live_change_form.html"
    delete_confirmation_template = DELETE_CONFIRMATION_TEMPLATE
    delete_selected_confirmation_template = DELETE_SELECTED_CONFIRMATION_TEMPLATE
    #: Each row's live figures, read for the page's rows at once.
    live_rows = LiveRows(
        queue_of=lambda queue: queue.name,
        stats_of=lambda queue, live: live.queue(queue.name),
        glossary=GLOSSARY,
    )
    #: What deleting a queue's row does, and does not.
    delete_note = DeleteNote(QUEUE_DELETE_NOTE)

    def __init__(self, model: type[Queue], admin_site: admin.AdminSite) -> None:
        super().__init__(model, admin_site)
        #: The live page of each queue, and its actions.
        self.live_pages = LivePages(self, QUEUE)
        #: The named archives on each queue's page, and their removal.
        self.archives = QueueArchives(self)

    def get_urls(self) -> list[URLPattern]:
        return [*self.archives.urls(), *self.live_pages.urls(), *super().get_urls()]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self.live_rows.shown(super().changelist_view(request, extra_context))

    def render_delete_form(self, request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
        return super().render_delete_form(request, self.delete_note.on_form(context))

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        if add or not form.changed_data:
            return super().construct_change_message(request, form, formsets, add)
        return old_and_new(form)

    @admin.action(
        description=_("Delete selected queues' rows (not their messages)"), permissions=["delete"]
    )
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        return self.delete_note.delete_selected(self, request, queryset)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # queues come from code and publishing

    def get_list_display(self, request: HttpRequest) -> Any:
        shown = list(super().get_list_display(request))
        if get_core_config().history:  # how far behind the Spark archive is
            shown.append("archive_lag")
        return shown

    def get_queryset(self, request: HttpRequest) -> QuerySet[Queue]:
        queues: QuerySet[Queue] = super().get_queryset(request)
        return queues.annotate(
            dead_rows=dead_letter_count(queue="name"),
            consumer_rows=Count("consumers", distinct=True),
            consumers_paused=Count("consumers", filter=Q(consumers__paused=True), distinct=True),
        )

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        queue = self.get_object(request, object_id) if object_id else None
        context = self.live_rows.form_context(queue, extra_context)
        return super().changeform_view(request, object_id, form_url, context)

    @admin.display(description=_("name"), ordering="name")
    def queue_name(self, obj: Queue) -> SafeString:
        return figures.breakable(obj.name)  # wraps after its dots and dashes only

    @admin.display(description=_("state"), ordering="paused")
    def state(self, obj: Queue) -> SafeString:
        rows, paused = getattr(obj, "consumer_rows", None), getattr(obj, "consumers_paused", 0)
        if rows is None:  # not from the changelist's query
            rows, paused = obj.consumers.count(), obj.consumers.filter(paused=True).count()
        return figures.queue_badge(obj.paused, paused, rows)

    backlog = live_column(
        "backlog", lambda q: q.total("backlog"), _("backlog"), lambda q: q.total("held_back")
    )
    in_flight = live_column("in_flight", lambda q: q.total("in_flight"), _("in flight"))
    retrying = live_column("retrying", lambda q: q.total("waiting_retry"), _("retrying"))
    delayed = live_column("delayed", lambda q: q.delayed, _("delayed"))
    oldest_unacked = live_column(
        "oldest_unacked", lambda q: figures.age(q.oldest_unacked_age_s), _("oldest unacked")
    )
    length = live_column("length", lambda q: q.length, _("length (incl. replay window)"))
    archive_lag = live_column("archive_lag", lambda q: q.archive_lag, _("archive lag"))

    @admin.display(description=_("instances"))
    def instances_alive(self, obj: Queue) -> SafeString:
        stats, _error = self.live_rows.of(obj)
        if stats is None:
            return figures.unknown()
        stalled = [c.name for c in stats.consumers if c.stalled]
        return figures.queue_instances(len(stats.workers), stalled, stats.total("instances_alive"))

    @admin.display(description=_("dead"), ordering="dead_rows")
    def dead(self, obj: Queue) -> SafeString:
        stats, _error = self.live_rows.of(obj)
        return figures.dead_cell(
            getattr(obj, "dead_rows", 0), stats.total("dead") if stats else None
        )

    # -- the queue's page ----------------------------------------------------------------

    @admin.display(description=_("live page"))
    def live_link(self, obj: Queue) -> SafeString:
        url = reverse("admin:redisq_django_queue_live", args=[obj.name])
        return format_html('<a href="{}" class="redisq-live-link">{} &rsaquo;</a>', url, _("live"))

    @admin.display(description=_("live figures"))
    def live_figures(self, obj: Queue) -> SafeString:
        stats, _error = self.live_rows.of(obj)
        live = format_html(
            '<p><a href="{}" id="redisq-live-page-link">{}</a></p>',
            reverse("admin:redisq_django_queue_live", args=[obj.name]),
            _("Open its live page: delayed messages, its log, its consumers, trends, actions"),
        )
        if stats is None:
            return format_html("{}{}", live, figures.unknown())
        cells = [
            ("backlog", stats.total("backlog")),
            ("in_flight", stats.total("in_flight")),
            ("retrying", stats.total("waiting_retry")),
            ("delayed", stats.delayed),
            ("oldest_unacked", figures.age(stats.oldest_unacked_age_s)),
            ("length", stats.length),
            ("dropped", stats.dropped),
        ]
        if stats.archive_lag is not None:
            cells.append(("archive_lag", stats.archive_lag))
        stalled = [c.name for c in stats.consumers if c.stalled]
        alive = figures.queue_instances(len(stats.workers), stalled, stats.total("instances_alive"))
        cells.append(("instances", alive))
        warning = (
            format_html(
                '<p class="redisq-warning" role="alert">⚠ {}. {}</p>',
                figures.stalled_text(stalled),
                figures.STALLED_TITLE,
            )
            if stalled
            else ""
        )
        state = format_html('<p class="redisq-state">{}</p>', self.state(obj))
        return format_html("{}{}{}{}", live, warning, state, figures.figure_table(cells))

    @admin.display(description=_("archives"))
    def archives_live(self, obj: Queue) -> SafeString:
        """Its archives: position, lag, when registered, a gap a hard cap made, and a
        link to remove each (:class:`~redisq_django.admin.queue_archives.QueueArchives`)."""
        return self.archives.field(obj)

    @admin.display(description=_("consumers"))
    def consumers_live(self, obj: Queue) -> SafeString:
        """Its consumers with state and figures, each linking to its own page (read
        only: consumers are declared in code, never added here)."""
        stats, error = self.live_rows.of(obj)
        rows = Consumer.objects.filter(queue=obj).select_related("queue").order_by("name")
        dead_rows = dict(
            Consumer.objects.filter(queue=obj)
            .annotate(n=dead_letter_count(queue="queue__name", consumer="name"))
            .values_list("name", "n")
        )
        live = {c.name: c for c in stats.consumers} if stats else {}
        lines = []
        for row in rows:
            c = live.get(row.name)
            missing = figures.unknown() if error else figures.absent()
            lines.append(
                (
                    reverse("admin:redisq_django_consumer_change", args=[row.pk]),
                    row.name,
                    figures.badge(figures.consumer_state(row)),
                    figures.backlog(c.backlog, c.held_back) if c else missing,
                    figures.figure(c.in_flight, "in_flight") if c else missing,
                    figures.figure(c.waiting_retry, "retrying") if c else missing,
                    figures.dead_cell(dead_rows.get(row.name, 0), c.dead if c else None),
                    figures.instances(len(c.workers), c.stalled, c.instances_alive)
                    if c
                    else missing,
                )
            )
        if not lines:
            return format_html("<p>{}</p>", _("No consumer declared in code yet."))
        head = format_html_join(
            "",
            '<th class="{}">{}</th>',
            (
                ("redisq-phone-hide" if t in (_("in flight"), _("retrying")) else "", t)
                for t in (
                    _("consumer"),
                    _("state"),
                    _("backlog"),
                    _("in flight"),
                    _("retrying"),
                    _("dead"),
                    _("instances"),
                )
            ),
        )
        body = format_html_join(
            "",
            '<tr><td><a href="{}">{}</a></td><td>{}</td><td>{}</td>'
            '<td class="redisq-phone-hide">{}</td><td class="redisq-phone-hide">{}</td>'
            "<td>{}</td><td>{}</td></tr>",
            lines,
        )
        return format_html(
            '<table class="redisq-consumers"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
            head,
            body,
        )
