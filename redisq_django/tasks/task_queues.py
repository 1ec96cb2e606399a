"""The task queues of the ``TASKS`` setting as logical consumers the worker runs.

Every priority level of every queue of every redisq backend is a queue with one logical
consumer, ``tasks``, whose handler is :func:`~redisq_django.tasks.execution.execute`.
They are declared like ``@consumer`` ones (so they get ``Queue``/``Consumer`` rows, admin
overrides, and everything ``runconsumer`` does), computed from the settings each time
they are asked for (``ConsumerRegistry.add_provider``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from redisq_django.consuming.declarations import ConsumerDeclaration
from redisq_django.core.errors import ConfigurationError
from redisq_django.tasks.backend_options import LEVELS, TASKS_CONSUMER
from redisq_django.tasks.configured import BACKEND_PATH, redisq_backends

logger = logging.getLogger("redisq.tasks")

#: The handler of every task queue (by path: the declaration's ``handler_path``).
HANDLER_PATH = "redisq_django.tasks.execution.execute"


class UnknownTaskQueue(ConfigurationError):
    """``runconsumer --tasks`` was given a queue no redisq backend has."""


def task_declarations() -> list[ConsumerDeclaration]:
    """A declaration per priority level of each task queue of the redisq backends."""
    from redisq_django.tasks.execution import execute

    out: list[ConsumerDeclaration] = []
    for options, names in redisq_backends().values():
        for name in names:
            ladder = f"{options.queue_prefix}{name}"  # its levels, read highest first
            for rank in range(len(LEVELS)):
                out.append(
                    ConsumerDeclaration(
                        queue=options.level_queue(name, rank),
                        name=TASKS_CONSUMER,
                        handler=execute,
                        handler_path=HANDLER_PATH,
                        # Crashes: the consumer's budget (REDISQ, admin); a task's own
                        # failures: its max_retries (RedisqTask, OPTIONS), see execution.
                        max_retries=None,
                        backoff=options.backoff,
                        max_backoff=options.max_backoff,
                        visibility_timeout=options.visibility_timeout,
                        concurrency=options.concurrency,
                        start="earliest",
                        priority=(ladder, rank),
                        time_limit=options.time_limit,
                        rate=options.rate,
                        burst=options.burst,
                        max_in_flight=options.max_in_flight,
                        # The queue's levels share its rate and slots (the normal one's).
                        flow_queue=options.level_queue(name, 1),
                    )
                )
    return out


def task_queues(names: Sequence[str] = ()) -> list[str]:
    """The redisq queues of Django task queues ``names`` (every task queue when empty).

    Raises:
        UnknownTaskQueue: a name is no queue of a redisq backend, or there is none.
    """
    known: dict[str, list[str]] = {}
    for options, queue_names in redisq_backends().values():
        for name in queue_names:
            known.setdefault(name, []).extend(options.level_queues(name))
    if not known:
        raise UnknownTaskQueue(
            f"No TASKS backend uses {BACKEND_PATH} (with valid QUEUES and OPTIONS); "
            "run `manage.py check` for details."
        )
    missing = [n for n in names if n not in known]
    if missing:
        raise UnknownTaskQueue(
            f"No redisq task backend has queue {', '.join(map(repr, missing))}. "
            f"Task queues: {', '.join(sorted(known))}."
        )
    chosen = names or sorted(known)
    return list(dict.fromkeys(q for n in chosen for q in known[n]))
