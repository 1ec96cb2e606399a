"""The wire of task results (Django-free): statuses, the enqueue call, expiries, hashes.

Shared by the sync store (:mod:`redisq_django.core.task_store`) and the asyncio
enqueue of the Tasks backend (``redisq_django.tasks.aio``), so that both build the same
``task_enqueue.lua`` call and read a result hash the same way (PROTOCOL.md, "Django task
results").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from redisq_django.core.clock import now_ms
from redisq_django.core.envelope import Envelope
from redisq_django.core.keys import QueueKeys
from redisq_django.core.wire import to_str

READY, RUNNING, SUCCESSFUL, FAILED = "READY", "RUNNING", "SUCCESSFUL", "FAILED"
STATUSES = (READY, RUNNING, SUCCESSFUL, FAILED)

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
) -> tuple[list[str], list[Any]]:
    """KEYS and ARGV of ``task_enqueue.lua`` for ``envelope`` (its id is the result id)
    and the result's fields: built once, run by a sync or an asyncio client."""
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
    return [keys.task_result(envelope.id), keys.task_results, keys.log, keys.delayed], args


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
