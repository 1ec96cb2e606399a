"""The script calls that settle deliveries (``ack.lua``, ``fail.lua``), built without
touching Redis, and the envelope of a message's next delivery."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redisq_django.core import envelope as env
from redisq_django.core import lifecycle
from redisq_django.core.dead_entry import Failure
from redisq_django.core.delivery import Delivery, Stream
from redisq_django.core.keys import GroupKeys
from redisq_django.core.scripts import ScriptName
from redisq_django.core.wire import flatten

#: What ``fail.lua`` writes: a retry member, or a dead-letter entry.
RETRY, DEAD = "retry", "dead"


def next_delivery(
    message: Delivery, now: int, *, failed: bool, error: Failure | None = None
) -> dict[bytes, bytes]:
    """The envelope of ``message``'s next delivery: a retry (``failed``: this delivery
    counts, its failure time is the first one if none was recorded; ``error``: what the
    operators' pages show as its last error) or a hand-back."""
    first = message.first_failed_at_ms
    fields = env.next_delivery_fields(
        message.fields,
        message_id=message.id,
        published_at_ms=message.published_at_ms,
        attempts=message.attempts - (0 if failed else 1),
        first_failed_at_ms=first if first is not None or not failed else now,
    )
    if error is not None:
        text = f"{error.error_class}: {error.message}"[: env.MAX_LAST_ERROR]
        fields[env.F_LAST_ERROR] = text.encode("utf-8", "backslashreplace")
    return fields


def ack_parts(
    gkeys: GroupKeys, instance: str, messages: Sequence[Delivery], history: bool
) -> tuple[ScriptName | None, list[str], list[Any]]:
    """What acknowledges ``messages``: ``(None, KEYS, ARGV)`` of a plain ``XACK`` (log
    entries, history off: ``XACK log group ids…``), else ``("ack", KEYS, ARGV)`` of
    ``ack.lua`` (direct entries are deleted; with history, its ``handled`` event)."""
    if history:
        return ("ack", *ack_call(gkeys, instance, messages))
    qkeys = gkeys.queue_keys
    if all(m.stream is Stream.LOG for m in messages):
        return None, [qkeys.log], [gkeys.group, *(m.entry_id for m in messages)]
    log = [m.entry_id for m in messages if m.stream is Stream.LOG]
    direct = [m.entry_id for m in messages if m.stream is not Stream.LOG]
    return "ack", [qkeys.log, gkeys.direct], [gkeys.group, len(log), *log, *direct]


def ack_call(
    gkeys: GroupKeys, instance: str, messages: Sequence[Delivery]
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of ``ack.lua`` in its history layout (log entries first)."""
    log: list[Delivery] = []
    direct: list[Delivery] = []
    for m in messages:
        (log if m.stream is Stream.LOG else direct).append(m)
    ordered = [*log, *direct] if direct else log
    records = lifecycle.records_array([(m.id, m.attempts, m.duration_ms) for m in ordered])
    qkeys = gkeys.queue_keys
    return (
        [qkeys.log, gkeys.direct, qkeys.events],
        [gkeys.group, len(log), instance, len(ordered), *(m.entry_id for m in ordered), records],
    )


def settle_call(
    gkeys: GroupKeys,
    instance: str,
    stream: Stream,
    entry_id: bytes,
    mode: str,
    due: int | str,
    fields: dict[bytes, bytes],
    event: list[bytes],
    history: bool,
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of ``fail.lua``: retry (``RETRY``, due at ``due`` ms, or ``"+<ms>"``
    from now by Redis's clock) or dead-letter (``DEAD``) one entry held by ``instance``,
    with its event when ``history`` is on."""
    source = gkeys.queue_keys.log if stream is Stream.LOG else gkeys.direct
    keys = [source, gkeys.retry, gkeys.dead]
    args: list[Any] = [
        gkeys.group,
        instance,
        entry_id,
        "1" if stream is Stream.DIRECT else "0",
        mode,
        due,
    ]
    if history:  # the event goes in the same script as the settle
        keys.append(gkeys.queue_keys.events)
        args += [len(event) // 2, *event]
    return keys, [*args, *flatten(fields)]
