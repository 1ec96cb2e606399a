"""A task's message payload and result hash, to and from Django's ``TaskResult``.

The payload of a task message (PROTOCOL.md, "Django tasks") carries everything a worker
needs, so that any worker runs it, and a result that expired while the task waited is
rebuilt from it::

    {"task": "shop.tasks.send_receipt", "args": [42], "kwargs": {}, "backend": "default",
     "queue_name": "default", "priority": 0, "run_after": null, "takes_context": false,
     "enqueued_at": 1700000000000, "retry": {"max_retries": 3}, "visibility_timeout": 30.0}

(``visibility_timeout``: the task's own, in seconds, or null.)
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias

from django.conf import settings
from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.base import TaskError
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils import timezone

from redisq_django.core.clock import datetime_to_ms, ms_to_datetime
from redisq_django.core.errors import RedisqError
from redisq_django.core.tasks import READY
from redisq_django.tasks.registry import UnknownTask, declared_task


class LeaseExpired(RedisqError):
    """A task's workers kept dying while they ran it (or it outran the visibility
    timeout each time): the error a result gets when its message becomes a dead letter
    with reason ``lease_expired``."""


class TaskEnded(RedisqError):
    """Staff ended the task before its time (the admin's *End* on its retry or delayed
    message): the error a result gets when its message becomes a dead letter with reason
    ``ended``."""


if TYPE_CHECKING:  # generic for django-stubs only: Django's class is not subscriptable
    _TaskResult: TypeAlias = TaskResult[Any, Any]
else:
    _TaskResult = TaskResult


# Frozen as Django's is (django-stubs declare it mutable: hence the ignore).
@dataclass(frozen=True, slots=True, kw_only=True)
class RedisqTaskResult(_TaskResult):  # type: ignore[misc]
    """Django's ``TaskResult``, whose return value may be given when it is made.

    Django's is set after construction (``init=False``), which a frozen dataclass only
    allows by writing past its ``frozen``; with this one a result's next state is a
    copy, ``dataclasses.replace(result, status=…, _return_value=…)``. It is a
    ``TaskResult`` in every other way (Django's ``refresh()`` included).
    """

    _return_value: Any | None = None


#: The ``@task`` options a message carries in ``retry`` (when set on the task).
RETRY_OPTIONS = ("max_retries", "backoff", "max_backoff")


def to_datetime(ms: str | int | None) -> dt.datetime | None:
    """A stored time (ms) as Django would give it: aware UTC, or naive local time when
    ``USE_TZ`` is off."""
    if ms is None or ms == "":
        return None
    when = ms_to_datetime(int(ms))
    return when if settings.USE_TZ else timezone.make_naive(when)


def now_to_the_ms() -> dt.datetime:
    """``timezone.now()`` cut to whole milliseconds: what a result stores (ms) and gives
    back. ``enqueue()`` returns it, so that ``get_result()`` and ``refresh()`` give the
    same ``enqueued_at`` back (a time with microseconds would come back rounded)."""
    now = timezone.now()
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


def to_ms(when: dt.datetime) -> int:
    """A datetime (naive ones in the current time zone) as ms since the epoch."""
    if timezone.is_naive(when):
        when = timezone.make_aware(when)
    return datetime_to_ms(when)


@dataclass(frozen=True)
class TaskMessage:
    """A task message's payload, decoded."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    backend: str
    queue_name: str
    priority: int
    run_after_ms: int | None
    takes_context: bool
    enqueued_at_ms: int
    retry: dict[str, Any] = field(default_factory=dict)
    #: The task's own visibility timeout, seconds (None: its consumer's).
    visibility_timeout: float | None = None

    @property
    def lease_ms(self) -> int:
        """The task's own visibility timeout in ms (0: none)."""
        return 0 if self.visibility_timeout is None else int(self.visibility_timeout * 1000)

    @classmethod
    def from_payload(cls, payload: Any) -> TaskMessage:
        """Decode a payload.

        Raises:
            ValueError: it is not a task message (the message says what is missing).
        """
        if not isinstance(payload, dict) or not isinstance(payload.get("task"), str):
            raise ValueError("not a task message: no 'task' path in the payload")
        try:
            return cls(
                task=payload["task"],
                args=list(payload.get("args") or []),
                kwargs=dict(payload.get("kwargs") or {}),
                backend=str(payload.get("backend") or "default"),
                queue_name=str(payload.get("queue_name") or "default"),
                priority=int(payload.get("priority") or 0),
                run_after_ms=payload.get("run_after"),
                takes_context=bool(payload.get("takes_context")),
                enqueued_at_ms=int(payload["enqueued_at"]),
                retry=dict(payload.get("retry") or {}),
                visibility_timeout=_seconds(payload.get("visibility_timeout")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a valid task message: {exc!r}") from None

    def payload(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "args": self.args,
            "kwargs": self.kwargs,
            "backend": self.backend,
            "queue_name": self.queue_name,
            "priority": self.priority,
            "run_after": self.run_after_ms,
            "takes_context": self.takes_context,
            "enqueued_at": self.enqueued_at_ms,
            "retry": self.retry,
            "visibility_timeout": self.visibility_timeout,
        }

    def result_fields(self) -> dict[str, str]:
        """The READY result hash of this task, as enqueued."""
        return {
            "task": self.task,
            "backend": self.backend,
            "queue_name": self.queue_name,
            "priority": str(self.priority),
            "run_after": "" if self.run_after_ms is None else str(self.run_after_ms),
            "takes_context": "1" if self.takes_context else "0",
            "args": json.dumps(self.args),
            "kwargs": json.dumps(self.kwargs),
            "status": READY,
            "enqueued_at": str(self.enqueued_at_ms),
            "errors": "[]",
            "worker_ids": "[]",
        }

    @classmethod
    def of(
        cls, task: Task[..., Any], result: TaskResult[..., Any], max_retries: int
    ) -> TaskMessage:
        """The message of ``task`` enqueued as ``result`` (args already normalised);
        ``max_retries``: the backend's default, unless the task has its own."""
        retry = {k: getattr(task, k, None) for k in RETRY_OPTIONS}
        if retry["max_retries"] is None:
            retry["max_retries"] = max_retries
        assert result.enqueued_at is not None
        return cls(
            task=task.module_path,
            args=result.args,
            kwargs=result.kwargs,
            backend=task.backend,
            queue_name=task.queue_name,
            priority=task.priority,
            run_after_ms=None if task.run_after is None else to_ms(task.run_after),
            takes_context=task.takes_context,
            enqueued_at_ms=to_ms(result.enqueued_at),
            retry={k: v for k, v in retry.items() if v is not None},
            visibility_timeout=_seconds(getattr(task, "visibility_timeout", None)),
        )


def _seconds(value: Any) -> float | None:
    """A duration in seconds from a payload (None stays None)."""
    return None if value is None else float(value)


def task_for(path: str, fields: Mapping[str, str]) -> Task[..., Any]:
    """The task of a stored result, with the priority, queue and run_after it ran with."""
    return _task_using(
        path,
        int(fields.get("priority") or 0),
        fields.get("queue_name") or "",
        fields.get("run_after") or "",
        settings.USE_TZ,
    )


@functools.lru_cache(maxsize=512)
def _task_using(
    path: str, priority: int, queue_name: str, run_after: str, use_tz: bool
) -> Task[..., Any]:
    # Cached: Task.using() validates the task again (signature inspection), a measurable
    # share of a no-op task's cost in the worker. Tasks are immutable.
    task = declared_task(path)
    return task.using(
        priority=priority,
        queue_name=queue_name or task.queue_name,
        run_after=to_datetime(run_after),
    )


def errors_of(raw: list[dict[str, str]]) -> list[TaskError]:
    return [
        TaskError(
            exception_class_path=str(e.get("exception_class_path", "")),
            traceback=str(e.get("traceback", "")),
        )
        for e in raw
    ]


def from_fields(result_id: str, fields: Mapping[str, str], alias: str) -> TaskResult[..., Any]:
    """The ``TaskResult`` a result hash describes.

    Raises:
        TaskResultDoesNotExist: the hash is not a task result, or its task is not
            declared in this process (``tasks/registry.py``: nothing is imported).
    """
    returned = json.loads(fields["return_value"]) if "return_value" in fields else None
    try:
        task = task_for(fields["task"], fields)
        result = RedisqTaskResult(
            task=task,
            id=result_id,
            status=TaskResultStatus(fields["status"]),
            enqueued_at=to_datetime(fields.get("enqueued_at")),
            started_at=to_datetime(fields.get("started_at")),
            finished_at=to_datetime(fields.get("finished_at")),
            last_attempted_at=to_datetime(fields.get("last_attempted_at")),
            args=json.loads(fields.get("args") or "[]"),
            kwargs=json.loads(fields.get("kwargs") or "{}"),
            backend=alias,
            errors=errors_of(json.loads(fields.get("errors") or "[]")),
            worker_ids=list(json.loads(fields.get("worker_ids") or "[]")),
            _return_value=returned,
        )
    except (KeyError, ValueError, UnknownTask) as exc:
        raise TaskResultDoesNotExist(
            f"Task result {result_id!r} cannot be read back: {exc}"
        ) from exc
    return result
