"""Changing a queue's number of partitions: only once it is drained, so that no message
is left where the new layout does not look and no ordering key has messages in two
partitions (``manage.py redisq partitions QUEUE K``).

Every partition's own record (field ``partitions`` of ``{q#i}:meta``, old and new) is
set to the new number *first*: from then on a process still routing by the old number
is refused by every script that would add a message there, so nothing it sends after
the drain check is left unread. The base keys change last, in one script
(``repartition.lua``), which refuses when a message reached the unpartitioned log after
the check; a queue that leaves one partition has its base log and delayed set replaced
by fences, so a plain ``XADD`` of a forgotten publisher fails (WRONGTYPE)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from redisq_django.core.archives import (
    ArchivedStream,
    legacy_field,
    parse_id,
    stream_key,
)
from redisq_django.core.groups import ensure_group, group_names
from redisq_django.core.keys import QueueKeys
from redisq_django.core.partitions import MAX_PARTITIONS, META_FIELD, parse_recorded
from redisq_django.core.scripts import Scripts
from redisq_django.core.start import StartPoint
from redisq_django.core.types import RedisClient
from redisq_django.core.wire import to_str


@dataclass(frozen=True)
class Repartitioned:
    """What :func:`repartition` did.

    Attributes:
        before: the number of partitions Redis recorded (1 when none was).
        after: the number recorded now.
        consumers: the logical consumers registered on every partition of the new layout.
        archives: the named archives (``name:table``) registered on every partition of
            the new layout.
    """

    before: int
    after: int
    consumers: list[str]
    archives: list[str] = field(default_factory=list)


def recorded_count(client: RedisClient, base: QueueKeys) -> int:
    """The number of partitions Redis records for the queue (1 when none is).

    Raises:
        ConfigurationError: the record is not a whole number from 1 to 64.
    """
    return parse_recorded(cast("Any", client.hget(base.meta, META_FIELD)), base.meta) or 1


def layout_of(base: QueueKeys, count: int) -> list[QueueKeys]:
    """The keys where a queue of ``count`` partitions keeps its messages."""
    return [base] if count == 1 else [base.partition(i, of=count) for i in range(count)]


def leftovers(client: RedisClient, places: Sequence[QueueKeys]) -> list[str]:
    """What is not drained in ``places`` (a queue's base keys or partitions), one line each:
    log entries after a consumer's position, pending (in-flight) messages, retries,
    messages in a consumer's input, delayed messages, ordered messages waiting for their
    key, dead letters not yet moved to the database. Empty: drained."""
    found: list[str] = []
    for keys in places:
        try:
            delayed = int(cast("Any", client.zcard(keys.delayed)))
        except redis.ResponseError:  # a fence: the base keys of a partitioned queue
            delayed = 0
        if delayed:
            found.append(f"{keys.delayed}: {delayed} delayed message(s)")
        for group in group_names(client, keys):
            found += _group_leftovers(client, keys, group)
    return found


def _group_leftovers(client: RedisClient, keys: QueueKeys, group: str) -> list[str]:
    gkeys = keys.group(group)
    found = []
    for stream in (keys.log, gkeys.direct):
        try:
            info = {to_str(g["name"]): g for g in cast("Any", client.xinfo_groups(stream))}
        except redis.ResponseError:  # no such stream
            continue
        mine = info.get(group)
        if mine is None:
            continue
        if int(mine["pending"]):
            found.append(f"{stream}: {mine['pending']} message(s) in flight for {group!r}")
        after = f"({to_str(mine['last-delivered-id'])}"
        if cast("Any", client.xrange(stream, after, "+", count=1)):
            found.append(f"{stream}: messages not yet read by {group!r}")
    counts = {
        "retrying": client.zcard(gkeys.retry),
        "ordered, waiting for their key": client.get(gkeys.held_back),
        "dead letters not yet in the database": client.xlen(gkeys.dead),
    }
    for what, n in counts.items():
        if int(cast("Any", n) or 0) > 0:
            found.append(f"{keys.tag} {group!r}: {int(cast('Any', n))} {what}")
    return found


def repartition(
    client: RedisClient, scripts: Scripts, base: QueueKeys, count: int
) -> Repartitioned:
    """Record ``count`` partitions for the drained queue of ``base`` and register every
    logical consumer of its old layout on each partition of the new one, at its end, and
    every named archive from the earliest (each partition's log is kept until the
    archive has stored it, as it was before).

    Raises:
        ValueError: ``count`` is out of range, the queue is not drained, or (from one
            partition to more) a named archive has not stored the unpartitioned log,
            which goes (the message lists what remains; nothing is changed).
        ConfigurationError: a record is not a whole number from 1 to 64.
    """
    if not isinstance(count, int) or not 1 <= count <= MAX_PARTITIONS:
        raise ValueError(f"A queue has 1 to {MAX_PARTITIONS} partitions, not {count!r}.")
    before = recorded_count(client, base)
    # The base keys too: what a queue held before it was first partitioned.
    old = list(dict.fromkeys([base, *layout_of(base, before)]))
    # Every partition's record, of the old layout and the new: from here on, writes
    # routed by the old number are refused there.
    touched = max(before, count) if max(before, count) > 1 else 0
    metas = [base.partition(i).meta for i in range(touched)]
    previous = _fence(client, metas, count)
    try:
        remaining = leftovers(client, old)
        if before == 1 and count > 1:
            remaining += _unarchived(client, base)
        if remaining:
            shown = "\n  ".join(remaining[:20])
            more = f"\n  ... and {len(remaining) - 20} more" if len(remaining) > 20 else ""
            raise ValueError(
                f"Queue {base.queue!r} is not drained, so its partitions stay {before}: a "
                f"message left behind would never be read under {count}, and a key's "
                f"messages could be handled out of order. Let the workers finish (and the "
                f"dead-letter sink move what is dead, and the archives store the log), "
                f"then run this again. What remains:\n  {shown}{more}"
            )
        last = _last_id(client, base.log) if before == 1 else ""
        scripts("repartition", [base.meta, base.log, base.delayed], [before, count, last])
    except BaseException:
        _restore(client, metas, previous)
        raise
    consumers = sorted({g for keys in old for g in group_names(client, keys)})
    archives = sorted({a for keys in old for a in _archives(client, keys)})
    for keys in layout_of(base, count):
        for group in consumers:
            ensure_group(scripts, keys.group(group), StartPoint.parse("latest"))
        for archive in archives:
            name, _, table = archive.partition(":")
            # Registered already (an old partition kept): it keeps its position.
            scripts(
                "archive_register",
                [keys.archives, keys.meta, stream_key(keys, table)],
                [name, table, "earliest"],
            )
    return Repartitioned(before, count, consumers, archives)


def _fence(client: RedisClient, metas: Sequence[str], count: int) -> list[Any]:
    """Set every partition's record in ``metas`` to ``count`` (writes routed by any other
    number are refused from now on); returns what each held before."""
    if not metas:
        return []
    with client.pipeline(transaction=False) as pipe:
        for meta in metas:
            pipe.hget(meta, META_FIELD)
            pipe.hset(meta, META_FIELD, count)
        replies = pipe.execute()
    return list(replies[::2])


def _restore(client: RedisClient, metas: Sequence[str], previous: Sequence[Any]) -> None:
    """Undo :func:`_fence` (the change was refused)."""
    if not metas:
        return
    with client.pipeline(transaction=False) as pipe:
        for meta, value in zip(metas, previous, strict=True):
            if value is None:
                pipe.hdel(meta, META_FIELD)
            else:
                pipe.hset(meta, META_FIELD, value)
        pipe.execute()


def _last_id(client: RedisClient, log: str) -> str:
    """The id of the last entry of ``log`` ("" when it has none, or is no stream)."""
    try:
        last = cast("Any", client.xrevrange(log, "+", "-", count=1))
    except redis.ResponseError:  # a fence (a string): no entry
        return ""
    return to_str(last[0][0]) if last else ""


def _unarchived(client: RedisClient, base: QueueKeys) -> list[str]:
    """What the named archives have not stored of the unpartitioned log, which leaves
    with its last partition (one line per archive)."""
    last = _last_id(client, base.log)
    if not last:
        return []
    found = []
    for raw_field, raw_position in cast("Any", client.hgetall(base.archives)).items():
        name, _, table = to_str(raw_field).partition(":")
        if table != ArchivedStream.MESSAGES.value:  # ":since", ":gap" and the events
            continue
        if parse_id(to_str(raw_position) or "0-0") < parse_id(last):
            found.append(
                f"{base.log}: archive {name!r} has stored up to {to_str(raw_position)}, "
                f"not up to {last} (the unpartitioned log goes when the queue is partitioned)"
            )
    return found


def _archives(client: RedisClient, keys: QueueKeys) -> list[str]:
    """The archives registered in ``keys`` (an earlier version's unnamed one as
    ``default``), as ``name:table``."""
    tables = {s.value for s in ArchivedStream}
    found = [
        to_str(f)
        for f in cast("Any", client.hkeys(keys.archives))
        if to_str(f).partition(":")[2] in tables
    ]
    legacy = cast("Any", client.hmget(keys.meta, [legacy_field(s) for s in ArchivedStream]))
    return found + [
        f"default:{s.value}" for s, v in zip(ArchivedStream, legacy, strict=True) if v is not None
    ]
