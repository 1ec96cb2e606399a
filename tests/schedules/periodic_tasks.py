"""A Django task for tests/schedules/test_task_target.py (Django >= 6.0 only: imported
by that test alone, after checking that ``django.tasks`` exists)."""

from __future__ import annotations

from django.tasks import task


@task
def record(key: str) -> None:
    """Append one line to the Redis list ``key`` (how the test counts runs)."""
    from redisq_django.connection import get_broker

    get_broker().client.rpush(key, "ran")
