"""One native ``redis.asyncio`` client per event loop, for everything that talks to Redis
from async code: ``apublish``/``apublish_many`` and the Tasks backend's ``aenqueue`` and
``aget_result`` (``tasks/aio.py``); never through a thread.

An asyncio client belongs to the loop it runs on, and a process may run several loops
(one per thread, ``asyncio.run`` per call, tests), so each loop gets its own, built with
the connection settings of the broker's client (``broker.new_async_client()``:
``redis.asyncio.Redis``; ``redis.asyncio.cluster.RedisCluster`` when the broker's client
is a Redis Cluster one; a client of the master the same sentinels name behind Sentinel)
and reused by every call on that loop. It is closed when the loop shuts down
(``loop.shutdown_asyncgens()``, which ``asyncio.run``, asgiref's ``async_to_sync`` and
ASGI servers call), or at once when the broker changes (settings changed).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import redis

from redisq_django.connection import get_broker
from redisq_django.core import Broker
from redisq_django.core.errors import RedisUnavailable
from redisq_django.core.scripts import AsyncScripts
from redisq_django.core.types import AsyncRedisClient


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
