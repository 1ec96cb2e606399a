"""The one consumer of the worker-only project (tests/management/test_without_admin.py): it
refuses payloads with ``"fail"``, which become dead letters at once (no retries)."""

from __future__ import annotations

from redisq_django import Message, consumer

#: Its queue; no other test uses it.
QUEUE = "workeronly"


@consumer(QUEUE, name="keeper", max_retries=0, start="earliest")
def keep(message: Message) -> None:
    if message.payload.get("fail"):
        raise ValueError(f"refused message {message.payload['n']}")
