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
    delivery: Delivery, now: int, *, failed: bool, error: Failure | None = None
) -> dict[bytes, bytes]:
    """The envelope of ``delivery``'s next delivery: a retry (``failed``: this delivery
    counts, its failure time is the first one if none was recorded; ``error``: what the
    operators' pages show as its last error) or a hand-back."""
    first = delivery.first_failed_at_ms
    fields = env.next_delivery_fields(
        delivery.fields,
        message_id=delivery.id,
        published_at_ms=delivery.published_at_ms,
        attempts=delivery.attempts - (0 if failed else 1),
        first_failed_at_ms=first if first is not None or not failed else now,
    )
    if error is not None:
        text = f"{error.error_class}: {error.message}"[: env.MAX_LAST_ERROR]
        fields[env.F_LAST_ERROR] = text.encode("utf-8", "backslashreplace")
    return fields


def ack_parts(
    gkeys: GroupKeys, instance: str, deliveries: Sequence[Delivery], history: bool
) -> tuple[ScriptName | None, list[str], list[Any]]:
    """What acknowledges ``deliveries``: ``(None, KEYS, ARGV)`` of a plain ``XACK`` (log
    entries, history off: ``XACK log group ids…``), else ``("ack", KEYS, ARGV)`` of
    ``ack.lua`` (direct entries are deleted; with history, its ``handled`` event)."""
    log = [m for m in deliveries if m.stream is Stream.LOG]
    direct = (
        [m for m in deliveries if m.stream is not Stream.LOG] if len(log) < len(deliveries) else []
    )
    if not history and not direct:
        return None, [gkeys.queue_keys.log], [gkeys.group, *(m.entry_id for m in log)]
    records = None
    if history:
        ordered = [*log, *direct]
        records = lifecycle.records_array([(m.id, m.attempts, m.duration_ms) for m in ordered])
    keys, args = ack_call(
        gkeys,
        [m.entry_id for m in log],
        [m.entry_id for m in direct],
        instance=instance if history else None,
        records=records,
    )
    return "ack", keys, args


def ack_call(
    gkeys: GroupKeys,
    log: Sequence[Any],
    direct: Sequence[Any],
    *,
    instance: str | None = None,
    records: Any = None,
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of ``ack.lua`` (its header), the one place they are built: the
    entry ids ``log`` and ``direct``; with ``instance`` (history on) the history layout,
    whose ``handled`` event carries ``records`` (``lifecycle.records_array`` of the
    messages, log entries first). The ids, then the records, come last: the worker packs
    the rest once (``core/worker/acks.py``)."""
    qkeys = gkeys.queue_keys
    if instance is None:
        return [qkeys.log, gkeys.direct], [gkeys.group, len(log), *log, *direct]
    return (
        [qkeys.log, gkeys.direct, qkeys.events],
        [gkeys.group, len(log), instance, len(log) + len(direct), *log, *direct, records],
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
    holder: tuple[str | bytes, str | bytes] | None = None,
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of ``fail.lua``: retry (``RETRY``, due at ``due`` ms, or ``"+<ms>"``
    from now by Redis's clock) or dead-letter (``DEAD``) one entry held by ``instance``,
    with its event when ``history`` is on. ``holder``: an ordered consumer's entry, its
    ``(ordering key or "", message id)``: a dead letter hands the key on."""
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
    if history or holder is not None:  # the event goes in the same script as the settle
        keys.append(gkeys.queue_keys.events)
        args += [len(event) // 2, *event] if history else [0]
    if holder is not None:
        keys += [gkeys.holders, gkeys.direct, gkeys.held_back]
        args += [gkeys.waiting_prefix, *holder]
    return keys, [*args, *flatten(fields)]
