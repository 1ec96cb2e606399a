"""The process-wide :class:`~redisq_django.core.Broker` built from Django settings, and
clients of the same Redis that give up quickly (the admin's, the metrics view's)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, cast

import redis
import redis.cluster
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from redisq_django.conf import SettingsError, get_core_config, get_settings
from redisq_django.core import Broker
from redisq_django.core.errors import describe_client
from redisq_django.core.hooks import PublishHook
from redisq_django.core.types import RedisClient

logger = logging.getLogger("redisq")

#: Where the broker's publish hooks come from: functions the app added once
#: (``apps.ready()``: tracing's), each asked whenever the broker is built, so that a
#: settings change (``REDISQ['TRACING']``) applies.
_hook_sources: list[Callable[[], Sequence[PublishHook]]] = []


def get_redis_client() -> RedisClient:
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

        # django-redis ships no types; what it hands out is a redis-py ``Redis``.
        return cast("RedisClient", get_redis_connection(alias))
    except (NotImplementedError, AttributeError, ImportError) as exc:
        raise SettingsError(
            f"CACHES[{alias!r}] is not a django-redis cache ({exc}). Use "
            "'django_redis.cache.RedisCache' as its BACKEND, or set REDISQ['URL']."
        ) from exc


@functools.lru_cache(maxsize=4)
def quick_client(timeout: float) -> RedisClient:
    """A client of the Redis that ``REDISQ`` names whose calls give up after ``timeout``
    seconds and are never retried: pages and scrapes answer when Redis is down or hung.

    The same server or Sentinel service, database, credentials and TLS as
    :func:`get_redis_client`'s; on a cluster, a cluster client built from ``URL``. Cached
    per timeout (cleared when the settings change).

    Raises:
        SettingsError: ``REDISQ`` names no usable connection.
        redis.exceptions.RedisClusterException: no node of the cluster answered.
    """
    if get_settings()["CLUSTER"]:
        # Built here, not copied: building a cluster client connects to it, and the
        # application's waits without a timeout by default.
        return redis.cluster.RedisCluster.from_url(get_settings()["URL"], **_quick({}, timeout))
    client = get_redis_client()
    pool: Any = getattr(client, "connection_pool", None)
    if type(pool) in (redis.ConnectionPool, redis.BlockingConnectionPool):
        new_pool = redis.ConnectionPool(
            connection_class=pool.connection_class, **_quick(pool.connection_kwargs, timeout)
        )
        return redis.Redis(connection_pool=new_pool)
    if isinstance(pool, SentinelConnectionPool):
        # The sentinels are asked with the same short timeouts: finding the master must
        # not hang either.
        manager = pool.sentinel_manager
        addresses = [s.connection_pool.connection_kwargs for s in manager.sentinels]
        quick_manager = Sentinel(  # type: ignore[no-untyped-call]
            [(a["host"], a["port"]) for a in addresses],
            min_other_sentinels=manager.min_other_sentinels,
            sentinel_kwargs=_quick(manager.sentinel_kwargs, timeout),
        )
        new_pool = SentinelConnectionPool(  # type: ignore[no-untyped-call]
            pool.service_name,
            quick_manager,
            is_master=pool.is_master,
            check_connection=pool.check_connection,
            **_quick(pool.connection_kwargs, timeout),
        )
        return redis.Redis(connection_pool=new_pool)
    logger.warning(
        "Redis client %s is used as it is for the admin and the metrics view (its pool is "
        "not a redis-py pool of a server or a Sentinel service): they wait as long as its "
        "own timeouts allow.",
        describe_client(client),
    )
    return client


# Connection arguments that belong to the pool that made them: a new pool makes its own.
_POOL_BOUND = ("connection_pool", "maint_notifications_pool_handler")


def _quick(connection_kwargs: dict[str, Any], timeout: float) -> dict[str, Any]:
    """``connection_kwargs`` with ``timeout`` on every socket operation, no retries and
    no health checks."""
    kwargs = {k: v for k, v in connection_kwargs.items() if k not in _POOL_BOUND}
    kwargs.pop("retry_on_error", None)
    kwargs.pop("retry_on_timeout", None)
    kwargs.update(
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )
    for restored in ("orig_socket_timeout", "orig_socket_connect_timeout"):
        if restored in kwargs:  # what redis-py restores after a maintenance notification
            kwargs[restored] = timeout
    return kwargs


def add_publish_hooks(source: Callable[[], Sequence[PublishHook]]) -> None:
    """Give every broker built from now on the publish hooks ``source()`` returns then
    (the same ``source`` again is a no-op); the broker is rebuilt.

    ``apps.ready()`` adds tracing's, so this module knows no capability: the app wires
    them together (docs/layout.md).
    """
    if source not in _hook_sources:
        _hook_sources.append(source)
    get_broker.cache_clear()


@functools.cache
def get_broker() -> Broker:
    """The shared broker of this process (thread-safe), rebuilt after settings change.

    Its publishing runs the hooks of :func:`add_publish_hooks` (with
    ``REDISQ['TRACING']``, tracing's: see ``metrics/tracing.py``).

    Raises:
        MissingExtra: ``TRACING`` is on but opentelemetry-api is not installed.
    """
    hooks = [hook for source in _hook_sources for hook in source()]
    return Broker(get_redis_client(), get_core_config(), hooks)
