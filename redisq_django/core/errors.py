"""The exceptions redisq raises; every message says what happened and what to do."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import redis

P = ParamSpec("P")
R = TypeVar("R")


class RedisqError(Exception):
    """Base class of every error raised by redisq."""


class PublishError(RedisqError):
    """A message could not be published."""


class PayloadTooLarge(PublishError):
    """The encoded payload is bigger than the configured limit."""

    def __init__(self, queue: str, size: int, limit: int, *, headers: int = 0) -> None:
        self.queue = queue
        self.size = size
        self.limit = limit
        what = f"Payload and headers ({headers} bytes of headers)" if headers else "Payload"
        super().__init__(
            f"{what} for queue {queue!r} is {size} bytes once encoded as JSON, over the "
            f"limit of {limit} bytes. Publish a reference (a primary key, a storage path) "
            f"instead of the data, or raise REDISQ['MAX_PAYLOAD_BYTES']."
        )


class PayloadNotSerializable(PublishError):
    """The payload or headers contain a value JSON cannot represent."""

    def __init__(self, queue: str, what: str, type_name: str) -> None:
        self.queue = queue
        self.type_name = type_name
        super().__init__(
            f"The {what} for queue {queue!r} is not JSON-serialisable: it contains an object "
            f"of type {type_name!r}. Convert it to str, int, float, bool, None, list or dict "
            f"(datetime, date, time, timedelta, Decimal and UUID are converted for you)."
        )


class InvalidName(RedisqError, ValueError):
    """A queue or consumer name is not allowed."""


class ConfigurationError(RedisqError):
    """The redisq configuration is invalid (also raised as ImproperlyConfigured by Django)."""


class ConsumerNotFound(RedisqError):
    """A logical consumer (consumer group) does not exist on the queue."""

    def __init__(self, queue: str, group: str) -> None:
        self.queue = queue
        self.group = group
        super().__init__(
            f"Logical consumer {group!r} is not registered on queue {queue!r}. Register it "
            f"first (Broker.ensure_consumer or a @consumer declaration) and try again."
        )


class RedisUnavailable(RedisqError):
    """Redis could not be reached."""

    def __init__(self, address: str, cause: BaseException) -> None:
        self.address = address
        super().__init__(
            f"Cannot reach Redis at {address}: {str(cause).rstrip('.')}. Check that the "
            f"server is running and that REDISQ['URL'] or REDISQ['CONNECTION'] points at it."
        )


def describe_client(client: Any) -> str:
    """``host:port/db`` of a redis-py client, never its password."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        kw = pool.connection_kwargs
        if "path" in kw:
            return f"unix:{kw['path']}"
        return f"{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"
    nodes = getattr(client, "get_nodes", None)
    if nodes is not None:  # RedisCluster
        return "cluster " + ",".join(n.name for n in nodes())
    return type(client).__name__


def translate_errors(method: Callable[P, R]) -> Callable[P, R]:
    """Turn redis-py connection failures of a method whose object has a ``client`` into
    :class:`RedisUnavailable`."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            owner = args[0]
            raise RedisUnavailable(describe_client(getattr(owner, "client", None)), exc) from exc

    return wrapper
