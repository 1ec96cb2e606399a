"""What the queue, consumer and overview admins share: pause/resume actions recorded in
the history, live figures read once per page, dead-letter count annotations, honest
delete wording and the breadcrumbs flag."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import django
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.constants import LOOKUP_SEP
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from redisq_django import figures
from redisq_django.admin.live import Live, live_stats
from redisq_django.models import DeadLetter

#: Django 6 styles the admin's breadcrumbs as ``<ol class="breadcrumbs">`` of ``<li>``,
#: Django 5.2 as ``<div class="breadcrumbs">``: our pages render the one that is styled.
BREADCRUMBS_OL = django.VERSION >= (6, 0)

#: The change message recorded in the admin history (stored as is, read by anyone).
PAUSED_LOG = "Paused"
RESUMED_LOG = "Resumed"

#: Attributes a changelist sets on each row it shows: its live stats (None: unknown or
#: absent) and why they are unknown ("" when Redis answered).
LIVE = "redisq_live"
LIVE_ERROR = "redisq_live_error"
_MISSING = object()


def dead_letter_count(**match: str) -> Coalesce:
    """An annotation: how many dead letters in status *dead* have the outer row's values.

    Args:
        match: DeadLetter field -> outer field, e.g. ``queue="queue__name"``.

    Returns:
        A correlated ``COUNT`` subquery (0 when none), so a changelist costs one query
        however many rows it shows, and the column can be sorted on.
    """
    rows = (
        DeadLetter.objects.filter(
            status=DeadLetter.Status.DEAD, **{f: OuterRef(o) for f, o in match.items()}
        )
        .order_by()
        .values(*match)  # GROUP BY the matched fields: one count per outer row
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(rows, output_field=IntegerField()), 0)


class ReadOnlyPages(admin.ModelAdmin):  # type: ignore[type-arg]
    """An admin entry whose pages only show what Redis holds (the overview, the task
    results): nothing to add, change or delete through Django's forms."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


#: Lookups no querystring may use: the database runs a pattern over every row, and one
#: like ``(a+)+$`` backtracks exponentially, so anyone who may view could tie it up.
REFUSED_LOOKUPS = frozenset({"regex", "iregex"})


class NoPatternLookups(admin.ModelAdmin):  # type: ignore[type-arg]
    """Refuses :data:`REFUSED_LOOKUPS` in the changelist's querystring (Django's admin
    allows any lookup on a model's own fields, ``?payload__regex=…`` included)."""

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        if lookup.rsplit(LOOKUP_SEP, 1)[-1] in REFUSED_LOOKUPS:
            return False
        return bool(super().lookup_allowed(lookup, value, request))


