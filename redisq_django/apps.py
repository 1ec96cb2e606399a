"""Django app configuration."""

from __future__ import annotations

from django.apps import AppConfig


class RedisqConfig(AppConfig):
    """Registers system checks and settings-change receivers."""

    name = "redisq_django"
    verbose_name = "Redis queues"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from redisq_django import checks, conf  # noqa: F401  (registers checks, receivers)
