"""Task results (Django tasks on redisq): a read-only list from Redis, filterable by
status, task and queue, and a page per result with its errors and tracebacks.

Results live in Redis (with their TTL), not in the database: the list reads the
:data:`PER_QUEUE` most recently changed results of each task queue, one pipelined read
per queue, and filters them here. Retrying a FAILED task is done from its dead letter.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.translation import gettext_lazy as _

from redisq_django.admin.common import BREADCRUMBS_OL, ReadOnlyPages
from redisq_django.connection import get_broker
from redisq_django.core.clock import ms_to_datetime
from redisq_django.core.errors import RedisqError
from redisq_django.core.task_wire import STATUSES
from redisq_django.core.wire import wire_int
from redisq_django.models import DeadLetter, TaskResults
from redisq_django.tasks.configured import redisq_backends

logger = logging.getLogger("redisq.admin")

#: Results read per task queue (the most recently changed first).
PER_QUEUE = 200
#: Characters of the args preview in the list.
PREVIEW_CHARS = 80


def task_queues() -> list[str]:
    """Every redisq queue of every task queue of the redisq backends."""
    return sorted(
        {
            q
            for options, names in redisq_backends().values()
            for name in names
            for q in options.level_queues(name)
        }
    )


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
class TaskResultsAdmin(ReadOnlyPages):
    """The results of Django tasks, read from Redis."""

    def get_urls(self) -> list[URLPattern]:
        info = (self.model._meta.app_label, self.model._meta.model_name)
        detail = path(
            "result/<str:result_id>/",
            self.admin_site.admin_view(self.result_view),
            name="{}_{}_result".format(*info),
        )
        return [detail, *super().get_urls()]

    def _context(self, request: HttpRequest, title: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.model._meta,
            "breadcrumbs_ol": BREADCRUMBS_OL,
        }

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        wanted = {k: request.GET.get(k, "") for k in ("status", "task", "queue")}
        store = get_broker().task_results
        rows: list[dict[str, Any]] = []
        unreachable = ""
        try:
            for queue in task_queues():
                rows += [row(queue, i, f) for i, f in store.latest(queue, PER_QUEUE)]
        except RedisqError as exc:
            logger.warning("Task results unavailable: %s", exc)
            unreachable = str(exc)
        rows.sort(key=lambda r: r["enqueued_ms"], reverse=True)
        choices = {
            "status": list(STATUSES),
            "task": sorted({r["task"] for r in rows}),
            "queue": sorted({r["queue"] for r in rows}),
        }
        shown = [r for r in rows if all(not v or r[k] == v for k, v in wanted.items())]
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
            "rows": shown,
            "total": len(rows),
            "filters": filters,
            "per_queue": PER_QUEUE,
            "unreachable": unreachable,
        }
        return TemplateResponse(request, "admin/redisq_django/task_results.html", context)

    def result_view(self, request: HttpRequest, result_id: str) -> HttpResponse:
        """One result: arguments, return value, every attempt's error and traceback."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        store = get_broker().task_results
        try:
            found = store.read(task_queues(), result_id)
        except RedisqError as exc:
            logger.warning("Task result unavailable: %s", exc)
            found = None
        if found is None:
            raise Http404("No such task result (unknown, expired, or Redis is unreachable).")
        shown = row(found[0], result_id, found[1])
        dead = DeadLetter.objects.filter(
            queue=found[0], consumer="tasks", message_id=result_id
        ).first()
        context = {**self._context(request, shown["task"]), "r": shown, "dead_letter": dead}
        return TemplateResponse(request, "admin/redisq_django/task_result.html", context)
