"""``enqueue_once``: enqueue a task at most once per message id (periodic schedules)."""

from __future__ import annotations

from typing import Any

from django.tasks import Task, TaskResult
from django.tasks.signals import task_enqueued

from redisq_django.connection import get_broker
from redisq_django.core.tasks import ONCE
from redisq_django.tasks.backend import RedisqBackend
from redisq_django.tasks.results import from_fields


def enqueue_once(
    task: Task[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], *, message_id: str
) -> TaskResult[..., Any]:
    """Enqueue ``task`` as message ``message_id`` at most once (publish-once: a second call
    with the same id enqueues nothing and returns the first call's result).

    The result id is ``message_id``. Safe to call from any number of processes at once,
    and again after an error (a timeout, Redis away): the first call that reaches Redis
    writes the READY result, and the message is published with the core's publish-once
    mechanism (``Broker.send(..., once=True)``, ``publish_once.lua``), which Redis
    remembers for a day per message id. A call whose result is already there returns
    that result (READY, RUNNING or finished) and sends no ``task_enqueued`` signal; it
    still sends the message once more through publish-once, which is a no-op when the
    first call's send went through and completes it when that call failed in between.

    Args:
        task: a ``@task`` of a ``redisq_django.tasks.RedisqBackend`` backend.
        args, kwargs: its arguments (JSON-normalised as Django does).
        message_id: the id, at most 64 characters (e.g. derived from a schedule and its
            tick time); also the result id.

    Returns:
        The first call's ``TaskResult`` (``get_result(message_id)`` reads it later).

    Raises:
        TypeError: ``task``'s backend is not a redisq one, or args are not JSON.
        InvalidTask: the task is not valid for the backend.
        ValueError: ``message_id`` is longer than 64 characters, or has a newline or
            another unprintable character.
        RedisUnavailable: Redis cannot be reached (calling again is safe).
    """
    backend = task.get_backend()
    if not isinstance(backend, RedisqBackend):
        raise TypeError(
            f"enqueue_once needs a task of a redisq backend; {task.module_path} uses "
            f"TASKS[{task.backend!r}] ({type(backend).__name__})."
        )
    result, envelope, message, expire_at = backend.prepare(task, args, kwargs, message_id)
    backend.ensure_queue(envelope.queue)
    existing = backend.results.enqueue(
        envelope, message.result_fields(), expire_at_ms=expire_at, mode=ONCE
    )
    get_broker().send([envelope], once=True)
    if existing is not None:
        return from_fields(message_id, existing, backend.alias)
    task_enqueued.send(type(backend), task_result=result)
    return result
