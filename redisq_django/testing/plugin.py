"""The pytest plugin of redisq_django (entry point ``pytest11``: installing the package
is enough). It adds one fixture, ``redisq``, and does nothing for a test that does not
ask for it; it imports nothing of Django until then."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from redisq_django.testing.kit import IsolatedQueues


@pytest.fixture
def redisq(request: pytest.FixtureRequest) -> Iterator[IsolatedQueues]:
    """This test's queues (:class:`~redisq_django.testing.IsolatedQueues`): a key prefix
    of its own on the settings' Redis (or on a private ``redis-server`` from ``PATH``
    when that one does not answer), deleted after the test, so that tests run in
    parallel (pytest-xdist) against one Redis; with ``capture``, ``drain``,
    ``dead_letters``, ``deliver_delayed`` and ``fire_schedule``.

    Handlers that use the database need it as any test does
    (``@pytest.mark.django_db``).
    """
    from redisq_django.testing.kit import isolated_queues

    # A test that also changes settings through pytest-django's fixture: the prefix is
    # set through it too, so that every change is undone in turn (whatever the order
    # the test lists the two fixtures in).
    wrapper = request.getfixturevalue("settings") if "settings" in request.fixturenames else None
    with isolated_queues(settings_fixture=wrapper) as queues:
        yield queues
