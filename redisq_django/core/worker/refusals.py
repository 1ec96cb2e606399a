"""Redis refusals and outages in the worker: temporary conditions, logged once, waited out.

A worker never dies of Redis saying no: an outage, a full Redis (OOM), a read-only
replica, a restart still loading its data, a cluster or master down, a busy script, a
missing consumer group, or a script refusing a value another client wrote (the key named
in the log, an error until an operator repairs it: nothing was read or settled
meanwhile). Each loop that talks to Redis keeps one :class:`Condition`: it logs when a
condition starts and when it is over (never once per retry) and says how long to wait
before the next try.
"""

from __future__ import annotations

import logging

from redisq_django.core.errors import (
    ConsumerNotFound,
    CorruptState,
    RedisRefused,
    RedisUnavailable,
)

#: What a worker waits out instead of dying (RedisRefused is a RedisUnavailable).
TEMPORARY = (RedisUnavailable, ConsumerNotFound, CorruptState)

#: Waits between tries grow from the first to the last value (seconds).
BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


def condition_of(exc: BaseException) -> str:
    """A short name of what went wrong: a refusal's condition, ``"nogroup"`` or
    ``"unreachable"``."""
    if isinstance(exc, RedisRefused):
        return exc.condition
    if isinstance(exc, ConsumerNotFound):
        return "nogroup"
    if isinstance(exc, CorruptState):
        return "corrupt"
    return "unreachable"


def describe(exc: BaseException) -> str:
    """The log line of a condition's start."""
    if isinstance(exc, ConsumerNotFound):
        return (
            f"Logical consumer {exc.consumer!r} of queue {exc.queue!r} is missing in Redis "
            "(Redis came back empty, or the group was removed); registering it again from "
            "the start of its log"
        )
    return str(exc).rstrip(".")


class Condition:
    """The Redis condition one loop is in (None: all is well).

    Args:
        where: what the loop does, for the log lines (e.g. a subscription).
        logger: where to log.
    """

    def __init__(self, where: object, logger: logging.Logger) -> None:
        self.where = where
        self.logger = logger
        self.current: str | None = None
        self.failures = 0

    def failed(self, exc: BaseException) -> float:
        """Record a failed try; log it when the condition is new. Returns the seconds
        to wait before the next try."""
        name = condition_of(exc)
        if name != self.current:
            # A value only an operator can repair is an error, not a passing condition.
            level = logging.ERROR if name == "corrupt" else logging.WARNING
            self.logger.log(level, "%s (%s); retrying in the background", describe(exc), self.where)
            self.current = name
        wait = BACKOFF_S[min(self.failures, len(BACKOFF_S) - 1)]
        self.failures += 1
        return wait

    def ok(self) -> None:
        """Record a successful try; log that the condition is over, if there was one."""
        if self.current == "corrupt":
            self.logger.warning("The refused value was repaired (%s)", self.where)
        elif self.current is not None:
            self.logger.warning(
                "Redis is reachable again (%s); %s is over", self.where, self.current
            )
        self.current = None
        self.failures = 0
