"""Task results (Django tasks on redisq): a list from Redis with status colours,
filters by status, task and queue, and pages; a page per result with its errors and
tracebacks; Retry of a FAILED result.

Results live in Redis (with their TTL), not in the database: the list looks at the
latest results only, in three round trips (:mod:`.task_result_reads`), through the
admin's guarded access to Redis (:mod:`.live`), so a hung Redis costs one short timeout
and the page says it is unreachable. Retry enqueues the task again through its Tasks
backend (a new result) and discards the FAILED one's dead letter.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.translation import gettext_lazy as _

from redisq_django.admin import live
from redisq_django.admin.common import BREADCRUMBS_OL, ReadOnlyPages
from redisq_django.admin.task_result_reads import PER_PAGE, WINDOW, read_page, task_queues
from redisq_django.admin.task_retry import RETRY_PERMISSION, TaskRetry
from redisq_django.core.clock import ms_to_datetime
from redisq_django.core.tasks import STATUSES
from redisq_django.core.wire import wire_int
from redisq_django.models import DeadLetter, TaskResults

logger = logging.getLogger("redisq.admin")

#: Characters of the args preview in the list.
PREVIEW_CHARS = 80
#: The badge of each status, in the colours of the other lists (dead letters, states).
STATUS_BADGES = {
    "READY": "redisq-off",
    "RUNNING": "redisq-retried",
    "SUCCESSFUL": "redisq-active",
    "FAILED": "redisq-dead",
}


def _time(ms: str | None, problems: list[str], name: str) -> Any:
    if not ms:
        return None
    value = wire_int(ms)
    try:
        return ms_to_datetime(value) if value is not None else None
    except (OverflowError, ValueError, OSError):
        value = None
    if value is None:
        problems.append(f"{name} is no time in ms")
    return None


def _json_list(text: str | None, problems: list[str], name: str) -> list[Any]:
    """The JSON list ``text`` (none: []); another client's text that is none: [] and
    ``problems`` says so."""
    try:
        value = json.loads(text or "[]")
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, list):
        problems.append(f"{name} is no JSON list")
        return []
    return value


def row(queue: str, result_id: str, fields: dict[str, str]) -> dict[str, Any]:
    """What the list and the page show of one result hash (any Redis client may write
    it: what cannot be read is left out and named in ``unreadable``)."""
    problems: list[str] = []
    errors = [e for e in _json_list(fields.get("errors"), problems, "errors") if _error(e)]
    workers = _json_list(fields.get("worker_ids"), problems, "worker_ids")
    args = f"{fields.get('args', '[]')} {fields.get('kwargs', '{}')}"
    started = wire_int(fields.get("started_at") or "")
    finished = wire_int(fields.get("finished_at") or "")
    unreadable = "; ".join(problems)
    return {
        "id": result_id,
        "queue": queue,
        "task": fields.get("task", "?"),
        "status": fields.get("status", "?"),
        "badge": STATUS_BADGES.get(fields.get("status", ""), "redisq-unknown"),
        "args_preview": args if len(args) <= PREVIEW_CHARS else args[: PREVIEW_CHARS - 1] + "…",
        "args": fields.get("args", "[]"),
        "kwargs": fields.get("kwargs", "{}"),
        "attempts": len(workers),
        "worker_ids": workers,
        "errors": errors,
        "last_error": errors[-1]["exception_class_path"]
        if errors
        else (f"unreadable: {unreadable}" if unreadable else ""),
        "return_value": fields.get("return_value"),
        "priority": fields.get("priority", "0"),
        "enqueued_at": _time(fields.get("enqueued_at"), problems, "enqueued_at"),
        "started_at": _time(fields.get("started_at"), problems, "started_at"),
        "finished_at": _time(fields.get("finished_at"), problems, "finished_at"),
        "duration_s": (finished - started) / 1000 if started and finished else None,
        "enqueued_ms": wire_int(fields.get("enqueued_at") or "") or 0,
        "unreadable": "; ".join(problems),
    }


def _error(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("exception_class_path"), str)


def _filter_url(wanted: dict[str, str], name: str, value: str) -> str:
    """The query string with filter ``name`` set to ``value`` ("" removes it)."""
    chosen = {k: v for k, v in {**wanted, name: value}.items() if v}
    return "?" + urlencode(chosen)


@admin.register(TaskResults)
class TaskResultsAdmin(TaskRetry, ReadOnlyPages):
    """The results of Django tasks, read from Redis."""

    def get_urls(self) -> list[URLPattern]:
        info = (self.model._meta.app_label, self.model._meta.model_name)
        view = self.admin_site.admin_view
        mine = [
            path(
                "result/<str:result_id>/",
                view(self.result_view),
                name="{}_{}_result".format(*info),
            ),
            path(
                "result/<str:result_id>/retry/",
                view(self.retry_view),
                name="{}_{}_retry".format(*info),
            ),
        ]
        return [*mine, *super().get_urls()]

    def _context(self, request: HttpRequest, title: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.model._meta,
            "breadcrumbs_ol": BREADCRUMBS_OL,
            "can_retry": request.user.has_perm(RETRY_PERMISSION),
        }

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        wanted = {k: request.GET.get(k, "") for k in ("status", "task", "queue")}
        number = wire_int(request.GET.get("p", "1")) or 1
        queues = [q for q in task_queues() if not wanted["queue"] or q == wanted["queue"]]
        reading = live.guarded(
            lambda broker: read_page(
                broker.task_results,
                queues,
                status=wanted["status"],
                task=wanted["task"],
                page=max(1, min(number, WINDOW // PER_PAGE)),
            )
        )
        found = reading.value
        rows = [row(q, i, f) for q, i, f in found.rows] if found else []
        matching = found.matching if found else 0
        paginator = Paginator(range(matching), PER_PAGE)
        current = paginator.get_page(number)
        tasks = sorted(
            {*(found.tasks if found else []), *([wanted["task"]] if wanted["task"] else [])}
        )
        choices = {"status": list(STATUSES), "task": tasks, "queue": task_queues()}
        filters = [
            {
                "name": name,
                "links": [
                    {
                        "label": value or _("All"),
                        "url": _filter_url(wanted, name, value),
                        "selected": wanted[name] == value,
                    }
                    for value in ["", *values]
                ],
            }
            for name, values in choices.items()
        ]
        context = {
            **self._context(request, _("Task results")),
            "rows": rows,
            "found": found,
            "window": WINDOW,
            "filters": filters,
            "page": current,
            "previous_url": _page_url(wanted, current.previous_page_number())
            if current.has_previous()
            else "",
            "next_url": _page_url(wanted, current.next_page_number()) if current.has_next() else "",
            "redisq_error": reading.error,
        }
        return TemplateResponse(request, "admin/redisq_django/task_results.html", context)

    def result_view(self, request: HttpRequest, result_id: str) -> HttpResponse:
        """One result: arguments, return value, every attempt's error and traceback."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        queues = task_queues()
        reading = live.guarded(lambda broker: broker.task_results.read(queues, result_id))
        found = reading.value
        if found is None:
            if reading.error:
                context = {**self._context(request, result_id), "redisq_error": reading.error}
                return TemplateResponse(request, "admin/redisq_django/task_result.html", context)
            raise Http404("No such task result (unknown, or expired).")
        shown = row(found[0], result_id, found[1])
        dead = DeadLetter.objects.filter(
            queue=found[0], consumer="tasks", message_id=result_id
        ).first()
        context = {**self._context(request, shown["task"]), "r": shown, "dead_letter": dead}
        return TemplateResponse(request, "admin/redisq_django/task_result.html", context)


def _page_url(wanted: dict[str, str], number: int) -> str:
    return _filter_url(wanted, "p", str(number) if number > 1 else "")
