"""An asyncio client of the broker's Redis, and running the core's script calls on it.

``redis.asyncio.Redis`` (``redis.asyncio.cluster.RedisCluster`` when the broker's client
is a Redis Cluster one) built with the connection settings of the broker's client
(``broker.new_async_client()``; behind Sentinel, a client of the master the same sentinels
name); the script calls it runs are built by the core, the same
ones the synchronous client runs (:class:`~redisq_django.core.scripts.ScriptCall`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel

from redisq_django.core import partitions
from redisq_django.core.scripts import AsyncScripts, ScriptCall, ScriptName
from redisq_django.core.sending import QueueSend
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
    pool = sync.connection_pool
    if isinstance(pool, redis.sentinel.SentinelConnectionPool):
        return _sentinel_client(pool)
    return redis.asyncio.Redis(**client_kwargs(sync))


def _sentinel_client(pool: redis.sentinel.SentinelConnectionPool) -> redis.asyncio.Redis:
    """A client of the master that the same sentinels name for the same service, asked
    with the same settings: it follows a failover as the synchronous one does."""
    manager = pool.sentinel_manager
    given = pool.connection_kwargs
    kwargs = {k: given[k] for k in ("db", *_COPIED[3:]) if k in given}
    if issubclass(pool.connection_class, redis.SSLConnection):
        kwargs["ssl"] = True
    addresses = []
    for s in manager.sentinels:
        address = s.connection_pool.connection_kwargs
        addresses.append((address["host"], address["port"]))
    sentinels = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        addresses,
        min_other_sentinels=manager.min_other_sentinels,
        sentinel_kwargs=manager.sentinel_kwargs,
    )
    master = sentinels.master_for(pool.service_name, redis_class=redis.asyncio.Redis, **kwargs)
    return cast("redis.asyncio.Redis", master)


async def run_call(conn: AsyncRedisClient, scripts: AsyncScripts, call: ScriptCall) -> Any:
    """Run ``call`` on asyncio client ``conn`` (``scripts``: its scripts), as
    ``core.batch.run_script`` runs it on the synchronous client: with quiet commands,
    all in one round trip, the script's reply returned (raised when it is an error) and
    the quiet commands' replies ignored; after NOSCRIPT the script is loaded and run
    again, alone (the quiet commands went through the first time). When it fails,
    ``call.failed()`` is told."""
    try:
        if not call.quiet:
            return await scripts(call.script, call.keys, call.args)
        async with conn.pipeline(transaction=False) as pipe:
            pipe.execute_command(*scripts.command(call.script, call.keys, call.args))
            for command in call.quiet:
                pipe.execute_command(*command)
            replies = await pipe.execute(raise_on_error=False)
        reply = replies[0]
        if isinstance(reply, redis.exceptions.NoScriptError):
            return await scripts(call.script, call.keys, call.args)
        if isinstance(reply, Exception):
            raise reply
        return reply
    except BaseException:
        call.failed()
        raise


async def run_send(conn: AsyncRedisClient, scripts: AsyncScripts, s: QueueSend) -> list[Any]:
    """Run a send the core planned (``Broker.plan_send``) on asyncio client ``conn``, as
    ``core.sending.run_send`` runs it on the synchronous client: one round trip (and one
    more after NOSCRIPT), one reply per envelope, errors raised."""
    if s.check is not None:
        await partitions.arecorded(conn, scripts, *s.check)
    try:
        if s.script is None:
            async with conn.pipeline(transaction=s.transaction) as pipe:
                for command in (*s.commands, *s.quiet):
                    pipe.execute_command(*command)
                replies = list(await pipe.execute(raise_on_error=False))[: len(s.commands)]
        elif not s.each:
            keys, args = s.calls[0]
            call = ScriptCall(s.script, keys, args, quiet=s.quiet)
            replies = list(await run_call(conn, scripts, call))
        else:
            replies = await _each(conn, scripts, s.script, s.calls, s.quiet)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
    except BaseException:
        s.failed()
        raise
    return replies if s.ids is None else s.ids


async def _each(
    conn: AsyncRedisClient,
    scripts: AsyncScripts,
    name: ScriptName,
    calls: Sequence[tuple[list[str], list[Any]]],
    quiet: Sequence[Sequence[Any]],
) -> list[Any]:
    """Script ``name`` once per ``(KEYS, ARGV)`` of ``calls`` and ``quiet`` in one round
    trip; after NOSCRIPT replies, exactly the refused calls again (the others ran)."""
    async with conn.pipeline(transaction=False) as pipe:
        for keys, args in calls:
            pipe.execute_command(*scripts.command(name, keys, args))
        for command in quiet:
            pipe.execute_command(*command)
        replies = list(await pipe.execute(raise_on_error=False))[: len(calls)]
    for i, reply in enumerate(replies):
        if isinstance(reply, redis.exceptions.NoScriptError):
            keys, args = calls[i]
            replies[i] = await scripts(name, keys, args)  # loads it, then runs it
    return replies
