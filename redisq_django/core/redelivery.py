"""Delivering messages again: moving a logical consumer back (reset) and re-driving a
dead letter to one consumer, each with its lifecycle event when history is on."""

from __future__ import annotations

from typing import Any

from redisq_django.core import envelope as env
from redisq_django.core import lifecycle
from redisq_django.core.keys import GroupKeys
from redisq_django.core.lifecycle import EventName
from redisq_django.core.scripts import Scripts
from redisq_django.core.types import RedisClient, execute
from redisq_django.core.wire import flatten, to_str


def reset(client: RedisClient, gkeys: GroupKeys, target: str, history: bool) -> None:
    """Move the consumer group to ``target`` (a last-delivered id); with ``history``, in
    one transaction with its ``reset`` event.

    Raises:
        redis.ResponseError: NOGROUP when the consumer is not registered.
    """
    log = gkeys.queue_keys.log
    if not history:
        execute(client, "XGROUP", "SETID", log, gkeys.group, target)
        return
    event = lifecycle.fields(EventName.RESET, gkeys.group, "", [], start=target)
    with client.pipeline(transaction=True) as pipe:
        pipe.execute_command("XGROUP", "SETID", log, gkeys.group, target)
        pipe.execute_command("XADD", gkeys.queue_keys.events, "*", *event)
        pipe.execute()


def redrive_call(
    gkeys: GroupKeys, dead_id: str, envelope: dict[bytes, bytes], history: bool
) -> tuple[list[str], list[Any]]:
    """The ``(KEYS, ARGV)`` of one ``redrive.lua`` call (see :func:`redrive`), ARGV after
    the protocol token, for a batch of them (``batch.run_scripts``)."""
    meta, k = gkeys.queue_keys.layout()
    keys: list[str] = [meta, gkeys.dead, gkeys.direct]
    args: list[Any] = [k, dead_id]
    if history:
        message_id = to_str(envelope.get(env.F_ID, b"")) or dead_id
        event = lifecycle.fields(
            EventName.REDRIVEN, gkeys.group, "", [lifecycle.record(message_id, 0)]
        )
        keys.append(gkeys.queue_keys.events)
        args += [len(event) // 2, *event]
    args += flatten(envelope)
    return keys, args


def redrive(
    scripts: Scripts,
    gkeys: GroupKeys,
    dead_id: str,
    envelope: dict[bytes, bytes],
    history: bool,
) -> Any:
    """Run ``redrive.lua``: deliver ``envelope`` to the consumer's private input, removing
    dead entry ``dead_id`` ("" when it lives elsewhere); with ``history``, its
    ``redriven`` event in the same script (many at once: :func:`redrive_call`).

    Returns:
        The new entry id, or None when ``dead_id`` was already gone.
    """
    keys, args = redrive_call(gkeys, dead_id, envelope, history)
    return scripts("redrive", keys, args)
