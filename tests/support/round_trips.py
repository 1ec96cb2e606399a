"""Counting a client's round trips to Redis: each is one packed write (one command, or one
pipeline) and its replies."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis


@contextmanager
def round_trips(client: redis.Redis) -> Iterator[list[int]]:
    """Count the writes (``send_packed_command`` calls) made on ``client``'s connections
    while the block runs: ``with round_trips(client) as trips: …; trips[0]``."""
    calls = [0]
    cls = client.connection_pool.connection_class
    original = cls.send_packed_command

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(self, *args, **kwargs)

    cls.send_packed_command = counting  # type: ignore[method-assign]
    try:
        yield calls
    finally:
        cls.send_packed_command = original  # type: ignore[method-assign]
