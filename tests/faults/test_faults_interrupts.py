"""A ``@consumer`` handler raising ``KeyboardInterrupt`` or ``SystemExit`` fails its message
like any error (retried, then a dead letter): it does not kill the worker (issue 19,
point 5). A real ``runconsumer`` process, stopped by a real SIGTERM."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker
from tests.support.workers import Workers, read_deliveries, wait_for, wait_ids

# The worker consumes a queue declared in code (tests/faultapp/consumers.py), a fixed
# name: the test starts it on an empty server.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("empty_redis")]

FAULTS, RECORDER = "faults", "recorder"  # tests/faultapp: max_retries 3, backoff 0.05 s


@pytest.fixture
def workers(redis_url: str, tmp_path: Path) -> Iterator[Workers]:
    pool = Workers(redis_url, tmp_path / "worker.sqlite3", tmp_path / "logs")
    pool.migrate()
    try:
        yield pool
    finally:
        pool.close()


def _dead(broker: Broker, db_path: Path) -> dict[str, tuple[int, str, str]]:
    """message id -> (attempts, reason, error class) of the dead letters of
    faults/recorder, in Redis or already in the workers' database."""
    found = {
        d.id: (d.attempts, d.reason, d.error_class)
        for d in broker.dead_letters.read(FAULTS, RECORDER)
    }
    with contextlib.closing(sqlite3.connect(db_path, timeout=5)) as db:
        rows = db.execute(
            "SELECT message_id, attempts, reason, error_class FROM redisq_django_deadletter "
            "WHERE queue = ? AND consumer = ?",
            (FAULTS, RECORDER),
        ).fetchall()
    found.update({str(m): (int(a), str(r), str(c)) for m, a, r, c in rows})
    return found


def test_a_handler_raising_keyboard_interrupt_or_system_exit_fails_its_message(
    workers: Workers, redis_client: redis.Redis
) -> None:
    # Given a handler that raises KeyboardInterrupt on one message and SystemExit on
    # another (every time), among good messages
    broker = Broker(redis_client)
    interrupt = broker.publish(FAULTS, {"raise": "KeyboardInterrupt"})
    exits = broker.publish(FAULTS, {"raise": "SystemExit"})
    good = broker.publish_many(FAULTS, [{"n": i} for i in range(20)])
    worker = workers.start(FAULTS)

    # When one worker process runs them
    def both_dead() -> dict[str, tuple[int, str, str]] | None:
        if not worker.alive:
            raise AssertionError(f"the worker died:\n{workers.report()}")
        dead = _dead(broker, workers.db_path)
        return dead if {interrupt, exits} <= dead.keys() else None

    dead = wait_for(both_dead, timeout=60, what="two dead letters", describe=workers.report)
    wait_ids(redis_client, FAULTS, RECORDER, good, timeout=60)

    # Then each is a dead letter after exactly max_retries + 1 = 4 attempts, with its
    # exception class, all run by that one process, which is still alive...
    assert dead == {
        interrupt: (4, "failed", "KeyboardInterrupt"),
        exits: (4, "failed", "SystemExit"),
    }
    deliveries = read_deliveries(redis_client, FAULTS, RECORDER)
    for mid in (interrupt, exits):
        assert [d.attempts for d in deliveries if d.id == mid] == [1, 2, 3, 4]
    assert {d.pid for d in deliveries} == {worker.pid}
    assert worker.alive
    # ...and stops cleanly on SIGTERM
    worker.send(signal.SIGTERM)
    assert worker.wait_exit(30) == 0, worker.tail()
    assert "crashed" not in worker.stderr
