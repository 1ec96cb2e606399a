"""Live figures in a changelist: the rows of one page read from Redis at once
(:func:`~redisq_django.admin.live.access.live_stats`: two round trips), a banner when
Redis is unreachable, and every figure with its help text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from django.contrib import admin
from django.http import HttpResponse
from django.template.response import TemplateResponse
from django.utils.safestring import SafeString

from redisq_django import figures
from redisq_django.admin.live.access import Live, live_stats

#: The changelist template that shows the banner and the glossary.
CHANGE_LIST_TEMPLATE = "admin/redisq_django/change_list.html"

#: Attributes a changelist sets on each row it shows: its live stats (None: unknown or
#: absent) and why they are unknown ("" when Redis answered).
LIVE = "redisq_live"
LIVE_ERROR = "redisq_live_error"
_MISSING = object()


class LiveRows:
    """The live figures of an admin's rows: which queue a row belongs to (``queue_of``)
    and which of that queue's stats it shows (``stats_of``); ``glossary``, the figures
    explained under the list (keys of :data:`figures.HELP`)."""

    def __init__(
        self,
        *,
        queue_of: Callable[[Any], str],
        stats_of: Callable[[Any, Live], Any],
        glossary: tuple[str, ...],
    ) -> None:
        self.queue_of = queue_of
        self.stats_of = stats_of
        self.glossary = glossary

    def of(self, obj: Any) -> tuple[Any, str]:
        """``obj``'s live stats and why they are unknown ("" when Redis answered)."""
        stats = getattr(obj, LIVE, _MISSING)
        if stats is _MISSING:  # shown outside a changelist: read (cached) on demand
            live = live_stats([self.queue_of(obj)])
            return self.stats_of(obj, live), live.error
        return stats, getattr(obj, LIVE_ERROR, "")

    def context(self, error: str) -> dict[str, Any]:
        """The banner's reason and the glossary, for a page's template."""
        return {
            "redisq_error": error,
            "redisq_glossary": [(key, figures.HELP[key]) for key in self.glossary],
        }

    def form_context(self, obj: Any | None, extra: dict[str, Any] | None) -> dict[str, Any]:
        """``extra`` context of ``obj``'s change form (None: an add form), with the
        banner's reason and the glossary (its queue's stats read, cached)."""
        live = live_stats([self.queue_of(obj)] if obj is not None else [])
        return {**(extra or {}), **self.context(live.error)}

    def shown(self, response: HttpResponse) -> HttpResponse:
        """The changelist ``response`` with the live stats of its page's rows, read at
        once, and its banner and glossary."""
        cl = getattr(response, "context_data", None) or {}
        if isinstance(response, TemplateResponse) and "cl" in cl:
            rows = list(cl["cl"].result_list)  # the page's rows, evaluated once
            live = live_stats(self.queue_of(r) for r in rows)
            for row in rows:
                setattr(row, LIVE, self.stats_of(row, live))
                setattr(row, LIVE_ERROR, live.error)
            assert response.context_data is not None
            response.context_data.update(self.context(live.error))
        return response


class _HasLiveRows(Protocol):
    live_rows: LiveRows


def live_column(
    key: str,
    value: Callable[[Any], Any],
    title: Any,
    held_back: Callable[[Any], int] | None = None,
) -> Any:
    """A column of an admin holding ``live_rows`` (:class:`LiveRows`): ``value(stats)``
    of the row's live stats with the help text of figure ``key``; unknown when Redis is
    unreachable, a dash when Redis has no such consumer yet. With ``held_back`` (a
    backlog), the messages held back behind their ordering keys beside it."""

    @admin.display(description=title)
    def column(model_admin: _HasLiveRows, obj: Any) -> SafeString:
        stats, error = model_admin.live_rows.of(obj)
        if stats is None:
            return figures.unknown() if error else figures.absent()
        if held_back is not None:
            return figures.backlog(value(stats), held_back(stats))
        return figures.figure(value(stats), key)

    return column
