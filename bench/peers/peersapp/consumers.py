"""The peer benchmark's job as a redisq consumer: ``runconsumer peers``."""

from __future__ import annotations

import common

from redisq_django import Message, consumer

QUEUE = "peers"
NAME = "incr"


@consumer(QUEUE, name=NAME)
def incr(message: Message) -> None:
    common.record(float(message.payload.get("t0", 0.0)))
