"""Bounded reads of many task results for a listing (Django-free): the latest results of
some task queues with their status and task, then chosen fields of a few of them, one
round trip each however many queues (PROTOCOL.md, "Django task results")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from redisq_django.core.tasks.store import TaskResultStore
from redisq_django.core.wire import to_str


@dataclass(frozen=True)
class Listed:
    """A result of a listing: its queue, id, status and task ("?" when unset)."""

    queue: str
    id: str
    status: str
    task: str


def _text(value: object) -> str:
    return "?" if value is None else to_str(value)


def latest_results(
    store: TaskResultStore, queues: Sequence[str], count: int
) -> tuple[int, list[Listed]]:
    """How many results the indexes of ``queues`` hold, and the ``count`` most recently
    changed of them (the latest to expire), newest first, with status and task. Two
    round trips; results expired meanwhile are left out."""
    if not queues:
        return 0, []
    with store.client.pipeline(transaction=False) as pipe:
        for queue in queues:
            index = store.keys(queue).task_results
            pipe.zcard(index)
            pipe.zrevrange(index, 0, count - 1, withscores=True)
        replies = pipe.execute()
    total = sum(int(n) for n in replies[0::2])
    newest = sorted(
        (
            (float(score), queue, to_str(rid))
            for queue, got in zip(queues, replies[1::2], strict=True)
            for rid, score in got
        ),
        reverse=True,
    )[:count]
    if not newest:
        return total, []
    with store.client.pipeline(transaction=False) as pipe:
        for _, queue, rid in newest:
            pipe.hmget(store.keys(queue).task_result(rid), "status", "task")
        summaries = pipe.execute()
    return total, [
        Listed(
            queue,
            rid,
            "?" if status is None else to_str(status),
            "?" if task is None else to_str(task),
        )
        for (_, queue, rid), (status, task) in zip(newest, summaries, strict=True)
        if status is not None or task is not None
    ]


def result_fields(
    store: TaskResultStore, results: Sequence[Listed], fields: Sequence[str]
) -> list[dict[str, str]]:
    """``fields`` of each of ``results`` (those set; an expired result: {}), one round
    trip."""
    if not results:
        return []
    with store.client.pipeline(transaction=False) as pipe:
        for r in results:
            pipe.hmget(store.keys(r.queue).task_result(r.id), *fields)
        replies = pipe.execute()
    return [
        {k: to_str(v) for k, v in zip(fields, values, strict=True) if v is not None}
        for values in replies
    ]
