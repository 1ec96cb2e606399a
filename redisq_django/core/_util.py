"""Small helpers shared inside the core: clocks, byte/str conversion, error translation."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import redis

from redisq_django.core.errors import RedisUnavailable

P = ParamSpec("P")
R = TypeVar("R")


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch (the clock stream ids and due times use)."""
    return time.time_ns() // 1_000_000


def to_str(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "backslashreplace")
    return str(value)


def to_bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


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
    """Turn redis-py connection failures into :class:`RedisUnavailable`."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            owner = args[0]
            raise RedisUnavailable(describe_client(getattr(owner, "client", None)), exc) from exc

    return wrapper


def flatten(fields: dict[bytes, bytes]) -> list[bytes]:
    out: list[bytes] = []
    for key, value in fields.items():
        out.append(key)
        out.append(value)
    return out


def number_problem(name: str, value: Any, *, integer: bool, positive: bool = False) -> str | None:
    """Why ``value`` is not a valid setting ``name`` (None when it is valid).

    Integers (``integer=True``) or numbers of seconds, at least 0 (or above 0 when
    ``positive``); booleans are refused although Python counts them as integers.
    """
    kind = int if integer else (int, float)
    is_number = isinstance(value, kind) and not isinstance(value, bool)
    if is_number and (value > 0 if positive else value >= 0):
        return None
    what = "an integer" if integer else "a number of seconds"
    return f"{name} must be {what} {'> 0' if positive else '>= 0'}, got {value!r}"
