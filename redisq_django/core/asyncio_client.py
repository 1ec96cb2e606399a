"""An asyncio client of the broker's Redis, and running the core's script calls on it.

``redis.asyncio.Redis`` (``redis.asyncio.cluster.RedisCluster`` when the broker's client
is a Redis Cluster one) built with the connection settings of the broker's client
(``broker.new_async_client()``); the script calls it runs are built by the core, the same
ones the synchronous client runs (:class:`~redisq_django.core.scripts.ScriptCall`).
"""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from redisq_django.core.scripts import AsyncScripts, ScriptCall
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
