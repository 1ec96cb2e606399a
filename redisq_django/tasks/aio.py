"""The asyncio side of the tasks backend: ``aenqueue`` and ``aget_result`` talk to Redis
with ``redis.asyncio``, never through a thread.

One native client per event loop: an asyncio client belongs to the loop it runs on, and
a process may run several loops (one per thread, ``asyncio.run`` per call, tests), so
each loop gets its own, built with the connection settings of the broker's client —
``redis.asyncio.Redis``, or ``redis.asyncio.cluster.RedisCluster`` when the broker's
client is a Redis Cluster one — and reused by every call on that loop. It is closed when
the loop shuts down (``loop.shutdown_asyncgens()``, which ``asyncio.run``, asgiref's
``async_to_sync`` and ASGI servers call), or at once when the broker's client changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from redisq_django.connection import get_broker
from redisq_django.core import trends
from redisq_django.core.batch import Command
from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import RedisUnavailable, describe_client
from redisq_django.core.keys import QueueKeys, registry_key
from redisq_django.core.scripts import AsyncScripts, ScriptName
from redisq_django.core.task_wire import PUBLISH, decode_hash, enqueue_call
from redisq_django.core.types import AsyncRedisClient, RedisClient

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
#: Those that also apply to every node of a cluster (the nodes' addresses come from it).
_COPIED_CLUSTER = ("username", "password", "socket_timeout", "socket_connect_timeout")


def client_kwargs(sync: redis.Redis) -> dict[str, Any]:
    """The connection settings of a standalone redis-py client, for ``redis.asyncio``."""
    pool = sync.connection_pool
    given = pool.connection_kwargs
    out = {k: given[k] for k in _COPIED if k in given}
    if "path" in given:  # a unix socket
        out = {k: v for k, v in out.items() if k not in ("host", "port")}
        out["unix_socket_path"] = given["path"]
    if issubclass(pool.connection_class, redis.SSLConnection):
        out["ssl"] = True
    return out


def new_client(sync: RedisClient) -> AsyncRedisClient:
    """An asyncio client with the connection settings of redis-py client ``sync``."""
    if isinstance(sync, redis.cluster.RedisCluster):
        node = sync.get_default_node()  # type: ignore[no-untyped-call]
        given = sync.nodes_manager.connection_kwargs
        kwargs = {k: given[k] for k in _COPIED_CLUSTER if k in given}
        if issubclass(given.get("connection_class", redis.Connection), redis.SSLConnection):
            kwargs["ssl"] = True
        return redis.asyncio.cluster.RedisCluster(host=node.host, port=node.port, **kwargs)
    return redis.asyncio.Redis(**client_kwargs(sync))


@dataclass
class _LoopClient:
    """The client of one event loop."""

    source: RedisClient  # the broker's client it was built from
    conn: AsyncRedisClient
    closer: Any  # the async generator that closes it at the loop's shutdown
    scripts: AsyncScripts = field(init=False)

    def __post_init__(self) -> None:
        self.scripts = AsyncScripts(self.conn)


_lock = threading.Lock()
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
    weakref.WeakKeyDictionary()
)


async def _closed_at_shutdown(conn: AsyncRedisClient) -> AsyncIterator[None]:
    # Started once, it stays suspended at its yield; the loop's shutdown_asyncgens()
    # closes every unfinished async generator started on the loop, running this finally.
    try:
        yield
    finally:
        await conn.aclose()


async def _loop_client() -> _LoopClient:
    """This event loop's client (built on first use, or when the broker changed)."""
    loop = asyncio.get_running_loop()
    sync = get_broker().client
    with _lock:
        entry = _clients.get(loop)
        if entry is not None and entry.source is sync:
            return entry
        stale, conn = entry, new_client(sync)
        entry = _clients[loop] = _LoopClient(sync, conn, _closed_at_shutdown(conn))
    # Its first step registers the generator with the loop (its asyncgen hooks); the
    # entry keeps it referenced, as the loop holds its generators weakly.
    await anext(entry.closer)
    if stale is not None:
        await stale.closer.aclose()
    return entry


@contextlib.asynccontextmanager
async def client() -> AsyncIterator[_LoopClient]:
    """This event loop's client; connection errors become ``RedisUnavailable`` as in the
    synchronous API."""
    entry = await _loop_client()
    try:
        yield entry
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailable(describe_client(get_broker().client), exc) from exc


async def _script(
    entry: _LoopClient, name: ScriptName, keys: Sequence[str], args: Sequence[Any]
) -> Any:
    return await entry.scripts(name, keys, args)


async def _script_quietly(
    entry: _LoopClient,
    name: ScriptName,
    keys: Sequence[str],
    args: Sequence[Any],
    quiet: Sequence[Command],
) -> Any:
    """Script ``name`` and ``quiet`` commands in one round trip, as ``core.batch.run_script``
    does for the synchronous client: the script's reply (raised when it is an error), the
    quiet commands' replies ignored. After NOSCRIPT the script is loaded and run again,
    alone: the quiet commands went through the first time."""
    async with entry.conn.pipeline(transaction=False) as pipe:
        pipe.execute_command(*entry.scripts.command(name, keys, args))
        for command in quiet:
            pipe.execute_command(*command)
        replies = await pipe.execute(raise_on_error=False)
    reply = replies[0]
    if isinstance(reply, redis.exceptions.NoScriptError):
        return await entry.scripts(name, keys, args)
    if isinstance(reply, Exception):
        raise reply
    return reply


async def ensure_consumer(entry: _LoopClient, keys: QueueKeys, consumer: str) -> None:
    """Register logical consumer ``consumer`` on the queue from its start unless it
    exists (as ``Broker.ensure_consumer(..., "earliest")``), and record the queue's name."""
    gkeys = keys.group(consumer)
    await _script(entry, "ensure_consumer", [keys.log, gkeys.direct], [consumer, "0-0"])
    await entry.conn.sadd(registry_key(get_broker().config.prefix), keys.queue)


async def enqueue(
    entry: _LoopClient,
    keys: QueueKeys,
    envelope: Envelope,
    result: Mapping[str, str],
    expire_at_ms: int,
    mode: str,
    *,
    trends_on: bool = False,
) -> Any:
    """Run ``task_enqueue.lua`` (see ``TaskResultStore.enqueue``); with ``trends_on``, a
    published task counts in the queue's ``published`` trend in the same round trip, as
    the synchronous ``enqueue`` counts it."""
    script_keys, args = enqueue_call(keys, envelope, result, expire_at_ms=expire_at_ms, mode=mode)
    if not (trends_on and mode == PUBLISH):
        return await _script(entry, "task_enqueue", script_keys, args)
    counter = trends.counter(keys)
    try:
        quiet = counter.commands({trends.PUBLISHED: 1})
        return await _script_quietly(entry, "task_enqueue", script_keys, args, quiet)
    except BaseException:
        counter.forget()  # its EXPIRE may be lost: send one again next time
        raise


async def read(
    entry: _LoopClient, queues: Sequence[QueueKeys], result_id: str
) -> dict[str, str] | None:
    """The result ``result_id`` from whichever queue holds it (one round trip; on a
    cluster, one per node holding some of those queues)."""
    async with entry.conn.pipeline(transaction=False) as pipe:
        for keys in queues:
            pipe.hgetall(keys.task_result(result_id))
        replies = await pipe.execute()
    for raw in replies:
        if raw:
            return decode_hash(raw)
    return None
