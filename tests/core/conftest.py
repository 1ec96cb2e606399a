"""Fixtures of the script contract tests: a broker, and the keys of one queue and group."""

from __future__ import annotations

import pytest

from redisq_django.core.keys import GroupKeys, QueueKeys, queue_keys


@pytest.fixture
def group_name() -> str:
    """The logical consumer whose keys ``gk`` holds (a module may override it)."""
    return "billing"


@pytest.fixture
def qk(queue_name: str) -> QueueKeys:
    return queue_keys("redisq", queue_name)


@pytest.fixture
def gk(qk: QueueKeys, group_name: str) -> GroupKeys:
    return qk.group(group_name)
