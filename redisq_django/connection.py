"""The process-wide :class:`~redisq_django.core.Broker` built from Django settings,
brokers of the same Redis that give up quickly (:func:`quick_broker`: the admin's, the
metrics view's, registration at ``migrate`` and on an event loop's thread), and one
native asyncio client per event loop (:func:`loop_client`) for async code."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import redis
import redis.cluster
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool

from redisq_django.conf import SettingsError, get_core_config, get_settings
from redisq_django.core import Broker
from redisq_django.core.errors import RedisUnavailable, describe_client
from redisq_django.core.hooks import PublishHook
from redisq_django.core.scripts import AsyncScripts
from redisq_django.core.types import AsyncRedisClient, RedisClient

logger = logging.getLogger("redisq")

#: Where the broker's publish hooks come from: functions the app added once
#: (``apps.ready()``: tracing's), each asked whenever the broker is built, so that a
#: settings change (``REDISQ['TRACING']``) applies.
_hook_sources: list[Callable[[], Sequence[PublishHook]]] = []


def get_redis_client() -> RedisClient:
    """The redis-py client named by ``REDISQ['URL']`` (a ``RedisCluster`` with
    ``REDISQ['CLUSTER']``) or ``REDISQ['CONNECTION']``.

    Raises:
        SettingsError: ``CONNECTION`` names no cache, or one that is not django-redis
            (:func:`cache_client`).
    """
    s = get_settings()
    if s["CLUSTER"]:
        return redis.cluster.RedisCluster.from_url(s["URL"])
    if s["URL"]:
        return redis.Redis.from_url(s["URL"])
    return cache_client(s["CONNECTION"])


#: The fix a message offers a user without a Redis setting (an example, no real address).
_SET_URL = "set REDISQ['URL'] instead (e.g. 'redis://localhost:6379/0')"
_DJANGO_REDIS = "django_redis.cache.RedisCache"


def cache_client(alias: str) -> RedisClient:
    """The redis-py client of django-redis cache ``alias``, built without connecting.

    Every entry point that needs Redis (``runconsumer``, ``manage.py redisq``, the
    admin, ``publish``) gets here first, and so does system check
    ``redisq_django.E005``: each says the same one line.

    Raises:
        SettingsError: ``CACHES`` has no such alias, or its cache is not a django-redis
            one (Django's default ``LocMemCache`` when nothing is configured, or Django's
            own ``RedisCache``, whose client is not redis-py's).
    """
    from django.conf import settings

    caches = getattr(settings, "CACHES", {})
    if alias not in caches:
        raise SettingsError(
            f"redisq has no Redis to use: REDISQ['CONNECTION'] names the cache {alias!r}, "
            f"which settings.CACHES does not have. Add a django-redis cache {alias!r} to "
            f"CACHES, or {_SET_URL}."
        )
    try:
        from django_redis import get_redis_connection

        # django-redis ships no types; what it hands out is a redis-py ``Redis``.
        return cast("RedisClient", get_redis_connection(alias))
    except (NotImplementedError, AttributeError, ImportError) as exc:
        raise SettingsError(_not_django_redis(alias, caches[alias], exc)) from exc


def _not_django_redis(alias: str, cache: Any, exc: Exception) -> str:
    """Why cache ``alias`` (its ``CACHES`` entry) gives redisq no client, and the fix."""
    from django.conf import settings

    if "CONNECTION" in getattr(settings, "REDISQ", {}):
        which = f"REDISQ['CONNECTION'] names the cache CACHES[{alias!r}], which"
    else:  # nothing configured yet: Django's default cache, in the zero-config case
        which = f"REDISQ sets no URL, and the cache it falls back on, CACHES[{alias!r}],"
    if isinstance(exc, ImportError):
        return (
            f"redisq has no Redis to use: {which} needs django-redis, which cannot be "
            f"imported ({exc}). Install django-redis, or {_SET_URL}."
        )
    backend = cache.get("BACKEND", "?") if isinstance(cache, dict) else "?"
    if backend == "django.core.cache.backends.redis.RedisCache":
        fix = f"Set REDISQ['URL'] to its LOCATION, or make its BACKEND {_DJANGO_REDIS}"
    else:
        fix = f"Make its BACKEND {_DJANGO_REDIS}, or {_SET_URL}"
    return f"redisq has no Redis to use: {which} is {backend}, not a django-redis cache. {fix}."


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


def quick_broker(timeout: float) -> Broker:
    """A broker of the Redis that ``REDISQ`` names whose calls give up after ``timeout``
    seconds and are never retried (on :func:`quick_client`), for whatever must answer
    when Redis is down or hung: the admin's pages, the metrics view's scrapes, the
    registration of declared consumers at ``migrate`` and on an event loop's thread.

    A new broker each call (the client is cached per timeout); without the publish
    hooks of :func:`get_broker`'s, which nothing that gives up quickly publishes with.

    Raises:
        SettingsError: ``REDISQ`` names no usable connection.
        redis.exceptions.RedisClusterException: no node of the cluster answered.
    """
    return Broker(quick_client(timeout), get_core_config())


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


# -- one asyncio client per event loop -------------------------------------------------
#
# One native ``redis.asyncio`` client per event loop, for everything that talks to Redis
# from async code: ``apublish``/``apublish_many`` and the Tasks backend's ``aenqueue`` and
# ``aget_result`` (``tasks/aio.py``); never through a thread.
#
# An asyncio client belongs to the loop it runs on, and a process may run several loops
# (one per thread, ``asyncio.run`` per call, tests), so each loop gets its own, built with
# the connection settings of the broker's client (``broker.new_async_client()``:
# ``redis.asyncio.Redis``; ``redis.asyncio.cluster.RedisCluster`` when the broker's client
# is a Redis Cluster one; a client of the master the same sentinels name behind Sentinel)
# and reused by every call on that loop. It is closed when the loop shuts down
# (``loop.shutdown_asyncgens()``, which ``asyncio.run``, asgiref's ``async_to_sync`` and
# ASGI servers call), or at once when the broker changes (settings changed).


@dataclass
class LoopClient:
    """The client of one event loop."""

    source: Broker  # the broker whose Redis it talks to
    conn: AsyncRedisClient
    closer: Any  # the async generator that closes it at the loop's shutdown
    loaded: AsyncScripts = field(init=False)  # its scripts, registered on first use

    def __post_init__(self) -> None:
        self.loaded = AsyncScripts(self.conn)


_lock = threading.Lock()
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopClient] = (
    weakref.WeakKeyDictionary()
)


async def _closed_at_shutdown(conn: AsyncRedisClient) -> AsyncIterator[None]:
    # Started once, it stays suspended at its yield; the loop's shutdown_asyncgens()
    # closes every unfinished async generator started on the loop, running this finally.
    try:
        yield
    finally:
        await conn.aclose()


async def _entry() -> LoopClient:
    """This event loop's client (built on first use, or when the broker changed)."""
    loop = asyncio.get_running_loop()
    broker = get_broker()
    with _lock:
        entry = _clients.get(loop)
        if entry is not None and entry.source is broker:
            return entry
        stale, conn = entry, broker.new_async_client()
        entry = _clients[loop] = LoopClient(broker, conn, _closed_at_shutdown(conn))
    # Its first step registers the generator with the loop (its asyncgen hooks); the
    # entry keeps it referenced, as the loop holds its generators weakly.
    await anext(entry.closer)
    if stale is not None:
        await stale.closer.aclose()
    return entry


@contextlib.asynccontextmanager
async def loop_client() -> AsyncIterator[LoopClient]:
    """This event loop's client; connection errors become ``RedisUnavailable`` as in the
    synchronous API."""
    entry = await _entry()
    try:
        yield entry
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailable(entry.source.where, exc) from exc
