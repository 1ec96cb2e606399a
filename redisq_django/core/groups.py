"""Logical consumers as consumer groups: registering them and listing them."""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import redis

from redisq_django.core import partitions
from redisq_django.core.errors import ConsumerNotFound, is_nogroup
from redisq_django.core.keys import GroupKeys, QueueKeys
from redisq_django.core.scripts import ScriptCall, Scripts
from redisq_django.core.start import StartPoint
from redisq_django.core.types import RedisClient, execute
from redisq_django.core.wire import to_str


def ensure_group(scripts: Scripts, gkeys: GroupKeys, start: StartPoint) -> bool:
    """Create the group on the log (at ``start``) and on the direct stream unless they
    exist; an existing group keeps its position. Returns True when it was created."""
    call = ensure_call(gkeys, start)
    return bool(scripts(call.script, call.keys, call.args))


def register(client: RedisClient, scripts: Scripts, gkeys: GroupKeys, start: StartPoint) -> bool:
    """:func:`ensure_group`, which Redis refuses where the layout its keys were built for is
    not recorded (a partition whose record Redis lost with its data, or a number of
    partitions changed since): the record is read again — recorded anew after data
    loss — and the group registered, or ``PartitionsMismatch`` raised
    (``partitions.retried``)."""
    return partitions.retried(
        client, scripts, gkeys.queue_keys, lambda: ensure_group(scripts, gkeys, start)
    )


def ensure_call(gkeys: GroupKeys, start: StartPoint) -> ScriptCall:
    """The ``ensure_consumer.lua`` call of :func:`ensure_group` (refused, nothing created,
    when the layout its keys were built for is not the one recorded there)."""
    meta, k = gkeys.queue_keys.layout()
    return ScriptCall(
        "ensure_consumer",
        [meta, gkeys.queue_keys.log, gkeys.direct],
        [k, gkeys.group, start.to_last_delivered_id()],
    )


def group_names(client: RedisClient, keys: QueueKeys) -> list[str]:
    """Names of the logical consumers registered on the queue's log (sorted)."""
    try:
        groups = client.xinfo_groups(keys.log)
    except redis.ResponseError:  # no such key
        return []
    return sorted(to_str(g["name"]) for g in groups)


def read_group(
    client: RedisClient,
    scripts: Scripts,
    gkeys: GroupKeys,
    consumer: str,
    count: int,
    block: int | None,
) -> Any:
    """XREADGROUP new entries of the log and the direct stream for ``consumer``.

    Raises:
        ConsumerNotFound: the group is missing on the log (a missing group on the direct
            stream alone is repaired here).
    """
    log, group = gkeys.queue_keys.log, gkeys.group
    args: list[Any] = ["XREADGROUP", "GROUP", group, consumer, "COUNT", count]
    if block is not None:
        args += ["BLOCK", block]
    args += ["STREAMS", log, gkeys.direct, ">", ">"]
    try:
        return execute(client, *args)
    except redis.ResponseError as exc:
        if not is_nogroup(exc):
            raise
    recover_group(client, scripts, gkeys)
    return execute(client, *args)


def recover_group(client: RedisClient, scripts: Scripts, gkeys: GroupKeys) -> None:
    """After a read found no group (NOGROUP): re-create the group on the direct stream
    if the log still has it (someone deleted the direct stream), else raise.

    Raises:
        ConsumerNotFound: the group is missing on the log.
    """
    if gkeys.group not in group_names(client, gkeys.queue_keys):
        raise ConsumerNotFound(gkeys.queue_keys.queue, gkeys.group)
    ensure_group(scripts, gkeys, StartPoint.parse("latest"))


def entries_of(reply: Any) -> Iterator[tuple[bytes, bytes, Any]]:
    """``(stream key, entry id, fields)`` of each entry of an ``XREADGROUP`` reply (RESP2:
    ``[[key, entries], …]``; RESP3: ``{key: [entries]}``), in order."""
    if not reply:
        return
    resp3 = isinstance(reply, dict)
    for stream_key, value in reply.items() if resp3 else reply:
        key = stream_key if isinstance(stream_key, bytes) else stream_key.encode()
        for entry_id, fields in value[0] if resp3 else value:
            yield key, entry_id, fields


def default_instance_name() -> str:
    """``host:pid:random``: unique per running instance, readable in stats."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


#: How :func:`default_instance_name` starts the name of each of a worker's threads.
_WORKER = re.compile(r"[^:]+:\d+:[0-9a-f]{6}(?=-|$)")


def worker_of(instance: str) -> str:
    """The worker process that instance ``instance`` runs in: the ``host:pid:random`` its
    name starts with (a worker names each handler thread
    ``<host:pid:random>-<consumer>[-p<partition>]-<n>``), else the whole name (another
    client names its instances as it likes: each then counts as a process of its own)."""
    found = _WORKER.match(instance)
    return found.group(0) if found else instance


def leave_group(client: RedisClient, gkeys: GroupKeys, instance: str) -> None:
    """Withdraw ``instance``'s heartbeat; if it holds no message, also remove it from the
    consumer group (what it still holds is reclaimed by other instances)."""
    client.zrem(gkeys.instances, instance)
    client.hdel(gkeys.running, instance)
    client.delete(gkeys.instance(instance))  # its report: gone with it
    log, group = gkeys.queue_keys.log, gkeys.group
    with client.pipeline(transaction=False) as pipe:
        pipe.xpending_range(log, group, "-", "+", 1, instance)
        pipe.xpending_range(gkeys.direct, group, "-", "+", 1, instance)
        held = pipe.execute(raise_on_error=False)
    if all(isinstance(h, list) and not h for h in held):
        with client.pipeline(transaction=False) as pipe:
            pipe.xgroup_delconsumer(log, group, instance)
            pipe.xgroup_delconsumer(gkeys.direct, group, instance)
            pipe.execute(raise_on_error=False)


def remove_group(client: RedisClient, gkeys: GroupKeys) -> None:
    """Destroy the consumer group and delete the consumer's private keys."""
    with client.pipeline(transaction=True) as pipe:
        pipe.execute_command("XGROUP", "DESTROY", gkeys.queue_keys.log, gkeys.group)
        pipe.delete(
            gkeys.direct,
            gkeys.retry,
            gkeys.dead,
            gkeys.instances,
            gkeys.running,
            gkeys.leases,
            gkeys.ended,
        )
        pipe.execute(raise_on_error=False)
    # An ordered consumer's keys (read after the group is gone: no read refills them).
    waiting = [gkeys.waiting(to_str(k)) for k in client.hkeys(gkeys.holders)]
    client.delete(gkeys.holders, gkeys.held_back, *waiting)
