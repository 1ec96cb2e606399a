"""The *Keys held back* section of an ordered consumer's live page: each ordering key
whose later messages wait, how many wait, the message holding it and why it holds
(running, retrying, queued, not found), each with *Release…*; and whether the admin
process knows the consumer as declared ordered.

Rows are cells of escaped HTML, as the lists' (:mod:`~redisq_django.admin.live.lists`):
an ordering key is any UTF-8 text up to 256 bytes, shown as text whose invisible and
direction-changing characters read as escapes (``core.wire.visible``). Forms carry a key
JSON-encoded (:func:`encode_key`): a browser submits a field's line breaks as CRLF,
which would name another key than the one shown.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext as _

from redisq_django import figures
from redisq_django.admin.live.lists import Cell, Row
from redisq_django.consuming.declarations import declarations
from redisq_django.core.errors import ConfigurationError
from redisq_django.core.ordered import HELD_LIMIT, HeldKey
from redisq_django.core.wire import visible

#: The states of a holder (``HeldKey.state``).
RUNNING, RETRYING, QUEUED, UNKNOWN = "running", "retrying", "queued", "unknown"
UNSEEN = "unseen"  # not among the entries looked at (a long backlog): most likely busy


def encode_key(key: str) -> str:
    """``key`` as a form field carries it: JSON, ASCII only (no line break survives a
    form's CRLF normalisation otherwise)."""
    return json.dumps(key)


#: The longest ordering key a Release form may name, bytes in UTF-8: keys another client
#: wrote may be longer than publishing allows (``MAX_KEY_BYTES``), not without bound.
MAX_FORM_KEY_BYTES = 4096


def decode_key(text: str | None) -> str | None:
    """The key a form field carries (:func:`encode_key`), or None when it carries none.

    Raises:
        ValueError: the field holds something else (crafted, not from our form): not a
            JSON string, empty, longer than :data:`MAX_FORM_KEY_BYTES`, or text that
            is no UTF-8 (a lone surrogate); the message says which.
    """
    if not text:
        return None
    # \uXXXX is 6 characters for at most 3 bytes: a longer field is no key of that size.
    if len(text) > 6 * MAX_FORM_KEY_BYTES + 2:
        raise ValueError(
            _("it is longer than any ordering key (%(n)d bytes at most)")
            % {"n": MAX_FORM_KEY_BYTES}
        )
    try:
        key = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(_("it is not a key as the Release button sends it")) from None
    if not isinstance(key, str) or not key:
        raise ValueError(_("it is not a key as the Release button sends it"))
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(_("it is not UTF-8 text")) from None
    if size > MAX_FORM_KEY_BYTES:
        raise ValueError(
            _("it is longer than any ordering key (%(n)d bytes at most)")
            % {"n": MAX_FORM_KEY_BYTES}
        )
    return key


def declared_ordered(queue: str, name: str) -> bool | None:
    """Whether this process's code declares ``queue``/``name`` ordered (its apps'
    ``consumers.py``, imported as the system checks do); None when it declares no such
    consumer or the declarations cannot be read."""
    try:
        found = {d.key: d for d in declarations()}
    except ConfigurationError:
        return None
    declaration = found.get((queue, name))
    return None if declaration is None else declaration.ordered


def ordered_text(ordered: bool | None) -> str:
    """``ordered`` in words (the consumer's settings page)."""
    if ordered is None:
        return _("unknown: this process's code declares no such consumer (workers elsewhere may)")
    return (
        _("yes: one message of an ordering key at a time, in publish order") if ordered else _("no")
    )


def why(held: HeldKey) -> SafeString:
    """Why ``held``'s key holds, in words."""
    if held.state == RUNNING:
        return format_html("{} {}", _("running on"), visible(held.instance or "?"))
    if held.state == RETRYING:
        error = Truncator(visible(held.last_error or "-")).chars(160)
        return format_html(
            "{} {} ({}) {} {}",
            _("retrying at"),
            figures.clock_ms(held.due_ms),
            figures.moment(held.due_ms),
            _("after:"),
            error,
        )
    if held.state == QUEUED:
        return format_html("{}", _("queued in the consumer's input"))
    if held.state == UNSEEN:
        return format_html(
            "{}",
            _(
                "holder not among the first 1,000 messages in flight, queued or retrying: "
                "most likely busy; look again before releasing the key"
            ),
        )
    return format_html(
        '<span class="redisq-warning">{}</span>',
        _("holder not found: release the key to let its next message go"),
    )


def _holder(held: HeldKey, message_url: str) -> SafeString:
    if held.ref is None:
        return format_html("{}", visible(held.holder))
    return format_html(
        '<a class="redisq-msg" href="{}?{}">{}</a>',
        message_url,
        urlencode({"ref": held.ref}),
        visible(held.holder),
    )


def _release(held: HeldKey, release_url: str, next_url: str) -> SafeString:
    return format_html(
        '<form method="get" action="{}" class="redisq-deliver-form">'
        '<input type="hidden" name="key" value="{}"><input type="hidden" name="next" value="{}">'
        '<button type="submit" class="button redisq-release" title="{}">{}</button></form>',
        release_url,
        encode_key(held.key),
        next_url,
        _("Let the next waiting message of this key go now (asks first)."),
        _("Release…"),
    )


@dataclass(frozen=True)
class EndForm:
    """Where *End holder* posts, with the page's CSRF token and where to come back."""

    url: str
    csrf_token: str
    next_url: str


def _end_holder(held: HeldKey, end: EndForm) -> SafeString:
    """*End holder*: a holder retrying (a poison message) or queued in the input becomes
    a dead letter now and the key passes to its next message, in order. A running one
    cannot be ended (its instance settles it)."""
    if held.ref is None or held.state not in (RETRYING, QUEUED):
        return SafeString("")
    return format_html(
        '<form method="post" action="{}" class="redisq-deliver-form">'
        '<input type="hidden" name="csrfmiddlewaretoken" value="{}">'
        '<input type="hidden" name="ref" value="{}"><input type="hidden" name="next" value="{}">'
        '<button type="submit" class="button redisq-end-holder" title="{}">{}</button></form>',
        end.url,
        end.csrf_token,
        held.ref,
        end.next_url,
        _(
            "Make the holder a dead letter now, without its remaining retries: the key's "
            "next message goes next, in order."
        ),
        _("End holder"),
    )


def held_rows(
    held: Sequence[HeldKey],
    message_url: str,
    release_url: str,
    next_url: str,
    can_change: bool,
    end: EndForm | None = None,
) -> list[Row]:
    """The rows of the section, one per held key."""
    out = []
    for h in held:
        cells = [
            Cell(
                _("ordering key"),
                format_html('<code class="redisq-key">{}</code>', visible(h.key)),
                "redisq-col-message",
            ),
            Cell(_("waiting"), format_html("{}", h.waiting)),
            Cell(_("held by"), _holder(h, message_url), "redisq-col-message"),
            Cell(_("why"), why(h), "redisq-col-error"),
        ]
        if can_change:
            action = _release(h, release_url, next_url)
            if end is not None:
                action = format_html("{}{}", _end_holder(h, end), action)
            cells.append(Cell(_("action"), action, "redisq-col-action"))
        out.append(Row(h.key, cells))
    return out


def held_context(
    held: list[HeldKey] | None,
    ordered: bool | None,
    *,
    message_url: str,
    release_url: str,
    next_url: str,
    can_change: bool,
    end: EndForm | None = None,
) -> dict[str, Any]:
    """What the section shows: ``held`` read with a limit of :data:`HELD_LIMIT` + 1
    (None: unknown), ``ordered`` as :func:`declared_ordered` says. Shown when keys are
    held, or when the consumer is declared ordered (or not known unordered, while Redis
    does not answer); not for a consumer known unordered with nothing held."""
    known = held is not None
    rows = held_rows((held or [])[:HELD_LIMIT], message_url, release_url, next_url, can_change, end)
    cut = known and len(held or []) > HELD_LIMIT
    if rows:
        shown = True
    elif known:
        shown = ordered is True
    else:
        shown = ordered is not False
    return {
        "held_shown": shown,
        "held_known": known,
        "held_rows": rows,
        "held_heads": [c.label for c in rows[0].cells] if rows else [],
        "held_cut": cut,
        "held_count": f"{HELD_LIMIT}+" if cut else len(rows),
        "held_limit": HELD_LIMIT,
        "ordered": ordered,
    }
