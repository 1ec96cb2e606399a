"""Retry of a FAILED task result from the admin: the task is enqueued again through its
Tasks backend (same task, arguments, queue, priority and backend; a new result), and
the failed result's dead letter, if the sink stored one, is discarded so that nobody
runs it a second time from there. POST only, CSRF-protected (``admin_view``), with the
change permission of task results, reported through ``messages``."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.translation import gettext

from redisq_django import deadletters
from redisq_django.admin import live
from redisq_django.admin.task_result_reads import task_queues
from redisq_django.core.tasks import FAILED, TASKS_CONSUMER
from redisq_django.models import DeadLetter
from redisq_django.tasks import registry

logger = logging.getLogger("redisq.admin")

#: Who may retry a task result.
RETRY_PERMISSION = "redisq_django.change_taskresults"


def _arguments(fields: dict[str, str]) -> tuple[list[Any], dict[str, Any]]:
    """The result's args and kwargs (ValueError: not the JSON list and object they
    must be)."""
    args = json.loads(fields.get("args") or "[]")
    kwargs = json.loads(fields.get("kwargs") or "{}")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise ValueError("its args are no JSON list, or its kwargs no JSON object")
    return args, kwargs


def enqueue_again(fields: dict[str, str]) -> str:
    """Enqueue the task of a result's ``fields`` again through its backend; the new
    result's id.

    Raises:
        ValueError: unreadable arguments or priority.
        LookupError: the task is not declared in this process (``UnknownTask``).
    """
    task = registry.declared_task(fields.get("task", ""))
    args, kwargs = _arguments(fields)
    using = task.using(
        queue_name=fields.get("queue_name") or task.queue_name,
        priority=int(fields.get("priority") or 0),
        backend=fields.get("backend") or task.backend,
    )
    return str(using.enqueue(*args, **kwargs).id)


class TaskRetry(admin.ModelAdmin):  # type: ignore[type-arg]
    """The Retry view of the task results admin."""

    def retry_view(self, request: HttpRequest, result_id: str) -> HttpResponse:
        """POST: enqueue a FAILED result's task again, and say what was done."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not request.user.has_perm(RETRY_PERMISSION):
            raise PermissionDenied
        reading = live.guarded(lambda broker: broker.task_results.read(task_queues(), result_id))
        found = reading.value
        if found is None:
            why = reading.error or gettext("it is unknown or expired.")
            text = gettext("Task result %(id)s was not retried: %(why)s")
            self.message_user(request, text % {"id": result_id, "why": why}, messages.ERROR)
            return self._back(request)
        queue, fields = found
        values = {"id": result_id, "task": fields.get("task", "?")}
        if fields.get("status") != FAILED:
            text = gettext("Task result %(id)s is %(status)s, not FAILED: not retried.")
            values["status"] = fields.get("status", "?")
            self.message_user(request, text % values, messages.WARNING)
            return self._back(request)
        try:
            values["new"] = enqueue_again(fields)
        except Exception as exc:  # unknown task, unreadable fields, Redis gone: say so
            logger.warning("Task result %s was not retried: %s", result_id, exc)
            text = gettext("Task %(task)s (result %(id)s) was not enqueued again: %(error)s")
            values["error"] = str(exc)
            self.message_user(request, text % values, messages.ERROR)
            return self._back(request)
        dead = DeadLetter.objects.filter(
            queue=queue, consumer=TASKS_CONSUMER, message_id=result_id, status="dead"
        )
        discarded = deadletters.discard(list(dead), request.user)
        text = (
            gettext(
                "Task %(task)s enqueued again: new result %(new)s. The failed result %(id)s "
                "stays as it was"
            )
            % values
        )
        if discarded:
            text += gettext("; its dead letter is discarded (kept for the record).")
        else:
            text += "."
        self.message_user(request, text, messages.SUCCESS)
        return self._back(request)

    def _back(self, request: HttpRequest) -> HttpResponseRedirect:
        """Back where the button was pressed (the filtered list, the result's page)."""
        back = request.POST.get("next") or request.META.get("HTTP_REFERER", "")
        if not url_has_allowed_host_and_scheme(
            back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            back = reverse("admin:redisq_django_taskresults_changelist")
        return HttpResponseRedirect(back)
