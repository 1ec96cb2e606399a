"""How live figures show: what each one means (help text on every figure), unknown
figures as unknown, state badges, the warning for a stalled consumer, ages as short text.

The admin's pages, their template tags and the operator command use it alike; it needs
no ``django.contrib.admin`` (a worker-only project has none), so it is not in ``admin/``,
whose import registers model admins."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Sequence
from typing import Any

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from redisq_django.core.error_key import PLACEHOLDERS
from redisq_django.core.wire import visible

#: What each figure means: the title of its cells and the glossary of every page.
HELP: dict[str, Any] = {
    "state": _(
        "Paused: workers fetch nothing (messages wait in Redis; in-flight ones finish). "
        "Disabled or not declared: no worker runs it."
    ),
    "backlog": _(
        "Messages waiting to be delivered now: published and not yet delivered, plus "
        "re-driven messages and due retries. On a queue: the sum over its consumers (a "
        "message two consumers still need counts twice)."
    ),
    "in_flight": _(
        "Delivered to an instance and not yet acknowledged. On a queue: the sum over its consumers."
    ),
    "held_back": _(
        "An ordered consumer's messages waiting behind an earlier message of their ordering "
        "key (running, retrying or lost): not in the backlog, as no worker can take them "
        "before that message is done. The consumer's page lists the keys held back."
    ),
    "retrying": _(
        "Failed deliveries waiting for their backoff before the next attempt. On a queue: "
        "the sum over its consumers."
    ),
    "delayed": _("Published with a delay or eta and not yet due (for the whole queue)."),
    "dead": _(
        "Dead letters still to deal with: rows in status dead plus those in Redis not yet "
        "moved to the database. On a queue: the sum over its consumers."
    ),
    "oldest_unacked": _(
        "Age of the oldest message a consumer has not acknowledged (waiting or in "
        "flight). On a queue: the oldest of its consumers."
    ),
    "instances": _(
        "Worker processes (manage.py runconsumer) running it with a live heartbeat; in "
        "brackets their handler threads where they are more (each thread keeps a "
        "heartbeat of its own: one per unit of concurrency, on every partition of a "
        "partitioned queue). On a queue: the processes running any of its consumers, "
        "each counted once."
    ),
    "length": _(
        "Entries in the queue's log, including acknowledged messages kept for replay (the "
        "replay window): not a backlog."
    ),
    "dropped": _(
        "Messages the hard cap (MAX_LENGTH / MAX_AGE) removed before every consumer had "
        "acknowledged them."
    ),
    "archive_lag": _(
        "Log entries the named archive furthest behind has not stored yet (history on: "
        "the whole log while no archive is registered). Each archive is on the queue's page."
    ),
    "paused": _("Paused: its workers fetch nothing new (messages wait in Redis)."),
    "partitions": _(
        "Partitions of the queue (REDISQ['PARTITIONS'], as recorded in Redis): each a "
        "queue of its own, spread over a cluster's masters; the figures add them up. "
        "Changed with manage.py redisq partitions, on a drained queue only."
    ),
    "published_rate": _(
        "Messages published to the partition per minute, averaged over the last minutes "
        "(this one included): how the publishers spread the queue's load."
    ),
    "handled_rate": _(
        "Deliveries its consumers handled per minute (all consumers added up), averaged "
        "over the last minutes (this one included)."
    ),
    "threads": _(
        "Handler threads with a live heartbeat on the partition, all consumers added up: "
        "a partition no instance of a consumer runs on is never emptied for it."
    ),
}

#: The name of each figure where it stands alone (detail pages).
LABELS: dict[str, Any] = {
    "backlog": _("backlog"),
    "in_flight": _("in flight"),
    "retrying": _("retrying"),
    "delayed": _("delayed"),
    "dead": _("dead"),
    "oldest_unacked": _("oldest unacked"),
    "instances": _("instances alive"),
    "length": _("length (incl. replay window)"),
    "dropped": _("dropped by the hard cap"),
    "archive_lag": _("archive lag"),
    "partitions": _("partitions"),
    "published_rate": _("published / min"),
    "handled_rate": _("handled / min"),
    "threads": _("threads alive"),
}

#: Shown in place of a figure Redis could not give.
UNKNOWN_TITLE = _("Unknown: Redis is unreachable.")
#: Shown in place of the figures of a consumer Redis does not know yet.
ABSENT_TITLE = _("Not registered in Redis yet: no worker has started this consumer.")
STALLED_TEXT = _("backlog, no instance alive")
STALLED_TITLE = _(
    "Messages are waiting and no instance of this consumer is alive: start a worker "
    "(manage.py runconsumer) or check why its workers stopped."
)


#: Where a queue or consumer name may wrap: after these, never inside a word.
_NAME_SEPARATORS = re.compile(r"(?<=[./_:-])")


def breakable(name: Any) -> SafeString:
    """A queue or consumer name (``tasks.reports.high``, ``shop/billing``) that wraps only
    after a separator (``.`` ``-`` ``_`` ``/`` ``:``), never mid-word: a ``<wbr>`` after each,
    and ``.redisq-name`` (styles.html) turns off breaking anywhere else."""
    parts = _NAME_SEPARATORS.split("" if name is None else str(name))
    return format_html(
        '<span class="redisq-name">{}</span>',
        format_html_join(SafeString("<wbr>"), "{}", ((part,) for part in parts)),
    )


def figure(value: Any, key: str) -> SafeString:
    """A figure with its help text as title; ``None`` shows as unknown."""
    if value is None:
        return unknown()
    return format_html('<span class="redisq-fig" title="{}">{}</span>', HELP[key], value)


def backlog(waiting: int | None, held_back: int = 0) -> SafeString:
    """A backlog figure, with the messages held back behind their ordering keys beside it:
    they wait too, though for their key rather than for a worker."""
    shown = figure(waiting, "backlog")
    if not held_back or waiting is None:
        return shown
    return format_html(
        '{} <span class="redisq-held-note" title="{}">+{} {}</span>',
        shown,
        HELP["held_back"],
        held_back,
        _("held back"),
    )


def figure_table(cells: list[tuple[str, Any]]) -> SafeString:
    """Figures as a list of name, value and help text (a detail page's summary)."""
    return format_html(
        '<dl class="redisq-figures">{}</dl>',
        format_html_join(
            "",
            '<div><dt>{}</dt><dd>{}</dd><dd class="redisq-help">{}</dd></div>',
            ((LABELS[key], _shown(value, key), HELP[key]) for key, value in cells),
        ),
    )


def _shown(value: Any, key: str) -> SafeString:
    return value if isinstance(value, SafeString) else figure(value, key)


def unknown(title: Any = UNKNOWN_TITLE) -> SafeString:
    return format_html('<span class="redisq-unknown" title="{}">?</span>', title)


def unreadable(reason: Any) -> SafeString:
    """A value that another Redis client wrote and no page can read, marked as such."""
    return format_html('<span class="redisq-unreadable">{} {}</span>', _("unreadable:"), reason)


def absent() -> SafeString:
    return format_html('<span class="redisq-absent" title="{}">&ndash;</span>', ABSENT_TITLE)


def age(seconds: float | None) -> str:
    """A short human age: ``4.2s``, ``12m``, ``3.1h``; ``-`` for none."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.1f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def dead_cell(rows: int, in_redis: int | None) -> SafeString:
    """Dead letters: rows in the database plus those still in Redis (unknown: the rows,
    said as such, :func:`dead_rows_only`)."""
    if in_redis is None:
        return dead_rows_only(rows)
    return figure(rows + in_redis, "dead")


def dead_rows_only(rows: int) -> SafeString:
    """The dead letters known while Redis cannot say how many it still holds: ``6 in the
    database, Redis unknown`` (``6+?`` read as a sum to finish, or as six)."""
    return format_html(
        '<span class="redisq-fig redisq-dead-rows" title="{}">{} <span class="redisq-dead-note">'
        '{} <span class="redisq-unknown" title="{}">{}</span></span></span>',
        HELP["dead"],
        rows,
        _("in the database,"),
        UNKNOWN_TITLE,
        _("Redis unknown"),
    )


def instances(alive: int | None, stalled: bool, threads: int | None = None) -> SafeString:
    """Instances alive (worker processes), their ``threads`` beside them where they are
    more, with the stalled warning when there is a backlog and none."""
    if alive is None:
        return unknown()
    if stalled:
        return format_html(
            '<span class="redisq-fig redisq-stalled" title="{}">{} ⚠'
            '<span class="redisq-stalled-text"> {}</span></span>',
            STALLED_TITLE,
            alive,
            STALLED_TEXT,
        )
    return _with_threads(alive, threads)


def _with_threads(alive: int, threads: int | None) -> SafeString:
    # One process runs a thread per unit of concurrency (per partition, too): counting
    # heartbeats showed 12 "instances" for one process; the threads stay in sight apart.
    if threads is None or threads == alive:
        return figure(alive, "instances")
    text = ngettext("%(n)d thread", "%(n)d threads", threads) % {"n": threads}
    return format_html(
        '<span class="redisq-fig" title="{}">{} <span class="redisq-threads">({})</span></span>',
        HELP["instances"],
        alive,
        text,
    )


def queue_instances(
    alive: int | None, stalled: Sequence[str], threads: int | None = None
) -> SafeString:
    """A queue's instances alive (worker processes, each once), their ``threads`` beside
    them where they are more, with the stalled warning naming the consumers it concerns:
    the queue's other consumers may well have instances alive."""
    if alive is None:
        return unknown()
    if not stalled:
        return _with_threads(alive, threads)
    text = stalled_text(stalled)
    return format_html(
        '<span class="redisq-fig redisq-stalled" title="{}">{} ⚠'
        '<span class="redisq-stalled-text"> {}</span></span>',
        format_html("{} {}", text, STALLED_TITLE),
        alive,
        text,
    )


def stalled_text(stalled: Sequence[str]) -> str:
    """``consumer `slow`: backlog, no instance alive`` for the consumers ``stalled``."""
    names = ", ".join(f"`{name}`" for name in stalled)
    return ngettext(
        "consumer %(names)s: backlog, no instance alive",
        "consumers %(names)s: backlog, no instance alive",
        len(stalled),
    ) % {"names": names}


def queue_badge(paused: bool, consumers_paused: int, consumers: int) -> SafeString:
    """A queue's state: paused, active, or active with some of its consumers paused
    (``Active · 1 of 3 consumers paused``), so a partial pause is never read as *Active*.

    Args:
        paused: whether the queue itself is paused.
        consumers_paused: how many of its consumers (rows) are paused.
        consumers: how many consumers (rows) it has.
    """
    if paused:
        return badge("paused")
    if not consumers_paused:
        return badge("active")
    if consumers_paused >= consumers:
        label = ngettext(
            "Active · its consumer paused", "Active · all %(n)d consumers paused", consumers
        ) % {"n": consumers}
        css = "redisq-paused"
    else:
        label = ngettext(
            "Active · %(paused)d of %(n)d consumer paused",
            "Active · %(paused)d of %(n)d consumers paused",
            consumers,
        ) % {"paused": consumers_paused, "n": consumers}
        css = "redisq-partial"
    return format_html(
        '<span class="redisq-badge {}" title="{}">{}</span>', css, HELP["state"], label
    )


#: (css class, label) of each state a queue or consumer can be in.
STATES: dict[str, tuple[str, Any]] = {
    "active": ("redisq-active", _("Active")),
    "paused": ("redisq-paused", _("Paused")),
    "queue_paused": ("redisq-paused", _("Paused (queue)")),
    "disabled": ("redisq-off", _("Disabled")),
    "undeclared": ("redisq-off", _("Not declared")),
}


def consumer_state(consumer: Any) -> str:
    """The :data:`STATES` key of a ``Consumer`` row (its queue loaded)."""
    if not consumer.declared:
        return "undeclared"
    if not consumer.enabled:
        return "disabled"
    if consumer.paused:
        return "paused"
    if consumer.queue.paused:
        return "queue_paused"
    return "active"


def badge(state: str) -> SafeString:
    """A state badge: the word itself (never an icon alone), coloured by kind."""
    css, label = STATES[state]
    return format_html(
        '<span class="redisq-badge {}" title="{}">{}</span>', css, HELP["state"], label
    )


#: A time in full, local and 24-hour as the charts' axes read it (a cell's title).
FULL_TIME = "%Y-%m-%d %H:%M:%S %Z"


_PLACEHOLDER = re.compile("(" + "|".join(re.escape(p) for p in PLACEHOLDERS) + ")")


def pattern(error_key: str) -> SafeString:
    """A cause's normalised error message with each placeholder (``<ip>``, ``<port>``…)
    marked as a variable (``<var>``), so that it reads as what was set aside, not as text
    the error held; the rest with invisible and direction-changing characters shown as
    escapes (``core.wire.visible``)."""
    # Split on one group: the text at even places, the placeholders at odd ones.
    pieces = [
        format_html('<var class="redisq-var">{}</var>', piece) if i % 2 else visible(piece)
        for i, piece in enumerate(_PLACEHOLDER.split(error_key or ""))
    ]
    return format_html_join("", "{}", ((piece,) for piece in pieces))


def clock(when: dt.datetime | None, *, now: dt.datetime | None = None) -> SafeString:
    """``when`` as every table of the console shows a time: local, 24-hour as the charts
    read it, and only as long as it needs to be: ``22:22:05`` today, ``05-03 22:22:05``
    another day of this year, ``2025-05-03 22:22:05`` before; the full date, time and
    zone in its title. ``-`` for none.

    Django's default format (``May 3, 2025, 10:22 p.m.``) is twice as wide, 12-hour, and
    reads like another clock than the charts' beside it.
    """
    if when is None:
        return format_html("{}", "-")
    now = now or timezone.now()
    if timezone.is_aware(when):
        when = timezone.localtime(when)
        now = timezone.localtime(now) if timezone.is_aware(now) else now
    if when.date() == now.date():
        text = when.strftime("%H:%M:%S")
    elif when.year == now.year:
        text = when.strftime("%m-%d %H:%M:%S")
    else:
        text = when.strftime("%Y-%m-%d %H:%M:%S")
    return format_html(
        '<time class="redisq-clock" datetime="{}" title="{}">{}</time>',
        when.isoformat(),
        when.strftime(FULL_TIME).strip(),
        text,
    )


def clock_ms(ms: int | None, *, now: dt.datetime | None = None) -> SafeString:
    """A time in ms since the epoch (as Redis keeps it) as :func:`clock` shows it."""
    if ms is None:
        return clock(None)
    return clock(dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC), now=now)


def moment(ms: Any, *, now_ms: int | None = None) -> SafeString:
    """A time as ``12s ago`` / ``in 4.0m`` with the date and time (local) as its title;
    ``-`` for none, ``unreadable: …`` for what is no time in ms (another client wrote
    it: a string, or a number beyond the calendar)."""
    if ms is None:
        return format_html("{}", "-")
    if isinstance(ms, bool) or not isinstance(ms, int | float):
        return unreadable(_("not a time in ms: %(value)s") % {"value": repr(ms)[:40]})
    try:
        when = timezone.localtime(dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC))
    except (OverflowError, ValueError, OSError):
        return unreadable(_("time out of range: %(value)s") % {"value": repr(ms)[:40]})
    now = time.time() * 1000 if now_ms is None else now_ms
    delta = (ms - now) / 1000
    text = (
        _("in %(age)s") % {"age": age(delta)}
        if delta > 0.5
        else _("%(age)s ago") % {"age": age(-delta)}
    )
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        when.isoformat(),
        when.strftime(FULL_TIME),
        text,
    )
