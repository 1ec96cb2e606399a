"""Task functions of the tasks backend tests (imported while TASKS uses redisq).

Most record what they did in a Redis list named by their first argument, so that a test
in another thread or process sees every run (``RUNS_URL`` points at the test Redis).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from typing import Any

import redis
from django.tasks import TaskContext, task

#: Set by the tests: the Redis where runs are recorded.
RUNS_URL_ENV = "REDISQ_TEST_RUNS_URL"


def _record(key: str, value: str) -> None:
    client = redis.Redis.from_url(os.environ[RUNS_URL_ENV])
    try:
        client.rpush(key, value)
    finally:
        client.close()


@task()
def noop(*args: Any, **kwargs: Any) -> None:
    """Does nothing (the benchmark's task)."""


@task()
def record(key: str, value: str) -> str:
    _record(key, value)
    return value


@task()
def calculate(a: int, b: int, *, scale: int = 1) -> dict[str, Any]:
    return {"sum": (a + b) * scale, "items": [a, b]}


@task()
def failing(message: str = "boom") -> None:
    raise ValueError(message)


@task(max_retries=2, backoff=0.05, max_backoff=0.1)
def flaky(key: str, fail_times: int) -> int:
    client = redis.Redis.from_url(os.environ[RUNS_URL_ENV])
    try:
        runs = client.rpush(key, "ran")
    finally:
        client.close()
    if runs <= fail_times:
        raise RuntimeError(f"attempt {runs} fails")
    return runs


@task(max_retries=3, backoff=0.05, max_backoff=0.1)
def rejects(key: str, reason: str) -> None:
    """Records each run, then gives up on the task (``Reject``): retries left, but none
    may be made."""
    from redisq_django import Reject

    _record(key, "ran")
    raise Reject(reason)


@task()
def exits(message: str = "bye") -> None:
    sys.exit(message)


@task()
def interrupts(message: str = "stop") -> None:
    raise KeyboardInterrupt(message)


@task()
async def async_interrupts(message: str = "stop") -> None:
    await asyncio.sleep(0)
    raise KeyboardInterrupt(message)


@task()
def returns_non_json() -> object:
    return object()


@task(takes_context=True)
def with_context(context: TaskContext, key: str) -> dict[str, Any]:
    _record(key, f"{context.attempt}:{context.task_result.id}")
    return {"attempt": context.attempt, "id": context.task_result.id}


@task()
async def async_record(key: str, value: str) -> str:
    await asyncio.sleep(0)
    _record(key, value)
    return value


@task()
def stamp(key: str) -> float:
    now = time.time()
    _record(key, repr(now))
    return now


@task()
def complex_exception() -> None:
    raise ValueError(ValueError("This task failed"))


@task()
def calculate_meaning_of_life() -> int:
    return 42


@task()
async def async_noop(*args: Any, **kwargs: Any) -> None:
    await asyncio.sleep(0)


@task()
def slow_first_time(key: str, sleep_s: float) -> int:
    """Records each start; the first attempt sleeps (long enough to be killed)."""
    client = redis.Redis.from_url(os.environ[RUNS_URL_ENV])
    try:
        runs = client.rpush(key, "started")
    finally:
        client.close()
    if runs == 1:
        time.sleep(sleep_s)
    return runs


@task(takes_context=True, max_retries=3, backoff=0.05, max_backoff=0.1)
def fails_slowly(context: TaskContext, key: str, sleep_s: float) -> None:
    """Records each start ("<result id> <pid>"), runs ``sleep_s`` (long enough to be
    killed in), then fails (every time)."""
    _record(key, f"{context.task_result.id} {os.getpid()}")
    time.sleep(sleep_s)
    raise ValueError(f"attempt {context.attempt} fails")


@task()
def kills_its_worker(key: str) -> None:
    """Records its start, then kills the process running it (every time)."""
    _record(key, "started")
    os.kill(os.getpid(), 9)


def _timed_run(key: str, sleep_s: float) -> int:
    """Records the time of each start (this host's clock, s); the first run sleeps."""
    client = redis.Redis.from_url(os.environ[RUNS_URL_ENV])
    try:
        runs = client.rpush(key, repr(time.time()))
    finally:
        client.close()
    if runs == 1:
        time.sleep(sleep_s)
    return runs


@task(visibility_timeout=3)
def short_lease(key: str, sleep_s: float) -> int:
    """A task with a visibility timeout of its own shorter than the heartbeat's 15 s."""
    return _timed_run(key, sleep_s)


@task(visibility_timeout=24)
def long_lease(key: str, sleep_s: float) -> int:
    """A task whose own visibility timeout outlasts the heartbeat's 15 s (renewed every
    8 s, it ends at least 16 s after the worker's death)."""
    return _timed_run(key, sleep_s)


def _receipt_once_killed(key: str, source: str) -> dict[str, str]:
    """Writes a receipt for ``source``; on its first run, kills its own process right
    after the transaction commits (before the worker writes its result and ack)."""
    from django.db import transaction

    from tests.shopapp.models import Receipt

    Receipt.objects.create(source=source, note=key)
    _record(key, str(os.getpid()))
    client = redis.Redis.from_url(os.environ[RUNS_URL_ENV])
    try:
        first = client.set(f"{key}:killed", "1", nx=True)
    finally:
        client.close()
    if first:
        transaction.on_commit(lambda: os.kill(os.getpid(), 9))
    return {"source": source}


@task(atomic=True, visibility_timeout=3)
def receipt_atomic(key: str, source: str) -> dict[str, str]:
    """:func:`_receipt_once_killed` in the transaction of its inbox row (its on_commit
    waits for that commit)."""
    return _receipt_once_killed(key, source)


@task(visibility_timeout=3)
def receipt_plain(key: str, source: str) -> dict[str, str]:
    """The same without ``atomic``: autocommit (on_commit runs at once, after the insert)."""
    return _receipt_once_killed(key, source)


@task(max_retries=5, backoff=3600, max_backoff=3600)
def fails_then_waits(message: str = "partner down") -> None:
    """Fails; its next attempt is an hour away (a retry staff may end)."""
    raise ConnectionError(message)
