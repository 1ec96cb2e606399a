"""A partitioned queue's lists as one list: each partition's page, merged in order, with a
cursor that holds every partition's own.

The lists of ``core/operator/browse.py`` are cut by entry ids and scores, never by an offset; a
partitioned queue's list (``core/partitions/``) reads a page of each partition from
its own cursor and merges them by the list's order (newest first for the log, soonest
due for delayed messages and retries, the private input then the log for what waits and
what is in flight, each by entry id). Each partition's entries shown are a prefix of its
page, so its next cursor is the one after the last of them. Each entry knows its
partition (:attr:`~redisq_django.core.operator.browse.Entry.part`, and its ref says it).

The cursor is the partitions' cursors joined by ``|`` (``~``: that partition is done).
A page costs each partition's round trips (one or two), not one pipeline for all.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from typing import Any

from redisq_django.core import members
from redisq_django.core.keys import QueueKeys
from redisq_django.core.operator import browse
from redisq_django.core.operator.browse import Entry, Page
from redisq_django.core.stats import id_order

#: A partition's read: its keys, its cursor, the page size.
Fetch = Callable[[QueueKeys, str | None, int], Page]

DONE = "~"
_SCORE_CURSOR = re.compile(r"^(-?[0-9]+(?:\.[0-9]+)?):([0-9]+)\Z")


def _newest_first(e: Entry) -> Any:
    ms, seq = id_order(e.key)
    return (-ms, -seq)


def _soonest(e: Entry) -> Any:
    return float(e.key)


def _input_then_log(e: Entry) -> Any:  # waiting: the private input first
    return (e.where != members.S_DIRECT, id_order(e.key))


def _log_then_input(e: Entry) -> Any:  # in flight: the log first
    return (e.where != members.S_LOG, id_order(e.key))


#: Per list kind: the merge order, consistent with each partition's own order.
ORDERS: dict[str, Callable[[Entry], Any]] = {
    browse.LOG: _newest_first,
    browse.DELAYED: _soonest,
    browse.RETRYING: _soonest,
    browse.WAITING: _input_then_log,
    browse.IN_FLIGHT: _log_then_input,
}


def part_ref(ref: str, part: int) -> str:
    """``ref`` of an entry in partition ``part`` of a partitioned queue: ``<ref>@<part>``
    (entry ids repeat across partitions: a ref names its partition)."""
    return f"{ref}@{part}"


def split_ref(ref: str) -> tuple[str, int | None]:
    """``(ref, partition)`` of a ref of a partitioned queue's entry (:func:`part_ref`);
    ``(ref, None)`` when it names no partition."""
    base, at, part = ref.rpartition("@")
    if at and part.isdigit() and part.isascii():
        return base, int(part)
    return ref, None


def merged_page(
    kind: str, layout: Sequence[QueueKeys], fetch: Fetch, cursor: str | None, n: int | None
) -> Page:
    """A page of list ``kind`` (``browse.LOG`` …) over the partitions ``layout``.

    Args:
        kind: which list: its order (:data:`ORDERS`) and how a cursor is cut.
        layout: the partitions' keys, in order.
        fetch: reads a page of one partition.
        cursor: the last page's ``next`` (None: the first page).
        n: the page size (``browse.page_size``).
    """
    n = browse.page_size(n)
    cursors = _cursors(cursor, len(layout))
    pages: list[Page | None] = [
        None if c == DONE else fetch(keys, c or None, n)
        for keys, c in zip(layout, cursors, strict=True)
    ]
    tagged = [
        dataclasses.replace(e, part=keys.part)
        for keys, page in zip(layout, pages, strict=True)
        if page is not None
        for e in page.entries
    ]
    shown = sorted(tagged, key=ORDERS[kind])[:n]
    nexts = []
    for keys, page, old in zip(layout, pages, cursors, strict=True):
        mine = [e for e in shown if e.part == keys.part]
        if page is None:
            nexts.append(DONE)
        elif len(mine) == len(page.entries):
            nexts.append(page.next or DONE)
        elif not mine:
            nexts.append(old)
        else:
            nexts.append(_after(kind, mine, old))
    more = any(c != DONE for c in nexts)
    return Page(shown, "|".join(nexts) if more else None)


def _cursors(cursor: str | None, count: int) -> list[str]:
    """Each partition's cursor ("" : its first page); a cursor of another shape (an
    unpartitioned queue's, a hand-edited one) starts every partition over."""
    parts = (cursor or "").split("|")
    return parts if len(parts) == count else [""] * count


def _after(kind: str, shown: Sequence[Entry], old: str) -> str:
    """The cursor of one partition after its entries ``shown`` (in its order), as the
    partition's own next page would have it (``core/operator/browse.py``)."""
    last = shown[-1]
    if kind in (browse.DELAYED, browse.RETRYING):
        match = _SCORE_CURSOR.match(old)
        skip = int(match.group(2)) if match and match.group(1) == last.key else 0
        return f"{last.key}:{sum(1 for e in shown if e.key == last.key) + skip}"
    if kind == browse.LOG:
        return f"l:{last.key}"
    return f"{'d' if last.where == members.S_DIRECT else 'l'}:{last.key}"
