"""Receivers of the tasks backend, connected from ``AppConfig.ready()`` (Django >= 6.0)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db.models.signals import post_save

from redisq_django.consuming.declarations import registry
from redisq_django.core.clock import now_ms
from redisq_django.core.dead_entry import DeadReason
from redisq_django.models import DeadLetter
from redisq_django.signals import dead_letters_retried
from redisq_django.tasks.backend_options import TASKS_CONSUMER

if TYPE_CHECKING:
    from redisq_django.core.tasks import TaskResultStore


def _task_queue_ttls() -> dict[str, int]:
    """redisq queue of each task queue -> its results' TTL (ms)."""
    from redisq_django.tasks.configured import redisq_backends

    return {
        q: options.result_ttl_ms
        for options, names in redisq_backends().values()
        for name in names
        for q in options.level_queues(name)
    }


def _results() -> TaskResultStore:
    from redisq_django.connection import get_broker

    return get_broker().task_results


def results_ready_again(sender: Any, rows: Any, **kwargs: Any) -> None:
    """Dead letters of task queues sent again (the admin's Retry): their FAILED results
    are READY again, until a worker starts them."""
    ttl = _task_queue_ttls()
    now = now_ms()
    ready = [
        (row.queue, row.message_id, now + ttl[row.queue])
        for row in rows
        if row.consumer == TASKS_CONSUMER and row.queue in ttl
    ]
    if ready:  # a bulk retry's chunk: one round trip, not one per row
        _results().ready_many(ready)


def results_of_lost_tasks(sender: Any, instance: Any, **kwargs: Any) -> None:
    """A task's dead letter stored with reason ``lease_expired`` (its workers kept
    dying, so none settled it) or ``ended`` (staff ended it before its time): its
    result, left READY or RUNNING, is FAILED."""
    errors = {
        DeadReason.LEASE_EXPIRED: "redisq_django.tasks.results.LeaseExpired",
        DeadReason.ENDED: "redisq_django.tasks.results.TaskEnded",
    }
    if instance.consumer != TASKS_CONSUMER or instance.reason not in errors:
        return
    ttl = _task_queue_ttls().get(instance.queue)
    if ttl is None:
        return
    error = {
        "exception_class_path": errors[DeadReason(instance.reason)],
        "traceback": instance.error_message,
    }
    _results().lost(instance.queue, instance.message_id, error=error, expire_at_ms=now_ms() + ttl)


def task_declarations() -> list[Any]:
    from redisq_django.tasks.task_queues import task_declarations as declared

    return declared()


def connect() -> None:
    """Connect the receivers and declare the task queues (idempotent)."""
    dead_letters_retried.connect(results_ready_again, dispatch_uid="redisq_tasks_ready_again")
    post_save.connect(
        results_of_lost_tasks, sender=DeadLetter, dispatch_uid="redisq_tasks_lost_results"
    )
    registry.add_provider("tasks", task_declarations)
