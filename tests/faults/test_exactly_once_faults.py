"""Exactly once from end to end (issue 35, point 5): each row a publisher commits becomes
exactly one row written by an ``atomic=True`` consumer, whatever dies in between.

The publisher commits N source rows (``Order``) with a message each, published with
``publish_on_commit`` through the outbox, in two transactions; it is SIGKILLed right
after the second one commits, before it sends anything, so that half waits in the
outbox. The relay (``manage.py redisq relay``) is SIGKILLed after Redis took those
messages and before it marked their rows sent; a second relay sends them again (Redis
publishes each message id once). Two logical consumers of the queue write a ``Receipt``
per message: ``atomic_sink`` (``atomic=True``) and ``plain_sink``, the same handler
without it, each in processes of its own. On some messages each of them SIGKILLs its
process between its commit and its acknowledgement (a failpoint:
tests/faultapp/consumers.py); the test starts a new process for each one that dies.
Mid-run, Redis is SIGKILLed and started again (AOF, fsync always: it keeps every write it
acknowledged).

Then every source row has exactly one receipt of ``atomic_sink``, while ``plain_sink`` has
two for each message its failpoint killed: the duplicates the inbox prevents are there
without it. On SQLite (the worker processes' file) and on PostgreSQL (the session's
cluster, which the processes reach through ``REDISQ_TEST_PG``).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from redisq_django.core import Broker, trends
from tests.faultapp.consumers import FAILPOINTS_ENV
from tests.support.redis_server import RedisServer
from tests.support.workers import WorkerProcess, Workers, unacked, wait_for

pytestmark = [
    pytest.mark.slow,
    # Each test runs on a private Redis (fresh_redis_server); the queue names are fixed
    # by the consumers declared in code.
    pytest.mark.timeout(240),
]

N = 40  # source rows, hence messages
ATOMIC, PLAIN = "atomic_sink", "plain_sink"
SINKS = (ATOMIC, PLAIN)
PER_SINK = 2  # processes running each sink at any time
WORKER_ARGS = ("--prefetch", "4", "--stats-interval", "0")


@dataclass(frozen=True)
class Variant:
    """Where the publisher, the relay and the sinks write: the queue whose consumers
    write to that database (tests/faultapp/consumers.py) and its alias."""

    queue: str
    alias: str


SQLITE = Variant("onceq", "default")
POSTGRES = Variant("pgonceq", "pg")


def _kills(i: int) -> list[str]:
    """The consumers whose failpoint the i-th message sets off: 4 messages each of 40,
    in both halves (sent at the commit, and by the relay)."""
    return [name for name, at in ((ATOMIC, 3), (PLAIN, 7)) if i % 10 == at]


# The publisher and the relays run as `manage.py shell -c`: the product's code, with a
# failpoint around it. The prelude (QUEUE, USING, ...) is prepended by _code().
PUBLISHER = """
import os, signal
from django.conf import settings
from django.db import transaction
from django.test import override_settings
import tests.faultapp.consumers  # its import points the "pg" alias (REDISQ_TEST_PG)
from redisq_django import publish_on_commit
from tests.shopapp.models import Order

def die():
    os.kill(os.getpid(), signal.SIGKILL)

with override_settings(REDISQ={**settings.REDISQ, "OUTBOX": [QUEUE]}):
    half = len(PLAN) // 2
    for part, dies in ((PLAN[:half], False), (PLAN[half:], True)):
        with transaction.atomic(using=USING):
            if dies:  # runs first after the commit: the messages stay in the outbox
                transaction.on_commit(die, using=USING)
            for kills in part:
                order = Order.objects.using(USING).create(total=1)
                payload = {"source": order.pk, "kill_after_commit": kills}
                publish_on_commit(QUEUE, payload, using=USING)
"""

RELAY = """
import os, signal
from django.core.management import call_command
import tests.faultapp.consumers  # its import points the "pg" alias (REDISQ_TEST_PG)
from redisq_django.publishing import outbox

# A dead relay's claim (SQLite) is taken over after CLAIM_TIMEOUT_S, 60 s: sooner here.
outbox.CLAIM_TIMEOUT_S = 2.0
if DIE:
    broker = outbox.get_broker

    class DiesOnceSent:
        def send(self, envelopes, **options):
            ids = broker().send(envelopes, **options)
            os.kill(os.getpid(), signal.SIGKILL)  # Redis has them; the rows say unsent
            return ids

    outbox.get_broker = DiesOnceSent
