"""The bounds of every numeric setting, wherever a value comes from.

One table, :data:`BOUNDS`: each setting's unit, least and greatest value and why. Every
place a user sets one checks it here, so that a value is refused with the same words
everywhere: ``settings.REDISQ`` (``conf.py``, reported by ``manage.py check`` as
``redisq_django.E001`` and raised by ``get_settings()``, so a worker refuses to start),
``@consumer(...)``, ``@task(...)`` and a ``TASKS`` backend's ``OPTIONS``, the admin's
overrides of a consumer (``Consumer.clean``), and ``runconsumer``'s arguments.

The core's own objects (:class:`~redisq_django.core.retry.RetryPolicy`,
:class:`~redisq_django.core.config.CoreConfig`) only refuse what can mean nothing (a
negative count or time): code that builds them directly, as the tests do, may choose a
lease of 200 ms.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Bound:
    """The valid values of one numeric setting.

    Attributes:
        unit: what the number counts (``"seconds"``, ``"messages"``...); messages name
            the unit of times (``"a number of seconds"``) and say "an integer" otherwise.
        minimum: the least valid value...
        above: ...or, True, the value it must exceed.
        maximum: the greatest valid value (None: no limit).
        integer: whole numbers only (else any number; never a bool).
        why: what the bound protects, said to the user with the refusal.
    """

    unit: str
    minimum: float
    why: str
    above: bool = False
    maximum: float | None = None
    integer: bool = False

    def range(self) -> str:
        """``">= 1"``, ``"> 0"`` or ``"between 0 and 65535"``."""
        low = f"{self.minimum:g}"
        if self.maximum is not None:
            return f"between {low} and {self.maximum:g}"
        return f"> {low}" if self.above else f">= {low}"

    def problem(self, label: str, value: Any) -> str | None:
        """Why ``value`` is not valid for the setting ``label`` names (None: it is).

        The words are the same wherever the value came from; ``label`` says where
        (``"VISIBILITY_TIMEOUT"``, ``"@consumer visibility_timeout"``).
        """
        kind = int if self.integer else (int, float)
        if isinstance(value, kind) and not isinstance(value, bool) and self._within(value):
            return None
        what = "an integer" if self.integer else f"a number of {self.unit}"
        return f"{label} must be {what} {self.range()}, got {value!r} ({self.why})".lstrip()

    def _within(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        low_ok = value > self.minimum if self.above else value >= self.minimum
        return low_ok and (self.maximum is None or value <= self.maximum)


_LEASE_WHY = (
    "the lease of a delivery, renewed every third of it with Redis round trips in "
    "between: a shorter one lets other instances take messages a live one still handles"
)

#: Every bounded numeric setting by its name in lower case: ``REDISQ`` keys and ``TASKS``
#: options (upper case there), ``@consumer``/``@task`` arguments, the admin's override
#: fields and ``runconsumer``'s options (``--max-messages``: ``max_messages``).
BOUNDS: dict[str, Bound] = {
    "max_retries": Bound(
        "retries", 0, "0: a failed message is a dead letter at once", integer=True
    ),
    "backoff": Bound("seconds", 0, "the first wait before a retry; 0 retries at once"),
    "max_backoff": Bound("seconds", 0, "the cap of one wait before a retry"),
    "visibility_timeout": Bound("seconds", 1, _LEASE_WHY),
    "concurrency": Bound("threads", 1, "0 would run no handler at all", integer=True),
    "max_payload_bytes": Bound(
        "bytes",
        1,
        "Redis refuses a string over 512 MB (proto-max-bulk-len)",
        maximum=512 * 1024 * 1024,
        integer=True,
    ),
    "replay_window": Bound("seconds", 0, "0: no acknowledged history is kept for replay"),
    "replay_window_length": Bound(
        "entries", 0, "0: no acknowledged history is kept for replay", integer=True
    ),
    "max_length": Bound("entries", 0, "0: no hard cap on the log's length", integer=True),
    "max_age": Bound("seconds", 0, "0: no hard cap on the age of log entries"),
    "poll_interval": Bound(
        "seconds", 0, "0 would ask Redis for due messages without pause", above=True
    ),
    "shutdown_grace_period": Bound(
        "seconds", 0, "0: handlers still running at a stop are not waited for"
    ),
    "outbox_retention": Bound("seconds", 0, "0: sent outbox rows are deleted at once"),
    "inbox_retention": Bound(
        "seconds",
        0,
        "a message delivered again after its inbox row is deleted runs again",
        above=True,
    ),
    "admin_redis_timeout": Bound(
        "seconds", 0, "0 would mean no answer from Redis in time: pages show no figures", above=True
    ),
    "result_ttl": Bound("seconds", 0, "0 would drop a task's result at once", above=True),
    "prefetch": Bound("messages", 1, "each fetch takes at least one message", integer=True),
    "max_messages": Bound("messages", 1, "the worker stops after handling this many", integer=True),
    "stats_interval": Bound("seconds", 0, "0: no summary lines"),
    "relay_interval": Bound(
        "seconds", 0, "0 would ask the database for outbox rows without pause", above=True
    ),
    "processes": Bound("processes", 1, "each runs the worker's threads", integer=True),
    "partitions_per_queue": Bound(
        "partitions",
        1,
        "each is a full queue of its own under its own hash tag; 1: not partitioned",
        maximum=64,
        integer=True,
    ),
    "metrics_port": Bound("port", 0, "a TCP port; 0: any free one", maximum=65535, integer=True),
    "ordered_wait_replicas": Bound(
        "replicas",
        0,
        "0: an ordered consumer's reads wait for no replica (WAIT)",
        integer=True,
    ),
    "ordered_wait_timeout": Bound(
        "seconds",
        0,
        "0 would make WAIT block for ever; the messages run after it anyway",
        above=True,
    ),
    "time_limit": Bound(
        "seconds",
        0,
        "how long a handler may run on one message before its attempt fails",
        above=True,
    ),
    "max_in_flight": Bound(
        "handlers",
        1,
        "how many handlers of the consumer may run at once across every worker",
        integer=True,
    ),
    "burst": Bound(
        "messages",
        1,
        "how many messages may start at once after a pause, within the rate",
        integer=True,
    ),
}
#: ``@consumer(wait_replicas=...)`` is ``REDISQ["ORDERED_WAIT_REPLICAS"]`` for one consumer.
BOUNDS["wait_replicas"] = BOUNDS["ordered_wait_replicas"]
#: ``runconsumer --grace-period`` is ``REDISQ["SHUTDOWN_GRACE_PERIOD"]`` for one run.
BOUNDS["grace_period"] = BOUNDS["shutdown_grace_period"]


def problem(name: str, value: Any, label: str | None = None) -> str | None:
    """Why ``value`` is not valid for setting ``name`` (a :data:`BOUNDS` key), or None.

    Args:
        name: the setting, in lower case.
        value: the value given.
        label: how the message names it (default ``name``): ``"VISIBILITY_TIMEOUT"``,
            ``"@task visibility_timeout"``...
    """
    return BOUNDS[name].problem(name if label is None else label, value)


def argument(name: str) -> Callable[[str], int | float]:
    """An ``argparse`` type for the option of setting ``name``: a number within its
    bounds, else an error in the same words as everywhere else."""
    bound = BOUNDS[name]

    def parse(text: str) -> int | float:
        try:
            value = int(text) if bound.integer else float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(str(bound.problem("", text))) from None
        found = bound.problem("", value)
        if found:
            raise argparse.ArgumentTypeError(found)
        return value

    parse.__name__ = name  # argparse names the type in some messages
    return parse
