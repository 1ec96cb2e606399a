"""App config of the fault-injection test consumers."""

from __future__ import annotations

from django.apps import AppConfig


class FaultAppConfig(AppConfig):
    """Holds ``consumers.py`` (found by redisq's autodiscovery); no models."""

    name = "tests.faultapp"
    label = "faultapp"
    default_auto_field = "django.db.models.BigAutoField"
