"""Redis errors after a commit never raise out of the committed transaction (issue 8,
point 12): without the outbox they are logged as errors naming the message; with the
outbox the rows wait for the relay, their claims released at once.

Real redis-server processes of these tests only (made read-only, or given a key of the
wrong type), and a socket that never answers for the timeout case.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.db import transaction

from redisq_django.connection import get_broker
from redisq_django.core import RedisRefused
from redisq_django.models import OutboxMessage
from redisq_django.publishing import publish, publish_many, publish_on_commit
from redisq_django.publishing.outbox import relay_once
from tests.support.databases import on_both_databases
from tests.support.redis_server import RedisServer, free_port

pytestmark = pytest.mark.servers


@pytest.fixture
def client(volatile_redis_server: RedisServer) -> Iterator[redis.Redis]:
    conn = volatile_redis_server.client()
    try:
        yield conn
    finally:
        conn.execute_command("REPLICAOF", "NO", "ONE")
        conn.close()


def make_read_only(client: redis.Redis) -> None:
    """Make Redis a replica (of a master that is not there): it refuses every write."""
    client.execute_command("REPLICAOF", "127.0.0.1", str(free_port()))


def errors_naming(caplog: pytest.LogCaptureFixture, message_id: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "redisq.publish"
        and r.levelno == logging.ERROR
        and message_id in r.getMessage()
    ]


# -- publishing now ----------------------------------------------------------------------


def test_publish_and_publish_many_raise_redis_refused_naming_the_condition(
    queue_name: str, settings: Any, volatile_redis_server: RedisServer, client: redis.Redis
) -> None:
    settings.REDISQ = {"URL": volatile_redis_server.url}
    make_read_only(client)
    for call in (
        lambda: publish(queue_name, {"n": 1}),
        lambda: publish(queue_name, {"n": 2}, delay=10),
        lambda: publish_many(queue_name, [{"n": 3}, {"n": 4}]),
    ):
        with pytest.raises(RedisRefused) as info:
            call()
        assert info.value.condition == "readonly"


# -- without the outbox -----------------------------------------------------------------


@on_both_databases
def test_a_refused_write_after_commit_is_logged_and_never_raised(
    queue_name: str,
    alias: str,
    settings: Any,
    volatile_redis_server: RedisServer,
    client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given no outbox, and a Redis that turns read-only before the commit
    settings.REDISQ = {"URL": volatile_redis_server.url}
    caplog.set_level(logging.ERROR, logger="redisq.publish")
    with transaction.atomic(using=alias):
        message_id = publish_on_commit(queue_name, {"order": 1}, using=alias)
        make_read_only(client)
    # When the transaction commits: nothing raised (we got here), and the error says
    # the message was not published, why, and what to do
    (text,) = errors_naming(caplog, message_id)
    assert f"'{queue_name}'" in text and "was NOT published" in text
    assert "read-only replica" in text
    assert "REDISQ['OUTBOX'] = True" in text


@on_both_databases
def test_any_redis_error_after_commit_is_logged_and_never_raised(
    queue_name: str,
    alias: str,
    settings: Any,
    volatile_redis_server: RedisServer,
    client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given no outbox, and the queue's log key holding a string (WRONGTYPE on XADD)
    settings.REDISQ = {"URL": volatile_redis_server.url}
    caplog.set_level(logging.ERROR, logger="redisq.publish")
    client.set(get_broker().keys(queue_name).log, "not a stream")
    with transaction.atomic(using=alias):
        message_id = publish_on_commit(queue_name, {"order": 2}, using=alias)
    # Then the commit did not raise, and the error is logged with its cause
    (text,) = errors_naming(caplog, message_id)
    assert "may not have been published" in text and "WRONGTYPE" in text


@pytest.mark.django_db(transaction=True)
def test_a_timeout_after_commit_says_the_message_may_not_have_been_published(
    queue_name: str, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a "Redis" that accepts connections and never answers
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        settings.REDISQ = {"URL": f"redis://127.0.0.1:{port}/0?socket_timeout=0.3"}
        caplog.set_level(logging.ERROR, logger="redisq.publish")
        with transaction.atomic():
            message_id = publish_on_commit(queue_name, {"order": 3})
    # Then the commit did not raise, and the log does not claim to know the outcome
    (text,) = errors_naming(caplog, message_id)
    assert "may not have been published" in text and "NOT published" not in text


# -- with the outbox (SQLite: rows are claimed with a conditional UPDATE) ---------------


def _row(message_id: str) -> OutboxMessage:
    return OutboxMessage.objects.get(message_id=message_id)


@pytest.mark.django_db(transaction=True)
def test_outbox_send_refused_after_commit_leaves_the_row_unclaimed_for_the_relay(
    queue_name: str, settings: Any, volatile_redis_server: RedisServer, client: redis.Redis
) -> None:
    # Given the outbox on, and a Redis that turns read-only before the commit
    settings.REDISQ = {"URL": volatile_redis_server.url, "OUTBOX": True}
    with transaction.atomic():
        message_id = publish_on_commit(queue_name, {"order": 4})
        make_read_only(client)
    # Then the commit did not raise; the row waits unsent and unclaimed, with the reason
    row = _row(message_id)
    assert row.sent_at is None and row.claimed_at is None and row.claimed_by == ""
    assert row.attempts == 1 and "read-only" in row.last_error

    # And the relay sends it at once when Redis takes writes again (no 60 s claim wait)
    client.execute_command("REPLICAOF", "NO", "ONE")
    assert relay_once() == 1
    assert _row(message_id).sent_at is not None


@pytest.mark.django_db(transaction=True)
def test_outbox_unexpected_redis_error_after_commit_releases_the_claim(
    queue_name: str,
    settings: Any,
    volatile_redis_server: RedisServer,
    client: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given the outbox on, and the queue's log key holding a string (WRONGTYPE)
    settings.REDISQ = {"URL": volatile_redis_server.url, "OUTBOX": True}
    caplog.set_level(logging.ERROR, logger="redisq.publish")
    log = get_broker().keys(queue_name).log
    client.set(log, "not a stream")
    with transaction.atomic():
        message_id = publish_on_commit(queue_name, {"order": 5})
    # Then the commit did not raise; the row is released at once, with the error
    row = _row(message_id)
    assert row.sent_at is None and row.claimed_at is None and row.claimed_by == ""
    assert row.attempts == 1 and "WRONGTYPE" in row.last_error
    assert any("relay" in r.getMessage() for r in caplog.records)

    # And once the key is fixed, the relay sends it
    client.delete(log)
    assert relay_once() == 1
    assert _row(message_id).sent_at is not None
