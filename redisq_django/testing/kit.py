"""What a test holds of its isolated Redis: :class:`IsolatedQueues`, the object the
``redisq`` pytest fixture and :class:`~redisq_django.testing.RedisqTestMixin` give."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from contextlib import AbstractContextManager

from redisq_django.core.dead_entry import DeadEntry
from redisq_django.testing import capturing, draining
from redisq_django.testing.capturing import Captured
from redisq_django.testing.draining import Drained
from redisq_django.testing.isolation import Isolation, isolated, redis_url_for_tests


class IsolatedQueues:
    """One test's queues: a key prefix of its own on a real Redis, removed afterwards,
    and the helpers bound to it (each is the module-level function of the same name).

    Attributes:
        prefix: the test's ``REDISQ["PREFIX"]``.
        url: the private server's URL when the settings' Redis did not answer, else None.
    """

    def __init__(self, isolation: Isolation, url: str | None, everything: Captured) -> None:
        self.prefix = isolation.prefix
        self.url = url
        self._everything = everything

    @property
    def published(self) -> Captured:
        """Every message published since the test began (read live)."""
        return self._everything

    def capture(
        self, *, on_commit: bool = True, using: str = "default"
    ) -> AbstractContextManager[Captured]:
        """:func:`~redisq_django.testing.capture`: ``with redisq.capture() as published``."""
        return capturing.capture(on_commit=on_commit, using=using)

    def drain(
        self,
        *queues: str,
        delayed: bool = False,
        max_messages: int = draining.DEFAULT_MAX_MESSAGES,
        max_rounds: int = draining.DEFAULT_MAX_ROUNDS,
        timeout: float = draining.DEFAULT_TIMEOUT_S,
    ) -> Drained:
        """:func:`~redisq_django.testing.drain`."""
        return draining.drain(
            *queues,
            delayed=delayed,
            max_messages=max_messages,
            max_rounds=max_rounds,
            timeout=timeout,
        )

    def dead_letters(self, queue: str, consumer: str | None = None) -> list[DeadEntry]:
        """:func:`~redisq_django.testing.dead_letters`."""
        return draining.dead_letters(queue, consumer)

    def deliver_delayed(self, *queues: str) -> int:
        """:func:`~redisq_django.testing.deliver_delayed`."""
        return draining.deliver_delayed(*queues)

    def fire_schedule(self, name: str, at: dt.datetime | None = None) -> str:
        """:func:`~redisq_django.testing.fire_schedule`."""
        return draining.fire_schedule(name, at)


@contextlib.contextmanager
def isolated_queues(*, settings_fixture: object = None) -> Iterator[IsolatedQueues]:
    """An :class:`IsolatedQueues` for the block: a prefix of its own on the settings'
    Redis (or on a private ``redis-server`` when that one does not answer), its keys
    deleted when the block ends.

    Args:
        settings_fixture: pytest-django's ``settings`` fixture, when the test uses it
            (:func:`~redisq_django.testing.isolated`).
    """
    url = redis_url_for_tests()
    isolation_of = isolated(url=url, settings_fixture=settings_fixture)
    with isolation_of as isolation, capturing.capture(on_commit=False) as everything:
        yield IsolatedQueues(isolation, url, everything)
