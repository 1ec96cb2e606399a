"""Partitioned queues: K full queues under hash tags ``{q#0}``…``{q#K-1}``, the key hash
that routes a message, and the number of partitions recorded in Redis.

A queue of ``CoreConfig.partitions`` K > 1 spreads over a Redis Cluster's masters while
every script stays single-slot: each partition is today's layout under a hash tag of
its own (``QueueKeys.partition``). Its base keys (``{q}``) keep what belongs to the
whole queue: ``{q}:meta`` records K (field ``partitions``), so that processes
configured differently are refused (:class:`~redisq_django.core.errors.PartitionsMismatch`)
instead of writing where no consumer reads.

Redis is the record; a process's K is a cache, checked where each write happens. Every
partition records K too (field ``partitions`` of ``{q#i}:meta``), and every script that
adds a message to a partition (or creates a group there) is given the K the caller
routes by and refuses the write (``REDISQ_LAYOUT``) unless the partition records it; a
partitioned queue's base log and delayed set are fences (strings), so a plain write of a
process that thinks it unpartitioned fails. A refused process reads the record again
(:func:`retried`): after Redis lost its data it records K anew and goes on; after a
change of K it is refused (``PartitionsMismatch``), never silently wrong.

Routing (:func:`route`): a message with an ordering key goes to ``partition_of(key, K)``,
so one key's messages keep their order within one partition; without a key, a message
whose id is known before sending (publish-once, a batch sent once, a delayed one) goes
to ``crc32(id) mod K`` (sent again, it meets its marker), and the rest take turns.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, TypeVar, cast

import redis

from redisq_django.core.envelope import Envelope
from redisq_django.core.errors import (
    ConfigurationError,
    PartitionedQueueError,
    PartitionsMismatch,
    error_code,
)
from redisq_django.core.keys import QueueKeys
from redisq_django.core.scripts import AsyncScripts, Scripts
from redisq_django.core.types import AsyncRedisClient, RedisClient

#: The most partitions a queue may have.
MAX_PARTITIONS = 64
#: The field of ``{q}:meta`` that records K (and of each partition's ``{q#i}:meta``).
META_FIELD = "partitions"

R = TypeVar("R")


def partition_of(key: str, k: int) -> int:
    """The partition of ordering key (or message id) ``key`` among ``k``: the IEEE 802.3
    CRC-32 of its UTF-8 bytes (``zlib.crc32``, unsigned), modulo ``k`` (PROTOCOL.md,
    "Partitions: the key hash")."""
    return zlib.crc32(key.encode()) % k


class Partitions:
    """The partitions of one queue with K > 1: their keys and whose turn it is.

    Thread-safe: ``next()`` of an ``itertools.count`` is one step under the GIL.
    """

    __slots__ = ("_turn", "count", "keys")

    def __init__(self, base: QueueKeys, count: int) -> None:
        self.count = count
        self.keys = tuple(base.partition(i, of=count) for i in range(count))
        self._turn = itertools.count()

    def next(self) -> QueueKeys:
        """The next partition in turn (messages without a key or an id of their own)."""
        return self.keys[next(self._turn) % self.count]

    def of(self, key: str) -> QueueKeys:
        """The partition of ordering key (or message id) ``key``."""
        return self.keys[partition_of(key, self.count)]


def route(
    parts: Partitions,
    envelopes: Sequence[Envelope],
    *,
    once: bool = False,
    batch: str | None = None,
) -> list[tuple[QueueKeys, list[int]]]:
    """Which partition each of one queue's envelopes goes to, as ``(partition keys,
    indexes into envelopes)`` in the order first met.

    Keyed envelopes go to their key's partition. The others: with ``once``, each to its
    id's (every envelope has one then); with ``batch``, together to the batch id's (it
    stays one all-or-none write, at most once); else together to the first one's id's
    when it has one (a delayed message), else to the next partition in turn.
    """
    loose: QueueKeys | None = None
    out: dict[QueueKeys, list[int]] = {}
    for index, e in enumerate(envelopes):
        if e.key is not None:
            target = parts.of(e.key)
        elif once and e.id is not None:
            target = parts.of(e.id)
        else:
            if loose is None:
                chosen = batch if batch is not None else e.id
                loose = parts.of(chosen) if chosen is not None else parts.next()
            target = loose
        out.setdefault(target, []).append(index)
    return list(out.items())


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


def pick(layout: Sequence[QueueKeys], partition: int | None, what: str) -> QueueKeys:
    """The keys of partition ``partition`` of a queue laid out as ``layout`` (its keys,
    or each of its partitions' keys), or its only keys when ``partition`` is None.

    Args:
        what: what is asked, for the error (e.g. "a dead letter").

    Raises:
        PartitionedQueueError: ``partition`` missing on a partitioned queue, given on
            another, or out of range.
    """
    queue, count = layout[0].queue, len(layout)
    if partition is None and count == 1:
        return layout[0]
    if count == 1:
        raise PartitionedQueueError(
            f"Queue {queue!r} is not partitioned (REDISQ['PARTITIONS'] gives it none): ask "
            f"for {what} by the queue alone, not Place({queue!r}, {partition!r})."
        )
    if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition < count:
        raise PartitionedQueueError(
            f"Queue {queue!r} has {count} partitions: say which one holds {what}, "
            f"Place({queue!r}, 0) to Place({queue!r}, {count - 1}) (got {partition!r})."
        )
    return layout[partition]
