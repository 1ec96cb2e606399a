"""Time limits in real ``runconsumer`` processes (issue 34, point 3): a handler blocked in
a call Python cannot interrupt has its attempt failed at the limit, and its process,
still stuck a grace period later, is replaced by the supervisor; nothing is lost."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker
from tests.support.workers import (
    Workers,
    read_deliveries,
    read_done,
    unacked,
    wait_for,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.servers,
    # The worker processes consume queues declared in code (tests/faultapp/consumers.py),
    # fixed names by nature: each test starts them on an empty server.
    pytest.mark.usefixtures("empty_redis"),
]

TIMED, BOUNDED = "timed", "bounded"  # time_limit=1, max_retries=1


def _dead_rows(db_file: Path) -> list[tuple[str, str, str]]:
    with contextlib.closing(sqlite3.connect(db_file, timeout=30)) as conn:
        return conn.execute(
            "SELECT message_id, error_class, error_message FROM redisq_django_deadletter"
        ).fetchall()


def test_a_process_stuck_past_its_time_limit_is_replaced_and_nothing_is_lost(
    workers: Workers, broker: Broker, redis_client: redis.Redis, db_file: Path
) -> None:
    # Given two supervised worker processes, a 1 s limit and a 1 s grace period
    supervisor = workers.start(TIMED, "--processes", "2", "--grace-period", "1")
    wait_for(
        lambda: supervisor.stdout.count("redisq worker") == 2,
        timeout=60,
        what="2 worker processes",
        describe=supervisor.tail,
    )
    # When one message's handler blocks 30 s in one C call, and 20 quick ones follow
    stuck = broker.publish(TIMED, {"sleep": 30})
    quick = [broker.publish(TIMED, {"n": i}) for i in range(20)]

    # Then each attempt of the stuck one failed at its limit (2 attempts: a retry, then
    # a dead letter), and the process stuck in it exited (code 1) and was started again
    wait_for(
        lambda: supervisor.stderr.count("died: exit code 1") >= 2,
        timeout=90,
        what="both stuck processes replaced",
        describe=supervisor.tail,
    )
    wait_for(
        lambda: stuck in {row[0] for row in _dead_rows(db_file)},
        timeout=60,
        what="the stuck message stored as a dead letter",
        describe=supervisor.tail,
    )
    attempts = sorted(
        d.attempts for d in read_deliveries(redis_client, TIMED, BOUNDED) if d.id == stuck
    )
    assert attempts == [1, 2]
    (row,) = [r for r in _dead_rows(db_file) if r[0] == stuck]
    assert row[1:] == ("TimeLimitExceeded", "time limit exceeded after 1 s")
    # ...and every quick message was handled, none twice lost: done, and nothing pending
    wait_for(
        lambda: {d.id for d in read_done(redis_client, TIMED, BOUNDED)} >= set(quick),
        timeout=60,
        what="every quick message handled",
        describe=supervisor.tail,
    )
    wait_for(lambda: unacked(redis_client, TIMED, BOUNDED) == 0, timeout=30, what="no pending")
    assert stuck not in {d.id for d in read_done(redis_client, TIMED, BOUNDED)}
    assert "stuck 1 s after its time limit" in supervisor.stderr
