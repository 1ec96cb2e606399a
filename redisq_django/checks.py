"""System checks (``manage.py check``) for redisq settings."""

from __future__ import annotations

from typing import Any

from django.core import checks

from redisq_django.conf import SettingsError, get_core_config, get_settings


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """redisq_django.E001: ``settings.REDISQ`` is invalid."""
    try:
        get_settings()
        get_core_config()
    except SettingsError as exc:
        return [
            checks.Error(
                str(exc),
                hint="Fix settings.REDISQ; the README lists every key with its default.",
                id="redisq_django.E001",
            )
        ]
    return []


@checks.register()
def check_consumers(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """redisq_django.E002: an app's ``consumers.py`` fails to import."""
    from redisq_django.registry import DiscoveryError, autodiscover

    try:
        autodiscover()
    except DiscoveryError as exc:
        return [
            checks.Error(
                str(exc),
                hint="Fix the import error; runconsumer cannot start until it imports.",
                id="redisq_django.E002",
            )
        ]
    return []
