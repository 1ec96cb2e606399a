"""The named archives of a queue on its admin page, and removing one.

Each archive holds retention until it has stored what it needs; one that no longer runs
keeps the log in Redis until it is removed. Removing lets retention drop what that
archive never stored, so it needs the queue model's *delete* permission; it is a POST
with CSRF protection after a confirmation page (a GET that changes nothing), reported
through ``messages`` and written to the queue's admin history. ``manage.py redisq
archives remove`` does the same through the same function
(:func:`redisq_django.archives.remove_archive`).
"""

from __future__ import annotations

from typing import Any

import redis
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from redisq_django import archives as named
from redisq_django import figures
from redisq_django.admin.live import admin_broker, forget_figures, guarded
from redisq_django.core.errors import InvalidName, RedisqError
from redisq_django.core.keys import validate_name
from redisq_django.models import Queue


class QueueArchives:
    """The archives of a queue on the queue admin's page (``owner``, which shows
    :meth:`field` as a read-only field and adds :meth:`urls` to its own), and their
    removal."""

    def __init__(self, owner: admin.ModelAdmin[Queue]) -> None:
        self.owner = owner

    def urls(self) -> list[URLPattern]:
        """The removal's page, behind the admin site's login and CSRF protection."""
        return [
            path(
                "archives/<str:queue>/<str:name>/remove/",
                self.owner.admin_site.admin_view(self.remove_view),
                name="redisq_django_queue_archive_remove",
            )
        ]

    def field(self, obj: Queue) -> SafeString:
        """Its archives: position, lag, when registered, a gap a hard cap made, and a
        link to remove each; of a partitioned queue, by partition (an archive's position
        in each)."""
        reading = guarded(lambda broker: broker.archives.states(obj.name))
        if reading.value is None:
            return figures.unknown(reading.error)
        if not reading.value:
            return format_html(
                "<p>{}</p>",
                _(
                    "No archive registered: retention waits for none (with history on, the log "
                    "is kept until one registers)."
                ),
            )
        by_name: dict[str, list[Any]] = {}
        for state in reading.value:
            by_name.setdefault(state.name, []).append(state)
        partitioned = any(state.partition is not None for state in reading.value)
        rows = [
            (
                state.name,
                state.table,
                # A partition's position: its ids are its own, not comparable across.
                *([state.partition] if partitioned else []),
                state.position,
                state.lag,
                named.registered_at(state),
                named.gap_text(state) or "-",
                reverse("admin:redisq_django_queue_archive_remove", args=[obj.name, state.name]),
                _("Remove…"),
            )
            for states in by_name.values()
            for state in sorted(states, key=lambda s: (s.table, s.partition or 0))
        ]
        titles = [_("archive"), _("table")]
        titles += [_("partition")] if partitioned else []
        titles += [_("position"), _("lag"), _("registered (UTC)"), _("gap"), ""]
        head = format_html_join("", "<th>{}</th>", ((t,) for t in titles))
        cells = "<td>{}</td>" * (len(titles) - 1)
        body = format_html_join(
            "",
            "<tr>" + cells + '<td><a href="{}" class="redisq-archive-remove">{}</a></td></tr>',
            rows,
        )
        return format_html(
            '<table class="redisq-archives"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>',
            head,
            body,
        )

    def remove_view(self, request: HttpRequest, queue: str, name: str) -> HttpResponse:
        if not self.owner.has_delete_permission(request):
            raise PermissionDenied
        try:
            validate_name("queue", queue)
            validate_name("archive", name)
        except InvalidName as exc:
            raise Http404(str(exc)) from None
        row = Queue.objects.filter(name=queue).first()
        back = (
            reverse("admin:redisq_django_queue_change", args=[row.pk])
            if row is not None
            else reverse("admin:redisq_django_queue_changelist")
        )
        if request.method != "POST":
            reading = guarded(lambda broker: broker.archives.states(queue))
            context = {
                **self.owner.admin_site.each_context(request),
                "title": _("Remove archive %(name)s of %(queue)s?")
                % {"name": name, "queue": queue},
                "queue": queue,
                "name": name,
                "states": [s for s in reading.value or [] if s.name == name],
                "redisq_error": reading.error,
                "back_url": back,
                "opts": self.owner.model._meta,
            }
            return TemplateResponse(request, "admin/redisq_django/archive_remove.html", context)
        try:
            removed = named.remove_archive(name, queue, broker=admin_broker(), user=request.user)
        except (RedisqError, redis.RedisError, OSError) as exc:
            self.owner.message_user(
                request, _("Nothing was removed: %(error)s") % {"error": exc}, messages.ERROR
            )
            return HttpResponseRedirect(back)
        forget_figures()
        if removed:
            self.owner.message_user(
                request,
                _("Removed archive %(name)s of %(queue)s: retention no longer waits for it.")
                % {"name": name, "queue": queue},
                messages.SUCCESS,
            )
        else:
            self.owner.message_user(
                request,
                _("Archive %(name)s is not registered on %(queue)s; nothing was removed.")
                % {"name": name, "queue": queue},
                messages.WARNING,
            )
        return HttpResponseRedirect(back)
