"""Pieces of a dead letter's page: collapsible, scrollable payload and traceback, and
every death as a read-only inline."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext

from redisq_django import figures
from redisq_django.models import DeadLetterFailure


class FailureInline(admin.TabularInline):  # type: ignore[type-arg]
    """Every death of the dead letter, newest first (read only)."""

    model = DeadLetterFailure
    fields = ("died", "reason", "attempts", "error_class", "message", "tb")
    readonly_fields = fields
    extra = 0
    can_delete = False
    verbose_name_plural = _("every death (newest first)")

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.has_perm("redisq_django.view_deadletter"))

    @admin.display(description=_("died"))
    def died(self, obj: DeadLetterFailure) -> SafeString:
        return figures.clock(obj.failed_at)

    @admin.display(description=_("error message"))
    def message(self, obj: DeadLetterFailure) -> str:
        return Truncator(obj.error_message).chars(300)

    @admin.display(description=_("traceback"))
    def tb(self, obj: DeadLetterFailure) -> SafeString:
        return fold(_("traceback"), obj.traceback, "redisq-traceback", open_=False)


def fold(title: Any, text: str, css: str, *, open_: bool = True) -> SafeString:
    """``text`` in a collapsible, scrollable box."""
    if not text:
        return format_html("{}", "-")
    return format_html(
        '<details class="redisq-fold"{}><summary>{} ({})</summary><pre class="{}">{}</pre>'
        "</details>",
        " open" if open_ else "",
        title,
        ngettext("%(n)d line", "%(n)d lines", text.count("\n") + 1) % {"n": text.count("\n") + 1},
        css,
        text,
    )


#: The line above JSON shown as stored because it is nested too deep to parse.
DEEP_NOTE = _("(nested too deep to lay out: shown as stored)")


def pretty_json(text: str) -> str:
    """``text`` (JSON) laid out, two spaces per level, keys sorted; undecodable text as
    stored; JSON nested deeper than Python's parser goes (another client's) as stored,
    after a line that says so."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        return text  # undecodable payloads are shown as stored (escaped by format_html)
    except RecursionError:
        return f"{DEEP_NOTE}\n{text}"