class HonestDelete(admin.ModelAdmin):  # type: ignore[type-arg]
    """Delete that says what it does: the action's name and both confirmation pages
    carry :attr:`delete_note` (what deleting these rows does, and what it does not)."""

    #: What deleting these rows does and does not (shown before anything is deleted).
    delete_note: Any = ""
    delete_confirmation_template = "admin/redisq_django/delete_confirmation.html"
    delete_selected_confirmation_template = "admin/redisq_django/delete_selected_confirmation.html"

    def render_delete_form(self, request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
        context["redisq_delete_note"] = self.delete_note
        return super().render_delete_form(request, context)

    def noted_delete(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        """Django's *delete selected*, its confirmation page given :attr:`delete_note`.

        Subclasses expose it as their own ``delete_selected`` action (which replaces
        the site-wide one) with a name that says what is deleted.
        """
        response = delete_selected(self, request, queryset)
        if isinstance(response, TemplateResponse) and response.context_data is not None:
            response.context_data["redisq_delete_note"] = self.delete_note
        return response


class LiveAdmin(HonestDelete):
    """A changelist whose rows show live figures from Redis, read for all rows of the
    page at once (:func:`~redisq_django.admin.live.live_stats`: two round trips); a
    banner says when Redis is unreachable, and every figure has its help text.

    Subclasses say which queue a row belongs to and which stats it shows.
    """

    change_list_template = "admin/redisq_django/change_list.html"
    #: The figures explained under the list (keys of :data:`figures.HELP`).
    glossary: tuple[str, ...] = ()

    def queue_of(self, obj: Any) -> str:
        raise NotImplementedError

    def stats_of(self, obj: Any, live: Live) -> Any:
        raise NotImplementedError

    def live_of(self, obj: Any) -> tuple[Any, str]:
        """``obj``'s live stats and why they are unknown ("" when Redis answered)."""
        stats = getattr(obj, LIVE, _MISSING)
        if stats is _MISSING:  # shown outside a changelist: read (cached) on demand
            live = live_stats([self.queue_of(obj)])
            return self.stats_of(obj, live), live.error
        return stats, getattr(obj, LIVE_ERROR, "")

    def live_context(self, error: str) -> dict[str, Any]:
        return {
            "redisq_error": error,
            "redisq_glossary": [(key, figures.HELP[key]) for key in self.glossary],
        }

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        response = super().changelist_view(request, extra_context)
        cl = getattr(response, "context_data", None) or {}
        if isinstance(response, TemplateResponse) and "cl" in cl:
            rows = list(cl["cl"].result_list)  # the page's rows, evaluated once
            live = live_stats(self.queue_of(r) for r in rows)
            for row in rows:
                setattr(row, LIVE, self.stats_of(row, live))
                setattr(row, LIVE_ERROR, live.error)
            assert response.context_data is not None
            response.context_data.update(self.live_context(live.error))
        return response


def live_column(key: str, value: Callable[[Any], Any], title: Any) -> Any:
    """A column showing ``value(stats)`` of the row's live stats with the help text of
    figure ``key``; unknown when Redis is unreachable, a dash when Redis has no such
    consumer yet."""

    @admin.display(description=title)
    def column(self: LiveAdmin, obj: Any) -> SafeString:
        stats, error = self.live_of(obj)
        if stats is None:
            return figures.unknown() if error else figures.absent()
        return figures.figure(value(stats), key)

    return column


class PauseActions(LiveAdmin):
    """*Pause selected* / *Resume selected* for models with a ``paused`` flag (queues,
    consumers); running workers apply the change within seconds.

    Subclasses say what they paused with ``paused_message`` / ``resumed_message``
    (``ngettext_lazy`` with a ``%(count)d`` placeholder, plural chosen by ``count``).
    """

    paused_message: Any
    resumed_message: Any

    @admin.action(description=_("Pause selected"), permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._set_paused(request, queryset, True)

    @admin.action(description=_("Resume selected"), permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        self._set_paused(request, queryset, False)

    def _set_paused(self, request: HttpRequest, queryset: QuerySet[Any], paused: bool) -> None:
        updated = 0
        for obj in queryset:  # save() keeps auto_now fields and signals working
            if obj.paused != paused:
                obj.paused = paused
                obj.save(update_fields=["paused", "updated_at"])
                self.log_change(request, obj, PAUSED_LOG if paused else RESUMED_LOG)
                updated += 1
        done = self.paused_message if paused else self.resumed_message
        self.message_user(
            request,
            "{} {}".format(
                done % {"count": updated},
                gettext("Running workers apply the change within seconds."),
            ),
            messages.SUCCESS,
        )

    def construct_change_message(
        self, request: HttpRequest, form: Any, formsets: Any, add: bool = False
    ) -> Any:
        """What changed, with the old and new values of each field (``paused: False →
        True``), so the history says what an override was before."""
        if add or not form.changed_data:
            return super().construct_change_message(request, form, formsets, add)
        parts = [
            f"{form.fields[name].label}: {_shown(form.initial.get(name))} → "
            f"{_shown(form.cleaned_data.get(name))}"
            for name in form.changed_data
        ]
        return "Changed " + "; ".join(parts) + "."


def _shown(value: Any) -> str:
    return "empty" if value is None or value == "" else str(value)
