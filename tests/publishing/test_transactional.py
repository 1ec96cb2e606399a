"""C10: publishing from Django is transactional, on SQLite and on PostgreSQL.

``publish_on_commit`` and model events publish only after the commit and nothing on
rollback; with the outbox the message is stored in the same transaction and a relay
forwards it, so a Redis outage at commit time loses nothing and nothing is sent twice.

Every transactional test runs on SQLite (the "default" alias) and on PostgreSQL (the
"pg" alias, a private cluster started by tests/conftest.py), as real transactions
(``transaction=True``): the on-commit hooks run at the real commit.
"""

from __future__ import annotations

import decimal
import json
import logging
import threading
import time
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.db import DatabaseError, connections, transaction

from redisq_django.connection import get_broker
from redisq_django.core import PayloadNotSerializable, PayloadTooLarge
from redisq_django.core.ids import new_message_id
from redisq_django.models import OutboxMessage
from redisq_django.publishing import outbox as outbox_module
from redisq_django.publishing import publish_on_commit
from redisq_django.publishing.events import publish_bulk_events
from redisq_django.publishing.outbox import (
    envelope_of,
    pending_count,
    relay_once,
    relay_rows,
    store,
)
from tests.shopapp.apps import ORDER_EVENTS_QUEUE
from tests.shopapp.models import Order
from tests.support.databases import POSTGRES, SQLITE, Rollback, on_both_databases
from tests.support.redis_server import RedisServer


def logged(queue: str) -> list[dict[str, Any]]:
    """The messages in ``queue``'s Redis log, oldest first (XRANGE)."""
    broker = get_broker()
    out = []
    for _entry_id, fields in broker.client.xrange(broker.keys(queue).log):
        out.append(
            {
                "id": fields[b"id"].decode(),
                "payload": json.loads(fields[b"payload"]),
                "headers": json.loads(fields[b"headers"]) if b"headers" in fields else None,
            }
        )
    return out


def logged_ids(queue: str) -> list[str]:
    return [m["id"] for m in logged(queue)]


def outbox(alias: str) -> Any:
    return OutboxMessage.objects.using(alias)


@pytest.fixture
def outbox_settings(redisq_settings: Any) -> Any:
    """REDISQ with the outbox on for every queue, on the session Redis."""
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "OUTBOX": True}
    return redisq_settings


# ---------------------------------------------------------------------------
# publish_on_commit without the outbox
# ---------------------------------------------------------------------------


@on_both_databases
def test_rollback_publishes_nothing(queue_name: str, alias: str, redisq_settings: Any) -> None:
    # Given a transaction that publishes, then fails
    with pytest.raises(Rollback), transaction.atomic(using=alias):
        publish_on_commit(queue_name, {"order": 1}, using=alias)
        raise Rollback

    # Then nothing reached Redis and no outbox row was written
    assert logged(queue_name) == []
    assert not outbox(alias).exists()


@on_both_databases
def test_commit_publishes_once_with_the_returned_id(
    queue_name: str, alias: str, redisq_settings: Any
) -> None:
    # Given a logical consumer of the queue
    broker = get_broker()
    broker.consumers.ensure(queue_name, "billing")

    # When a transaction publishes two messages
    with transaction.atomic(using=alias):
        first = publish_on_commit(queue_name, {"order": 1}, headers={"source": "t"}, using=alias)
        second = publish_on_commit(queue_name, {"order": 2}, using=alias)
        # Then nothing is sent before the commit...
        assert logged(queue_name) == []

    # ...and each exactly once after it, under the ids returned at the call
    assert logged_ids(queue_name) == [first, second]
    with broker.subscribe(queue_name, "billing") as sub:
        got = sub.fetch(count=10, block_ms=100)
        sub.ack(got)
    assert [(m.id, m.payload) for m in got] == [(first, {"order": 1}), (second, {"order": 2})]
    assert got[0].headers == {"source": "t"}
    assert not outbox(alias).exists()


