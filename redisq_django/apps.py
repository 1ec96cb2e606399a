"""Django app configuration."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.apps import AppConfig

if TYPE_CHECKING:
    from redisq_django.core.hooks import PublishHook


class RedisqConfig(AppConfig):
    """Registers system checks and signal receivers, and hands the broker its publish
    hooks: the one place that wires the capabilities together (docs/layout.md)."""

    name = "redisq_django"
    verbose_name = "Redis queues"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from redisq_django import checks, connection, signal_handlers  # noqa: F401  (checks: registrations)

        signal_handlers.connect()
        connection.add_publish_hooks(tracing_hooks)
        connection.add_publish_hooks(first_publish_hooks)
        import django

        if django.VERSION >= (6, 0):  # django.tasks: the tasks backend's task queues
            from redisq_django.tasks import signal_handlers as task_signal_handlers

            task_signal_handlers.connect()


def tracing_hooks() -> list[PublishHook]:
    """The broker's publish hooks from tracing (``REDISQ['TRACING']``), imported when a
    broker is built rather than at every process's start."""
    from redisq_django.metrics.tracing import publish_hooks

    return publish_hooks()


def first_publish_hooks() -> list[PublishHook]:
    """The broker's publish hook that registers a queue's declared consumers before a
    process's first message to it (``consuming/registration.py``)."""
    from redisq_django.consuming.registration import first_publish_hooks as hooks

    return hooks()
