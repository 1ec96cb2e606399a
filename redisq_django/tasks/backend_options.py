"""The ``OPTIONS`` of a ``TASKS`` backend, and how task queues map to redisq queues.

Redis Streams have no priorities, so each Django task queue is three redisq queues, one
per priority level, which workers read highest first (``core/worker/priority.py``):

=========================  ==============================  =====================
Django priority            redisq queue (default prefix)   level
=========================  ==============================  =====================
1 … 100                    ``tasks.<queue_name>.high``      high (read first)
0 (the default)            ``tasks.<queue_name>``           normal
-100 … -1                  ``tasks.<queue_name>.low``       low (read last)
=========================  ==============================  =====================

Within a level, tasks run in the order they were enqueued (their due time for deferred
ones): priorities 10 and 90 are the same level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redisq_django.core import bounds
from redisq_django.core.errors import InvalidName
from redisq_django.core.keys import validate_name
from redisq_django.core.limits import Rate, rate_problem

#: The logical consumer that runs the tasks of every task queue.
TASKS_CONSUMER = "tasks"

#: How long a result is kept after its last change, seconds (1 day).
DEFAULT_RESULT_TTL_S = 24 * 3600.0

#: Priority levels, highest first: (name, queue suffix). Rank = index.
LEVELS = (("high", ".high"), ("normal", ""), ("low", ".low"))

#: Every key of a backend's ``OPTIONS`` with its default (times in seconds; None: the
#: ``REDISQ`` setting of the same name applies).
OPTION_DEFAULTS: dict[str, Any] = {
    "RESULT_TTL": DEFAULT_RESULT_TTL_S,
    "QUEUE_PREFIX": "tasks.",
    # A task that raises is retried this many times unless @task(max_retries=...) says
    # otherwise (Django's own backends never retry). Crashes (a worker killed while it
    # runs a task) count against the consumer's budget instead: REDISQ["MAX_RETRIES"].
    "MAX_RETRIES": 0,
    "BACKOFF": None,
    "MAX_BACKOFF": None,
    "VISIBILITY_TIMEOUT": None,
    # Handler threads per priority level and queue in each runconsumer process.
    "CONCURRENCY": 1,
    # Flow control of each task queue, its priority levels together, every worker on
    # every host together (docs/howto/protecting.md); None: no limit.
    "TIME_LIMIT": None,
    "RATE": None,
    "BURST": None,
    "MAX_IN_FLIGHT": None,
}


def level_rank(priority: int) -> int:
    """The level (0 = high, 1 = normal, 2 = low) of a Django priority."""
    return 0 if priority > 0 else (1 if priority == 0 else 2)


@dataclass(frozen=True)
class TaskOptions:
    """A backend's validated ``OPTIONS`` (times in seconds)."""

    result_ttl: float = DEFAULT_RESULT_TTL_S
    queue_prefix: str = "tasks."
    max_retries: int = 0
    backoff: float | None = None
    max_backoff: float | None = None
    visibility_timeout: float | None = None
    concurrency: int = 1
    time_limit: float | None = None
    rate: str | None = None
    burst: int | None = None
    max_in_flight: int | None = None

    @property
    def result_ttl_ms(self) -> int:
        return int(self.result_ttl * 1000)

    def level_queue(self, queue_name: str, rank: int) -> str:
        """The redisq queue of Django queue ``queue_name`` at level ``rank``."""
        return f"{self.queue_prefix}{queue_name}{LEVELS[rank][1]}"

    def level_queues(self, queue_name: str) -> list[str]:
        """The redisq queues of ``queue_name``, highest level first."""
        return [self.level_queue(queue_name, rank) for rank in range(len(LEVELS))]


def option_problems(options: Any) -> list[str]:
    """What is wrong with a backend's ``OPTIONS`` (empty when nothing)."""
    if not isinstance(options, dict):
        return [f"OPTIONS must be a dict, not {type(options).__name__}"]
    unknown = sorted(set(options) - set(OPTION_DEFAULTS))
    found: list[str | None] = []
    if unknown:
        found.append(f"unknown key(s) {', '.join(unknown)} (valid: {', '.join(OPTION_DEFAULTS)})")
    merged = {**OPTION_DEFAULTS, **options}
    found += [
        bounds.problem(key.lower(), merged[key], key)
        for key in OPTION_DEFAULTS
        # None: the REDISQ setting of the same name applies (checked there)
        if key.lower() in bounds.BOUNDS and merged[key] is not None
    ]
    prefix = merged["QUEUE_PREFIX"]
    if not isinstance(prefix, str):
        found.append("QUEUE_PREFIX must be a string")
    if merged["RATE"] is not None:
        found.append(rate_problem(merged["RATE"], merged["BURST"]))
    elif merged["BURST"] is not None:
        found.append("BURST needs a RATE: it is how many of the rate may start at once")
    return [p for p in found if p]


def parse_options(options: Any) -> TaskOptions:
    """``OPTIONS`` validated.

    Raises:
        ValueError: naming every problem.
    """
    problems = option_problems(options)
    if problems:
        raise ValueError("; ".join(problems))
    merged = {**OPTION_DEFAULTS, **options}
    return TaskOptions(
        result_ttl=float(merged["RESULT_TTL"]),
        queue_prefix=merged["QUEUE_PREFIX"],
        max_retries=int(merged["MAX_RETRIES"]),
        backoff=merged["BACKOFF"],
        max_backoff=merged["MAX_BACKOFF"],
        visibility_timeout=merged["VISIBILITY_TIMEOUT"],
        concurrency=int(merged["CONCURRENCY"]),
        time_limit=merged["TIME_LIMIT"],
        rate=None if merged["RATE"] is None else str(Rate.parse(merged["RATE"])),
        burst=merged["BURST"],
        max_in_flight=merged["MAX_IN_FLIGHT"],
    )


def queue_name_problem(options: TaskOptions, queue_name: Any) -> str | None:
    """Why Django queue ``queue_name`` cannot be a redisq queue, or None."""
    if not isinstance(queue_name, str):
        return f"queue name {queue_name!r} is not a string"
    for queue in options.level_queues(queue_name):
        try:
            validate_name("queue", queue)
        except InvalidName as exc:
            return f"queue {queue_name!r} makes the redisq queue name {queue!r}: {exc}"
    return None
