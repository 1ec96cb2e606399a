"""Publishing one tick: a message to a queue, or a Django task enqueued, at most once per
tick id (the id every worker derives from the schedule and the tick time)."""

from __future__ import annotations

import importlib
from typing import Any

import django

from redisq_django.core.broker import Broker
from redisq_django.schedules.scheduler import Fire
from redisq_django.schedules.spec import QueueTarget, ScheduleSpec, TaskTarget, tick_id
from redisq_django.schedules.timing import ScheduleError


def publish_tick(broker: Broker, spec: ScheduleSpec, tick_ms: int) -> str:
    """Publish the message of ``spec``'s queue target for tick ``tick_ms``, once per id.

    Returns:
        The message id (:func:`~redisq_django.schedules.spec.tick_id`).
    """
    target = spec.target
    assert isinstance(target, QueueTarget)
    envelope = broker.prepare(
        target.queue, target.payload, headers=spec.headers(tick_ms), id=tick_id(spec.name, tick_ms)
    )
    return broker.send([envelope], once=True)[0]


def load_task(path: str) -> Any:
    """The Django task declared at dotted ``path``: looked up among the project's tasks
    (``redisq_django.tasks.registry``), never imported from the path, which a worker
    reads from the database and staff type in the admin.

    Raises:
        ScheduleError: no task of the project has that path (or Django < 6.0).
    """
    if django.VERSION < (6, 0):
        raise ScheduleError(
            f"Task {path!r}: Django's tasks need Django 6.0 or newer; this is "
            f"{django.get_version()}."
        )
    from redisq_django.tasks.registry import UnknownTask, declared_task

    try:
        return declared_task(path)
    except UnknownTask as exc:
        raise ScheduleError(str(exc)) from None


def enqueue_tick(spec: ScheduleSpec, tick_ms: int) -> str:
    """Enqueue ``spec``'s task for tick ``tick_ms``, at most once per tick id, through the
    redisq Tasks backend (``redisq_django.tasks.enqueue_once``).

    Returns:
        The tick id, which is the enqueued message's id.

    Raises:
        ScheduleError: the task does not import, or the Tasks backend is not available.
    """
    target = spec.target
    assert isinstance(target, TaskTarget)
    try:
        # Imported when first needed: the Tasks backend needs Django >= 6.0.
        enqueue_once = importlib.import_module("redisq_django.tasks").enqueue_once
    except (ImportError, AttributeError) as exc:
        raise ScheduleError(
            f"Schedule {spec.name!r} enqueues task {target.path!r}, which needs the redisq "
            f"Tasks backend (redisq_django.tasks, Django >= 6.0): {exc}"
        ) from None
    message_id = tick_id(spec.name, tick_ms)
    enqueue_once(
        load_task(target.path), tuple(target.args), dict(target.kwargs), message_id=message_id
    )
    return message_id


def firer(broker: Broker) -> Fire:
    """The ``fire`` of a :class:`~redisq_django.schedules.scheduler.Scheduler`: each tick
    to its schedule's queue or task."""

    def fire(spec: ScheduleSpec, tick_ms: int) -> str:
        if isinstance(spec.target, QueueTarget):
            return publish_tick(broker, spec, tick_ms)
        return enqueue_tick(spec, tick_ms)

    return fire
