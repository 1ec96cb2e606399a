"""What the schedules tests share: their own declarations, and a consumer to run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from redisq_django import Message, consumer
from redisq_django.consuming.declarations import registry as consumer_registry
from redisq_django.schedules.declared import registry


@pytest.fixture
def declarations() -> Iterator[None]:
    """The test's own schedule declarations (the process's others set aside)."""
    saved = dict(registry._declarations)
    registry._declarations.clear()
    try:
        yield
    finally:
        registry._declarations.clear()
        registry._declarations.update(saved)


@pytest.fixture
def a_consumer(queue_name: str) -> Iterator[str]:
    """A declared consumer (runconsumer needs one), of its own queue."""
    saved = dict(consumer_registry._declarations)
    consumer_registry._declarations.clear()

    @consumer(f"{queue_name}.work", name="noop")
    def noop(message: Message) -> None:
        pass

    try:
        yield f"{queue_name}.work"
    finally:
        consumer_registry._declarations.clear()
        consumer_registry._declarations.update(saved)
