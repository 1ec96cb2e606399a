"""App config of the tasks tests' worker processes (tests/tasks/settings.py)."""

from __future__ import annotations

from django.apps import AppConfig


class TaskAppConfig(AppConfig):
    """Holds ``tasks.py`` (found by the tasks registry's discovery); no models."""

    name = "tests.taskapp"
    label = "taskapp"
    default_auto_field = "django.db.models.BigAutoField"
