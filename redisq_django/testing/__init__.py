"""Helpers for testing code that publishes and consumes (docs/howto/testing.md).

``from redisq_django.testing import capture, drain``: ``with capture() as published``
collects what a block published; ``drain("orders")`` runs the queue's declared
consumers in the test's thread until it is empty. The ``redisq`` pytest fixture (this
package's plugin, registered by its entry point) and :class:`RedisqTestMixin` give each
test a key prefix of its own on a real Redis, so tests run in parallel against one.

The names are imported lazily (PEP 562), as the package's own: pytest loads the plugin
before Django's settings are configured.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from redisq_django.testing.capturing import Captured, Published, capture
    from redisq_django.testing.draining import (
        Counts,
        Drained,
        DrainError,
        HandlerFailure,
        dead_letters,
        deliver_delayed,
        drain,
        fire_schedule,
    )
    from redisq_django.testing.isolation import NoTestRedis, isolated
    from redisq_django.testing.kit import IsolatedQueues, isolated_queues
    from redisq_django.testing.testcase import RedisqTestMixin

#: Each public name and the module that defines it.
_HOMES = {
    "capture": "capturing",
    "Captured": "capturing",
    "Published": "capturing",
    "drain": "draining",
    "Drained": "draining",
    "Counts": "draining",
    "HandlerFailure": "draining",
    "DrainError": "draining",
    "dead_letters": "draining",
    "deliver_delayed": "draining",
    "fire_schedule": "draining",
    "isolated": "isolation",
    "NoTestRedis": "isolation",
    "IsolatedQueues": "kit",
    "isolated_queues": "kit",
    "RedisqTestMixin": "testcase",
}

__all__ = [
    "Captured",
    "Counts",
    "DrainError",
    "Drained",
    "HandlerFailure",
    "IsolatedQueues",
    "NoTestRedis",
    "Published",
    "RedisqTestMixin",
    "capture",
    "dead_letters",
    "deliver_delayed",
    "drain",
    "fire_schedule",
    "isolated",
    "isolated_queues",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