call_command("redisq", "relay", "--interval", "0.2", "--database", USING)
"""


def _code(body: str, variant: Variant, **names: Any) -> str:
    prelude = f"QUEUE, USING = {variant.queue!r}, {variant.alias!r}\n"
    prelude += "".join(f"{name} = {value!r}\n" for name, value in names.items())
    return prelude + body


class Database:
    """The variant's database as the processes left it, read from pytest's process: the
    workers' SQLite file, or PostgreSQL through pytest's own "pg" connection (the test
    database pytest-django created, in autocommit)."""

    def __init__(self, alias: str, db_file: Path) -> None:
        self.alias = alias
        self.db_file = db_file

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.alias == "default":
            with contextlib.closing(sqlite3.connect(self.db_file, timeout=30)) as conn:
                return conn.execute(sql.replace("%s", "?"), params).fetchall()
        from django.db import connections

        with connections[self.alias].cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def count(self, sql: str, params: tuple[Any, ...] = ()) -> int:
        return int(self.rows(sql, params)[0][0])

    def receipts(self, note: str) -> Counter[str]:
        found = self.rows("SELECT source FROM shopapp_receipt WHERE note = %s", (note,))
        return Counter(source for (source,) in found)

    def unsent(self) -> int:
        return self.count("SELECT COUNT(*) FROM redisq_django_outboxmessage WHERE sent_at IS NULL")

    def env(self) -> dict[str, str]:
        """What the worker processes need to reach this database (REDISQ_TEST_PG)."""
        if self.alias == "default":
            return {}
        from django.db import connections

        given = connections[self.alias].settings_dict
        keys = ("HOST", "PORT", "NAME", "USER", "PASSWORD")
        return {"REDISQ_TEST_PG": json.dumps({key: given[key] for key in keys})}


class Crew:
    """``PER_SINK`` processes of each sink, each replaced when it dies. A sink has
    processes of its own: one sink's failpoint never cuts the other's handler short, so
    each failpoint fires once, exactly where it is placed."""

    def __init__(self, pool: Workers, queue: str) -> None:
        self.pool = pool
        self.argv = [(queue, "--consumer", name, *WORKER_ARGS) for name in SINKS]
        self.argv *= PER_SINK
        self.running = [pool.start(*argv) for argv in self.argv]
        self.dead: list[WorkerProcess] = []

    def keep(self) -> None:
        for i, worker in enumerate(self.running):
            if not worker.alive:
                self.dead.append(worker)
                self.running[i] = self.pool.start(*self.argv[i])


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(SQLITE, id="sqlite"),
        pytest.param(
            POSTGRES,
            id="postgresql",
            marks=pytest.mark.django_db(databases=["default", "pg"], transaction=True),
        ),
    ],
)
def test_each_source_row_yields_one_row_through_sigkills_and_a_redis_crash(
    variant: Variant,
    fresh_redis_server: RedisServer,
    db_file: Path,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    queue, plan = variant.queue, [_kills(i) for i in range(N)]
    pool = Workers(fresh_redis_server.url, db_file, tmp_path / "logs")
    client = fresh_redis_server.client()
    request.addfinalizer(client.close)
    db = Database(variant.alias, db_file)
    failpoints = tmp_path / "failpoints"
    pool.extra_env.update(db.env(), **{FAILPOINTS_ENV: str(failpoints)})
    broker = Broker(client)
    log = broker.keys(queue).log
    try:
        began = time.monotonic()
        for name in SINKS:
            broker.consumers.ensure(queue, name, "earliest")
        crew = Crew(pool, queue)
        for worker in crew.running:
            worker.wait_ready(timeout=60)

        # Given a publisher that commits N source rows and their messages through the
        # outbox in two transactions, and is SIGKILLed right after the second commit
        publisher = pool.start_command("shell", "-c", _code(PUBLISHER, variant, PLAN=plan))
        assert publisher.wait_exit(timeout=60) == -signal.SIGKILL, publisher.tail()
        sources = {str(pk) for (pk,) in db.rows("SELECT id FROM shopapp_order")}
        assert len(sources) == N
        assert db.unsent() == N // 2 and client.xlen(log) == N // 2

        # When the relay is SIGKILLed after Redis took the other half, before it marked
        # their rows sent, and a second relay sends them again
        relay = pool.start_command("shell", "-c", _code(RELAY, variant, DIE=True))
        assert relay.wait_exit(timeout=60) == -signal.SIGKILL, relay.tail()
        assert db.unsent() == N // 2 and client.xlen(log) == N
        pool.start_command("shell", "-c", _code(RELAY, variant, DIE=False))

        # ... while consumer processes die between their commits and their acks (each
        # replaced), and Redis crashes mid-run and starts again (AOF, fsync always)
        def handled(least: int) -> bool:
            crew.keep()
            return len(db.receipts(ATOMIC)) >= least

        wait_for(lambda: handled(N * 6 // 10), timeout=90, what="60% handled", interval=0.1)
        fresh_redis_server.kill()
        fresh_redis_server.restart()  # on the same port
        restarted = time.monotonic()

        # Then everything is handled and acknowledged, and the outbox is empty
        def settled() -> bool:
            if not handled(N) or set(db.receipts(PLAIN)) != sources or db.unsent():
                return False
            try:
                return not any(
                    unacked(client, queue, name)
                    or client.zcard(broker.keys(queue).group(name).retry)
                    for name in SINKS
                )
            except redis.ConnectionError:
                return False

        def state() -> str:
            return (
                f"{len(db.receipts(ATOMIC))} atomic, {len(db.receipts(PLAIN))} plain, "
                f"{db.unsent()} unsent; {len(crew.dead)} died\n{pool.report()}"
            )

        for _ in range(2):  # twice, a second apart: nothing was still on its way
            wait_for(settled, timeout=90, what="every message handled", describe=state)
            time.sleep(1)
        took, after_restart = time.monotonic() - began, time.monotonic() - restarted
        deaths = Counter(w.proc.returncode for w in crew.dead)
    finally:
        pool.close()
    atomic, plain = db.receipts(ATOMIC), db.receipts(PLAIN)
    fired = {name: _fired(failpoints / queue / name) for name in SINKS}
    skipped = broker.operator.last_hour(queue, ATOMIC, trends.SKIPPED)
    dead_letters = sum(len(broker.dead_letters.read(queue, name)) for name in SINKS)
    published = client.xlen(log)
    print(
        f"\n{variant.alias}: settled {took:.1f}s after the start, {after_restart:.1f}s after "
        f"the Redis crash; consumer processes died: {dict(deaths)}; failpoints fired: "
        f"{ {name: len(ids) for name, ids in fired.items()} }; atomic_sink skipped "
        f"{skipped}; plain_sink duplicates: {sum(plain.values()) - len(plain)}"
    )

    # Every source row has exactly one row of the atomic consumer, and its inbox row
    assert set(atomic) == sources
    assert {source: n for source, n in atomic.items() if n != 1} == {}
    inbox = "SELECT COUNT(*) FROM redisq_django_inboxentry WHERE queue = %s AND consumer = %s"
    assert db.count(inbox, (queue, ATOMIC)) == N
    # ... the failpoints killed a process between a commit and its ack once on each
    # message they were set on; the atomic consumer skipped those when delivered again...
    killed = {w.pid for w in crew.dead if w.proc.returncode == -signal.SIGKILL}
    for name in SINKS:
        assert len(fired[name]) == sum(name in kills for kills in plan), name
        assert set(fired[name].values()) <= killed, name
    assert skipped >= len(fired[ATOMIC])
    # ... while the plain one has two rows for each of them, and all the others
    by_message = dict(db.rows("SELECT message_id, payload FROM redisq_django_outboxmessage"))
    for message_id in fired[PLAIN]:
        assert plain[str(json.loads(by_message[message_id])["source"])] >= 2, message_id
    assert set(plain) == sources
    # ... and each message was published once, nothing lost, nothing dead
    assert len(by_message) == N and published == N
    assert dead_letters == 0
    assert _sqlite_dead(db_file, queue) == 0
    assert took < 120


def _fired(directory: Path) -> dict[str, int]:
    """The failpoints of one sink that fired: message id -> the pid they killed."""
    if not directory.is_dir():
        return {}
    return {path.name: int(path.read_text()) for path in directory.iterdir()}


def _sqlite_dead(db_file: Path, queue: str) -> int:
    """Dead letters the workers' sink moved to the database (the default one, SQLite)."""
    with contextlib.closing(sqlite3.connect(db_file, timeout=30)) as conn:
        sql = "SELECT COUNT(*) FROM redisq_django_deadletter WHERE queue = ?"
        return int(conn.execute(sql, (queue,)).fetchone()[0])
