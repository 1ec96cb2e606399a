"""The handler of the ``tasks`` consumer: runs one task message and records its result.

A worker (``runconsumer --tasks``) calls :func:`execute` for each task message, in a
handler thread. The result goes RUNNING when the attempt starts (``task_start.lua``);
then one script settles the message with the result (``task_settle.lua``): the ack with
SUCCESSFUL, a retry with READY, or a dead letter with FAILED. Django's ``task_started``
and ``task_finished`` signals are sent here, as Django's own backends send them (the
handler holds the ``TaskResult`` they carry; a middleware would have to rebuild it).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Sequence
from traceback import format_exception
from typing import Any

from django.tasks import Task, TaskContext, TaskResultStatus, task_backends
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils.json import normalize_json

from redisq_django.consuming import inbox
from redisq_django.core.clock import now_ms
from redisq_django.core.dead_entry import Failure
from redisq_django.core.delivery import Delivery, Stream
from redisq_django.core.handler import Reject, settling
from redisq_django.core.outcome import Outcome, Settlement
from redisq_django.core.retry import RetryPolicy
from redisq_django.core.tasks import SUCCESSFUL, TaskPipe, TaskResultStore
from redisq_django.core.wire import loggable
from redisq_django.core.worker import Middleware
from redisq_django.tasks.backend import RedisqBackend, RedisqTask
from redisq_django.tasks.registry import UnknownTask, declared_task
from redisq_django.tasks.results import RedisqTaskResult, TaskMessage, task_for, to_datetime

logger = logging.getLogger("redisq.tasks")


def _policy(delivery: Delivery, job: TaskMessage, default_retries: int) -> RetryPolicy:
    """How a failed attempt is retried: the consumer's backoff (backend options, admin
    overrides) with the task's own ``@task`` options on top. Its ``max_retries`` is the
    task's (or the backend's ``OPTIONS["MAX_RETRIES"]``), never the consumer's: that one
    is the budget for crashes (deliveries that never settled)."""
    policy = delivery.policy or RetryPolicy()
    changes: dict[str, Any] = {
        "max_retries": int(job.retry.get("max_retries", default_retries)),
    }
    if "backoff" in job.retry:
        changes["backoff_s"] = float(job.retry["backoff"])
    if "max_backoff" in job.retry:
        changes["max_backoff_s"] = float(job.retry["max_backoff"])
    return policy.evolve(**changes)


def _error(exc: BaseException) -> TaskError:
    kind = type(exc)
    return TaskError(
        exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
        traceback="".join(format_exception(exc)),
    )


@settling  # the worker hands it the delivery, which it settles itself
def execute(delivery: Delivery) -> Settlement:
    """Run the task of ``delivery``'s message and settle the delivery with its result.

    Returns:
        How the attempt was settled here: ``ACKED`` with its result (written without
        waiting, see ``core/tasks/pipe.py``), or after a failure ``RETRIED`` or ``DEAD``
        (the settlement's ``error`` is the task's exception; ``DEAD`` at once, reason
        ``rejected``, when the task raised ``Reject``); ``LOST`` when another instance
        holds the message.

    Raises:
        Reject: the message is not a task message, names a backend that is not ours, or
            has an id with unprintable characters (a dead letter at once: retrying
            cannot help). A task path this process did not declare is the attempt's
            failure (``UnknownTask``; its module is never imported).
    """
    message = delivery.message
    if not message.id.isprintable():
        # A task's id is its result id, which Django's own log lines show as it is.
        raise Reject("a task id must be printable (no newlines or control characters)")
    try:
        job = TaskMessage.from_payload(message.payload)
    except ValueError as exc:
        raise Reject(str(exc)) from None
    backend = task_backends[job.backend]
    if not isinstance(backend, RedisqBackend):
        raise Reject(f"TASKS[{job.backend!r}] is not a redisq backend")
    store = backend.results
    pipe = _pipe(store)
    pipe.read_all()  # the previous task's settle (its reply arrived meanwhile)
    ttl = backend.task_options.result_ttl_ms
    worker_id = message.instance or "unknown"
    task_object = _task_or_placeholder(job)
    started = max(now_ms(), job.enqueued_at_ms)  # hosts' clocks differ; keep them ordered
    expire, rebuild = started + ttl, job.result_fields()
    if pipe.available and delivery.stream is Stream.LOG and message.attempts == 1:
        # A first delivery (retries and re-drives come through the direct stream): no
        # attempt before it, so the task need not wait for the start's reply.
        call = store.start_call(delivery, worker_id, expire, rebuild, started, job.lease_ms)
        pipe.write("task_start", *call)
        workers, errors = [worker_id], list[dict[str, str]]()
    else:
        workers, errors, started = store.start(
            delivery,
            worker_id=worker_id,
            expire_at_ms=expire,
            rebuild=rebuild,
            now=started,
            lease_ms=job.lease_ms,
        )
    if job.lease_ms:  # the start began the attempt's own lease: the worker renews that one
        delivery.lease_ms = job.lease_ms
    result = RedisqTaskResult(
        task=task_object,
        id=message.id,
        status=TaskResultStatus.RUNNING,
        enqueued_at=to_datetime(job.enqueued_at_ms),
        started_at=to_datetime(started),
        finished_at=None,
        last_attempted_at=to_datetime(max(now_ms(), started)),
        args=job.args,
        kwargs=job.kwargs,
        backend=job.backend,
        errors=[TaskError(**e) for e in errors],
        worker_ids=workers,
    )
    task_started.send(sender=type(backend), task_result=result)
    began = time.perf_counter_ns()
    ran = True
    try:
        task = declared_task(job.task)  # never an import of a path read from Redis
        ran, value_json = _run(task, job, result, delivery)
    except BaseException as exc:
        # SystemExit and KeyboardInterrupt too: in a worker thread they are the task's
        # own (no person pressed Ctrl-C: signals reach the main thread, which stops the
        # worker by its handlers), so they fail the task, recorded, as django-tasks' worker
        # does; only Django's immediate backend lets KeyboardInterrupt through.
        pipe.read_all()  # the start is applied before the failure is settled
        return _failed(delivery, job, backend, result, exc, started, _ms_since(began))
    duration = _ms_since(began)
    finished = max(now_ms(), started)
    done = {"status": SUCCESSFUL, "finished_at": str(finished), "return_value": value_json}
    result = dataclasses.replace(
        result,
        status=TaskResultStatus.SUCCESSFUL,
        finished_at=to_datetime(finished),
        _return_value=json.loads(value_json),
    )
    settled = Settlement.acked() if ran else Settlement.skipped()
    if pipe.available:
        # Acknowledged with its result by this write (the worker must not ack it too:
        # its own ack could reach Redis first); the reply is read with the next write.
        call = store.succeed_call(delivery, done, expire_at_ms=finished + ttl, duration_ms=duration)
        pipe.write("task_settle", *call)
        task_finished.send(sender=type(backend), task_result=result)
        return settled
    if not store.succeed(delivery, done, expire_at_ms=finished + ttl, duration_ms=duration):
        return Settlement.lost()
    task_finished.send(sender=type(backend), task_result=result)
    return settled


def _run(
    task: Task[..., Any], job: TaskMessage, result: RedisqTaskResult, delivery: Delivery
) -> tuple[bool, str]:
    """Call the task; ``(ran, its return value as JSON)``. An ``atomic`` task runs in
    its database's transaction with its inbox row, and when the row says it committed
    before (a crash between its commit and its result), it is not called again: its
    kept return value is the result (``consuming/inbox.py``)."""

    def call() -> str:
        if job.takes_context:
            raw = task.call(TaskContext(task_result=result), *job.args, **job.kwargs)
        else:
            raw = task.call(*job.args, **job.kwargs)
        return json.dumps(normalize_json(raw))

    using = inbox.database_of(getattr(task, "atomic", False), f"@task {job.task}")
    if using is None:
        return True, call()
    message = delivery.message
    ran, kept = inbox.once(
        message, queue=message.queue, consumer=message.consumer, using=using, work=call
    )
    return ran, "null" if kept is None else kept


def _ms_since(began_ns: int) -> int:
    """Milliseconds since ``time.perf_counter_ns()`` said ``began_ns`` (the task's run
    time, in its lifecycle event)."""
    return (time.perf_counter_ns() - began_ns) // 1_000_000


_local = threading.local()


def _pipe(store: TaskResultStore) -> TaskPipe:
    """This thread's pipe of task writes (a new one when the broker changed)."""
    pipe: TaskPipe | None = getattr(_local, "pipe", None)
    if pipe is None or getattr(_local, "store", None) is not store:
        if pipe is not None:
            pipe.close()
        pipe = _local.pipe = store.new_pipe()
        _local.store = store
    return pipe


