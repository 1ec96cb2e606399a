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


class NotRedrivable(RedisqError, ValueError):
    """A dead letter cannot be delivered again: it is undecodable or has no payload."""


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


class ArchiveNotRegistered(RedisqError):
    """A named archive is not registered on a queue (never, or removed since)."""

    def __init__(self, queue: str, name: str, table: str) -> None:
        self.queue = queue
        self.name = name
        self.table = table
        super().__init__(
            f"Archive {name!r} is not registered for the {table} of queue {queue!r}: it was "
            f"removed (manage.py redisq archives remove) or never started. Start it again to "
            f"register it anew (it goes on from its checkpoint)."
        )


class RedisUnavailable(RedisqError):
    """Redis could not be reached."""

    def __init__(self, address: str, cause: BaseException) -> None:
        self.address = address
        super().__init__(
            f"Cannot reach Redis at {address}: {str(cause).rstrip('.')}. Check that the "
            f"server is running and that REDISQ['URL'] or REDISQ['CONNECTION'] points at it."
        )


class RedisRefused(RedisUnavailable):
    """Redis is reachable but refuses commands for now (full, read-only, loading...).

    A :class:`RedisUnavailable`, so code that handles outages handles refusals too.
    ``condition`` names it: ``"oom"``, ``"readonly"``, ``"loading"``, ``"masterdown"``,
    ``"clusterdown"``, ``"busy"`` or ``"noreplicas"`` (see :data:`REFUSALS`). A refused
    command was not executed, so sending again later is safe.
    """

    def __init__(self, address: str, condition: str, cause: BaseException) -> None:
        self.address = address
        self.condition = condition
        what, todo = REFUSALS[condition]
        RedisqError.__init__(
            self,
            f"Redis at {address} refused the command: {what} ({str(cause).rstrip('.')}). {todo}",
        )


#: The conditions of :class:`RedisRefused`, named after the first word of Redis's error
#: reply (lower case): what happened, and what to do.
REFUSALS: dict[str, tuple[str, str]] = {
    "oom": (
        "it is out of memory (maxmemory reached with maxmemory-policy noeviction)",
        "Let consumers drain their queues, shorten the replay window or raise maxmemory, "
        "then retry.",
    ),
    "readonly": (
        "it is a read-only replica (a failover may be under way)",
        "Point REDISQ at the current master, or retry once the failover is over.",
    ),
    "loading": (
        "it is loading its data set after a restart",
        "Retry in a few seconds.",
    ),
    "masterdown": (
        "it is a replica that lost the link to its master",
        "Retry once the master is back, or point REDISQ at the current master.",
    ),
    "clusterdown": (
        "the Redis Cluster does not serve this slot (cluster down or resharding)",
        "Retry once every slot is served again (CLUSTER INFO: cluster_state:ok).",
    ),
    "busy": (
        "it is busy running a long script or function",
        "Retry later; SCRIPT KILL (or FUNCTION KILL) stops a script that never ends.",
    ),
    "noreplicas": (
        "fewer replicas than min-replicas-to-write are connected",
        "Retry once the replicas are back, or lower min-replicas-to-write.",
    ),
}


def refusal_condition(exc: BaseException) -> str | None:
    """The :data:`REFUSALS` condition of a redis-py error, or None when it is not one."""
    if isinstance(exc, redis.exceptions.BusyLoadingError):  # a ConnectionError in redis-py
        return "loading"
    if not isinstance(exc, redis.ResponseError):
        return None
    if isinstance(exc, redis.exceptions.OutOfMemoryError):
        return "oom"
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return "readonly"
    if isinstance(exc, redis.exceptions.MasterDownError):  # a ClusterDownError
        return "masterdown"
    if isinstance(exc, redis.exceptions.ClusterDownError):
        return "clusterdown"
    # redis-py strips the error code from some replies ("OOM ..." arrives as "command not
    # allowed when used memory > 'maxmemory'"), and keeps it for those it does not know.
    text = str(exc)
    if "when used memory > 'maxmemory'" in text:
        return "oom"
    word = text.split(" ", 1)[0].lower()
    return word if word in REFUSALS else None


def _is_nogroup(exc: BaseException) -> bool:
    return isinstance(exc, redis.ResponseError) and str(exc).startswith("NOGROUP")


def describe_client(client: Any) -> str:
    """``host:port/db`` of a redis-py client (a Sentinel service's name), never its
    password."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        kw = pool.connection_kwargs
        service = getattr(pool, "service_name", None)
        if service is not None:  # the master (or a replica) of a Sentinel service
            return f"Sentinel service {service}/{kw.get('db', 0)}"
        if "path" in kw:
            return f"unix:{kw['path']}"
        return f"{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"
    nodes = getattr(client, "get_nodes", None)
    if nodes is not None:  # RedisCluster
        return "cluster " + ",".join(n.name for n in nodes())
    return type(client).__name__


def translate_errors(method: Callable[P, R]) -> Callable[P, R]:
    """Turn redis-py errors of a method whose object has a ``client`` into ours:
    refusals into :class:`RedisRefused`, connection failures into
    :class:`RedisUnavailable`, and NOGROUP into :class:`ConsumerNotFound` when the object
    has a ``queue`` and a ``group`` (a subscription)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except redis.RedisError as exc:
            owner = args[0]
            condition = refusal_condition(exc)
            if condition is not None:
                address = describe_client(getattr(owner, "client", None))
                raise RedisRefused(address, condition, exc) from exc
            if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
                address = describe_client(getattr(owner, "client", None))
                raise RedisUnavailable(address, exc) from exc
            queue, group = getattr(owner, "queue", None), getattr(owner, "group", None)
            if _is_nogroup(exc) and isinstance(queue, str) and isinstance(group, str):
                raise ConsumerNotFound(queue, group) from exc
            raise

    return wrapper
