"""Every filter a dead-letter page applies, shown as a chip with its own remove link (that
filter only), including the ones the sidebar has no place for: a cause's error pattern
(``error_key``) from *Show* or *Retry all*, and any lookup typed into the address.

A filter the page applies and does not show is one nobody thinks of removing: another
error class then lists "0 dead letters" while hundreds exist (issue 36).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import (
    ALL_VAR,
    ERROR_FLAG,
    ORDER_VAR,
    PAGE_VAR,
    SEARCH_VAR,
    ChangeList,
)
from django.core.exceptions import FieldDoesNotExist
from django.db.models.constants import LOOKUP_SEP
from django.http import QueryDict
from django.utils.http import urlencode
from django.utils.translation import gettext_lazy as _

from redisq_django.core.wire import visible
from redisq_django.figures import pattern
from redisq_django.models import DeadLetter

#: The causes page's parameter choosing what makes a cause: how the page shows, not a
#: filter.
BY = "by"
#: The parameter of the "all matching" pages naming the page to return to.
NEXT = "next"
#: Parameters that say how to show the rows, not which: kept when a filter is removed
#: (the order, the counts beside the filters, the popup's, all rows on one page).
SHOWING = frozenset({ORDER_VAR, "_facets", "_popup", "_to_field", ALL_VAR, BY})
#: Parameters that die with any change of filter (the page number, the error flag).
TRANSIENT = frozenset({PAGE_VAR, ERROR_FLAG, NEXT})

#: A cause's error pattern: the filter *Show* and *Retry all* of a cause set, which no
#: sidebar filter lists (there are as many as there are causes).
ERROR_KEY = "error_key"

#: How a lookup reads before its value (``exact``: the value alone).
LOOKUP_WORDS: dict[str, Any] = {
    "exact": "",
    "iexact": "",
    "in": _("one of"),
    "gt": ">",
    "gte": "≥",
    "lt": "<",
    "lte": "≤",
    "isnull": _("empty"),
    "contains": _("contains"),
    "icontains": _("contains"),
    "startswith": _("starts with"),
    "istartswith": _("starts with"),
    "endswith": _("ends with"),
    "iendswith": _("ends with"),
}


@dataclass(frozen=True, kw_only=True)
class Chip:
    """One filter in force: its name, its value as shown (and whole, for the title), the
    parameters it sets, and the page without it (None: it cannot be removed here)."""

    label: str
    value: Any
    title: str
    params: tuple[str, ...]
    remove_url: str | None


def page_url(base: str, query: QueryDict, drop: Iterable[str] = ()) -> str:
    """``base`` with ``query`` less the parameters ``drop`` and the transient ones
    (order and the rest of how the rows show are kept)."""
    gone = set(drop) | TRANSIENT
    pairs = [(k, v) for k, values in query.lists() if k not in gone for v in values]
    return f"{base}?{urlencode(pairs)}" if pairs else base


def clear_url(base: str, query: QueryDict) -> str:
    """``base`` with no filter: only how the rows show is kept."""
    return page_url(base, query, drop=[k for k in query if k not in SHOWING])


def chips(
    cl: ChangeList, query: QueryDict, base: str, *, fixed: Collection[str] = ()
) -> list[Chip]:
    """The filters ``query`` applies to ``cl``'s rows, in the sidebar's order, then the
    date, then the others in the address's order, then the search.

    Args:
        cl: The changelist built from ``query`` (its sidebar filters name the values).
        query: The page's own parameters.
        base: The page's address without its query (each chip's remove link leads there).
        fixed: Parameters the page needs (the causes page's status *dead*): shown, with
            no remove link.
    """
    found: list[Chip] = []
    claimed: set[str] = set()

    def add(label: Any, value: Any, title: str, params: list[str]) -> None:
        claimed.update(params)
        removable = not fixed or not set(params) & set(fixed)
        found.append(
            Chip(
                label=str(label),
                value=value,
                title=title,
                params=tuple(params),
                remove_url=page_url(base, query, params) if removable else None,
            )
        )

    for spec in cl.filter_specs:
        used = [p for p in spec.expected_parameters() if p is not None and p in query]
        if not used:
            continue
        shown = [str(c["display"]) for c in spec.choices(cl) if c["selected"]]
        text = ", ".join(shown) if shown else raw(query, used)
        add(spec.title, visible(text), visible(text), used)

    if cl.date_hierarchy:
        parts = [f"{cl.date_hierarchy}{LOOKUP_SEP}{unit}" for unit in ("year", "month", "day")]
        used = [p for p in parts if p in query]
        if used:
            text = "-".join(str(query.get(p, "")).zfill(2) for p in used)
            add(field_label(cl.date_hierarchy), visible(text), visible(text), used)

    for param in query:
        if param in claimed or param in SHOWING or param in TRANSIENT or param == SEARCH_VAR:
            continue
        text = raw(query, [param])
        if param == ERROR_KEY:
            add(_("error"), pattern(text), visible(text), [param])
        else:
            add(field_label(param), visible(text), visible(text), [param])

    search = raw(query, [SEARCH_VAR])
    if search:
        add(_("search"), visible(search), visible(search), [SEARCH_VAR])
    return found


def field_label(param: str) -> str:
    """The name of the field a lookup parameter filters on; a parameter that names no
    field, as written."""
    name = param.partition(LOOKUP_SEP)[0]
    try:
        field = DeadLetter._meta.get_field(name)
    except FieldDoesNotExist:
        return param
    return str(getattr(field, "verbose_name", name))


def raw(query: QueryDict, params: list[str]) -> str:
    """The values of ``params`` as written, each after its lookup in words when it is
    not plain equality: ``≥ 2026-05-01, < 2026-05-08``, ``starts with 01a2``."""
    pieces = []
    for param in params:
        lookup = param.partition(LOOKUP_SEP)[2]
        word = str(LOOKUP_WORDS.get(lookup, lookup))
        pieces += [f"{word} {value}".strip() for value in query.getlist(param)]
    return ", ".join(pieces)


class ErrorClassFilter(admin.AllValuesFieldListFilter):
    """By error class. Choosing a class (or all) also drops a cause's error pattern: a
    pattern belongs to one class, so kept with another it would select nothing."""

    def choices(self, changelist: ChangeList) -> Iterator[Any]:
        for choice in super().choices(changelist):
            query = QueryDict(choice["query_string"].lstrip("?"), mutable=True)
            query.pop(ERROR_KEY, None)
            yield {**choice, "query_string": f"?{query.urlencode()}"}