class TaskPipeMiddleware(Middleware):
    """Reads the replies of a handler thread's task writes at the end of each batch and
    gives its connection back (``TaskPipe``)."""

    def after_batch(self, deliveries: Sequence[Delivery]) -> None:
        pipe: TaskPipe | None = getattr(_local, "pipe", None)
        if pipe is not None:
            pipe.close()


#: The worker runs it with the task queues' handler (``consuming.runner``).
execute.worker_middleware = TaskPipeMiddleware()  # type: ignore[attr-defined]


def _failed(
    delivery: Delivery,
    job: TaskMessage,
    backend: RedisqBackend,
    result: RedisqTaskResult,
    exc: BaseException,
    started: int,
    duration_ms: int,
) -> Settlement:
    """Settle a failed attempt (retry or dead letter; a dead letter at once when the task
    raised ``Reject``, as a consumer's handler may) and send ``task_finished``; called
    inside the ``except`` block, so that Django's log line carries the traceback.

    Returns:
        Its settlement, whose ``error`` is ``exc``.
    """
    error = _error(exc)
    finished = max(now_ms(), started)
    failure = Failure(error.exception_class_path, str(exc), error.traceback)
    policy = _policy(delivery, job, backend.task_options.max_retries)
    result_fields: dict[str, Any] = {
        "error": dataclasses.asdict(error),
        "finished_at_ms": finished,
        "expire_at_ms": finished + backend.task_options.result_ttl_ms,
        "duration_ms": duration_ms,
    }
    if isinstance(exc, Reject):  # the task says retrying cannot help
        settlement = backend.results.reject(delivery, failure, **result_fields)
    else:
        settlement = backend.results.fail(delivery, failure, policy, **result_fields)
    errors = [*result.errors, error]
    if settlement.outcome is Outcome.DEAD:
        result = dataclasses.replace(
            result, status=TaskResultStatus.FAILED, finished_at=to_datetime(finished), errors=errors
        )
        task_finished.send(sender=type(backend), task_result=result)
    elif settlement.outcome is Outcome.RETRIED:
        logger.info(
            "Task id=%s path=%s attempt %d failed (%s), its error %d of at most %d; retrying",
            result.id,
            loggable(job.task),
            delivery.attempts,
            error.exception_class_path,
            delivery.failures + 1,
            policy.max_retries + 1,
        )
    return settlement.with_error(exc)


def task_missing(*args: object, **kwargs: object) -> None:
    """Stands for a task this process did not declare, in the result its failure gets."""


def _task_or_placeholder(job: TaskMessage) -> Task[..., Any]:
    """The task of ``job`` as it was enqueued; when it is not declared here, the
    failure is the task's own (raised again when it runs), and a placeholder stands in."""
    try:
        return task_for(job.task, job.result_fields())
    except UnknownTask:
        return RedisqTask(
            func=task_missing,
            backend=job.backend,
            queue_name=job.queue_name,
            priority=job.priority,
        )
