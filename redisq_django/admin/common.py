"""What the admins share: pause/resume actions recorded in the history with old and new
values, dead-letter count annotations, honest delete wording, read-only pages, refused
pattern lookups and the breadcrumbs flag (the live figures are
:mod:`redisq_django.admin.live`'s)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import django
from django.contrib import admin, messages
from django.contrib.admin.actions import delete_selected
from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.constants import LOOKUP_SEP
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from redisq_django.models import DeadLetter

#: Django 6 styles the admin's breadcrumbs as ``<ol class="breadcrumbs">`` of ``<li>``,
#: Django 5.2 as ``<div class="breadcrumbs">``: our pages render the one that is styled.
BREADCRUMBS_OL = django.VERSION >= (6, 0)

#: The change message recorded in the admin history (stored as is, read by anyone).
PAUSED_LOG = "Paused"
RESUMED_LOG = "Resumed"


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


#: Django's delete pages, with the note of what deleting does (``redisq_delete_note``).
DELETE_CONFIRMATION_TEMPLATE = "admin/redisq_django/delete_confirmation.html"
DELETE_SELECTED_CONFIRMATION_TEMPLATE = "admin/redisq_django/delete_selected_confirmation.html"


@dataclass(frozen=True)
class DeleteNote:
    """Delete that says what it does: both confirmation pages carry ``text`` (what
    deleting these rows does, and what it does not). The admin that holds one renders
    Django's delete pages with :data:`DELETE_CONFIRMATION_TEMPLATE` and
    :data:`DELETE_SELECTED_CONFIRMATION_TEMPLATE`."""

    text: Any

    def on_form(self, context: dict[str, Any]) -> dict[str, Any]:
        """``context`` of the delete page (``render_delete_form``), with the note."""
        context["redisq_delete_note"] = self.text
        return context

    def delete_selected(
        self, model_admin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Any]
    ) -> Any:
        """Django's *delete selected*, its confirmation page given the note.

        An admin exposes it as its own ``delete_selected`` action (which replaces the
        site-wide one) with a name that says what is deleted.
        """
        response = delete_selected(model_admin, request, queryset)
        if isinstance(response, TemplateResponse) and response.context_data is not None:
            response.context_data["redisq_delete_note"] = self.text
        return response


class HonestDelete(admin.ModelAdmin):  # type: ignore[type-arg]
    """A :class:`DeleteNote` of :attr:`delete_note` on Django's delete pages."""

    #: What deleting these rows does and does not (shown before anything is deleted).
    delete_note: Any = ""
    delete_confirmation_template = DELETE_CONFIRMATION_TEMPLATE
    delete_selected_confirmation_template = DELETE_SELECTED_CONFIRMATION_TEMPLATE

    def render_delete_form(self, request: HttpRequest, context: dict[str, Any]) -> HttpResponse:
        return super().render_delete_form(request, DeleteNote(self.delete_note).on_form(context))

    def noted_delete(self, request: HttpRequest, queryset: QuerySet[Any]) -> Any:
        """Django's *delete selected*, its confirmation page given :attr:`delete_note`
        (:meth:`DeleteNote.delete_selected`)."""
        return DeleteNote(self.delete_note).delete_selected(self, request, queryset)


def pause_actions(*, paused: Any, resumed: Any) -> tuple[Callable[..., None], ...]:
    """*Pause selected* / *Resume selected* for an admin of rows with a ``paused`` flag
    (queues, consumers), named ``pause`` and ``resume``; running workers apply the
    change within seconds, and each row changed is written to the admin history.

    Args:
        paused: what the message says was paused, ``ngettext_lazy`` with a
            ``%(count)d`` placeholder (plural chosen by ``count``).
        resumed: the same, resumed.
    """

    @admin.action(description=_("Pause selected"), permissions=["change"])
    def pause(
        model_admin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Any]
    ) -> None:
        _set_paused(model_admin, request, queryset, True, paused)

    @admin.action(description=_("Resume selected"), permissions=["change"])
    def resume(
        model_admin: admin.ModelAdmin[Any], request: HttpRequest, queryset: QuerySet[Any]
    ) -> None:
        _set_paused(model_admin, request, queryset, False, resumed)

    return pause, resume


def _set_paused(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    queryset: QuerySet[Any],
    paused: bool,
    done: Any,
) -> None:
    updated = 0
    for obj in queryset:  # save() keeps auto_now fields and signals working
        if obj.paused != paused:
            obj.paused = paused
            obj.save(update_fields=["paused", "updated_at"])
            model_admin.log_change(request, obj, PAUSED_LOG if paused else RESUMED_LOG)
            updated += 1
    model_admin.message_user(
        request,
        "{} {}".format(
            done % {"count": updated},
            gettext("Running workers apply the change within seconds."),
        ),
        messages.SUCCESS,
    )


def old_and_new(form: Any) -> str:
    """What a change form changed, with the old and new values of each field
    (``paused: False → True``), so the history says what an override was before."""
    parts = [
        f"{form.fields[name].label}: {_shown(form.initial.get(name))} → "
        f"{_shown(form.cleaned_data.get(name))}"
        for name in form.changed_data
    ]
    return "Changed " + "; ".join(parts) + "."


def _shown(value: Any) -> str:
    return "empty" if value is None or value == "" else str(value)
