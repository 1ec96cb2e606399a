"""The admin tests' fixtures: a logged-in superuser's client, and a live consumer with
something in every list (a module that needs another says so with its own)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.support.admin_pages import superuser_client
from tests.support.live_data import Live, live_consumer


@pytest.fixture
def root() -> Client:
    """A client logged in as superuser ``root``."""
    return superuser_client()


@pytest.fixture
def made(broker: Any, queue_name: str) -> Live:
    """A live consumer of the test's queue with messages in each of its lists
    (tests/support/live_data.py)."""
    return live_consumer(broker, queue_name)
