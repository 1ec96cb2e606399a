"""The process-wide :class:`~redisq_django.core.Broker` built from Django settings."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import redis
import redis.cluster

from redisq_django.conf import SettingsError, get_core_config, get_settings
from redisq_django.core import Broker

if TYPE_CHECKING:
    from redisq_django.metrics.tracing import Tracing


def get_redis_client() -> Any:
    """The redis-py client named by ``REDISQ['URL']`` (a ``RedisCluster`` with
    ``REDISQ['CLUSTER']``) or ``REDISQ['CONNECTION']``.

    Raises:
        SettingsError: the alias is not a django-redis cache.
    """
    s = get_settings()
    if s["CLUSTER"]:
        return redis.cluster.RedisCluster.from_url(s["URL"])
    if s["URL"]:
        return redis.Redis.from_url(s["URL"])
    alias = s["CONNECTION"]
    from django.conf import settings

    if alias not in getattr(settings, "CACHES", {}):
        raise SettingsError(
            f"settings.REDISQ['CONNECTION'] is {alias!r}, but CACHES has no such alias. "
            "Add a django-redis cache with that alias, or set REDISQ['URL']."
        )
    try:
        from django_redis import get_redis_connection

        return get_redis_connection(alias)
    except (NotImplementedError, AttributeError, ImportError) as exc:
        raise SettingsError(
            f"CACHES[{alias!r}] is not a django-redis cache ({exc}). Use "
            "'django_redis.cache.RedisCache' as its BACKEND, or set REDISQ['URL']."
        ) from exc


@functools.cache
def get_broker() -> Broker:
    """The shared broker of this process (thread-safe), rebuilt after settings change.

    With ``REDISQ['TRACING']``, its publishing is traced (see ``metrics/tracing.py``).

    Raises:
        MissingExtra: ``TRACING`` is on but opentelemetry-api is not installed.
    """
    hooks = [get_tracing()] if get_settings()["TRACING"] else []
    return Broker(get_redis_client(), get_core_config(), hooks)


@functools.cache
def get_tracing() -> Tracing:
    """The process's :class:`~redisq_django.metrics.tracing.Tracing` (publish hook and
    worker middleware), on OpenTelemetry's global tracer provider.

    Raises:
        MissingExtra: opentelemetry-api is not installed.
    """
    from redisq_django.metrics.tracing import Tracing

    return Tracing()
