"""The number of partitions recorded in Redis, checked where each write happens.

``{q}:meta`` records K (field ``partitions``), so that processes configured differently
are refused (:class:`~redisq_django.core.errors.PartitionsMismatch`) instead of writing
where no consumer reads.

Redis is the record; a process's K is a cache, checked where each write happens. Every
partition records K too (field ``partitions`` of ``{q#i}:meta``), and every script that
adds a message to a partition (or creates a group there) is given the K the caller
routes by and refuses the write (``REDISQ_LAYOUT``) unless the partition records it; a
partitioned queue's base log and delayed set are fences (strings), so a plain write of a
process that thinks it unpartitioned fails. A refused process reads the record again
(:func:`retried`): after Redis lost its data it records K anew and goes on; after a
change of K it is refused (``PartitionsMismatch``), never silently wrong.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, TypeVar, cast

import redis

from redisq_django.core.errors import (
    ConfigurationError,
    PartitionsMismatch,
    error_code,
)
from redisq_django.core.keys import QueueKeys
from redisq_django.core.partitions.routing import MAX_PARTITIONS
from redisq_django.core.scripts import AsyncScripts, Scripts
from redisq_django.core.types import AsyncRedisClient, RedisClient

#: The field of ``{q}:meta`` that records K (and of each partition's ``{q#i}:meta``).
META_FIELD = "partitions"

R = TypeVar("R")

#: What a partitioned queue's base log and delayed set hold: a string (written by
#: ``partitions.lua`` and ``repartition.lua``), so that a plain ``XADD`` or ``ZADD`` of a
#: process that thinks the queue unpartitioned fails (WRONGTYPE).
FENCE_PREFIX = b"redisq fence:"

#: A step of the layout check (:func:`checking`): a script call ``("script", name, keys,
#: args)`` or a batch of plain commands sent in one round trip ``("commands", [...])``
#: (no transaction: each is on its own key, in its own slot).
Step = tuple[Any, ...]


def parse_recorded(raw: bytes | str | None, where: str) -> int | None:
    """A number of partitions as recorded in Redis (``where``: the key), read strictly: a
    whole number from 1 to :data:`MAX_PARTITIONS`, or None when nothing is recorded.

    Raises:
        ConfigurationError: the record is anything else ("4.5", "04", "x"): written by
            someone else; it is never read leniently.
    """
    if raw is None:
        return None
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    if text.isascii() and text.isdigit() and not text.startswith("0"):
        k = int(text)
        if k <= MAX_PARTITIONS:
            return k
    shown = text[:20].encode("unicode_escape").decode()
    raise ConfigurationError(
        f"{where} records {shown!r} as its number of partitions (field {META_FIELD!r}), "
        f"which is not a whole number from 1 to {MAX_PARTITIONS}. Record the right one: "
        f"'manage.py redisq partitions QUEUE K' (on a drained queue), or 'HSET {where} "
        f"{META_FIELD} K' with the K its processes are configured with."
    )


def checking(base: QueueKeys, k: int) -> Generator[Step, Any, int]:
    """Compare ``k``, this process's number of partitions of the queue of ``base``, with
    what Redis records, recording it when nothing is (the steps, for either client:
    :func:`recorded`, :func:`arecorded`).

    For 1: one ``HGET``. For K > 1: ``partitions.lua`` reads the record (a queue whose
    base log holds a stream was used unpartitioned: 1). When nothing is recorded — a new
    queue, or Redis lost the base keys (a restart without persistence, one master of a
    cluster that came back empty) — the partitions' own records say what the queue had,
    and K is recorded again; then each partition's record (field ``partitions`` of
    ``{q#i}:meta``, which every write there checks) is set to K where missing. So a
    process that finds its writes refused (``REDISQ_LAYOUT``) after Redis lost its data
    records the layout again and goes on, and one with another K is refused.

    Returns:
        ``k`` (it matches).

    Raises:
        PartitionsMismatch: Redis records (or the partitions' records or the base keys'
            data imply) another K.
        ConfigurationError: a record is not a whole number from 1 to 64, partitions
            disagree, or partition logs exist without any record (written by a version
            before these records).
    """
    if k == 1:
        (raw,) = yield ("commands", [("HGET", base.meta, META_FIELD)])
        return _compared(base, parse_recorded(raw, base.meta) or 0, k)
    script_keys = [base.meta, base.log, base.delayed]
    found = int((yield ("script", "partitions", script_keys, [0])))
    if found == 0:
        metas = [base.partition(i).meta for i in range(MAX_PARTITIONS)]
        logs = [base.partition(i).log for i in range(MAX_PARTITIONS)]
        replies = yield (
            "commands",
            [("HGET", meta, META_FIELD) for meta in metas] + [("EXISTS", log) for log in logs],
        )
        _compared(base, _from_partitions(base, metas, logs, replies), k)
        found = int((yield ("script", "partitions", script_keys, [k])))
    _compared(base, found, k)
    mine = [base.partition(i).meta for i in range(k)]
    stamped = yield (
        "commands",
        [c for meta in mine for c in (("HSETNX", meta, META_FIELD, k), ("HGET", meta, META_FIELD))],
    )
    for meta, raw in zip(mine, stamped[1::2], strict=True):
        found_there = parse_recorded(raw, meta)
        if found_there != k:
            raise PartitionsMismatch(base.queue, found_there or 0, k, where=meta)
    return k


def _from_partitions(
    base: QueueKeys, metas: Sequence[str], logs: Sequence[str], replies: Sequence[Any]
) -> int:
    """What the partitions' own records say the queue has (0: nothing), when its base
    keys record nothing."""
    seen = {
        meta: k
        for meta, raw in zip(metas, replies[: len(metas)], strict=True)
        if (k := parse_recorded(raw, meta)) is not None
    }
    if len(set(seen.values())) > 1:
        shown = ", ".join(f"{meta} records {k}" for meta, k in list(seen.items())[:6])
        raise ConfigurationError(
            f"Queue {base.queue!r} has no number of partitions recorded in {base.meta}, "
            f"and its partitions disagree ({shown}). Record the right one with 'manage.py "
            f"redisq partitions {base.queue} K' once its processes agree."
        )
    if seen:
        return next(iter(seen.values()))
    stray = [log for log, n in zip(logs, replies[len(metas) :], strict=True) if n]
    if stray:
        raise ConfigurationError(
            f"Queue {base.queue!r} has partition logs ({', '.join(stray[:3])}...) but no "
            f"number of partitions recorded in Redis ({base.meta} has no {META_FIELD!r} "
            f"field, nor do its partitions). Record it: 'manage.py redisq partitions "
            f"{base.queue} K' with the K those logs were written with."
        )
    return 0


def _compared(base: QueueKeys, found: int, k: int) -> int:
    if found not in (0, k):
        raise PartitionsMismatch(base.queue, found, k)
    return k


def run_steps(client: RedisClient, scripts: Scripts, steps: Generator[Step, Any, R]) -> R:
    """Run a sans-I/O check (:func:`checking`) on the synchronous client."""
    reply: Any = None
    while True:
        try:
            step = steps.send(reply)
        except StopIteration as done:
            return cast("R", done.value)
        if step[0] == "script":
            reply = scripts(step[1], step[2], step[3])
            continue
        with client.pipeline(transaction=False) as pipe:
            for command in step[1]:
                pipe.execute_command(*command)
            reply = pipe.execute()


async def arun_steps(
    conn: AsyncRedisClient, scripts: AsyncScripts, steps: Generator[Step, Any, R]
) -> R:
    """:func:`run_steps` on an asyncio client."""
    reply: Any = None
    while True:
        try:
            step = steps.send(reply)
        except StopIteration as done:
            return cast("R", done.value)
        if step[0] == "script":
            reply = await scripts(step[1], step[2], step[3])
            continue
        async with conn.pipeline(transaction=False) as pipe:
            for command in step[1]:
                pipe.execute_command(*command)
            reply = await pipe.execute()


def recorded(client: RedisClient, scripts: Scripts, base: QueueKeys, k: int) -> int:
    """:func:`checking` on the synchronous client: ``k``, or an error."""
    return run_steps(client, scripts, checking(base, k))


async def arecorded(conn: AsyncRedisClient, scripts: AsyncScripts, base: QueueKeys, k: int) -> int:
    """:func:`checking` on an asyncio client."""
    return await arun_steps(conn, scripts, checking(base, k))


def refused(exc: BaseException, keys: QueueKeys) -> bool:
    """Whether a write into ``keys``' layout was refused because the layout it assumed is
    not the one Redis records: a script's ``REDISQ_LAYOUT`` reply, or, for a queue's
    own keys, WRONGTYPE from a plain ``XADD``/``ZADD`` that met the fence of a queue
    partitioned since. Read the record again (:func:`recorded`) before trying again."""
    code = error_code(exc)
    return code == "REDISQ_LAYOUT" or (code == "WRONGTYPE" and keys.part is None)


def retried(client: RedisClient, scripts: Scripts, keys: QueueKeys, write: Callable[[], R]) -> R:
    """Run ``write``, a write into ``keys``' layout; when it is refused for its layout
    (:func:`refused`: the number of partitions changed, or Redis lost the records), read
    the record again — recording it anew when Redis lost it — and run it once more.

    A refused write wrote nothing (the check comes first in every script, and a plain
    write that met a fence failed whole), so running it again duplicates nothing.

    Raises:
        PartitionsMismatch: Redis records another number of partitions than ``keys``
            were built for: this process's setting is stale.
    """
    try:
        return write()
    except redis.ResponseError as exc:
        if not refused(exc, keys):
            raise
    recorded(client, scripts, keys.base, keys.of or 1)
    return write()


async def aretried(
    conn: AsyncRedisClient,
    scripts: AsyncScripts,
    keys: QueueKeys,
    write: Callable[[], Awaitable[R]],
) -> R:
    """:func:`retried` on an asyncio client."""
    try:
        return await write()
    except redis.ResponseError as exc:
        if not refused(exc, keys):
            raise
    await arecorded(conn, scripts, keys.base, keys.of or 1)
    return await write()