@pytest.mark.django_db
def test_callbacks_run_by_capture_on_commit_callbacks_send_each_message_once(
    queue_name: str, redisq_settings: Any
) -> None:
    # Given a test transaction that never commits, whose on-commit callbacks a test runs
    # with Django's captureOnCommitCallbacks(execute=True), which leaves them registered
    from django.test import TestCase

    with TestCase.captureOnCommitCallbacks(execute=True) as first:
        one = publish_on_commit(queue_name, {"order": 1})
    # When the same transaction publishes again, and its callbacks run again
    with TestCase.captureOnCommitCallbacks(execute=True) as second:
        two = publish_on_commit(queue_name, {"order": 2})
    for callback in [*first, *second]:  # as a second run of the whole list would
        callback()

    # Then each message was sent, once: the batch that ran took no new message
    assert len(first) == len(second) == 1
    assert logged_ids(queue_name) == [one, two]


@on_both_databases
def test_outside_a_transaction_publishes_at_once(
    queue_name: str, alias: str, redisq_settings: Any
) -> None:
    # Given autocommit (no atomic block)
    # When publishing on commit
    message_id = publish_on_commit(queue_name, {"order": 3}, using=alias)

    # Then it is published before the call returns
    assert logged(queue_name) == [{"id": message_id, "payload": {"order": 3}, "headers": None}]


@on_both_databases
def test_rolled_back_savepoint_drops_only_its_own_messages(
    queue_name: str, alias: str, redisq_settings: Any
) -> None:
    # Given an outer transaction with a nested block (savepoint) that rolls back
    with transaction.atomic(using=alias):
        before = publish_on_commit(queue_name, {"n": "before"}, using=alias)
        with pytest.raises(Rollback), transaction.atomic(using=alias):
            publish_on_commit(queue_name, {"n": "inside"}, using=alias)
            raise Rollback
        after = publish_on_commit(queue_name, {"n": "after"}, using=alias)
        assert logged(queue_name) == []

    # Then the outer commit publishes its own messages only, in order
    assert [(m["id"], m["payload"]) for m in logged(queue_name)] == [
        (before, {"n": "before"}),
        (after, {"n": "after"}),
    ]


@on_both_databases
def test_savepoint_commit_waits_for_the_outer_commit(
    queue_name: str, alias: str, redisq_settings: Any
) -> None:
    # Given a nested block that commits inside an outer one that rolls back
    with pytest.raises(Rollback), transaction.atomic(using=alias):
        with transaction.atomic(using=alias):
            publish_on_commit(queue_name, {"n": "inner"}, using=alias)
        raise Rollback

    # Then nothing is published: only the outermost commit counts
    assert logged(queue_name) == []


class RoundTrips:
    """Counts what redis-py writes to its sockets: one packed write is one round trip."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = redis.connection.AbstractConnection.send_packed_command

        def counted(conn: Any, command: Any, check_health: bool = True) -> None:
            self.count += 1
            real(conn, command, check_health)

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("outbox_on", [False, True], ids=["direct", "outbox"])
def test_a_transactions_messages_leave_in_one_round_trip_per_queue(
    queue_name: str, redisq_settings: Any, monkeypatch: pytest.MonkeyPatch, outbox_on: bool
) -> None:
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "OUTBOX": outbox_on}
    # Connect, register the queues and load the scripts beforehand (not what is measured)
    broker = get_broker()
    broker.send(
        [
            broker.prepare(q, {"warm": True}, id=new_message_id())
            for q in (queue_name, f"{queue_name}.audit")
        ],
        once=True,
    )
    calls: list[str] = []
    # Given one transaction publishing 50 messages to each of two queues, with another
    # on_commit callback registered between them
    with transaction.atomic():
        first = [publish_on_commit(queue_name, {"n": n}) for n in range(50)]
        transaction.on_commit(lambda: calls.append("between"))
        second = [publish_on_commit(f"{queue_name}.audit", {"n": n}) for n in range(50)]
        trips = RoundTrips(monkeypatch)
    # Then the commit sends each queue's messages in one round trip
    assert trips.count == 2
    assert calls == ["between"]
    assert logged_ids(queue_name)[1:] == first
    assert logged_ids(f"{queue_name}.audit")[1:] == second


# ---------------------------------------------------------------------------
# Model events
# ---------------------------------------------------------------------------


def event(pk: int, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The default payload and headers of an Order event."""
    return (
        {"model": "shopapp.order", "pk": pk, "event": name},
        {"event": name, "model": "shopapp.order"},
    )


