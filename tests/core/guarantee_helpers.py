"""Helpers shared by the guarantee tests (C1-C11): bounded consume loops and clocks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from redisq_django.core import Message

#: Upper bound on fetch calls in one drain (each waits at most ``block_ms``).
MAX_FETCHES = 5_000


def drain(
    sub: Any,
    *,
    expected: int,
    timeout_s: float = 10.0,
    count: int = 100,
    block_ms: int = 50,
    ack: bool = True,
    settle: Callable[[Any, Message], None] | None = None,
) -> list[Message]:
    """Fetch until ``expected`` messages arrived, the deadline passed or the fetch budget
    ran out; ack each (or hand it to ``settle``). Returns every message received."""
    received: list[Message] = []
    deadline = time.monotonic() + timeout_s
    for _ in range(MAX_FETCHES):
        if len(received) >= expected or time.monotonic() > deadline:
            break
        batch = sub.fetch(count=count, block_ms=block_ms)
        received.extend(batch)
        if settle is not None:
            for message in batch:
                settle(sub, message)
        elif ack and batch:
            sub.ack(batch)
    return received


def fetch_nothing(sub: Any, *, wait_ms: int = 200) -> list[Message]:
    """Fetch once, waiting ``wait_ms``: what arrives (tests expect nothing)."""
    return sub.fetch(count=100, block_ms=wait_ms)


def wait_for(
    predicate: Callable[[], Any], *, timeout_s: float = 5.0, interval_s: float = 0.02
) -> Any:
    """Poll ``predicate`` until truthy (bounded by time and count); returns its last value."""
    deadline = time.monotonic() + timeout_s
    value = predicate()
    for _ in range(int(timeout_s / interval_s) + 1):
        if value or time.monotonic() > deadline:
            break
        time.sleep(interval_s)
        value = predicate()
    return value


def ids(messages: list[Message]) -> list[str]:
    return [m.id for m in messages]


def age_pending(client: Any, stream: str, group: str, idle_ms: int) -> None:
    """Make every pending entry of ``group`` on ``stream`` look idle for ``idle_ms``, as if
    that much time had passed, without sleeping: ``XCLAIM … IDLE`` to its current owner
    (``JUSTID`` leaves the delivery count alone)."""
    for row in client.xpending_range(stream, group, "-", "+", 10_000):
        client.xclaim(
            stream,
            group,
            row["consumer"],
            min_idle_time=0,
            message_ids=[row["message_id"]],
            idle=idle_ms,
            justid=True,
        )
