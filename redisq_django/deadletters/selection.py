"""Which dead-letter rows an operator means: the admin's filters and ``manage.py redisq
dead``'s options, after moving what is still in Redis into the database."""

from __future__ import annotations

from django.db.models import QuerySet

from redisq_django.deadletters.sinking import sink_all
from redisq_django.models import DeadLetter


def rows(
    queue: str | None = None,
    consumer: str | None = None,
    status: str | None = DeadLetter.Status.DEAD,
    *,
    error_class: str | None = None,
    error_key: str | None = None,
    sink: bool = True,
) -> QuerySet[DeadLetter]:
    """Dead-letter rows (after moving what is still in Redis, unless ``sink`` is
    False), newest failure first, narrowed to the values given (None or "": any)."""
    if sink:
        sink_all()
    found = DeadLetter.objects.all()
    for name, value in (
        ("queue", queue),
        ("consumer", consumer),
        ("status", status),
        ("error_class", error_class),
        ("error_key", error_key),
    ):
        if value is not None and value != "":
            found = found.filter(**{name: value})
    return found
