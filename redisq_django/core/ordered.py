"""Ordered consumers: the messages of one ordering key handled one at a time, in order.

A logical consumer declared ordered receives a message with an ordering key only while
no other message of that key is out: delivered to one of its instances, waiting for a
retry, or handed on to its private input. The key is held by that message (the group's
``holders`` hash: key -> message id) from the read that lets it out
(``read_ordered.lua``) until it is acknowledged (``ack_ordered.lua``) or becomes a dead
letter (``fail.lua``); a retry, a re-delivery after a crash and a hand-back at shutdown
keep it. A message read meanwhile waits at the end of its key's list (acknowledged from
the group in the same script, so no instance holds it); the settle that frees the key
hands it to the list's first message, which goes to the consumer's direct stream.

Every step is one script: a crash between two of them leaves each message either out
(pending, retrying: the key held by it) or waiting in its list, never both or neither.
Messages without a key, and unordered consumers of the same queue, are not affected.

A failover can undo a settle that the promoted replica had not received: the key's
holder is then pending again and runs again, after the key's next message if that one
ran meanwhile. With a :class:`~redisq_django.core.replica_wait.ReplicaWait`, :func:`read`
waits until replicas have the read before its messages are handed out: replication keeps
the master's order, so they then have every settle that let those messages out too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import redis

from redisq_django.core import envelope as env
from redisq_django.core.errors import CorruptState, error_code, is_nogroup
from redisq_django.core.groups import recover_group
from redisq_django.core.keys import GroupKeys
from redisq_django.core.members import S_DIRECT, S_LOG, S_RETRY, member_fields
from redisq_django.core.replica_wait import ReplicaWait, call_and_wait
from redisq_django.core.scripts import Scripts
from redisq_django.core.types import RedisClient, ScoredMembers, execute
from redisq_django.core.wire import to_str

#: How many times :func:`release_key` tries when the key changes under it.
RELEASE_ATTEMPTS = 10
#: Where a holder is looked for, at most this many entries of each place are read.
LOOK_LIMIT = 1000
#: At most this many held keys are described per call (the admin's and console's lists).
HELD_LIMIT = 200
#: ``ordered_purge.lua`` looks at this many in-flight entries per stream, at most (far
#: more than the instances of a consumer hold at once).
IN_FLIGHT = 100_000


@dataclass(frozen=True)
class OrderedRead:
    """What one ``read_ordered.lua`` call returned.

    Attributes:
        reply: the delivered entries as an XREADGROUP reply (``groups.entries_of``).
        read: entries read in all, delivered or set waiting behind their key's holder.
        resume: ``(log id, direct id)`` to wait for new entries after (XREAD BLOCK), or
            None when a stream may hold more (read again at once).
        confirmed: with a replica wait, how many replicas confirmed the read in time
            (None: none was asked for).
        marked: the consumer's ``ended`` hash exists: some log entry may be marked ended
            (``core/ended.py``); marked entries were delivered without their key.
    """

    reply: list[Any]
    read: int
    resume: tuple[str, str] | None
    confirmed: int | None = None
    marked: bool = False


def read(
    client: RedisClient,
    scripts: Scripts,
    gkeys: GroupKeys,
    instance: str,
    count: int,
    wait: ReplicaWait | None = None,
) -> OrderedRead:
    """Read up to ``count`` new entries of each stream for ``instance`` (never blocks
    but for ``wait``: then ``WAIT`` for replicas after the read, see the module's
    docstring)."""
    log, direct = gkeys.queue_keys.log, gkeys.direct
    # The `ended` hash as KEYS[5]: marked log entries pass their key by, and the reply
    # says whether any is marked (core/ended.py), at no cost while none is.
    keys = [log, direct, gkeys.holders, gkeys.held_back, gkeys.ended]
    args = [gkeys.group, instance, count, gkeys.waiting_prefix]

    def call() -> tuple[Any, int | None]:
        if wait is None:
            return scripts("read_ordered", keys, args), None
        return call_and_wait(client, scripts, "read_ordered", keys, args, wait)

    try:
        (got_log, got_direct, n, last_log, last_direct, marked), confirmed = call()
    except redis.ResponseError as exc:
        if not is_nogroup(exc):
            raise
        recover_group(client, scripts, gkeys)
        (got_log, got_direct, n, last_log, last_direct, marked), confirmed = call()
    resume = None
    if last_log and last_direct:
        resume = (to_str(last_log), to_str(last_direct))
    reply = [[log.encode(), got_log], [direct.encode(), got_direct]]
    return OrderedRead(reply, int(n), resume, confirmed, bool(int(marked)))


def read_or_wait(
    client: RedisClient,
    scripts: Scripts,
    gkeys: GroupKeys,
    instance: str,
    count: int,
    wait_ms: int | None,
    replicas: ReplicaWait | None = None,
) -> OrderedRead:
    """:func:`read` (with ``replicas``: its replica wait); when it read nothing at all,
    then wait up to ``wait_ms`` for new entries (None: do not wait)."""
    got = read(client, scripts, gkeys, instance, count, replicas)
    if not got.read and wait_ms and got.resume is not None:
        wait_for_entries(client, gkeys, got.resume, wait_ms)
    return got


def wait_for_entries(
    client: RedisClient, gkeys: GroupKeys, after: tuple[str, str], ms: int
) -> None:
    """Block up to ``ms`` until an entry newer than ``after`` reaches the log or the
    direct stream (``XREAD`` consumes nothing: the next :func:`read` takes it)."""
    execute(
        client,
        "XREAD",
        "BLOCK",
        ms,
        "COUNT",
        1,
        "STREAMS",
        gkeys.queue_keys.log,
        gkeys.direct,
        *after,
    )


@dataclass(frozen=True)
class HeldKey:
    """An ordering key whose later messages wait (the admin's "held back" list).

    Attributes:
        key: the ordering key.
        waiting: how many of its messages wait behind the holder.
        holder: the id of the message that holds it.
        state: why: ``"running"`` (delivered to ``instance``), ``"retrying"`` (waiting
            for its backoff until ``due_ms``, after ``last_error``), ``"queued"`` (in the
            consumer's private input), ``"unseen"`` (not among the first
            :data:`LOOK_LIMIT` entries of a longer place: most likely busy), or
            ``"unknown"`` (found nowhere: see
            :func:`release_key`).
        ref: where the holder is, as :attr:`~redisq_django.core.operator.browse.Entry.ref`
            (``log:<id>``, ``direct:<id>``, ``retry:<due ms>:<message id>``) for a page
            that shows it; None when it was found nowhere.
    """

    key: str
    waiting: int
    holder: str
    state: str
    instance: str | None = None
    due_ms: int | None = None
    last_error: str | None = None
    ref: str | None = None


def held_keys(client: RedisClient, gkeys: GroupKeys, limit: int = HELD_LIMIT) -> list[HeldKey]:
    """The keys of ordered consumer ``gkeys`` that hold back later messages, most
    waiting first (at most ``limit``), each with its holder and why it holds."""
    holders = {to_str(k): to_str(v) for k, v in client.hgetall(gkeys.holders).items()}
    if not holders:
        return []
    names = list(holders)
    with client.pipeline(transaction=False) as pipe:
        for key in names:
            pipe.llen(gkeys.waiting(key))
        lengths = pipe.execute()
    held = sorted(
        ((n, key) for n, key in zip(lengths, names, strict=True) if n),
        key=lambda item: (-item[0], item[1]),
    )[:limit]
    if not held:
        return []
    where, complete = _whereabouts(client, gkeys, {holders[key] for _, key in held})
    missing = ("unknown",) if complete else ("unseen",)
    return [
        HeldKey(key, int(n), holders[key], *where.get(holders[key], missing)) for n, key in held
    ]


def _whereabouts(
    client: RedisClient, gkeys: GroupKeys, ids: set[str]
) -> tuple[dict[str, tuple[Any, ...]], bool]:
    """Where each message of ``ids`` is: ``(state, instance, due_ms, last_error, ref)``;
    and whether every place was looked at in full (each is read up to
    :data:`LOOK_LIMIT` entries: an id not found in a longer one is "unseen", not gone)."""
    found: dict[str, tuple[Any, ...]] = {}
    log, direct, group = gkeys.queue_keys.log, gkeys.direct, gkeys.group
    complete = True
    for stream in (log, direct):
        rows = cast(
            "list[dict[str, Any]]", client.xpending_range(stream, group, "-", "+", LOOK_LIMIT)
        )
        pending = {row["message_id"]: to_str(row["consumer"]) for row in rows}
        entries = cast(
            "list[tuple[bytes, dict[bytes, bytes]]]",
            _entries(client, stream, list(pending))
            if stream == log
            else client.xrange(direct, "-", "+", LOOK_LIMIT),
        )
        complete = complete and len(rows) < LOOK_LIMIT and len(entries) < LOOK_LIMIT
        for entry_id, fields in entries:
            mid = to_str(fields.get(env.F_ID) or entry_id)
            if mid in ids:
                by = pending.get(entry_id)
                ref = f"{S_LOG if stream == log else S_DIRECT}:{to_str(entry_id)}"
                state = ("running", by) if by else ("queued", None)
                found[mid] = (*state, None, None, ref)
    retries = cast("ScoredMembers", client.zrange(gkeys.retry, 0, LOOK_LIMIT - 1, withscores=True))
    complete = complete and len(retries) < LOOK_LIMIT
    for member, score in retries:
        fields = member_fields(member)
        mid = to_str(fields.get(env.F_ID, b""))
        if mid in ids:
            error = fields.get(env.F_LAST_ERROR)
            due = int(score)
            ref = f"{S_RETRY}:{due}:{mid}"
            found[mid] = ("retrying", None, due, to_str(error) if error else None, ref)
    return found, complete


def _entries(client: RedisClient, stream: str, ids: list[bytes]) -> list[Any]:
    """The entries ``ids`` of ``stream`` that still exist (one round trip)."""
    with client.pipeline(transaction=False) as pipe:
        for entry_id in ids:
            pipe.xrange(stream, entry_id, entry_id)
        return [e for found in pipe.execute() for e in found]


def release_key(scripts: Scripts, gkeys: GroupKeys, key: str) -> bool:
    """Free ``key`` by hand (an operator's action, for a holder lost outside redisq's
    settles: its entry deleted by a hard cap, say): the first waiting message of the key
    goes to the consumer's input and holds it (``release_key.lua``, the hand-over
    ``ack_ordered.lua`` does). Returns False when nothing held it.

    Raises:
        CorruptState: another client wrote what the hand-over reads (nothing done).
    """
    try:
        reply = scripts(
            "release_key",
            [gkeys.holders, gkeys.direct, gkeys.held_back],
            [gkeys.waiting_prefix, key],
        )
    except redis.ResponseError as exc:
        if error_code(exc) == "REDISQ_CORRUPT":
            raise CorruptState(exc) from None
        raise
    return bool(reply)


def after_purge(scripts: Scripts, gkeys: GroupKeys) -> tuple[int, int]:
    """After a purge of ``gkeys``'s waiting work (``ordered_purge.lua``): drop the
    messages waiting behind its ordering keys, and free each key that no message in
    flight holds (else its key's later messages would wait for a purged one for ever).

    Returns:
        ``(keys freed, waiting messages dropped)``.
    """
    keys = [gkeys.queue_keys.log, gkeys.direct, gkeys.holders, gkeys.held_back]
    freed, dropped = scripts("ordered_purge", keys, [gkeys.group, gkeys.waiting_prefix, IN_FLIGHT])
    return int(freed), int(dropped)
