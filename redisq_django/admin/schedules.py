"""Admin for periodic schedules: add and edit them (cron or interval, time zone, target),
enable or disable them, reset a declared one to what the code says. Running workers
apply every change within seconds."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from redisq_django import figures
from redisq_django.admin.live import guarded, status
from redisq_django.conf import check_queue_known
from redisq_django.core.clock import datetime_to_ms, ms_to_datetime
from redisq_django.core.errors import ConfigurationError
from redisq_django.core.keys import validate_name
from redisq_django.models import Schedule
from redisq_django.schedules.listing import (
    DISABLED,
    ENABLED,
    INVALID,
    NOT_DECLARED,
    row_next_tick,
    row_state,
)
from redisq_django.schedules.schedule_sync import differs_from_code, spec_from_snapshot
from redisq_django.schedules.scheduler import REPAIR_AFTER_MS
from redisq_django.schedules.spec import QueueTarget, target_of
from redisq_django.schedules.targets import load_task
from redisq_django.schedules.timing import ScheduleError, Timing, every_to_ms

#: The change messages recorded in the admin history (stored as is, read by anyone).
ENABLED_LOG = "Enabled"
DISABLED_LOG = "Disabled"
RESET_LOG = "Reset to the code's declaration"

#: The attribute of a listed row holding why Redis did not answer ("" when it did).
REDIS_ERROR = "_redisq_error"
#: The attribute of a listed row holding its latest (claimed, sent) ticks in Redis, ms.
TICKS = "_redisq_ticks"
NEXT_RUN_UNKNOWN = _(
    "Unknown: Redis does not answer, and no schedule fires until it does (then the due "
    "runs are caught up as each schedule's missed policy says)."
)


def _banner(error: str) -> dict[str, Any]:
    return {"redisq_error": error}


def _text(local: dt.datetime) -> str:
    """A time in words of a sentence: to the second, 24-hour, with its zone."""
    return local.strftime("%Y-%m-%d %H:%M:%S %Z")


#: Each state's badge: a word, its colour only a complement.
STATE_BADGES = {
    ENABLED: ("redisq-active", _("enabled")),
    DISABLED: ("redisq-off", _("disabled")),
    NOT_DECLARED: ("redisq-off", _("not run: no longer declared in code")),
    INVALID: ("redisq-dead", _("not run: invalid")),
}


#: Columns of a declared schedule that only the code changes.
CODE_OWNED = ("name", "queue", "task", "payload")


class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    """Checks a schedule as workers will read it: one of cron and interval, a valid cron
    and time zone, one of queue and task, a task that imports."""

    class Meta:
        model = Schedule
        fields = "__all__"

    def _value(self, data: dict[str, Any], field: str) -> Any:
        # Read-only fields (a declared schedule's target) are not in the form.
        return data[field] if field in data else getattr(self.instance, field)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        cron, every = self._value(data, "cron"), self._value(data, "every")
        try:
            if "name" in data:
                validate_name("schedule", data["name"])
            Timing(cron or None, every_to_ms(every) if every else None, data.get("timezone", ""))
        except ConfigurationError as exc:  # ScheduleError, InvalidName
            raise ValidationError(str(exc)) from None
        queue, task = self._value(data, "queue"), self._value(data, "task")
        try:
            target = target_of(queue, task, self._value(data, "payload"))
            if isinstance(target, QueueTarget):
                check_queue_known(target.queue)
            elif "task" in data:  # only when staff typed it: the code's own is trusted
                load_task(target.path)
        except ConfigurationError as exc:
            raise ValidationError(str(exc)) from None
        catch_up = data.get("catch_up")
        if catch_up is not None and catch_up.total_seconds() < 0:
            self.add_error("catch_up", gettext("The catch-up bound must not be negative."))
        return data


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = ScheduleForm
    change_list_template = "admin/redisq_django/change_list.html"
    change_form_template = "admin/redisq_django/live_change_form.html"
    list_display = (
        "name",
        "timing_display",
        "target_display",
        "state_display",
        "last_run",
        "next_tick",
        "origin",
        "changed_in_admin",
    )
    list_filter = ("enabled", "origin", "declared", "missed")
    search_fields = ("name", "queue", "task", "cron")
    actions = ("enable", "disable", "reset_to_code")
    fieldsets = (
        (None, {"fields": ("name", "enabled")}),
        (_("When (a cron or an interval)"), {"fields": ("cron", "every", "timezone")}),
        (_("What (a queue and its message, or a task)"), {"fields": ("queue", "task", "payload")}),
        (_("After downtime"), {"fields": ("missed", "catch_up")}),
        (
            _("State"),
            {
                "fields": (
                    "origin",
                    "declared",
                    "declaration",
                    "ticking_since",
                    "last_run",
                    "next_tick",
                    "last_message_id",
                )
            },
        ),
    )
    readonly_fields = (
        "origin",
        "declared",
        "declaration",
        "ticking_since",
        "last_run",
        "next_tick",
        "last_message_id",
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None:
            # The name identifies its ticks; a declared schedule's target is the code's.
            fields += CODE_OWNED if obj.origin == Schedule.Origin.CODE else ("name",)
        return fields

    @admin.display(description=_("when"))
    def timing_display(self, obj: Schedule) -> str:
        try:
            return obj.timing().describe()
        except ScheduleError as exc:
            return gettext("invalid: %(error)s") % {"error": exc}

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        # One round trip per page: schedules fire through Redis, so while it does not
        # answer the page says so (the banner) and shows no next run it cannot know; when
        # it does, its claimed and sent ticks say which tick failed to go out.
        names = list(Schedule.objects.values_list("name", flat=True))
        ticks: dict[str, tuple[int, int]] = {}
        if names:
            reading = guarded(lambda broker: broker.schedule_ledger.ticks(names))
            error, ticks = reading.error, reading.value or {}
        else:
            error = status().error
        response = super().changelist_view(request, {**(extra_context or {}), **_banner(error)})
        cl = (getattr(response, "context_data", None) or {}).get("cl")
        for row in cl.result_list if cl is not None else ():
            setattr(row, REDIS_ERROR, error)
            setattr(row, TICKS, ticks.get(row.name))
        return response

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = {**(extra_context or {}), **_banner(status().error)}
        return super().changeform_view(request, object_id, form_url, extra)

    @admin.display(description=_("next run"))
    def next_tick(self, obj: Schedule) -> str | SafeString | None:
        # Computed from the clock as the page is shown: the stored next_run_at is only
        # as fresh as the last save or fire, so it reads stale after downtime. Formatted
        # here, so the list and the change page (which would show str()) agree.
        error = getattr(obj, REDIS_ERROR, None)
        if error is None:  # the change page (the outage, if any, is remembered)
            error = status().error
        if error:
            return format_html("{} {}", figures.unknown(NEXT_RUN_UNKNOWN), _("unknown"))
        tick = row_next_tick(obj, datetime_to_ms(timezone.now()))
        if tick is None:
            return None
        return figures.clock_ms(tick)

    @admin.display(description=_("state"), ordering="enabled")
    def state_display(self, obj: Schedule) -> SafeString:
        listed = row_state(obj, datetime_to_ms(timezone.now()))
        css, label = STATE_BADGES.get(listed.state, ("redisq-off", listed.state))
        badge = format_html('<span class="redisq-badge {}">{}</span>', css, label)
        if listed.error:
            return format_html("{} {}", badge, listed.error)
        return badge

    @admin.display(description=_("last run"), ordering="last_run_at")
    def last_run(self, obj: Schedule) -> SafeString:
        shown = figures.clock(obj.last_run_at)
        claimed, sent = getattr(obj, TICKS, None) or (0, 0)
        # A worker claims a tick, publishes it, then marks it sent; still unsent well
        # after it fell due, its publishing failed (each worker gives up after a few
        # attempts) or no worker lived to finish it.
        if claimed > sent and datetime_to_ms(timezone.now()) - claimed > REPAIR_AFTER_MS:
            failed = format_html(
                '<span class="redisq-tick-failed">{}</span>',
                gettext(
                    "tick of %(when)s not published: a worker claimed it and its publishing "
                    "failed or stopped (the workers' log says why)"
                )
                % {"when": _text(timezone.localtime(ms_to_datetime(claimed)))},
            )
            return format_html("{}<br>{}", shown, failed)
        return shown

    @admin.display(description=_("ticking since"))
    def ticking_since(self, obj: Schedule) -> SafeString:
        return figures.clock(obj.since)

    @admin.display(description=_("target"))
    def target_display(self, obj: Schedule) -> str:
        return f"task {obj.task}" if obj.task else f"queue {obj.queue}"

    @admin.display(description=_("changed in admin"))
    def changed_in_admin(self, obj: Schedule) -> str:
        # Words, not Django's boolean icons: a red ✗ for "not changed" read as a failure.
        if obj.origin != Schedule.Origin.CODE:
            return gettext("made in the admin")
        if differs_from_code(obj):
            return gettext("changed in the admin")
        return gettext("as declared in code")

    @admin.action(description=_("Enable selected"), permissions=["change"])
    def enable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description=_("Disable selected"), permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._set_enabled(request, queryset, False)

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet[Schedule], on: bool) -> None:
        changed = 0
        for row in queryset:  # save(): a schedule enabled again ticks from now on
            if row.enabled != on:
                row.enabled = on
                row.save(update_fields=["enabled", "updated_at"])
                self.log_change(request, row, ENABLED_LOG if on else DISABLED_LOG)
                changed += 1
        text = (
            ngettext("Enabled %(count)d schedule.", "Enabled %(count)d schedules.", changed)
            if on
            else ngettext("Disabled %(count)d schedule.", "Disabled %(count)d schedules.", changed)
        )
        self.message_user(
            request,
            "{} {}".format(
                text % {"count": changed}, gettext("Running workers apply it within seconds.")
            ),
            messages.SUCCESS,
        )

    @admin.action(description=_("Reset selected to the code's declaration"), permissions=["change"])
    def reset_to_code(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        reset = skipped = 0
        for row in queryset:
            if row.origin != Schedule.Origin.CODE or not row.declaration:
                skipped += 1
                continue
            if not differs_from_code(row):
                continue
            row.from_spec(spec_from_snapshot(row.name, row.declaration))
            row.save()
            self.log_change(request, row, RESET_LOG)
            reset += 1
        text = ngettext(
            "Reset %(count)d schedule to its declaration in code.",
            "Reset %(count)d schedules to their declarations in code.",
            reset,
        )
        self.message_user(request, text % {"count": reset}, messages.SUCCESS)
        if skipped:
            text = ngettext(
                "%(count)d schedule was made in the admin and has no declaration in code.",
                "%(count)d schedules were made in the admin and have no declaration in code.",
                skipped,
            )
            self.message_user(request, text % {"count": skipped}, messages.WARNING)
