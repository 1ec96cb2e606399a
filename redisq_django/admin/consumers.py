"""Admin for logical consumers: state, live figures, pause/resume, validated overrides
and which value wins; every change in the admin history with old and new values."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
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
    CONSUMER,
    LivePages,
    LiveRows,
    declared_ordered,
    guarded,
    live_column,
    ordered_text,
)
from redisq_django.conf import get_core_config
from redisq_django.models import TUNABLES, Consumer

CONSUMER_DELETE_NOTE = _(
    "Deleting a consumer here deletes its row in the database (its pause flag and "
    "overrides) — it stays registered in Redis with its messages, and a worker that "
    "declares it writes the row again when it starts. Remove its @consumer declaration "
    "to stop running it."
)
#: The figures explained under the list and on a consumer's live page (keys of
#: ``figures.HELP``).
GLOSSARY = (
    "state",
    "backlog",
    "in_flight",
    "retrying",
    "dead",
    "oldest_unacked",
    "instances",
)

#: The rule each override must follow, shown under its field.
OVERRIDE_HELP = {
    "max_retries": _("Retries after the first delivery, 0 or more."),
    "backoff": _("Seconds, 0 or more: the k-th retry waits up to backoff x 2^(k-1)."),
    "max_backoff": _("Seconds, at least the backoff: the longest wait between retries."),
    "visibility_timeout": _(
        "Seconds, at least 1: an unacknowledged delivery goes to another instance after it."
    ),
    "concurrency": _("Handler threads per worker process, at least 1."),
    "time_limit": _(
        "Seconds a handler may run on one message before its attempt fails; 0: no limit."
    ),
    "rate": _(
        "At most this many messages per second, minute or hour across every worker "
        "('100/s', '600/m', '5000/h'); 'off': no limit."
    ),
    "burst": _("Messages that may start at once after a pause, within the rate; at least 1."),
    "rate_per_key": _(
        "At most this many messages of each ordering key per second, minute or hour "
        "('10/s'); 'off': no limit."
    ),
    "max_in_flight": _(
        "At most this many handlers running at once across every worker; 0: no limit."
    ),
}


class ConsumerForm(forms.ModelForm):  # type: ignore[type-arg]
    """The consumer's form: each override says its rule (``Consumer.clean`` enforces
    them) and that an empty field means the code's value."""

    class Meta:
        model = Consumer
        fields = ("enabled", "paused", *TUNABLES)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        empty = _("Empty: the value declared in code (or the REDISQ default) applies.")
        for name, rule in OVERRIDE_HELP.items():
            if name in self.fields:
                self.fields[name].help_text = format_html("{} {}", rule, empty)


