"""The asyncio side of the tasks backend: ``aenqueue`` and ``aget_result`` talk to Redis
with ``redis.asyncio``, never through a thread, on this event loop's client
(``redisq_django/connection.py``: one per loop, closed with it).

What it runs, the core builds, the same calls as the synchronous side runs
(``core.scripts.ScriptCall``): nothing of the wire is rebuilt here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redisq_django.connection import LoopClient, loop_client
from redisq_django.core.asyncio_client import run_call
from redisq_django.core.scripts import ScriptCall

__all__ = ["loop_client", "pipelined", "run"]


async def run(entry: LoopClient, call: ScriptCall) -> Any:
    """Run a script call the core built (``broker.ensure_consumer_call``,
    ``TaskResultStore.enqueue_command``) on this loop's client."""
    return await run_call(entry.conn, entry.loaded, call)


async def pipelined(entry: LoopClient, commands: Sequence[Sequence[Any]]) -> list[Any]:
    """The replies to ``commands`` the core built (``core.tasks.result_wire.read_commands``), in
    one round trip (on a cluster, one per node holding some of their keys)."""
    async with entry.conn.pipeline(transaction=False) as pipe:
        for command in commands:
            pipe.execute_command(*command)
        return list(await pipe.execute())
