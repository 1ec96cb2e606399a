"""The redisq backends of the ``TASKS`` setting, and the redisq queues their task
queues map to (read by the declarations, the checks and the admin)."""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from redisq_django.tasks.backend_options import TaskOptions, parse_options, queue_name_problem

BACKEND_PATH = "redisq_django.tasks.RedisqBackend"
_BACKEND_PATHS = (BACKEND_PATH, "redisq_django.tasks.backend.RedisqBackend")


def redisq_backends() -> dict[str, tuple[TaskOptions, list[str]]]:
    """alias -> (options, queue names) of every ``TASKS`` backend that is ours and valid
    (invalid ones are left to the system checks)."""
    found: dict[str, tuple[TaskOptions, list[str]]] = {}
    tasks = getattr(settings, "TASKS", {}) or {}
    for alias, params in tasks.items():
        if not isinstance(params, dict) or params.get("BACKEND") not in _BACKEND_PATHS:
            continue
        try:
            options = parse_options(params.get("OPTIONS", {}))
        except ValueError:
            continue
        names = [n for n in params.get("QUEUES", ["default"]) if not queue_name_problem(options, n)]
        found[alias] = (options, sorted(set(names)))
    return found


@dataclass(frozen=True)
class SharedQueue:
    """Redisq queues that two or more task queues map to: ``owners`` are (alias, queue
    name) in ``TASKS`` order, ``queues`` the redisq queues they share."""

    owners: tuple[tuple[str, str], ...]
    queues: tuple[str, ...]

    def describe(self) -> str:
        names = " and ".join(f"TASKS[{a!r}] queue {n!r}" for a, n in self.owners)
        shared = ", ".join(map(repr, self.queues))
        return f"{names} use the same redisq queue{'s' if len(self.queues) > 1 else ''} {shared}"


def shared_queues(first_alias: str | None = None) -> list[SharedQueue]:
    """The task queues of the redisq backends that map to a redisq queue in common
    (e.g. two backends with the same ``QUEUE_PREFIX`` and a queue name in common, or
    queues ``x`` and ``x.high``), one entry per set of task queues; with
    ``first_alias``, only those whose first owner in ``TASKS`` order is that backend (so
    that each is reported once)."""
    owners: dict[str, list[tuple[str, str]]] = {}
    for alias, (options, names) in redisq_backends().items():
        for name in names:
            for queue in options.level_queues(name):
                owners.setdefault(queue, []).append((alias, name))
    grouped: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for queue, found in owners.items():
        if len(found) > 1:
            grouped.setdefault(tuple(found), []).append(queue)
    return [
        SharedQueue(found, tuple(queues))
        for found, queues in grouped.items()
        if first_alias is None or found[0][0] == first_alias
    ]