@admin.register(Consumer)
class ConsumerAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Logical consumers: their live figures (:attr:`live_rows`), pause and resume,
    validated overrides, and their live pages (:attr:`live_pages`), held by the admin,
    each one concern."""

    form = ConsumerForm
    list_display = (
        "consumer_name",
        "live_link",
        "state",
        "backlog",
        "in_flight",
        "retrying",
        "dead",
        "oldest_unacked",
        "instances_alive",
        "effective_max_retries",
        "effective_concurrency",
    )
    list_filter = ("queue", "paused", "enabled", "declared")
    list_select_related = ("queue",)  # the name and every stats column read queue.name
    search_fields = ("name", "queue__name", "handler")
    readonly_fields = (
        "queue_link",
        "name",
        "handler",
        "declared",
        "start",
        "ordered",
        "live_figures",
        "flow_control",
        "effective_settings",
    )
    fieldsets = (
        (None, {"fields": ("live_figures",)}),
        (None, {"fields": ("queue_link", "name", "handler", "declared", "start", "ordered")}),
        (_("State"), {"fields": ("enabled", "paused")}),
        (
            _("Overrides (empty: the code's value applies)"),
            {"fields": (*TUNABLES, "effective_settings")},
        ),
        (_("Flow control"), {"fields": ("flow_control",)}),
    )
    actions = (
        *pause_actions(
            paused=ngettext_lazy(
                "Paused %(count)d consumer.", "Paused %(count)d consumers.", "count"
            ),
            resumed=ngettext_lazy(
                "Resumed %(count)d consumer.", "Resumed %(count)d consumers.", "count"
            ),
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
        queue_of=lambda consumer: consumer.queue.name,
        stats_of=lambda consumer, live: live.consumer(consumer.queue.name, consumer.name),
        glossary=GLOSSARY,
    )
    #: What deleting a consumer's row does, and does not.
    delete_note = DeleteNote(CONSUMER_DELETE_NOTE)

    def __init__(self, model: type[Consumer], admin_site: admin.AdminSite) -> None:
        super().__init__(model, admin_site)
        #: The live page of each consumer, and its actions.
        self.live_pages = LivePages(self, CONSUMER)

    def get_urls(self) -> list[URLPattern]:
        return [*self.live_pages.urls(), *super().get_urls()]

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
        description=_("Delete selected consumers' rows (not their messages)"),
        permissions=["delete"],
    )
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        return self.delete_note.delete_selected(self, request, queryset)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # consumers are declared in code (@consumer)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Consumer]:
        consumers: QuerySet[Consumer] = super().get_queryset(request)
        return consumers.select_related("queue").annotate(
            dead_rows=dead_letter_count(queue="queue__name", consumer="name")
        )

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        consumer = self.get_object(request, object_id) if object_id else None
        context = self.live_rows.form_context(consumer, extra_context)
        return super().changeform_view(request, object_id, form_url, context)

    # Not sortable, as __str__ was: a sorted column's header grows its sort icons, which
    # a phone's list has no room for (the rows come sorted by queue and name anyway).
    @admin.display(description=_("consumer"))
    def consumer_name(self, obj: Consumer) -> SafeString:
        return figures.breakable(obj)  # queue/name: wraps after its separators only

    @admin.display(description=_("state"), ordering="paused")
    def state(self, obj: Consumer) -> SafeString:
        return figures.badge(figures.consumer_state(obj))

    backlog = live_column("backlog", lambda c: c.backlog, _("backlog"), lambda c: c.held_back)
    in_flight = live_column("in_flight", lambda c: c.in_flight, _("in flight"))
    retrying = live_column("retrying", lambda c: c.waiting_retry, _("retrying"))
    oldest_unacked = live_column(
        "oldest_unacked", lambda c: figures.age(c.oldest_unacked_age_s), _("oldest unacked")
    )

    @admin.display(description=_("instances"))
    def instances_alive(self, obj: Consumer) -> SafeString:
        stats, error = self.live_rows.of(obj)
        if stats is None:
            return figures.unknown() if error else figures.absent()
        return figures.instances(len(stats.workers), stats.stalled, stats.instances_alive)

    @admin.display(description=_("dead"), ordering="dead_rows")
    def dead(self, obj: Consumer) -> SafeString:
        """Dead letters in the database plus those still in Redis (not yet sunk)."""
        stats, error = self.live_rows.of(obj)
        in_redis = stats.dead if stats else (None if error else 0)
        return figures.dead_cell(getattr(obj, "dead_rows", 0), in_redis)

    @admin.display(description=_("max retries"))
    def effective_max_retries(self, obj: Consumer) -> str:
        return str(obj.effective("max_retries", get_core_config()).value)

    @admin.display(description=_("concurrency"))
    def effective_concurrency(self, obj: Consumer) -> str:
        return str(obj.effective("concurrency", get_core_config()).value)

    # -- the consumer's page -------------------------------------------------------------

    @admin.display(description=_("queue"))
    def queue_link(self, obj: Consumer) -> SafeString:
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:redisq_django_queue_change", args=[obj.queue_id]),
            obj.queue.name,
        )

    @admin.display(description=_("ordered"))
    def ordered(self, obj: Consumer) -> str:
        """Whether the code declares it ordered (``@consumer(ordered=True)``), as this
        process finds its declaration; the row does not keep it."""
        return ordered_text(declared_ordered(obj.queue.name, obj.name))

    @admin.display(description=_("live page"))
    def live_link(self, obj: Consumer) -> SafeString:
        url = reverse("admin:redisq_django_consumer_live", args=[obj.queue.name, obj.name])
        return format_html('<a href="{}" class="redisq-live-link">{} &rsaquo;</a>', url, _("live"))

    @admin.display(description=_("live figures"))
    def live_figures(self, obj: Consumer) -> SafeString:
        stats, error = self.live_rows.of(obj)
        state = figures.badge(figures.consumer_state(obj))
        dead_url = (
            reverse("admin:redisq_django_deadletter_changelist")
            + "?"
            + urlencode({"queue": obj.queue.name, "consumer": obj.name, "status__exact": "dead"})
        )
        dead_link = format_html(
            '<a href="{}">{}</a>',
            dead_url,
            figures.dead_cell(getattr(obj, "dead_rows", 0), stats.dead if stats else None),
        )
        live = format_html(
            '<p><a href="{}" id="redisq-live-page-link">{}</a></p>',
            reverse("admin:redisq_django_consumer_live", args=[obj.queue.name, obj.name]),
            _(
                "Open its live page: every message waiting, delayed, retrying, in flight; its "
                "instances, trends and actions"
            ),
        )
        if stats is None:
            missing = figures.unknown() if error else figures.absent()
            table = figures.figure_table([("backlog", missing), ("dead", dead_link)])
            return format_html('{}<p class="redisq-state">{}</p>{}', live, state, table)
        warning = (
            format_html('<p class="redisq-warning" role="alert">⚠ {}</p>', figures.STALLED_TITLE)
            if stats.stalled
            else ""
        )
        table = figures.figure_table(
            [
                ("backlog", stats.backlog),
                ("in_flight", stats.in_flight),
                ("retrying", stats.waiting_retry),
                ("dead", dead_link),
                ("oldest_unacked", figures.age(stats.oldest_unacked_age_s)),
                (
                    "instances",
                    figures.instances(len(stats.workers), stats.stalled, stats.instances_alive),
                ),
            ]
        )
        return format_html('{}{}<p class="redisq-state">{}</p>{}', live, warning, state, table)

    @admin.display(description=_("limits, and what they do now"))
    def flow_control(self, obj: Consumer) -> SafeString:
        """Each limit that applies, and what it does now: messages waiting for the rate,
        slots in use, attempts stopped by the time limit in the last hour; for an
        ``atomic=True`` consumer, the duplicates its inbox skipped in the last hour."""
        spec = obj.to_spec(lambda m: None, get_core_config())
        atomic = obj.declared_atomic
        reading = guarded(
            lambda b: (
                *b.operator.flow(obj.queue.name, obj.name),
                b.operator.last_hour(obj.queue.name, obj.name, "skipped") if atomic else 0,
            )
        )
        unknown: Any = figures.unknown(reading.error)
        rate_now = slots_now = timed_now = skipped_now = unknown
        if reading.value is not None:
            flow, timed_out, skipped = reading.value
            skipped_now = _("%(n)d duplicate(s) skipped in the last hour") % {"n": skipped}
            rate_now = (
                _("at its limit now: messages wait in the queue for their turn")
                if flow.at_rate_limit(spec.rate)
                else _("below its limit now")
            )
            slots_now = _("%(n)d in use now") % {"n": flow.slots_in_use}
            timed_now = _("%(n)d attempt(s) stopped at the limit in the last hour") % {
                "n": timed_out
            }
        none = _("no limit")
        rows = [
            (_("rate"), spec.rate.describe() if spec.rate else none, rate_now),
            (
                _("rate per key"),
                spec.rate_per_key.describe() if spec.rate_per_key else none,
                "",
            ),
            (_("max in flight"), spec.max_in_flight or none, slots_now),
            (
                _("time limit"),
                f"{spec.time_limit:g} s" if spec.time_limit else none,
                timed_now,
            ),
            (
                _("exactly once (atomic)"),
                _("on, database %(db)s") % {"db": atomic} if atomic else _("off"),
                skipped_now if atomic else "",
            ),
        ]
        return format_html(
            '<table class="redisq-flow" id="redisq-flow"><thead><tr><th>{}</th><th>{}</th>'
            "<th>{}</th></tr></thead><tbody>{}</tbody></table>",
            _("limit"),
            _("setting"),
            _("now"),
            format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", rows),
        )

    @admin.display(description=_("effective settings (and which value wins)"))
    def effective_settings(self, obj: Consumer) -> str:
        rows = obj.effective_all(get_core_config()).items()
        return format_html(
            '<table class="redisq-effective"><thead><tr><th>{}</th><th>{}</th><th>{}</th>'
            "</tr></thead><tbody>{}</tbody></table>",
            _("setting"),
            _("value"),
            _("from"),
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}{}</td></tr>",
                (
                    (
                        f,
                        _shown_limit(f, e.value),
                        e.source,
                        format_html(' <strong class="redisq-warning">({})</strong>', e.note)
                        if e.note
                        else "",
                    )
                    for f, e in rows
                ),
            ),
        )


def _shown_limit(field: str, value: Any) -> Any:
    """An effective setting as the table shows it: a limit without a value is none, a
    burst without one is the rate's default (``core/limits.default_burst``)."""
    if value is not None:
        return value
    return _("the rate's default") if field == "burst" else _("no limit")