# Order's model events go to the fixed queue ORDER_EVENTS_QUEUE (declared in
# tests/shopapp): this test reads all of it, so no other test's events, please.
@pytest.mark.usefixtures("empty_redis")
@on_both_databases
def test_model_events_are_published_after_the_commit(alias: str, redisq_settings: Any) -> None:
    # When an order is created, updated and deleted in one transaction
    with transaction.atomic(using=alias):
        order = Order.objects.using(alias).create(total=decimal.Decimal("9.99"), note="new")
        pk = order.pk
        order.note = "paid"
        order.save(using=alias)
        order.delete(using=alias)
        assert logged(ORDER_EVENTS_QUEUE) == []

    # Then three events follow the commit, with the default payload and headers
    got = logged(ORDER_EVENTS_QUEUE)
    assert [(m["payload"], m["headers"]) for m in got] == [
        event(pk, "created"),
        event(pk, "updated"),
        event(pk, "deleted"),
    ]
    assert len({m["id"] for m in got}) == 3


# Order's model events go to the fixed queue ORDER_EVENTS_QUEUE (declared in
# tests/shopapp): this test reads all of it, so no other test's events, please.
@pytest.mark.usefixtures("empty_redis")
@on_both_databases
def test_model_events_of_a_rolled_back_transaction_are_not_published(
    alias: str, redisq_settings: Any
) -> None:
    with pytest.raises(Rollback), transaction.atomic(using=alias):
        order = Order.objects.using(alias).create(total=decimal.Decimal("1.00"))
        order.note = "changed"
        order.save(using=alias)
        raise Rollback

    assert logged(ORDER_EVENTS_QUEUE) == []
    assert not Order.objects.using(alias).exists()


# Order's model events go to the fixed queue ORDER_EVENTS_QUEUE (declared in
# tests/shopapp): this test reads all of it, so no other test's events, please.
@pytest.mark.usefixtures("empty_redis")
@on_both_databases
def test_loaddata_raw_saves_publish_no_events(
    alias: str, redisq_settings: Any, tmp_path: Path
) -> None:
    # Given a fixture file with two orders
    fixture = tmp_path / "orders.json"
    fixture.write_text(
        json.dumps(
            [
                {"model": "shopapp.order", "pk": 101, "fields": {"total": "5.00", "note": "a"}},
                {"model": "shopapp.order", "pk": 102, "fields": {"total": "6.00", "note": "b"}},
            ]
        )
    )

    # When it is loaded (raw saves), and another order is saved raw by hand
    call_command("loaddata", str(fixture), database=alias, verbosity=0)
    with transaction.atomic(using=alias):
        Order(pk=103, total=decimal.Decimal("7.00")).save_base(raw=True, using=alias)

    # Then the rows exist but no event was published
    assert sorted(Order.objects.using(alias).values_list("pk", flat=True)) == [101, 102, 103]
    assert logged(ORDER_EVENTS_QUEUE) == []


# Order's model events go to the fixed queue ORDER_EVENTS_QUEUE (declared in
# tests/shopapp): this test reads all of it, so no other test's events, please.
@pytest.mark.usefixtures("empty_redis")
@on_both_databases
def test_bulk_events_follow_the_commit_one_per_object(alias: str, redisq_settings: Any) -> None:
    # When orders are bulk-created (no signals) and their events declared explicitly
    with transaction.atomic(using=alias):
        orders = Order.objects.using(alias).bulk_create(
            [Order(total=decimal.Decimal(n)) for n in ("1", "2", "3")]
        )
        ids = publish_bulk_events(orders, "created", using=alias)
        assert logged(ORDER_EVENTS_QUEUE) == []

    # Then one message per object, after the commit, under the returned ids
    got = logged(ORDER_EVENTS_QUEUE)
    assert [m["id"] for m in got] == ids
    assert [(m["payload"], m["headers"]) for m in got] == [event(o.pk, "created") for o in orders]


