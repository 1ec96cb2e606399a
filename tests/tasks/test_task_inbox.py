"""``@task(atomic=True)`` (issue 35, point 3): a task whose function writes rows runs in
a transaction with its inbox row, so that a worker killed between the task's commit and
its result does not make the rows twice: the next worker finds the row, does not call
the function again, and writes the result (SUCCESSFUL, with the return value the row
kept). The same task without ``atomic`` writes its rows twice. Real ``runconsumer
--tasks`` processes, SIGKILL from the task's own ``on_commit`` (a failpoint), SQLite."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

pytest.importorskip("django.tasks", reason="the tasks backend needs Django >= 6.0 (django.tasks)")

from django.tasks import TaskResultStatus, task, task_backends
from django.tasks.exceptions import InvalidTask

from tests.support.workers import wait_for
from tests.tasks.conftest import TasksEnv, TaskWorkers


@pytest.fixture
def workers(tasks_env: TasksEnv, tmp_path: Path) -> Iterator[TaskWorkers]:
    w = TaskWorkers(tasks_env.redis_url, tmp_path / "db.sqlite3", tmp_path / "logs")
    w.extra_env = {
        "REDISQ_TEST_TASK_QUEUE": tasks_env.queue,
        "REDISQ_TEST_TASK_OPTIONS": json.dumps({}),
        "REDISQ_TEST_RUNS_URL": tasks_env.redis_url,
        # The crash is a delivery that never settled: one is allowed, not a dead letter
        "REDISQ_TEST_MAX_RETRIES": "3",
    }
    w.migrate()
    try:
        yield w
    finally:
        w.close()


def _receipts(db: Path, source: str) -> int:
    with contextlib.closing(sqlite3.connect(db, timeout=30)) as conn:
        (n,) = conn.execute(
            "SELECT COUNT(*) FROM shopapp_receipt WHERE source = ?", (source,)
        ).fetchone()
    return int(n)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("name", "receipts"), [("receipt_atomic", 1), ("receipt_plain", 2)])
def test_a_task_killed_between_its_commit_and_its_result_writes_its_rows_once(
    tasks_env: TasksEnv, workers: TaskWorkers, name: str, receipts: int
) -> None:
    env = tasks_env
    key, source = f"runs:{env.queue}", f"order-{env.queue}"
    # Given a task that kills its worker right after its transaction commits, once
    result = env.task(name).enqueue(key, source)
    first = workers.start("--tasks", env.queue, "--stats-interval", "0")
    assert first.wait_exit(60) == -9, workers.report()
    assert _receipts(workers.db_path, source) == 1

    # When another worker takes the task over (at the end of its own lease, 3 s)
    workers.start("--tasks", env.queue, "--stats-interval", "0")
    backend = task_backends["default"]
    wait_for(
        lambda: backend.get_result(result.id).status == TaskResultStatus.SUCCESSFUL,
        timeout=90,
        what=f"{name} to succeed",
        describe=workers.report,
    )

    # Then the atomic task's row was written once and its function ran once; its result
    # is the return value of that one run. Without atomic, the row is there twice.
    result.refresh()
    assert result.return_value == {"source": source}
    assert result.attempts == 2
    assert _receipts(workers.db_path, source) == receipts
    runs = redis.Redis.from_url(env.redis_url).llen(key)
    assert runs == receipts


async def _writes_async() -> None:
    pass


def _writes() -> None:
    pass


@pytest.mark.parametrize(
    ("func", "atomic", "needle"),
    [
        (_writes_async, True, "plain function, not an async def one"),
        (_writes, "nowhere", "alias of one of settings.DATABASES (default, pg)"),
    ],
)
def test_an_atomic_task_is_refused_when_it_cannot_be(
    tasks_env: TasksEnv, func: Any, atomic: Any, needle: str
) -> None:
    # Django validates a task as it is declared: the mistake shows at import
    with pytest.raises(InvalidTask, match=re.escape(needle)):
        task(atomic=atomic)(func)
