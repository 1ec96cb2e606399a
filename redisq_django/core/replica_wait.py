"""Waiting for replicas (``WAIT``) after a script call, on the connection that ran it.

Redis replicates asynchronously: a failover promotes a replica that may lack the last
writes of its master. ``WAIT numreplicas timeout`` blocks until that many replicas have
every write the master had when the *same connection* last wrote, or the timeout passes,
and answers how many did. Another connection's ``WAIT`` knows nothing of this one's
writes, so the call and its ``WAIT`` go in one pipeline (one connection, one round trip).

On a Redis Cluster the pipeline goes to the node that serves the call's keys (one slot:
every key of a queue shares its hash tag), through that node's own client: redis-py's
cluster pipeline would route a ``WAIT``, which names no key, to any node. A slot moved
meanwhile is looked up again; a node that cannot be reached refreshes the cluster's map
before the error goes to the caller, who retries as after any outage.

Used by ordered consumers (``Subscription``'s ``replica_wait``): see
docs/howto/ordering.md, *Failover*.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, cast

import redis
import redis.cluster

from redisq_django.core.scripts import ScriptName, Scripts
from redisq_django.core.types import RedisClient

#: A call refused with MOVED (a slot that changed hands) is sent this many times at most.
MOVED_ATTEMPTS = 3


@dataclass(frozen=True)
class ReplicaWait:
    """How many replicas must confirm a call, and how long to wait for them.

    Attributes:
        replicas: replicas that must have the call's writes (at least 1).
        timeout_ms: the longest wait, ms (at least 1: ``WAIT``'s 0 would wait for ever).
    """

    replicas: int
    timeout_ms: int

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.timeout_ms < 1:
            raise ValueError(f"{self!r}: replicas and timeout_ms must be at least 1")


def call_and_wait(
    client: RedisClient,
    scripts: Scripts,
    name: ScriptName,
    keys: list[str],
    args: list[Any],
    wait: ReplicaWait,
) -> tuple[Any, int]:
    """Run script ``name``, then ``WAIT`` for ``wait.replicas`` on the same connection.

    Returns:
        The script's reply, and how many replicas confirmed within ``wait.timeout_ms``
        (fewer than asked when the wait timed out: the call ran all the same).

    Raises:
        redis.RedisError: the script's error reply, or the connection's failure (whether
            the call ran is then unknown, as for any call).
    """
    cluster = client if isinstance(client, redis.cluster.RedisCluster) else None
    for attempt in range(MOVED_ATTEMPTS):
        if cluster is None:
            owner = cast("redis.Redis", client)
        else:  # the client of the node that serves the keys' slot
            node = cluster.get_node_from_key(keys[0])  # type: ignore[no-untyped-call]
            owner = cluster.get_redis_connection(node)
        try:
            reply, confirmed = _pipelined(owner, scripts, name, keys, args, wait)
        except (redis.ConnectionError, redis.TimeoutError):
            if cluster is not None:
                _refresh(cluster)  # the next try finds the slot's node now
            raise
        except redis.exceptions.MovedError:
            if cluster is None or attempt == MOVED_ATTEMPTS - 1:
                raise
            _refresh(cluster)
            continue
        return reply, confirmed
    raise AssertionError("unreachable")  # pragma: no cover


def _pipelined(
    owner: redis.Redis,
    scripts: Scripts,
    name: ScriptName,
    keys: list[str],
    args: list[Any],
    wait: ReplicaWait,
) -> tuple[Any, int]:
    """The call and its ``WAIT`` in one pipeline of ``owner`` (a plain client)."""
    for _ in range(2):  # a NOSCRIPT (Redis restarted): load the script, once
        with owner.pipeline(transaction=False) as pipe:
            pipe.execute_command(*scripts.command(name, keys, args))  # type: ignore[no-untyped-call]
            pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)  # type: ignore[no-untyped-call]
            reply, confirmed = pipe.execute(raise_on_error=False)
        if isinstance(reply, redis.exceptions.NoScriptError):
            scripts.load(name)
            continue
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(confirmed, BaseException):
            raise confirmed
        return reply, int(confirmed)
    raise redis.exceptions.NoScriptError(f"script {name} could not be loaded")


def _refresh(cluster: redis.cluster.RedisCluster) -> None:
    """Read the cluster's slots again (a failover moved them); nothing when no node
    answers now: the caller's next try reads them."""
    with contextlib.suppress(redis.RedisError):
        cluster.nodes_manager.initialize()
