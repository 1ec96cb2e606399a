"""Dead-letter triage pages of the admin: dead letters by cause, and retry/discard of every
dead letter matching the current filter (a summary first, then the work done server
side in chunks from the filter itself: never one form field per row).

Mixed into :class:`~redisq_django.admin.deadletters.DeadLetterAdmin`; the work is done
by :mod:`redisq_django.deadletters`, which ``manage.py redisq dead`` calls too.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponsePermanentRedirect,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from redisq_django import deadletters
from redisq_django.admin.common import BREADCRUMBS_OL
from redisq_django.admin.deadletters import filter_chips
from redisq_django.admin.deadletters.filter_chips import BY, NEXT
from redisq_django.admin.live import admin_broker
from redisq_django.models import DeadLetter

#: The verbs of the bulk operations, as they appear in URLs.
OPS = ("retry", "discard")


def take(request: HttpRequest, name: str) -> str:
    """The value of ``name`` in ``request``'s query, which loses it: a parameter of the
    page (what makes a cause, where to return), not a filter of the changelist."""
    query = request.GET.copy()
    value = query.pop(name, [""])[-1]
    query._mutable = False
    request.GET = query  # type: ignore[assignment]  # (immutable again, as Django's)
    return value


class TriageViews(admin.ModelAdmin):  # type: ignore[type-arg]
    """The causes page, the "all matching" pages and the bulk actions' confirmation."""

    #: A bulk retry or discard stops after this many seconds (whole chunks), says how
    #: many are left, and is run again to continue; so a request never outlives a
    #: server's timeout however many rows match.
    bulk_budget_s = 20.0

    def has_retry_permission(self, request: HttpRequest) -> bool:
        raise NotImplementedError

    def triage_urls(self) -> list[URLPattern]:
        view = self.admin_site.admin_view
        return [
            path("causes/", view(self.causes_view), name="redisq_django_deadletter_causes"),
            # The page's address in 0.9, which a bookmark may hold: redirected, filters
            # kept, for one minor version.
            path("groups/", view(self.groups_view), name="redisq_django_deadletter_groups"),
            path(
                "matching/<str:op>/",
                view(self.matching_view),
                name="redisq_django_deadletter_matching",
            ),
        ]

    # -- helpers -------------------------------------------------------------------------

    def changelist_url(self, query: str = "") -> str:
        url = reverse("admin:redisq_django_deadletter_changelist")
        return f"{url}?{query}" if query else url

    def filtered(self, request: HttpRequest) -> QuerySet[DeadLetter]:
        """The rows the changelist shows for ``request``'s filters and search (all
        pages).

        Raises:
            IncorrectLookupParameters: a filter the changelist would refuse.
        """
        return self.get_changelist_instance(request).get_queryset(request)

    def context(self, request: HttpRequest, title: Any, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.model._meta,
            "breadcrumbs_ol": BREADCRUMBS_OL,
            "back_url": self.changelist_url(request.GET.urlencode()),
            **extra,
        }

    # -- causes --------------------------------------------------------------------------

    def groups_view(self, request: HttpRequest) -> HttpResponse:
        """Deprecated address of :meth:`causes_view` (``groups/``, 0.9): redirected there
        with the same query."""
        query = request.GET.urlencode()
        url = reverse("admin:redisq_django_deadletter_causes")
        return HttpResponsePermanentRedirect(f"{url}?{query}" if query else url)

    def causes_view(self, request: HttpRequest) -> HttpResponse:
        """The causes of dead letters: those of one consumer, task, error class and
        normalised message together, or with ``?by=task`` those of one consumer and task
        (the current filters apply; status *dead* unless a status is chosen)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        query = request.GET
        by = query.get(BY, deadletters.BY_ERROR)
        if by not in (deadletters.BY_ERROR, deadletters.BY_TASK):
            by = deadletters.BY_ERROR
        if not any(k.startswith("status") for k in query):  # triage is about the dead
            dead = query.copy()
            dead["status__exact"] = DeadLetter.Status.DEAD
            url = reverse("admin:redisq_django_deadletter_causes")
            return HttpResponseRedirect(f"{url}?{dead.urlencode()}")
        take(request, BY)
        filters = request.GET
        try:
            cl = self.get_changelist_instance(request)
            rows = cl.get_queryset(request)
        except IncorrectLookupParameters:
            return HttpResponseRedirect(self.changelist_url("e=1"))
        found, total = deadletters.causes(rows, by=by)
        status = query.get("status__exact", "")
        lines = [
            (c, urlencode({**c.lookup, **({"status__exact": status} if status else {})}))
            for c in found
        ]
        url = reverse("admin:redisq_django_deadletter_causes")
        by_task = filters.copy()
        by_task[BY] = deadletters.BY_TASK
        # Triage is of the dead: status dead is the page's own, shown with no remove link.
        fixed = ["status__exact"] if status == DeadLetter.Status.DEAD else []
        chips = filter_chips.chips(cl, query, url, fixed=fixed)
        context = self.context(
            request,
            _("Dead letters by cause"),
            by=by,
            by_error_url=f"{url}?{filters.urlencode()}",
            by_task_url=f"{url}?{by_task.urlencode()}",
            causes=lines,
            total_causes=total,
            can_retry=self.has_retry_permission(request),
            status=status,
            filter_chips=chips,
            clear_filters_url=filter_chips.clear_url(url, query)
            if any(c.remove_url for c in chips)
            else "",
            # A cause's Retry all / Discard all returns here, this page's filters kept.
            next_query=urlencode({NEXT: request.get_full_path()}),
        )
        return TemplateResponse(request, "admin/redisq_django/deadletter/causes.html", context)

    # -- all matching --------------------------------------------------------------------

    def matching_view(self, request: HttpRequest, op: str) -> HttpResponse:
        """GET: what retrying (discarding) every dead letter matching the filter would
        touch. POST: do it, in chunks, then back to the filtered list."""
        if op not in OPS:
            raise Http404
        if not self.has_retry_permission(request):
            raise PermissionDenied
        back = take(request, NEXT)
        if not url_has_allowed_host_and_scheme(
            back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            # Back to the list with the filter that chose the rows (every one of them
            # shown on it as a chip).
            back = self.changelist_url(request.GET.urlencode())
        try:
            rows = self.filtered(request)
        except IncorrectLookupParameters:
            return HttpResponseRedirect(self.changelist_url("e=1"))
        if request.method == "POST":
            self.run_bulk(request, rows, op)
            return HttpResponseRedirect(back)
        return self.summary_page(request, rows, op, hidden=[], back=back)

    def summary_page(
        self,
        request: HttpRequest,
        rows: QuerySet[DeadLetter],
        op: str,
        hidden: list[tuple[str, str]],
        back: str = "",
    ) -> TemplateResponse:
        """The confirmation: count, consumers, error classes and a sample of what the
        operation touches; its form posts ``hidden`` and nothing per row; "No, take me
        back" leads to ``back`` (default: the filtered list)."""
        context = self.context(
            request,
            _("Are you sure?"),
            op=op,
            summary=deadletters.summary(rows),
            hidden=hidden,
            form_url=request.get_full_path(),
            **({"back_url": back} if back else {}),
        )
        return TemplateResponse(request, "admin/redisq_django/deadletter/confirm.html", context)

    def run_bulk(self, request: HttpRequest, rows: QuerySet[DeadLetter], op: str) -> None:
        """Retry or discard the dead ones of ``rows`` and report through ``messages``."""
        if op == "retry":
            result = deadletters.retry_matching(
                rows, request.user, broker=admin_broker(), budget_s=self.bulk_budget_s
            )
            text = ngettext(
                "Sent %(count)d dead letter again, to its own consumer.",
                "Sent %(count)d dead letters again, each to its own consumer.",
                result.done,
            )
        else:
            result = deadletters.discard_matching(rows, request.user, budget_s=self.bulk_budget_s)
            text = ngettext(
                "Discarded %(count)d dead letter.", "Discarded %(count)d dead letters.", result.done
            )
        if result.done or not result.error:
            self.message_user(request, text % {"count": result.done}, messages.SUCCESS)
        if result.skipped:
            text = ngettext(
                "%(count)d undecodable dead letter was not retried: it would only die again. "
                "Download its raw fields from its page, then discard it.",
                "%(count)d undecodable dead letters were not retried: they would only die "
                "again. Download their raw fields from their pages, then discard them.",
                result.skipped,
            )
            self.message_user(request, text % {"count": result.skipped}, messages.WARNING)
        if result.error:
            text = gettext("Stopped: %(error)s %(count)d matching dead letters are still dead.")
            values = {"error": result.error, "count": result.remaining}
            self.message_user(request, text % values, messages.ERROR)
        elif result.remaining:
            text = gettext(
                "%(count)d matching dead letters are left (this request stopped after "
                "%(seconds)d s): run it again to continue."
            )
            values = {"count": result.remaining, "seconds": self.bulk_budget_s}
            self.message_user(request, text % values, messages.WARNING)

    # -- the actions' confirmation -------------------------------------------------------

    def confirm_action(
        self, request: HttpRequest, queryset: QuerySet[DeadLetter], action: str, op: str
    ) -> HttpResponse | None:
        """The summary page of an action, or None once confirmed. With "select all"
        (``select_across``) the form carries that flag, never the rows' ids."""
        if request.POST.get("post") == "yes":
            return None
        hidden = [("action", action), ("post", "yes"), ("index", "0")]
        selected = request.POST.getlist(ACTION_CHECKBOX_NAME)
        if request.POST.get("select_across") == "1":
            # Every matching row: the filter (in the URL) selects them. Django still wants
            # one ticked id to run an action; the rows come from the filter, not from it.
            hidden += [("select_across", "1"), (ACTION_CHECKBOX_NAME, selected[0])]
        else:  # the ticked rows: at most one page of ids (list_per_page)
            hidden += [(ACTION_CHECKBOX_NAME, pk) for pk in selected]
        return self.summary_page(request, queryset, op, hidden)
