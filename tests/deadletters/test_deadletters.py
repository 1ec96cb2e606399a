"""The dead-letter sink: Redis -> DeadLetter rows, idempotent, and safe when the
database fails (queries made to fail through Django's execute_wrapper)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import OperationalError, connection

from redisq_django import deadletters
from redisq_django.connection import get_broker
from redisq_django.models import DeadLetter

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]


@contextmanager
def database_down() -> Iterator[None]:
    """Every query fails, as with a database that went away."""

    def refuse(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        raise OperationalError("server closed the connection unexpectedly")

    with connection.execute_wrapper(refuse):
        yield


def kill(broker: Any, queue: str, payload: Any, consumer: str = "billing") -> str:
    """Publish and reject one message; returns its id (a dead letter in Redis)."""
    broker.consumers.ensure(queue, consumer)
    message_id = broker.publish(queue, payload)
    with broker.subscribe(queue, consumer) as sub:
        (message,) = sub.fetch(count=1, block_ms=500)
        sub.reject(message, ValueError("declined"))
    return message_id


# sink_all() sinks every queue in Redis: no other test's dead letters, please.
@pytest.mark.usefixtures("empty_redis")
def test_sink_moves_dead_letters_into_rows_with_their_details(queue_name: str, broker: Any) -> None:
    message_id = kill(broker, queue_name, {"order": 1})
    assert deadletters.sink_all() == 1
    row = DeadLetter.objects.get()
    assert (row.queue, row.consumer, row.message_id) == (queue_name, "billing", message_id)
    assert row.status == DeadLetter.Status.DEAD and row.reason == "rejected"
    assert row.error_class == "ValueError" and row.error_message == "declined"
    assert "ValueError: declined" in row.traceback
    assert row.payload == '{"order":1}' and row.attempts == 1
    assert row.first_failed_at and row.last_failed_at and row.published_at
    assert broker.dead_letters.read(queue_name, "billing") == []


def test_with_the_database_down_dead_letters_wait_in_redis(queue_name: str, broker: Any) -> None:
    # Given a dead letter in Redis and a database that fails every query
    message_id = kill(broker, queue_name, {"order": 2})
    with database_down(), pytest.raises(OperationalError):
        deadletters.sink(queue_name, "billing")

    # Then nothing was lost: it is still in Redis, and no row was half-written
    assert [d.id for d in broker.dead_letters.read(queue_name, "billing")] == [message_id]
    assert DeadLetter.objects.count() == 0

    # When the database is back, the next round moves it
    assert deadletters.sink(queue_name, "billing") == 1
    assert DeadLetter.objects.get().message_id == message_id
    assert broker.dead_letters.read(queue_name, "billing") == []


def test_sink_is_idempotent_when_redis_keeps_an_entry_already_stored(
    queue_name: str, broker: Any
) -> None:
    # Given a dead letter stored as a row, but (a crash before the delete) still in Redis
    kill(broker, queue_name, {"order": 3})
    (letter,) = broker.dead_letters.read(queue_name, "billing")
    DeadLetter.objects.create(
        queue=queue_name, consumer="billing", message_id=letter.id, payload="{}", reason="x"
    )
    # When the sink runs again
    assert deadletters.sink(queue_name, "billing") == 1
    # Then there is still one row, now complete
    row = DeadLetter.objects.get()
    assert row.payload == '{"order":3}' and row.reason == "rejected"


# sink_all() sinks every queue in Redis: no other test's dead letters, please.
@pytest.mark.usefixtures("empty_redis")
def test_a_retried_message_that_dies_again_updates_its_row(queue_name: str, broker: Any) -> None:
    kill(broker, queue_name, {"order": 4})
    deadletters.sink_all()
    row = DeadLetter.objects.get()
    assert deadletters.retry([row]) == 1
    with broker.subscribe(queue_name, "billing") as sub:
        (again,) = sub.fetch(count=1, block_ms=500)
        assert again.id == row.message_id and again.attempts == 1
        sub.reject(again, KeyError("still declined"))
    deadletters.sink_all()
    row.refresh_from_db()
    assert DeadLetter.objects.count() == 1
    assert row.status == DeadLetter.Status.DEAD and row.retry_count == 1
    assert row.error_class == "KeyError"


# sink_all() sinks every queue in Redis: no other test's dead letters, please.
@pytest.mark.usefixtures("empty_redis")
def test_retry_and_discard_skip_rows_that_are_not_dead(queue_name: str, broker: Any) -> None:
    kill(broker, queue_name, {"order": 5})
    deadletters.sink_all()
    row = DeadLetter.objects.get()
    assert deadletters.discard([row]) == 1
    row.refresh_from_db()
    assert row.status == DeadLetter.Status.DISCARDED
    assert deadletters.retry([row]) == 0
    with broker.subscribe(queue_name, "billing") as sub:
        assert sub.fetch(count=1, block_ms=100) == []


# sink_all() sinks every queue in Redis: no other test's dead letters, please.
@pytest.mark.usefixtures("empty_redis")
def test_retry_from_the_database_records_a_redriven_event(
    queue_name: str, redisq_settings: Any, django_user_model: Any
) -> None:
    # Given history on and a dead letter stored in the database
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "HISTORY": True}
    broker = get_broker()
    message_id = kill(broker, queue_name, {"order": 9})
    deadletters.sink_all()
    row = DeadLetter.objects.get(message_id=message_id)
    # When staff retry it (the admin's Retry calls this function)
    assert deadletters.retry([row], django_user_model.objects.create(username="ops")) == 1
    # Then the events show its death and its re-drive, for that consumer
    recorded = [
        (f[b"e"].decode(), f[b"g"].decode(), f[b"m"].decode())
        for _, f in broker.client.xrange(broker.keys(queue_name).events)
    ]
    assert recorded == [
        ("dead", "billing", f'[["{message_id}",1,null]]'),
        ("redriven", "billing", f'[["{message_id}",0,null]]'),
    ]