# Order's model events go to the fixed queue ORDER_EVENTS_QUEUE (declared in
# tests/shopapp): this test reads all of it, so no other test's events, please.
@pytest.mark.usefixtures("empty_redis")
@on_both_databases
def test_bulk_events_of_a_rolled_back_transaction_are_not_published(
    alias: str, redisq_settings: Any
) -> None:
    with pytest.raises(Rollback), transaction.atomic(using=alias):
        orders = Order.objects.using(alias).bulk_create([Order(total=decimal.Decimal("1"))])
        publish_bulk_events(orders, "created", using=alias)
        raise Rollback

    assert logged(ORDER_EVENTS_QUEUE) == []


# ---------------------------------------------------------------------------
# The outbox
# ---------------------------------------------------------------------------


@on_both_databases
def test_outbox_row_is_written_in_the_transaction_and_sent_after_commit(
    queue_name: str, alias: str, outbox_settings: Any
) -> None:
    with transaction.atomic(using=alias):
        message_id = publish_on_commit(queue_name, {"order": 1}, headers={"k": "v"}, using=alias)
        # Then, inside the transaction, the row exists, unsent, and Redis has nothing
        row = outbox(alias).get()
        assert (row.queue, row.message_id, row.sent_at) == (queue_name, message_id, None)
        assert json.loads(row.payload) == {"order": 1}
        assert logged(queue_name) == []

    # After the commit the row is sent at once and marked so
    assert logged(queue_name) == [
        {"id": message_id, "payload": {"order": 1}, "headers": {"k": "v"}}
    ]
    row.refresh_from_db(using=alias)
    assert row.sent_at is not None
    assert pending_count(using=alias) == 0

    # A later relay sends nothing again
    assert relay_once(using=alias) == 0
    assert logged_ids(queue_name) == [message_id]


# Order's model events go to the fixed queue ORDER_EVENTS_QUEUE (declared in
# tests/shopapp): this test reads all of it, so no other test's events, please.
@pytest.mark.usefixtures("empty_redis")
@on_both_databases
def test_outbox_rollback_leaves_no_row(queue_name: str, alias: str, outbox_settings: Any) -> None:
    with pytest.raises(Rollback), transaction.atomic(using=alias):
        publish_on_commit(queue_name, {"order": 1}, using=alias)
        Order.objects.using(alias).create(total=decimal.Decimal("2.50"))  # model event too
        raise Rollback

    assert not outbox(alias).exists()
    assert logged(queue_name) == []
    assert logged(ORDER_EVENTS_QUEUE) == []


# Order's model events go to the fixed queue ORDER_EVENTS_QUEUE (declared in
# tests/shopapp): this test reads all of it, so no other test's events, please.
@pytest.mark.usefixtures("empty_redis")
@on_both_databases
def test_outbox_model_events_go_through_the_outbox(alias: str, outbox_settings: Any) -> None:
    with transaction.atomic(using=alias):
        order = Order.objects.using(alias).create(total=decimal.Decimal("3.00"))
        assert outbox(alias).filter(queue=ORDER_EVENTS_QUEUE).count() == 1

    (message,) = logged(ORDER_EVENTS_QUEUE)
    assert (message["payload"], message["headers"]) == event(order.pk, "created")
    assert outbox(alias).get().message_id == message["id"]
    assert pending_count(using=alias) == 0


