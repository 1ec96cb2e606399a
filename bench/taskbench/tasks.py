"""The no-op tasks the benchmark enqueues, one per backend."""

from django.tasks import task


@task(backend="default", queue_name="bench")
def noop_redisq() -> None:
    """Does nothing (redisq backend)."""


@task(backend="db", queue_name="bench")
def noop_db() -> None:
    """Does nothing (django-tasks-db backend)."""
