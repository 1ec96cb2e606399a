""":class:`RedisqTestMixin`: the ``redisq`` fixture for Django's ``TestCase`` and
``TransactionTestCase``."""

from __future__ import annotations

from redisq_django.testing.kit import IsolatedQueues, isolated_queues


class RedisqTestMixin:
    """Gives each test ``self.redisq``, an :class:`IsolatedQueues`: a key prefix of its
    own on a real Redis, deleted after the test, with ``capture``, ``drain``,
    ``dead_letters``, ``deliver_delayed`` and ``fire_schedule`` bound to it.

    Put it before the test case class (``class OrderTests(RedisqTestMixin, TestCase)``)
    and call ``super().setUp()`` in a ``setUp`` of your own.
    """

    redisq: IsolatedQueues

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self.redisq = self.enterContext(isolated_queues())  # type: ignore[attr-defined]
