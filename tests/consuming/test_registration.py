"""Declared consumers registered in Redis before their first worker runs (issue 32, point
10; ``consuming/registration.py``): by a process's first publish to their queue, on
every path that publishes, and by ``migrate``, which Redis being away or hung never
fails. In-process; the real processes are in tests/faults/test_first_deploy.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.db import transaction

import redisq_django
from redisq_django import Message, consumer
from redisq_django.connection import get_broker
from redisq_django.consuming import registration
from redisq_django.consuming.declarations import registry
from redisq_django.core.errors import RedisUnavailable
from tests.support.aio import run_async
from tests.support.hung_server import HungServer
from tests.support.redis_server import RedisServer, free_port

pytestmark = [pytest.mark.django_db, pytest.mark.servers]


@pytest.fixture
def declared(queue_name: str) -> Iterator[str]:
    """Consumers ``billing`` and ``email`` (default start) of ``queue_name``, and one of
    another queue; other tests' declarations set aside. Yields that other queue."""
    saved = dict(registry._declarations)
    registry._declarations.clear()
    other = f"{queue_name}.other"

    @consumer(queue_name, name="billing")
    def billing(message: Message) -> None: ...

    @consumer(queue_name, name="email")
    def email(message: Message) -> None: ...

    @consumer(other, name="audit", start="earliest")
    def audit(message: Message) -> None: ...

    try:
        yield other
    finally:
        registry._declarations.clear()
        registry._declarations.update(saved)


def _received(queue: str, name: str) -> list[str]:
    """The ids ``name`` gets when it first reads (as its first worker would)."""
    with get_broker().subscribe(queue, name) as sub:
        deliveries = sub.fetch(count=100, block_ms=0)
        sub.ack(deliveries)
    return [d.message.id for d in deliveries]


@pytest.mark.parametrize("how", ["publish", "publish_many", "publish_on_commit", "apublish"])
def test_the_first_publish_registers_the_declared_consumers_of_its_queue(
    redisq_settings: Any,
    queue_name: str,
    declared: str,
    how: str,
    django_capture_on_commit_callbacks: Any,
) -> None:
    broker = get_broker()
    assert broker.consumers.names(queue_name) == []
    # When this process first publishes to the queue (no worker ever ran)
    if how == "publish":
        ids = [redisq_django.publish(queue_name, {"n": 1})]
    elif how == "publish_many":
        ids = redisq_django.publish_many(queue_name, [{"n": 1}, {"n": 2}])
    elif how == "publish_on_commit":
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            ids = [redisq_django.publish_on_commit(queue_name, {"n": 1})]
    else:
        ids = [run_async(redisq_django.apublish(queue_name, {"n": 1}))]
    # Then its declared consumers exist, and each receives what was published
    assert broker.consumers.names(queue_name) == ["billing", "email"]
    assert _received(queue_name, "billing") == ids
    assert _received(queue_name, "email") == ids
    # And the other queue's consumer waits for a publish to its own queue
    assert broker.consumers.names(declared) == []


def test_a_registration_that_failed_is_tried_again(
    settings: Any,
    volatile_redis_server: RedisServer,
    queue_name: str,
    declared: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registration, "RETRY_AFTER_S", 0.0)
    settings.REDISQ = {"URL": volatile_redis_server.url}
    # Given a first publish while Redis is down: it fails, registering nothing
    volatile_redis_server.stop()
    with pytest.raises(RedisUnavailable):
        redisq_django.publish(queue_name, {"n": 0})
    # When Redis is back, the next publish registers the consumers before its message
    volatile_redis_server.restart()  # on the same port
    ids = [redisq_django.publish(queue_name, {"n": 1})]
    assert get_broker().consumers.names(queue_name) == ["billing", "email"]
    assert _received(queue_name, "billing") == ids


def test_a_process_registers_a_queue_once(
    redisq_settings: Any, queue_name: str, declared: str
) -> None:
    # Given the consumers registered by this process's first publish
    redisq_django.publish(queue_name, {"n": 1})
    broker = get_broker()
    assert broker.consumers.names(queue_name) == ["billing", "email"]
    # When one is removed, later publishes of this process do not ask Redis again (the
    # publish path stays one round trip)...
    broker.consumers.remove(queue_name, "email")
    redisq_django.publish(queue_name, {"n": 2})
    assert broker.consumers.names(queue_name) == ["billing"]
    # ...while a new broker (settings changed) registers again on its first publish
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "MAX_RETRIES": 3}
    redisq_django.publish(queue_name, {"n": 3})
    assert get_broker().consumers.names(queue_name) == ["billing", "email"]


def test_migrate_registers_every_declared_consumer(
    redisq_settings: Any, queue_name: str, declared: str, redis_client: redis.Redis
) -> None:
    # When migrate runs (nothing to migrate: its post_migrate still runs)
    call_command("migrate", verbosity=0)
    # Then every declared consumer exists, at its start point: "latest" is the end of
    # the log then, "earliest" its beginning
    broker = get_broker()
    assert broker.consumers.names(queue_name) == ["billing", "email"]
    assert broker.consumers.names(declared) == ["audit"]
    # And what is published from then on reaches each one
    ids = broker.publish_many(queue_name, [{"n": 1}, {"n": 2}])
    assert _received(queue_name, "billing") == ids
    assert _received(queue_name, "email") == ids


@pytest.mark.parametrize("redis_is", ["down", "hung"])
def test_migrate_succeeds_when_redis_is_away_and_says_what_happens(
    settings: Any,
    queue_name: str,
    declared: str,
    redis_is: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registration, "MIGRATE_TIMEOUT_S", 0.3)
    with HungServer() as hung:
        url = hung.url if redis_is == "hung" else f"redis://127.0.0.1:{free_port()}/0"
        settings.REDISQ = {"URL": url}
        with caplog.at_level(logging.WARNING, logger="redisq"):
            call_command("migrate", verbosity=0)
    warnings = [r.getMessage() for r in caplog.records if r.name == "redisq"]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("The 3 declared consumer(s) are not registered in Redis yet:")
    assert warnings[0].endswith(
        "Each is registered by the first publish to its queue, or when its worker starts; "
        "what is published before that does not reach it."
    )