class OutboxOnPostgres:
    """A database router sending OutboxMessage to the "pg" alias (so that
    ``redisq relay``, which relays the router's database, serves PostgreSQL)."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "pg" if model is OutboxMessage else None

    db_for_write = db_for_read


@pytest.mark.parametrize(
    ("alias", "relay"),
    [
        pytest.param(*SQLITE.values, "function", marks=SQLITE.marks, id="sqlite-relay_once"),
        pytest.param(*SQLITE.values, "command", marks=SQLITE.marks, id="sqlite-command"),
        pytest.param(
            *POSTGRES.values, "function", marks=POSTGRES.marks, id="postgresql-relay_once"
        ),
        pytest.param(*POSTGRES.values, "command", marks=POSTGRES.marks, id="postgresql-command"),
    ],
)
def test_outbox_keeps_a_message_through_a_redis_outage_at_commit(
    queue_name: str, alias: str, relay: str, settings: Any, fresh_redis_server: RedisServer
) -> None:
    # Given the outbox on, and a Redis that goes away before the commit
    settings.REDISQ = {"URL": fresh_redis_server.url, "OUTBOX": True}
    if alias == "pg":
        settings.DATABASE_ROUTERS = [OutboxOnPostgres()]
    with transaction.atomic(using=alias):
        message_id = publish_on_commit(queue_name, {"order": 42}, using=alias)
        fresh_redis_server.stop()
    # When the transaction commits: it succeeds, and the row waits unsent
    row = outbox(alias).get()
    assert row.message_id == message_id
    assert row.sent_at is None
    assert row.attempts == 1 and row.last_error

    # When Redis is back and the relay runs
    fresh_redis_server.restart()
    if relay == "command":
        out = StringIO()
        call_command("redisq", "relay", "--once", stdout=out)
        assert out.getvalue().strip() == "Sent 1 outbox message(s); 0 waiting."
    else:
        assert relay_once(using=alias) == 1

    # Then the message is delivered exactly once, with the id chosen at the call
    assert logged(queue_name) == [{"id": message_id, "payload": {"order": 42}, "headers": None}]
    row.refresh_from_db(using=alias)
    assert row.sent_at is not None
    assert relay_once(using=alias) == 0
    assert logged_ids(queue_name) == [message_id]


def _stored_row(alias: str, queue: str, payload: Any) -> OutboxMessage:
    """An unsent outbox row, as a transaction leaves it when the send after commit failed."""
    envelope = get_broker().prepare(queue, payload, id=new_message_id())
    with transaction.atomic(using=alias):
        return store(envelope, using=alias)


@on_both_databases
def test_relay_crashing_after_publishing_does_not_publish_twice(
    queue_name: str, alias: str, outbox_settings: Any
) -> None:
    # Given a row a relay published but crashed before marking sent
    row = _stored_row(alias, queue_name, {"order": 7})
    assert get_broker().send([envelope_of(row)], once=True) == [row.message_id]
    assert logged_ids(queue_name) == [row.message_id]

    # When the next relay runs
    relay_once(using=alias)

    # Then the row is marked sent and Redis still holds one message
    assert logged_ids(queue_name) == [row.message_id]
    assert pending_count(using=alias) == 0


ROWS = 200


@pytest.mark.slow
@on_both_databases
def test_concurrent_relays_send_every_row_exactly_once(
    queue_name: str, alias: str, outbox_settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two relays drain the same outbox at once; Redis gets each row exactly once.

    On PostgreSQL rows are locked with SELECT ... FOR UPDATE SKIP LOCKED. On SQLite
    (pytest-django's shared-cache in-memory database, one connection per thread) rows
    are claimed with a conditional UPDATE; there a concurrent writer can make a round
    fail with "database table is locked", even after publishing (the rows then stay
    claimed until the claim goes stale and another relay takes them over, and Redis's
    sent markers stop the second publish). The claim timeout is shortened so that
    takeover happens within the test.
    """
    monkeypatch.setattr(outbox_module, "CLAIM_TIMEOUT_S", 1.0)
    # A round is one Redis round trip for its whole batch: on loopback so quick that one
    # relay could drain everything before the other starts. A few milliseconds of
    # network latency per round make the two relays genuinely interleave.
    real_send = get_broker().send

    def slow_send(*args: Any, **kwargs: Any) -> list[str]:
        time.sleep(0.005)
        return real_send(*args, **kwargs)

    monkeypatch.setattr(get_broker(), "send", slow_send)
    # Given 200 unsent outbox rows
    broker = get_broker()
    with transaction.atomic(using=alias):
        rows = [
            store(broker.prepare(queue_name, {"n": n}, id=new_message_id()), using=alias)
            for n in range(ROWS)
        ]

    # When two relays, each with its own database connection, drain them at once,
    # retrying a failed round as `redisq relay` does
    start = threading.Barrier(2)
    failed_rounds: list[str] = []
    rounds_sent: dict[int, int] = {}  # rows each relay sent (or found already sent)
    errors: list[BaseException] = []

    def relay() -> None:
        me = threading.get_ident()
        deadline = time.monotonic() + 20
        try:
            start.wait(10)
            while time.monotonic() < deadline:
                try:
                    n = relay_rows(using=alias, batch=10)
                    rounds_sent[me] = rounds_sent.get(me, 0) + n
                    if n == 0 and pending_count(using=alias) == 0:
                        return
                except DatabaseError as exc:
                    failed_rounds.append(str(exc))
                    time.sleep(0.01)
        except BaseException as exc:
            errors.append(exc)
        finally:
            conn = connections[alias]
            if conn.vendor == "sqlite" and conn.connection is not None:
                conn.connection.close()  # Django ignores close() on in-memory databases
            connections.close_all()

    threads = [threading.Thread(target=relay) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    if alias == "pg":
        assert failed_rounds == []
    assert len(rounds_sent) == 2 and all(rounds_sent.values())  # both relays took part

    # Then Redis holds exactly 200 messages, one per row, and every row is sent
    ids = logged_ids(queue_name)
    assert len(ids) == ROWS
    assert set(ids) == {r.message_id for r in rows}
    assert pending_count(using=alias) == 0


# ---------------------------------------------------------------------------
# Without the outbox, a Redis outage at commit is logged
# ---------------------------------------------------------------------------


@on_both_databases
def test_redis_down_at_commit_without_outbox_logs_the_lost_message(
    queue_name: str,
    alias: str,
    settings: Any,
    fresh_redis_server: RedisServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given no outbox and a Redis that goes away before the commit
    settings.REDISQ = {"URL": fresh_redis_server.url}
    caplog.set_level(logging.ERROR, logger="redisq.publish")
    with transaction.atomic(using=alias):
        order = Order.objects.using(alias).create(total=decimal.Decimal("1.00"))
        message_id = publish_on_commit(queue_name, {"order": order.pk}, using=alias)
        fresh_redis_server.stop()

    # Then the commit succeeded and an error names the message, its queue and the fix
    assert Order.objects.using(alias).filter(pk=order.pk).exists()
    records = [
        r for r in caplog.records if r.name == "redisq.publish" and r.levelno == logging.ERROR
    ]
    mine = [r for r in records if message_id in r.getMessage()]
    assert len(mine) == 1, [r.getMessage() for r in records]
    text = mine[0].getMessage()
    # (a lost connection leaves the outcome unknown: the log does not claim either way)
    assert f"'{queue_name}'" in text and "may not have been published" in text
    assert "REDISQ['OUTBOX'] = True" in text
    # The model event of the order was lost the same way, and said so too
    assert any(f"'{ORDER_EVENTS_QUEUE}'" in r.getMessage() for r in records)

    # And nothing was published once Redis is back
    fresh_redis_server.restart()
    assert logged(queue_name) == []
    assert not outbox(alias).exists()


# ---------------------------------------------------------------------------
# Bad payloads fail at the call, before the commit
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("use_outbox", [False, True], ids=["direct", "outbox"])
@on_both_databases
def test_bad_payloads_fail_at_the_call(
    queue_name: str, alias: str, use_outbox: bool, redisq_settings: Any
) -> None:
    redisq_settings.REDISQ = {
        **redisq_settings.REDISQ,
        "MAX_PAYLOAD_BYTES": 100,
        "OUTBOX": use_outbox,
    }

    class Unserialisable:
        pass

    with transaction.atomic(using=alias):
        with pytest.raises(PayloadTooLarge, match="MAX_PAYLOAD_BYTES"):
            publish_on_commit(queue_name, {"blob": "x" * 200}, using=alias)
        with pytest.raises(PayloadNotSerializable, match="Unserialisable"):
            publish_on_commit(queue_name, {"obj": Unserialisable()}, using=alias)
        good = publish_on_commit(queue_name, {"ok": True}, using=alias)

    # The transaction went on; only the valid message was stored and published
    assert logged_ids(queue_name) == [good]
    assert list(outbox(alias).values_list("message_id", flat=True)) == (
        [good] if use_outbox else []
    )
