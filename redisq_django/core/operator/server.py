"""What the guarantees need from the Redis server, checked: a version with the commands
we use, no eviction, and an append-only file (docs/howto/redis.md, "Operating Redis for redisq").

Read by ``manage.py check --deploy`` and logged as warnings when ``runconsumer`` starts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

import redis

from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str

logger = logging.getLogger("redisq.server")

#: The oldest Redis whose commands the scripts use (XAUTOCLAIM, XTRIM MINID, ...).
MIN_VERSION = (6, 2)

_SECTION = "see 'Operating Redis for redisq' in the documentation (docs/howto/redis.md)"


class ServerProblem(NamedTuple):
    """One way the Redis server falls short of what the guarantees need.

    Attributes:
        code: ``"eviction"``, ``"no_aof"``, ``"aof_fsync"``, ``"old_version"`` or
            ``"config_unreadable"`` (stable: the system check ids follow them).
        message: what was found.
        hint: what to do.
    """

    code: str
    message: str
    hint: str


def _nodes(reply: Any) -> list[Mapping[str, Any]]:
    # A cluster client answers {node: reply} when it asked every node.
    if isinstance(reply, Mapping) and reply and all(isinstance(v, Mapping) for v in reply.values()):
        return list(reply.values())
    return [reply] if isinstance(reply, Mapping) else []


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for part in text.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _config(client: RedisClient, name: str) -> set[str]:
    """The values of setting ``name`` on every node (one pattern per call: Redis 6.2)."""
    return {to_str(n.get(name, "")) for n in _nodes(client.config_get(name))}


def server_problems(client: RedisClient) -> list[ServerProblem]:
    """What the Redis server behind ``client`` lacks for the guarantees (empty: nothing).

    ``CONFIG GET`` is often refused by managed Redis services; that is reported as one
    ``config_unreadable`` problem (the rest cannot be checked), never raised.

    Raises:
        redis.RedisError: Redis cannot be reached (the caller reports that on its own).
    """
    problems: list[ServerProblem] = []
    versions = {to_str(n.get("redis_version", "")) for n in _nodes(client.info("server"))}
    old = sorted(v for v in versions if v and _version(v) < MIN_VERSION)
    if old:
        problems.append(
            ServerProblem(
                "old_version",
                f"Redis {old[0]} is older than 6.2, the oldest version redisq supports.",
                f"Upgrade Redis to 6.2 or later; {_SECTION}.",
            )
        )
    try:
        policies = _config(client, "maxmemory-policy")
        appendonly = _config(client, "appendonly")
        fsync = _config(client, "appendfsync")
    except redis.ResponseError as exc:  # unknown (renamed) command, NOPERM
        problems.append(
            ServerProblem(
                "config_unreadable",
                f"Redis refused CONFIG GET ({exc}), so redisq cannot check its "
                "maxmemory-policy and persistence.",
                "Check them by hand or in your provider's console: maxmemory-policy "
                f"noeviction and AOF on (appendonly yes); {_SECTION}.",
            )
        )
        return problems
    if policies - {"noeviction"}:
        problems.append(
            ServerProblem(
                "eviction",
                f"Redis evicts keys under memory pressure (maxmemory-policy "
                f"{', '.join(sorted(policies - {'noeviction'}))}): it may delete queues, "
                "messages and consumer groups without a trace.",
                "Set maxmemory-policy noeviction on the Redis redisq uses, and keep the "
                f"Django cache (allkeys-lru) on another Redis or database; {_SECTION}.",
            )
        )
    if appendonly - {"yes"}:
        problems.append(
            ServerProblem(
                "no_aof",
                "Redis runs without an append-only file (appendonly no): a restart loses "
                "every message published since the last snapshot, or all of them.",
                f"Set appendonly yes (appendfsync everysec or always); {_SECTION}.",
            )
        )
    elif fsync & {"no"}:
        problems.append(
            ServerProblem(
                "aof_fsync",
                "Redis writes its append-only file with appendfsync no: a crash of the "
                "host may lose the last 30 s or so of messages.",
                f"Set appendfsync everysec (at most 1 s lost) or always; {_SECTION}.",
            )
        )
    return problems


def warn_server_problems(client: RedisClient) -> list[ServerProblem]:
    """Log each of :func:`server_problems` as a WARNING (a worker's start); never raises.

    Returns:
        The problems logged.
    """
    try:
        problems = server_problems(client)
    except redis.RedisError as exc:
        logger.warning("Could not check the Redis configuration: %s", exc)
        return []
    for problem in problems:
        logger.warning("%s %s", problem.message, problem.hint)
    return problems
