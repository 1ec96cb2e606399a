"""A partitioned queue's partitions side by side on its live page: each one's backlog, in
flight, publish and handle rates, oldest unacknowledged age and threads alive, and the
partition that is hot, late or stuck flagged, with the reason in words.

The figures are those the page reads anyway: each partition's stats
(:attr:`~redisq_django.core.stats.QueueStats.partitions`) and trend
(:attr:`~redisq_django.core.trends.Trend.partitions`). The flags compare a partition
with the *other* partitions' median (:func:`flags`): a queue whose partitions are all
slow, idle or paused shows that in its own figures and state, and flagging every
partition would hide the one that differs.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from redisq_django import figures
from redisq_django.core.stats import QueueStats
from redisq_django.core.trends import HANDLED, PUBLISHED, Trend

#: Rates are per minute, averaged over this many last minutes (this one included): short
#: enough to see a partition stop, long enough that one quiet minute is not a stop.
RATE_MINUTES = 5
#: A figure at least this many times the other partitions' median...
HOT_FACTOR = 3.0
#: ...and at least this many messages above it: a hot backlog (a few messages more on
#: one partition is the noise of routing, not a hot key).
HOT_MIN_MESSAGES = 10
#: ...or this many published per minute above it: a hot publish rate.
HOT_MIN_PER_MINUTE = 6.0
#: ...or this many seconds older: a late partition (a few seconds is one slow handler).
LATE_MIN_S = 60.0

HOT, LATE, STUCK = "hot", "late", "stuck"


@dataclass(frozen=True)
class Flag:
    """Why a partition stands out: ``kind`` (:data:`HOT`, :data:`LATE`, :data:`STUCK`),
    the figure it concerns (a key of ``figures.HELP``) and the reason in words."""

    kind: str
    figure: str
    reason: str


@dataclass(frozen=True)
class PartitionRow:
    """One partition's figures (None: unknown) and what flags it.

    Attributes:
        part: its number, from 0.
        backlog, in_flight: summed over the queue's consumers, as the queue's own.
        oldest_unacked_age_s: the oldest message a consumer has not acknowledged, s.
        published, handled: per minute over the last :data:`RATE_MINUTES` (handled: all
            consumers added up); None when unknown or trends are off.
        threads: handler threads with a live heartbeat on it, all consumers.
        flags: why it stands out (empty: it does not).
    """

    part: int
    backlog: int | None = None
    in_flight: int | None = None
    oldest_unacked_age_s: float | None = None
    published: float | None = None
    handled: float | None = None
    threads: int | None = None
    flags: tuple[Flag, ...] = ()

    def flagged(self, figure: str) -> bool:
        return any(f.figure == figure for f in self.flags)

    @property
    def kinds(self) -> list[str]:
        return sorted({f.kind for f in self.flags})


def rates(trend: Trend | None, part: int) -> tuple[float | None, float | None]:
    """Published and handled per minute on partition ``part`` over the last
    :data:`RATE_MINUTES` of ``trend`` (None, None: no trend of that partition)."""
    if trend is None or part >= len(trend.partitions):
        return None, None
    minutes = trend.partitions[part].minutes[-RATE_MINUTES:]
    handled = f"{HANDLED}:"  # handled:<consumer>, every consumer's
    return (
        sum(m.get(PUBLISHED, 0) for m in minutes) / RATE_MINUTES,
        sum(v for m in minutes for f, v in m.items() if f.startswith(handled)) / RATE_MINUTES,
    )


def partition_rows(
    stats: QueueStats | None, recent: Trend | None, count: int
) -> list[PartitionRow]:
    """A row per partition of a queue of ``count`` partitions: from ``stats`` (None:
    Redis could not be read, every figure unknown) and its ``recent`` trend (None:
    trends off or unknown), each flagged against the others (:func:`flags`)."""
    if stats is None or len(stats.partitions) != count:
        return [PartitionRow(part=i) for i in range(count)]
    rows = []
    for i, part in enumerate(stats.partitions):
        published, handled = rates(recent, i)
        rows.append(
            PartitionRow(
                part=i,
                backlog=part.total("backlog"),
                in_flight=part.total("in_flight"),
                oldest_unacked_age_s=part.oldest_unacked_age_s,
                published=published,
                handled=handled,
                threads=part.total("instances_alive"),
            )
        )
    unserved = _unserved(stats)
    return [replace(r, flags=flags(r, rows, unserved.get(r.part, ()))) for r in rows]


def _unserved(stats: QueueStats) -> dict[int, list[tuple[str, int]]]:
    """Partition -> the consumers with a backlog there and no instance alive there, yet
    instances on other partitions (a client that left a partition out)."""
    out: dict[int, list[tuple[str, int]]] = {}
    serving = {c.name for c in stats.consumers if c.instances_alive}
    for i, part in enumerate(stats.partitions):
        for c in part.consumers:
            if c.stalled and c.name in serving:
                out.setdefault(i, []).append((c.name, c.backlog))
    return out


def flags(
    row: PartitionRow, rows: Sequence[PartitionRow], unserved: Sequence[tuple[str, int]] = ()
) -> tuple[Flag, ...]:
    """Why ``row`` stands out among ``rows`` (its queue's partitions):

    - *hot*: its backlog is at least :data:`HOT_FACTOR` times the other partitions'
      median and :data:`HOT_MIN_MESSAGES` above it, or its publish rate is
      :data:`HOT_FACTOR` times theirs and :data:`HOT_MIN_PER_MINUTE` above it;
    - *late*: its oldest unacknowledged message is :data:`HOT_FACTOR` times as old as
      theirs (a partition with none counts 0) and :data:`LATE_MIN_S` older;
    - *stuck*: it handled nothing in the last :data:`RATE_MINUTES` minutes while the
      others handled messages, and a message of it has waited all that time; or a
      consumer has a backlog on it and no instance alive on it, yet instances on the
      others (``unserved``: ``(consumer, backlog)``).
    """
    others = [r for r in rows if r.part != row.part]
    out: list[Flag] = []
    if row.backlog is not None:
        median = _above(row.backlog, [r.backlog for r in others], HOT_MIN_MESSAGES)
        if median is not None:
            what = _("backlog %(n)d") % {"n": row.backlog}
            out.append(Flag(HOT, "backlog", _beside(what, row.backlog, median, f"{median:g}")))
    if row.published is not None:
        median = _above(row.published, [r.published for r in others], HOT_MIN_PER_MINUTE)
        if median is not None:
            what = _("%(rate)s published per minute") % {"rate": _rate(row.published)}
            reason = _beside(what, row.published, median, _rate(median))
            out.append(Flag(HOT, "published_rate", reason))
    age = row.oldest_unacked_age_s
    if age is not None:
        ages = [r.oldest_unacked_age_s or 0.0 for r in others if r.backlog is not None]
        median = _above(age, ages, LATE_MIN_S)
        if median is not None:
            what = _("oldest unacknowledged message %(age)s old") % {"age": figures.age(age)}
            out.append(
                Flag(LATE, "oldest_unacked", _beside(what, age, median, figures.age(median)))
            )
    handled_elsewhere = [r.handled for r in others if r.handled]
    if row.handled == 0 and handled_elsewhere and (age or 0) >= RATE_MINUTES * 60:
        reason = _(
            "nothing handled in the last %(minutes)d minutes while other partitions "
            "handled up to %(rate)s per minute, and its oldest unacknowledged message is "
            "%(age)s old"
        ) % {
            "minutes": RATE_MINUTES,
            "rate": _rate(max(handled_elsewhere)),
            "age": figures.age(age),
        }
        out.append(Flag(STUCK, "handled_rate", reason))
    for consumer, backlog in unserved:
        reason = _(
            "consumer `%(consumer)s` has %(backlog)d waiting here and no instance alive on "
            "this partition (it has instances on the others)"
        ) % {"consumer": consumer, "backlog": backlog}
        out.append(Flag(STUCK, "threads", reason))
    return tuple(out)


def _above(value: float, others: Sequence[float | None], floor: float) -> float | None:
    """The others' median when ``value`` is far above it (:data:`HOT_FACTOR` times, and
    ``floor`` more), else None."""
    known = [v for v in others if v is not None]
    if not known:
        return None
    median = statistics.median(known)
    return median if value >= HOT_FACTOR * median and value - median >= floor else None


def _beside(what: str, value: float, median: float, shown: str) -> str:
    """``backlog 40, 13 times the other partitions' median (3)``."""
    if median <= 0:
        return _("%(what)s; the other partitions' median is %(median)s") % {
            "what": what,
            "median": shown,
        }
    times = value / median
    return _("%(what)s, %(times)s times the other partitions' median (%(median)s)") % {
        "what": what,
        "times": f"{times:.0f}" if times >= 10 else f"{times:.1f}",
        "median": shown,
    }


