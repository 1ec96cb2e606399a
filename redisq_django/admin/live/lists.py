"""The rows of a live page's lists: what waits, is delayed, retrying or in flight, the
queue's log, the instances and the consumers, each row with a payload preview and a link
to the message's page; delayed and retrying rows with a *Deliver now* button.

Rows are built here as cells of escaped HTML (one template shows every list, and on a
phone shows each row as a card, each cell with its label).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy as _lazy

from redisq_django import figures
from redisq_django.core.instances import Instance
from redisq_django.core.operator import (
    DELAYED,
    ENDABLE,
    IN_FLIGHT,
    RETRYING,
    S_DELAYED,
    S_DIRECT,
    S_LOG,
    WAITING,
    Entry,
)
from redisq_django.core.wire import visible


@dataclass(frozen=True)
class Cell:
    label: str
    html: SafeString
    css: str = ""


@dataclass(frozen=True)
class Row:
    ref: str
    cells: list[Cell] = field(default_factory=list)


@dataclass(frozen=True)
class Links:
    """What rows link to and post to."""

    message_url: str
    action_url: str
    csrf_token: str
    next_url: str
    can_change: bool
    #: The consumer whose page shows the rows (None: the queue's).
    consumer: str | None = None


#: The id of the form that ends or deletes the messages ticked in a list.
BULK_FORM = "redisq-bulk"


def endable(ref: str, consumer: str | None, *, in_flight: bool = False) -> bool:
    """Whether the message ``ref`` names can be ended from a page of ``consumer``: a
    delayed message or a message waiting in the log from any page (the queue's: for
    every consumer that has not read it), a retry or a private-input entry from its
    consumer's; never a row of the in-flight list, which its instance settles
    (``core/operator/actions.end_message``)."""
    where = ref.partition(":")[0]
    return (
        not in_flight and where in ENDABLE and (where in (S_DELAYED, S_LOG) or consumer is not None)
    )


def _tick(links: Links, entry: Entry) -> SafeString:
    """A box that ticks the row for the list's End / Delete (outside the table: a form
    cannot hold the rows' own Deliver-now forms)."""
    if not links.can_change or not endable(entry.ref, links.consumer, in_flight=bool(entry.owner)):
        return SafeString("")
    return format_html(
        '<input type="checkbox" name="ref" value="{}" form="{}" class="redisq-tick" '
        'aria-label="{}">',
        entry.ref,
        BULK_FORM,
        _("Choose %(id)s") % {"id": visible(entry.message_id)},
    )


def _link(links: Links, entry: Entry) -> SafeString:
    link = format_html(
        '<a class="redisq-msg" href="{}?{}">{}</a>',
        links.message_url,
        urlencode({"ref": entry.ref}),
        visible(entry.message_id),
    )
    key = entry.ordering_key
    if key is None:
        return link
    return format_html(
        '{} <span class="redisq-key" title="{}">{}</span>', link, _("ordering key"), visible(key)
    )


def _preview(entry: Entry) -> SafeString:
    if entry.unreadable:  # another client wrote a member that is no envelope: show it raw
        return format_html(
            '{} <code class="redisq-preview">{}</code>',
            figures.unreadable(_("not a JSON object of strings")),
            entry.preview,
        )
    return format_html('<code class="redisq-preview">{}</code>', entry.preview)


#: Why an unreadable delayed or retry entry has no *Deliver now* (its row and its page).
UNDELIVERABLE = _lazy(
    "No Deliver now: another Redis client wrote this entry and it is no message of ours. "
    "Delivered, it would only become a dead letter no handler can read."
)


def _deliver(links: Links, entry: Entry) -> SafeString:
    if not links.can_change:
        return SafeString("")  # format_html() without arguments is a TypeError on Django 6
    if entry.unreadable:
        return format_html('<span class="redisq-no-deliver">{}</span>', UNDELIVERABLE)
    return format_html(
        '<form method="post" action="{}" class="redisq-deliver-form">'
        '<input type="hidden" name="csrfmiddlewaretoken" value="{}">'
        '<input type="hidden" name="ref" value="{}"><input type="hidden" name="next" value="{}">'
        '<button type="submit" class="button redisq-deliver" title="{}">{}</button></form>',
        links.action_url,
        links.csrf_token,
        entry.ref,
        links.next_url,
        _("Deliver it now, ahead of its due time."),
        _("Deliver now"),
    )


def _number(value: Any) -> SafeString:
    return format_html("{}", "-" if value is None else value)


