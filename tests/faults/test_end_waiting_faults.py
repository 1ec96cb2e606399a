"""Messages waiting in the log ended for one consumer (``core/ended.py``), while its
``runconsumer`` processes are SIGKILLed mid-batch: no ended message ever starts, every
other message is handled, the other consumer receives them all, and each ended message is
exactly one dead letter (reason ``ended``). Real processes, real signals, real Redis."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import pytest
import redis

from redisq_django.core import Broker
from tests.support.workers import Workers, read_deliveries, read_done, wait_for, wait_ids

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("empty_redis")]

CHAOS, ALPHA, BETA = "chaos", "alpha", "beta"  # visibility 2 s, max_retries 5


def _ended_rows(db_path: Path) -> list[str]:
    """Message ids of alpha's dead letters (reason ended) the workers' sink stored."""
    # Not migrated yet, or locked by a sink: nothing read this time.
    closing = contextlib.closing(sqlite3.connect(db_path, timeout=5))
    with closing as db, contextlib.suppress(sqlite3.OperationalError):
        rows = db.execute(
            "SELECT message_id FROM redisq_django_deadletter WHERE queue = ? AND "
            "consumer = ? AND reason = 'ended'",
            (CHAOS, ALPHA),
        ).fetchall()
        return [str(r[0]) for r in rows]
    return []


@pytest.mark.timeout(150)
def test_sigkills_while_marked_messages_are_read_never_run_one_and_lose_none(
    workers: Workers, broker: Broker, redis_client: redis.Redis
) -> None:
    # Given 3,000 messages, every 10th ended for alpha before any worker read it
    broker.consumers.ensure(CHAOS, ALPHA, "earliest")
    broker.consumers.ensure(CHAOS, BETA, "earliest")
    ids = broker.publish_many(CHAOS, [{"n": n, "sleep": 0.002} for n in range(3000)])
    ended = set(ids[::10])
    for mid in ended:  # an entry id is the message id here (no id field)
        assert broker.operator.end_message(CHAOS, ALPHA, f"log:{mid}", by="ops").outcome == (
            "marked"
        )
    kept = [i for i in ids if i not in ended]

    # When 3 alpha instances (prefetch 50) and a beta run, and an alpha is SIGKILLed and
    # replaced every 0.4 s for 6 s
    args = ("--prefetch", "50", "--stats-interval", "0")
    alphas = [workers.start(CHAOS, "--consumer", ALPHA, *args) for _ in range(3)]
    beta = workers.start(CHAOS, "--consumer", BETA, *args)
    for w in [*alphas, beta]:
        w.wait_ready()
    kills = 0
    for r in range(15):
        time.sleep(0.4)
        slot = r % len(alphas)
        alphas[slot].kill()
        kills += 1
        alphas[slot] = workers.start(CHAOS, "--consumer", ALPHA, *args)

    # Then alpha handled every message that was not ended, and started none that was
    wait_ids(redis_client, CHAOS, ALPHA, kept, timeout=90)
    beta_done = wait_ids(redis_client, CHAOS, BETA, ids, timeout=60)
    started = {d.id for d in read_deliveries(redis_client, CHAOS, ALPHA)}
    done = {d.id for d in read_done(redis_client, CHAOS, ALPHA)}
    print(f"\n{kills} SIGKILLs; alpha started {len(started)} ids, beta handled {len(beta_done)}")
    assert started & ended == set()
    assert done == set(kept)
    assert {d.id for d in beta_done} == set(ids)
    # ... and each ended message is one dead letter of alpha, reason ended, stored by the
    # workers' sink (every 2 s; unique per message, so a second one would show in Redis)
    letters: list[str] = []

    def all_stored() -> bool:
        letters[:] = _ended_rows(workers.db_path)
        return set(letters) >= ended

    wait_for(all_stored, timeout=60, what="the ended dead letters", describe=workers.report)
    assert sorted(letters) == sorted(ended)
    assert [d.id for d in broker.dead_letters.read(CHAOS, ALPHA) if d.id not in ended] == []
    assert broker.dead_letters.read(CHAOS, BETA) == []
    wait_for(
        lambda: redis_client.exists(broker.keys(CHAOS).group(ALPHA).ended) == 0,
        timeout=30,
        what="the marks to go",
    )
    assert beta.alive and all(a.alive for a in alphas), workers.report()
