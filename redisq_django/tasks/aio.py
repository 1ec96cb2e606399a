"""The asyncio side of the tasks backend: ``aenqueue`` and ``aget_result`` talk to Redis
with ``redis.asyncio``, never through a thread.

Each call opens a client with the connection settings of the broker's own client and
closes it when done: an asyncio client belongs to the event loop it first ran on, and a
process may run many loops (``asyncio.run`` per request, tests), so nothing is shared
between calls. A Redis Cluster client has no single connection pool to copy: with one,
these calls raise ``NotImplementedError`` (use ``enqueue`` / ``get_result``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import redis
import redis.asyncio

from redisq_django.connection import get_broker
from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import RedisUnavailable, describe_client
from redisq_django.core.keys import QueueKeys, registry_key
from redisq_django.core.scripts import script_source
from redisq_django.core.task_results import decode_hash, enqueue_call

#: Connection settings copied from the broker's client.
_COPIED = (
    "host",
    "port",
    "db",
    "username",
    "password",
    "socket_timeout",
    "socket_connect_timeout",
    "client_name",
)


def client_kwargs() -> dict[str, Any]:
    """The broker's client's connection settings, for ``redis.asyncio.Redis``.

    Raises:
        NotImplementedError: the broker's client has no single pool (Redis Cluster).
    """
    pool = getattr(get_broker().client, "connection_pool", None)
    if pool is None:
        raise NotImplementedError(
            "aenqueue/aget_result need a standalone Redis client; with Redis Cluster, "
            "call enqueue/get_result instead."
        )
    given = pool.connection_kwargs
    out = {k: given[k] for k in _COPIED if k in given}
    if "path" in given:  # a unix socket
        out = {k: v for k, v in out.items() if k not in ("host", "port")}
        out["unix_socket_path"] = given["path"]
    if issubclass(pool.connection_class, redis.SSLConnection):
        out["ssl"] = True
    return out


@contextlib.asynccontextmanager
async def client() -> AsyncIterator[Any]:
    """An asyncio client for one call, closed afterwards; connection errors become
    ``RedisUnavailable`` as in the synchronous API."""
    conn = redis.asyncio.Redis(**client_kwargs())
    try:
        yield conn
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailable(describe_client(get_broker().client), exc) from exc
    finally:
        await conn.aclose()


async def _script(conn: Any, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
    # AsyncScript sends EVALSHA and loads the script on NOSCRIPT.
    return await conn.register_script(script_source(name))(keys=list(keys), args=list(args))


async def ensure_consumer(conn: Any, keys: QueueKeys, group: str) -> None:
    """Register ``group`` on the queue from its start unless it exists (as
    ``Broker.ensure_consumer(..., "earliest")``), and record the queue's name."""
    gkeys = keys.group(group)
    await _script(conn, "ensure_consumer", [keys.log, gkeys.direct], [group, "0-0"])
    await conn.sadd(registry_key(get_broker().config.prefix), keys.queue)


async def enqueue(
    conn: Any,
    keys: QueueKeys,
    envelope: Envelope,
    result: Mapping[str, str],
    expire_at_ms: int,
    mode: str,
) -> Any:
    """Run ``task_enqueue.lua`` (see ``TaskResults.enqueue``)."""
    script_keys, args = enqueue_call(keys, envelope, result, expire_at_ms=expire_at_ms, mode=mode)
    return await _script(conn, "task_enqueue", script_keys, args)


async def read(conn: Any, queues: Sequence[QueueKeys], result_id: str) -> dict[str, str] | None:
    """The result ``result_id`` from whichever queue holds it (one round trip)."""
    async with conn.pipeline(transaction=False) as pipe:
        for keys in queues:
            pipe.hgetall(keys.task_result(result_id))
        replies = await pipe.execute()
    for raw in replies:
        if raw:
            return decode_hash(raw)
    return None
