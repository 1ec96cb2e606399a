"""Bounded reads of task results for the admin's list: one page of results costs three
round trips and reads at most :data:`WINDOW` ids and statuses, never every result.

1. The ids of the :data:`WINDOW` most recently changed results of the task queues shown
   (``ZREVRANGE`` of each queue's index, scored by expiry = last change + TTL) and how
   many each index holds (``ZCARD``).
2. The status and task of each of those (``HMGET``): the filters and their choices.
3. The fields the list shows of the page's rows (``HMGET``, never ``return_value``).

The caller runs :func:`read_page` through the admin's guarded access to Redis
(:func:`redisq_django.admin.live.guarded`), so a hung Redis costs one timeout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from redisq_django.core.tasks import TaskResultStore, latest_results, result_fields
from redisq_django.tasks.configured import redisq_backends

#: The most recently changed results a list looks at (filters and paging work in them).
WINDOW = 1000
#: Rows per page.
PER_PAGE = 50
#: The fields the list shows (``return_value`` only on a result's own page).
ROW_FIELDS = (
    "task",
    "status",
    "args",
    "kwargs",
    "errors",
    "worker_ids",
    "priority",
    "enqueued_at",
    "started_at",
    "finished_at",
)


def task_queues() -> list[str]:
    """Every redisq queue of every task queue of the redisq backends."""
    return sorted(
        {
            q
            for options, names in redisq_backends().values()
            for name in names
            for q in options.level_queues(name)
        }
    )


@dataclass
class ResultsPage:
    """One page of results matching the filters, out of the window."""

    rows: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    total: int = 0  # results the indexes of the queues hold
    looked_at: int = 0  # of which the window holds (the latest)
    matching: int = 0  # in the window, matching the filters
    tasks: list[str] = field(default_factory=list)  # the tasks seen in the window


def read_page(
    store: TaskResultStore,
    queues: Sequence[str],
    *,
    status: str = "",
    task: str = "",
    page: int = 1,
) -> ResultsPage:
    """Page ``page`` (from 1) of the results of ``queues`` with ``status`` and ``task``
    ("": any) among the latest :data:`WINDOW`, the most recently changed first."""
    total, window = latest_results(store, queues, WINDOW)
    matching = [
        c for c in window if (not status or c.status == status) and (not task or c.task == task)
    ]
    shown = matching[(page - 1) * PER_PAGE : page * PER_PAGE]
    rows = [
        (c.queue, c.id, fields)
        for c, fields in zip(shown, result_fields(store, shown, ROW_FIELDS), strict=True)
        if fields
    ]
    return ResultsPage(
        rows=rows,
        total=total,
        looked_at=len(window),
        matching=len(matching),
        tasks=sorted({c.task for c in window}),
    )