def entry_rows(list_name: str, entries: Sequence[Entry], links: Links) -> list[Row]:
    """The rows of a list of messages (those that can be ended with a box to tick first)."""
    out = []
    ticks = links.can_change and any(
        endable(e.ref, links.consumer, in_flight=bool(e.owner)) for e in entries
    )
    for e in entries:
        message = Cell(_("message"), _link(links, e), "redisq-col-message")
        if ticks:
            message = Cell(
                _("message"),
                format_html("{} {}", _tick(links, e), _link(links, e)),
                "redisq-col-message",
            )
        payload = Cell(_("payload"), _preview(e), "redisq-col-payload")
        if list_name == WAITING:
            where = _("private input") if e.where == S_DIRECT else _("log")
            cells = [
                message,
                Cell(_("from"), format_html("{}", where)),
                Cell(_("published"), figures.moment(e.published_at_ms)),
                Cell(_("attempt"), _number(e.attempts + 1)),
                payload,
            ]
        elif list_name == DELAYED:
            cells = [
                message,
                Cell(_("due"), figures.moment(e.due_ms)),
                Cell(_("published"), figures.moment(e.published_at_ms)),
                payload,
                Cell(_("action"), _deliver(links, e), "redisq-col-action"),
            ]
        elif list_name == RETRYING:
            error = Truncator(e.last_error or "-").chars(160)
            cells = [
                message,
                Cell(_("next attempt"), figures.moment(e.due_ms)),
                Cell(_("attempt"), _number(e.attempts + 1)),
                Cell(_("last error"), format_html("{}", visible(error)), "redisq-col-error"),
                payload,
                Cell(_("action"), _deliver(links, e), "redisq-col-action"),
            ]
        elif list_name == IN_FLIGHT:
            if e.since_ms is not None:
                since = format_html("{} {}", _("running since"), figures.moment(e.since_ms))
            else:
                delivered = figures.age((e.idle_ms or 0) / 1000)
                since = format_html("{}", _("delivered %(age)s ago, waiting") % {"age": delivered})
            cells = [
                message,
                Cell(_("instance"), format_html("{}", visible(e.owner)), "redisq-col-instance"),
                Cell(_("since"), since),
                Cell(_("deliveries"), _number(e.deliveries)),
                Cell(_("attempt"), _number(e.attempts + (e.deliveries or 0))),
                payload,
            ]
        else:  # the queue's log
            cells = [message, Cell(_("published"), figures.moment(e.published_at_ms)), payload]
        out.append(Row(e.ref, cells))
    return out


def instance_rows(instances: Sequence[Instance], message_url: str) -> list[Row]:
    """The rows of the instances list."""
    out = []
    for i in instances:
        r = i.report
        state = "active" if i.alive else "disabled"
        label = _("alive") if i.alive else _("heartbeat expired")
        if i.busy and i.running:
            running = format_html(
                '<a href="{}?{}">{}</a> {} {}',
                message_url,
                urlencode({"ref": i.running}),
                i.running.partition(":")[2],
                _("since"),
                figures.moment(r.get("since")),
            )
        else:
            running = format_html("{}", _("idle") if r else "-")
        out.append(
            Row(
                i.name,
                [
                    Cell(_("instance"), format_html("{}", visible(i.name)), "redisq-col-instance"),
                    Cell(
                        _("state"),
                        format_html(
                            '<span class="redisq-badge {}">{}</span>',
                            figures.STATES[state][0],
                            label,
                        ),
                    ),
                    Cell(
                        _("host"),
                        figures.unreadable(_("report: %(why)s") % {"why": i.unreadable})
                        if i.unreadable
                        else _number(r.get("host")),
                    ),
                    Cell(_("pid"), _number(r.get("pid"))),
                    Cell(_("started"), figures.moment(r.get("started"))),
                    Cell(_("last heartbeat"), figures.moment(i.last_heartbeat_ms)),
                    Cell(_("handled"), _number(r.get("handled"))),
                    Cell(_("failed"), _number(r.get("failed"))),
                    Cell(_("in flight"), _number(i.in_flight)),
                    Cell(_("running now"), running),
                ],
            )
        )
    return out


def heads(rows: Sequence[Row]) -> list[str]:
    """The column labels of ``rows`` (those of the first row)."""
    return [c.label for c in rows[0].cells] if rows else []


def consumer_rows(
    queue: str, stats: Any, rows: dict[str, Any], dead_rows: dict[str, int], error: str
) -> list[Row]:
    """The rows of a queue's consumers (in Redis or in the database), each linking to its
    live page. ``stats``: the queue's ``QueueStats`` (None: unknown)."""
    live = {c.name: c for c in stats.consumers} if stats else {}
    missing = figures.unknown() if error else figures.absent()
    out = []
    for name in sorted(set(live) | set(rows)):
        c, row = live.get(name), rows.get(name)
        url = reverse("admin:redisq_django_consumer_live", args=[queue, name])
        in_redis = c.dead if c else None
        out.append(
            Row(
                name,
                [
                    Cell(
                        _("consumer"),
                        format_html(
                            '<a href="{}" class="redisq-msg">{}</a>', url, figures.breakable(name)
                        ),
                        "redisq-col-instance",
                    ),
                    Cell(
                        _("state"),
                        figures.badge(figures.consumer_state(row) if row else "undeclared"),
                    ),
                    Cell(_("backlog"), figures.backlog(c.backlog, c.held_back) if c else missing),
                    Cell(
                        _("in flight"), figures.figure(c.in_flight, "in_flight") if c else missing
                    ),
                    Cell(
                        _("retrying"), figures.figure(c.waiting_retry, "retrying") if c else missing
                    ),
                    Cell(
                        _("dead"),
                        figures.dead_cell(dead_rows.get(name, 0), in_redis if c or error else 0),
                    ),
                    Cell(
                        _("instances"),
                        figures.instances(len(c.workers), c.stalled, c.instances_alive)
                        if c
                        else missing,
                    ),
                ],
            )
        )
    return out
