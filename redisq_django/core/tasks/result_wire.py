"""The wire of task results (Django-free): statuses, the enqueue and settle calls,
expiries, hashes.

Shared by the sync store (:mod:`redisq_django.core.tasks.store`) and the asyncio side
of the Tasks backend (``redisq_django.tasks.aio``), so that both run the same
``task_enqueue.lua`` call, read results with the same commands and decode a result hash
the same way (PROTOCOL.md, "Django task results").
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from redisq_django.core import trends
from redisq_django.core.clock import now_ms
from redisq_django.core.delivery import Delivery
from redisq_django.core.envelope import Envelope
from redisq_django.core.keys import GroupKeys, QueueKeys
from redisq_django.core.scripts import ScriptCall
from redisq_django.core.settle import Settling
from redisq_django.core.wire import to_str

READY, RUNNING, SUCCESSFUL, FAILED = "READY", "RUNNING", "SUCCESSFUL", "FAILED"
STATUSES = (READY, RUNNING, SUCCESSFUL, FAILED)

#: The logical consumer of every task queue (PROTOCOL.md, "Django task results").
TASKS_CONSUMER = "tasks"


def task_of(consumer: str, payload: Any) -> str:
    """The module path of the Django task a message of ``consumer`` carries ("" for no
    task): the payload's ``task`` for the consumer of task queues, cut to 200 characters.

    >>> task_of("tasks", {"task": "shop.tasks.send_receipt", "args": [42]})
    'shop.tasks.send_receipt'
    """
    task = payload.get("task") if consumer == TASKS_CONSUMER and isinstance(payload, dict) else ""
    return task[:200] if isinstance(task, str) else ""


#: What ``task_enqueue.lua`` does: publish with the result, or write the result once.
PUBLISH, ONCE = "publish", "once"


def enqueue_call(
    keys: QueueKeys,
    envelope: Envelope,
    result: Mapping[str, str],
    *,
    expire_at_ms: int,
    mode: str = PUBLISH,
    now: int | None = None,
    trends_on: bool = False,
) -> ScriptCall:
    """The ``task_enqueue.lua`` call for ``envelope`` (its id is the result id) and the
    result's fields: built once, run by a sync or an asyncio client. With ``trends_on``,
    a published task counts in the queue's ``published`` trend in the same round trip."""
    if envelope.id is None:
        raise ValueError("A task's envelope needs its id (the result id).")
    if envelope.delay_ms is not None:
        raise ValueError("A task is deferred by an absolute time (eta), not a delay.")
    due = envelope.due_at_ms or 0
    member = envelope.member() if due else b""
    args: list[Any] = [
        expires(expire_at_ms),
        envelope.id,
        mode,
        due,
        member,
        "" if now is None else now,  # "": Redis's clock says which index entries expired
        len(result),
        *pairs(result),
    ]
    if mode == PUBLISH and not due:
        args += envelope.fields()
    script_keys = [keys.task_result(envelope.id), keys.task_results, keys.log, keys.delayed]
    if not (trends_on and mode == PUBLISH):
        return ScriptCall("task_enqueue", script_keys, args)
    counter = trends.counter(keys)
    quiet = counter.commands({trends.PUBLISHED: 1})
    return ScriptCall("task_enqueue", script_keys, args, quiet, failed=counter.forget)


def settle_call(
    keys: QueueKeys,
    delivery: Delivery,
    mode: str,
    due: str,
    result: Mapping[str, str],
    error_json: bytes,
    envelope: Mapping[bytes, bytes],
    expire_at_ms: int,
    event: Sequence[bytes] | None,
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of ``task_settle.lua`` for ``delivery`` of the queue of ``keys``
    (``mode``: ``ack``, ``retry`` or ``dead``): the settle layout, built by
    ``Settling.call``, then the task's own arguments and keys; ``event``: the settle's
    lifecycle event with history on, None with history off."""
    gkeys = keys.group(delivery.consumer)
    own = [
        mode,
        due,
        expires(expire_at_ms),
        delivery.id,
        error_json,
        len(result),
        *pairs(result),
        *pairs(envelope),
    ]
    task_keys = [keys.task_result(delivery.id), keys.task_results, gkeys.leases]
    settling = _settling(gkeys, delivery.instance)
    return settling.call([settling.entry(delivery)], event or (), own, task_keys)


@functools.lru_cache(maxsize=256)
def _settling(gkeys: GroupKeys, instance: str) -> Settling:
    """The settle calls of one worker instance of a task consumer: built once, not per
    task (a worker runs a handful of instances; its tasks settle thousands of times)."""
    return Settling(gkeys, instance)


def read_commands(queues: Sequence[QueueKeys], result_id: str) -> list[tuple[str, str]]:
    """An ``HGETALL`` of result ``result_id`` in each of ``queues``; :func:`found` reads
    the replies."""
    return [("HGETALL", keys.task_result(result_id)) for keys in queues]


def found(queues: Sequence[QueueKeys], replies: Sequence[Any]) -> tuple[str, dict[str, str]] | None:
    """``(queue, fields)`` of the first of ``queues`` whose reply to
    :func:`read_commands` holds the result, or None (unknown or expired)."""
    for keys, raw in zip(queues, replies, strict=True):
        if raw:
            return keys.queue, decode_hash(raw)
    return None


def expires(expire_at_ms: int) -> str:
    """An expiry (by this host's clock) as ``+<ms>``: the scripts time it by Redis's."""
    return f"+{max(1, expire_at_ms - now_ms())}"


def pairs(fields: Mapping[str, str] | Mapping[bytes, bytes]) -> list[Any]:
    """``{k: v, ...}`` as the flat ``[k, v, ...]`` list scripts take."""
    return [item for pair in fields.items() for item in pair]


def decode_hash(raw: Any) -> dict[str, str]:
    """A result hash as redis-py returns it (a dict or a flat list, bytes) as text."""
    if isinstance(raw, dict):
        return {to_str(k): to_str(v) for k, v in raw.items()}
    items = list(raw or [])
    return {to_str(items[i]): to_str(items[i + 1]) for i in range(0, len(items), 2)}