def _rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or float(value).is_integer() else f"{value:,.1f}"


#: The table's columns: each a figure of ``figures.HELP``.
COLUMNS = ("backlog", "in_flight", "oldest_unacked", "published_rate", "handled_rate", "threads")


#: Rates, which come from the trends.
RATES = ("published_rate", "handled_rate")
#: Shown for a rate while trends are off.
TRENDS_OFF = gettext_lazy("Unknown: trends are off (REDISQ['TRENDS']), rates come from them.")


def _value(row: PartitionRow, key: str) -> Any:
    return {
        "backlog": row.backlog,
        "in_flight": row.in_flight,
        "oldest_unacked": figures.age(row.oldest_unacked_age_s),
        "published_rate": None if row.published is None else _rate(row.published),
        "handled_rate": None if row.handled is None else _rate(row.handled),
        "threads": row.threads,
    }[key]


def table_context(
    stats: QueueStats | None, recent: Trend | None, count: int, *, error: str, trends_on: bool
) -> dict[str, Any]:
    """What ``live/partitions.html`` shows: the heads, a row of cells per partition (a
    flagged figure's cell marked), the flagged partitions with their reasons, and the
    rules in words."""
    rows = partition_rows(stats, recent, count)
    missing = figures.unknown() if error else figures.absent()
    no_rate = (
        figures.unknown()
        if error
        else format_html('<span class="redisq-absent" title="{}">&ndash;</span>', TRENDS_OFF)
        if not trends_on
        else figures.absent()
    )
    labels = {k: figures.LABELS[k] for k in COLUMNS}
    consumers = len(stats.consumers) if stats is not None else 0
    if consumers > 1:  # summed, it is no match for published: say so where it is read
        labels["handled_rate"] = _("handled / min (all %(n)d consumers, added up)") % {
            "n": consumers
        }
    table = []
    for row in rows:
        cells = []
        for key in COLUMNS:
            if row.backlog is None:
                html = missing
            elif key in RATES and row.published is None:
                html = no_rate
            else:
                html = figures.figure(_value(row, key), key)
            css = "redisq-flagged" if any(f.figure == key for f in row.flags) else ""
            cells.append({"key": key, "label": labels[key], "html": html, "css": css})
        table.append({"row": row, "cells": cells})
    return {
        "heads": [(labels[k], figures.HELP[k]) for k in COLUMNS],
        "table": table,
        "count": count,
        "known": stats is not None and len(stats.partitions) == count,
        "flagged": [r for r in rows if r.flags],
        "rate_minutes": RATE_MINUTES,
        "rules": _(
            "A partition is flagged hot when its backlog or its publish rate is at least "
            "%(factor)s times the other partitions' median (and %(messages)d messages or "
            "%(rate)s per minute above it); late when its oldest unacknowledged message is "
            "%(factor)s times as old as theirs and a minute older; stuck when it handled "
            "nothing in the last %(minutes)d minutes while others handled messages and a "
            "message of it waited all that time, or when a consumer has instances on the "
            "other partitions and none on it."
        )
        % {
            "factor": f"{HOT_FACTOR:g}",
            "messages": HOT_MIN_MESSAGES,
            "rate": f"{HOT_MIN_PER_MINUTE:g}",
            "minutes": RATE_MINUTES,
        },
    }
