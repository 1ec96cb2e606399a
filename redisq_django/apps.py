"""Django app configuration."""

from __future__ import annotations

from django.apps import AppConfig


class RedisqConfig(AppConfig):
    """Registers system checks and signal receivers."""

    name = "redisq_django"
    verbose_name = "Redis queues"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from redisq_django import checks, signal_handlers  # noqa: F401  (registrations)

        signal_handlers.connect()
        import django

        if django.VERSION >= (6, 0):  # django.tasks: the tasks backend's task queues
            from redisq_django.tasks import signal_handlers as task_signal_handlers

            task_signal_handlers.connect()
