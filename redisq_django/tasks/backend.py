"""``RedisqBackend``: Django's Tasks framework on redisq queues, and its ``Task`` class."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.core import checks
from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils import timezone

from redisq_django.conf import SettingsError, get_settings
from redisq_django.connection import get_broker
from redisq_django.consuming import inbox
from redisq_django.core import bounds
from redisq_django.core.clock import now_ms
from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import ConfigurationError
from redisq_django.core.ids import new_message_id
from redisq_django.core.start import StartPoint
from redisq_django.core.tasks import TaskResultStore, read_commands
from redisq_django.core.tasks import found as read_found
from redisq_django.tasks import aio, registry
from redisq_django.tasks.backend_options import (
    TASKS_CONSUMER,
    TaskOptions,
    level_rank,
    option_problems,
    parse_options,
    queue_name_problem,
)
from redisq_django.tasks.configured import shared_queues
from redisq_django.tasks.results import RedisqTaskResult, TaskMessage, from_fields, now_to_the_ms

if TYPE_CHECKING:
    _Task = Task[..., Any]
else:
    _Task = Task  # not subscriptable at run time


@dataclass(frozen=True, slots=True, kw_only=True)
class RedisqTask(_Task):
    """A ``@task`` of a redisq backend, with our retry options (``@task(max_retries=3)``).

    Attributes:
        max_retries: retries after a failed attempt before the task is FAILED (a dead
            letter); default the backend's ``OPTIONS["MAX_RETRIES"]`` (0).
        backoff: base of the exponential backoff between attempts, seconds.
        max_backoff: cap of one backoff wait, seconds.
        visibility_timeout: the lease of each started attempt, seconds (at least 1,
            as everywhere: ``core/bounds.py``): its worker renews it every third of that
            while the task runs, and when the worker dies (or stalls) another worker runs
            the task again once the lease has gone that long without renewal, and not
            before, whatever the worker's heartbeat and the queue's
            ``OPTIONS["VISIBILITY_TIMEOUT"]`` say (``core/leases.py``). Default: the
            queue's consumer's rules apply.
        atomic: ``True`` (the default database) or a database alias: the task runs in a
            transaction on it that first records the task in the inbox, so that its rows
            are written once however often it is delivered; a task delivered again
            after it committed is not run again and its result (SUCCESSFUL, with the
            return value kept in the inbox row) is written again
            (docs/howto/exactly-once.md). Plain functions only.
    """

    max_retries: int | None = None
    backoff: float | None = None
    max_backoff: float | None = None
    visibility_timeout: float | None = None
    atomic: bool | str = False


#: The extra ``@task`` options (their bounds: ``core/bounds.py``).
_EXTRA = ("max_retries", "backoff", "max_backoff", "visibility_timeout")


class RedisqBackend(BaseTaskBackend):
    """Runs tasks through redisq: ``TASKS = {"default": {"BACKEND":
    "redisq_django.tasks.RedisqBackend", "QUEUES": ["default"], "OPTIONS": {...}}}``.

    Workers: ``manage.py runconsumer --tasks``. See docs/howto/tasks.md, "Django Tasks".
    """

    task_class = RedisqTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self._ensured: set[str] = set()

    @functools.cached_property
    def task_options(self) -> TaskOptions:
        """The validated ``OPTIONS``.

        Raises:
            InvalidTask: they are invalid (``manage.py check`` says so too).
        """
        try:
            return parse_options(self.options)
        except ValueError as exc:
            raise InvalidTask(f"TASKS[{self.alias!r}]['OPTIONS'] is invalid: {exc}") from None

    @property
    def results(self) -> TaskResultStore:
        """The task results of the current broker (rebuilt when settings change it)."""
        return get_broker().task_results

    # -- validation --------------------------------------------------------------------

    def validate_task(self, task: Task[..., Any]) -> None:
        super().validate_task(task)
        for name in _EXTRA:
            value = getattr(task, name, None)
            problem = None if value is None else bounds.problem(name, value, f"@task {name}")
            if problem:
                raise InvalidTask(f"{problem}.")
        problem = queue_name_problem(self.task_options, task.queue_name)
        if problem:
            raise InvalidTask(f"Task queue {problem}.")
        if getattr(task, "atomic", False):
            self._validate_atomic(task)
        # Django validates each task as it is created: a valid one is declared, and
        # only declared tasks run in a worker (tasks/registry.py).
        registry.declare(task)

    @staticmethod
    def _validate_atomic(task: Task[..., Any]) -> None:
        where = f"@task {task.module_path}"
        try:
            inbox.database_of(task.atomic, where)  # type: ignore[attr-defined]
        except ConfigurationError as exc:
            raise InvalidTask(str(exc)) from None
        if inspect.iscoroutinefunction(task.func):
            raise InvalidTask(
                f"{where}: atomic=True needs a plain function, not an async def one: Django "
                "runs transaction.atomic() on one thread, and an async task's awaits may run "
                "its queries on others. Make the task a plain function (the worker runs it "
                "on a thread of its own), or keep atomic off and make it idempotent."
            )

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """System checks: invalid ``OPTIONS`` (E030), no ``QUEUES`` (E031), a queue name
        that makes no valid redisq queue name (E032), a redisq queue shared with another
        task queue of this or another backend (E033, reported by the first backend in
        ``TASKS`` involved), a partitioned task queue (E034)."""
        return list(self._problems())

    def _problems(self) -> Iterable[checks.CheckMessage]:
        where = f"TASKS[{self.alias!r}]"
        for problem in option_problems(self.options):
            yield checks.Error(
                f"{where}['OPTIONS'] is invalid: {problem}.",
                hint="See 'Django Tasks' in the docs (docs/howto/tasks.md) for the options.",
                id="redisq_django.E030",
            )
        if not self.queues:
            yield checks.Error(
                f"{where}['QUEUES'] is empty: redisq needs the task queue names.",
                hint='List them, e.g. "QUEUES": ["default"].',
                id="redisq_django.E031",
            )
        if option_problems(self.options):
            return
        for name in sorted(self.queues, key=str):
            bad_name = queue_name_problem(self.task_options, name)
            if bad_name:
                yield checks.Error(
                    f"{where}['QUEUES']: {bad_name}.",
                    hint="Use letters, digits, '_', '.' or '-' (and a short name).",
                    id="redisq_django.E032",
                )
        try:
            partitioned = get_settings()["PARTITIONS"]
        except SettingsError:  # reported as E001
            partitioned = {}
        for name in sorted(self.queues, key=str):
            levels = [q for q in self.task_options.level_queues(name) if q in partitioned]
            if levels and not queue_name_problem(self.task_options, name):
                yield checks.Error(
                    f"{where}['QUEUES']: task queue {name!r} is partitioned "
                    f"(REDISQ['PARTITIONS'] names {', '.join(map(repr, levels))}): task "
                    "queues cannot be, their results and scripts live under one hash tag.",
                    hint="Remove the task queue's redisq queues from REDISQ['PARTITIONS'].",
                    id="redisq_django.E034",
                )
        for shared in shared_queues(first_alias=self.alias):
            yield checks.Error(
                f"{where}['QUEUES']: {shared.describe()}: their tasks, results and workers "
                "would mix.",
                hint="Give one of the backends another OPTIONS['QUEUE_PREFIX'], or rename "
                "one of the queues (a task queue q is the redisq queues <prefix>q, "
                "<prefix>q.high and <prefix>q.low).",
                id="redisq_django.E033",
            )

    # -- enqueueing --------------------------------------------------------------------

    def level_queue(self, task: Task[..., Any]) -> str:
        """The redisq queue a task goes to (its queue name and priority level).

        Raises:
            InvalidTask: that queue is partitioned (``manage.py check`` says so: E034).
        """
        queue = self.task_options.level_queue(task.queue_name, level_rank(task.priority))
        if get_broker().partitions.count(queue) > 1:
            raise InvalidTask(
                f"Task queue {task.queue_name!r} is partitioned (REDISQ['PARTITIONS'] names "
                f"{queue!r}): task queues cannot be. Remove it from PARTITIONS."
            )
        return queue

    def prepare(
        self, task: Task[..., Any], args: Any, kwargs: Any, result_id: str | None = None
    ) -> tuple[TaskResult[..., Any], Envelope, TaskMessage, int]:
        """Validate and encode a task: its READY result, its message and when its result
        expires (ms). Raises as ``enqueue``; ``ValueError`` for a ``result_id`` with
        unprintable characters (a result id appears in log lines as it is)."""
        if result_id is not None and not result_id.isprintable():
            raise ValueError(f"A task id must be printable (no newlines): {result_id!r}.")
        self.validate_task(task)
        result = RedisqTaskResult(
            task=task,
            id=result_id if result_id is not None else new_message_id(),
            status=TaskResultStatus.READY,
            enqueued_at=now_to_the_ms(),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        message = TaskMessage.of(task, result, self.task_options.max_retries)
        eta = None
        if task.run_after is not None:
            eta = task.run_after if timezone.is_aware(task.run_after) else (
                timezone.make_aware(task.run_after)
            )  # fmt: skip
        envelope = get_broker().prepare(
            self.level_queue(task), message.payload(), eta=eta, id=result.id
        )
        due = envelope.due_at_ms or 0
        expire_at = max(now_ms(), due) + self.task_options.result_ttl_ms
        return result, envelope, message, expire_at

    def ensure_queue(self, queue: str) -> None:
        """Register the ``tasks`` consumer of ``queue`` from its start (once a process),
        so that tasks enqueued before any worker ran are not skipped."""
        if queue not in self._ensured:
            get_broker().consumers.ensure(queue, TASKS_CONSUMER, StartPoint.parse("earliest"))
            self._ensured.add(queue)

    def enqueue(  # type: ignore[override]  # the stubs' ParamSpec ties args to the task
        self, task: Task[..., Any], args: Any, kwargs: Any
    ) -> TaskResult[..., Any]:
        """Enqueue ``task``: its READY result and its message in one script.

        Raises:
            InvalidTask: the task is not valid for this backend.
            TypeError: args or kwargs are not JSON-serialisable.
            PayloadTooLarge, RedisUnavailable: as ``publish``.
        """
        result, envelope, message, expire_at = self.prepare(task, args, kwargs)
        self.ensure_queue(envelope.queue)
        self.results.enqueue(envelope, message.result_fields(), expire_at_ms=expire_at)
        task_enqueued.send(type(self), task_result=result)
        return result

    async def aenqueue(  # type: ignore[override]  # as enqueue
        self, task: Task[..., Any], args: Any, kwargs: Any
    ) -> TaskResult[..., Any]:
        """``enqueue`` with the event loop's native asyncio Redis client (``redis.asyncio``,
        one per loop, standalone or Cluster; see ``tasks/aio.py``): never blocks the event
        loop on Redis."""
        result, envelope, message, expire_at = self.prepare(task, args, kwargs)
        queue = envelope.queue
        async with aio.loop_client() as client:
            if queue not in self._ensured:
                # From the log's start, as ensure_queue does.
                call = get_broker().consumers.ensure_call(queue, TASKS_CONSUMER, "earliest")
                await aio.run(client, call)
                self._ensured.add(queue)
            fields = message.result_fields()
            # The same call as enqueue's (its trend counted in the same round trip).
            call = self.results.enqueue_command(envelope, fields, expire_at_ms=expire_at)
            await aio.run(client, call)
        task_enqueued.send(type(self), task_result=result)
        return result

    # -- results -----------------------------------------------------------------------

    def result_queues(self) -> list[str]:
        """Every redisq queue whose results this backend reads."""
        opts = self.task_options
        return [q for name in sorted(self.queues) for q in opts.level_queues(name)]

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The result ``result_id``, read from Redis (any process may ask).

        Raises:
            TaskResultDoesNotExist: unknown, or expired (``OPTIONS["RESULT_TTL"]``).
        """
        found = self.results.read(self.result_queues(), result_id)
        if found is None:
            raise TaskResultDoesNotExist(result_id)
        return from_fields(result_id, found[1], self.alias)

    async def aget_result(self, result_id: str) -> TaskResult[..., Any]:
        """``get_result`` with the event loop's asyncio Redis client (as ``aenqueue``)."""
        broker = get_broker()
        queues = [broker.keys(q) for q in self.result_queues()]
        async with aio.loop_client() as client:
            replies = await aio.pipelined(client, read_commands(queues, result_id))
        found = read_found(queues, replies)
        if found is None:
            raise TaskResultDoesNotExist(result_id)
        return from_fields(result_id, found[1], self.alias)
