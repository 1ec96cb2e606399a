"""The transactional inbox of ``atomic=True`` consumers (issue 35, points 1, 2 and 4): the
handler's rows and the inbox row commit together; a message delivered again is skipped
and acknowledged; a handler that raises rolls both back; two instances on one message
serialize on the row (PostgreSQL and SQLite); old rows are pruned in bounded batches.
Real redis-server, real databases; the worker in this process."""

from __future__ import annotations

import datetime as dt
import io
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connections

from redisq_django.consuming import inbox
from redisq_django.consuming.consumer_sync import sync_declarations
from redisq_django.consuming.declarations import consumer, registry
from redisq_django.core import RetryPolicy
from redisq_django.core.errors import ConfigurationError
from redisq_django.core.handler import DUPLICATE, ConsumerSpec
from redisq_django.core.message import Message
from redisq_django.core.worker import Worker, WorkerOptions
from redisq_django.models import Consumer, InboxEntry
from tests.shopapp.models import Receipt

pytestmark = pytest.mark.site_broker


@pytest.fixture
def restore_registry() -> Iterator[None]:
    saved = dict(registry._declarations)
    try:
        yield
    finally:
        registry._declarations.clear()
        registry._declarations.update(saved)


def a_message(broker: Any, queue: str, payload: Any = None) -> Message:
    """A real message of ``queue``, as a worker receives it."""
    broker.consumers.ensure(queue, "billing")
    broker.publish(queue, payload if payload is not None else {"n": 1})
    with broker.subscribe(queue, "billing", "test") as sub:
        (delivery,) = sub.fetch(count=1, block_ms=1000)
    return delivery.message


def receipts_handler(using: str = "default", fail: bool = False) -> Callable[[Message], None]:
    def handler(message: Message) -> None:
        Receipt.objects.using(using).create(source=message.id)
        if fail:
            raise RuntimeError("the handler failed after writing")

    return handler


# -- declaration ------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.usefixtures("restore_registry")
def test_atomic_is_declared_and_kept_on_the_row(queue_name: str) -> None:
    @consumer(queue_name, name="billing", atomic=True)
    def billing(message: Message) -> None:
        Receipt.objects.create(source=message.id)

    (declared,) = [d for d in registry.declarations() if d.queue == queue_name]
    assert declared.atomic == "default"
    assert inbox.inbox_database(declared.handler) == "default"
    assert inbox.inbox_database(billing) is None  # the function itself stays as written
    sync_declarations()
    assert Consumer.objects.get(queue__name=queue_name, name="billing").declared_atomic == (
        "default"
    )


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [({"atomic": "nowhere"}, "one of settings.DATABASES"), ({"atomic": 1}, "give True")],
)
def test_atomic_names_a_database(queue_name: str, kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigurationError, match=needle):
        consumer(queue_name, name="billing", **kwargs)(lambda m: None)


def test_an_async_handler_cannot_be_atomic(queue_name: str) -> None:
    async def handler(message: Message) -> None:
        pass

    with pytest.raises(ConfigurationError, match="needs a plain function, not an async def"):
        consumer(queue_name, name="billing", atomic=True)(handler)


# -- one message, handled once ----------------------------------------------------------


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("using", ["default", "pg"])
def test_a_message_delivered_again_is_skipped_and_its_rows_are_written_once(
    broker: Any, queue_name: str, using: str
) -> None:
    message = a_message(broker, queue_name)
    run = inbox.atomic_handler(
        receipts_handler(using), queue=queue_name, consumer="billing", using=using
    )
    before = inbox.skipped[(queue_name, "billing")]
    # The first delivery writes its receipt and the inbox row; the second is skipped
    assert run(message) is None
    assert run(message) is DUPLICATE
    assert Receipt.objects.using(using).filter(source=message.id).count() == 1
    assert InboxEntry.objects.using(using).filter(message_id=message.id).count() == 1
    assert inbox.skipped[(queue_name, "billing")] == before + 1
    assert broker.operator.last_hour(queue_name, "billing", "skipped") >= 1


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("using", ["default", "pg"])
def test_a_handler_that_raises_rolls_back_its_rows_and_the_inbox_row(
    broker: Any, queue_name: str, using: str
) -> None:
    message = a_message(broker, queue_name)
    failing = inbox.atomic_handler(
        receipts_handler(using, fail=True), queue=queue_name, consumer="billing", using=using
    )
    with pytest.raises(RuntimeError):
        failing(message)
    assert not Receipt.objects.using(using).filter(source=message.id).exists()
    assert not InboxEntry.objects.using(using).filter(message_id=message.id).exists()
    # Retried, it runs (the record did not survive the rollback)
    working = inbox.atomic_handler(
        receipts_handler(using), queue=queue_name, consumer="billing", using=using
    )
    assert working(message) is None
    assert Receipt.objects.using(using).filter(source=message.id).count() == 1


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
def test_each_logical_consumer_has_its_own_record_of_a_message(
    broker: Any, queue_name: str
) -> None:
    message = a_message(broker, queue_name)
    for name in ("billing", "audit"):
        run = inbox.atomic_handler(
            receipts_handler(), queue=queue_name, consumer=name, using="default"
        )
        assert run(message) is None
    assert Receipt.objects.filter(source=message.id).count() == 2


def _close_connections() -> None:
    for conn in connections.all():
        if conn.vendor == "sqlite" and conn.connection is not None:
            conn.connection.close()
        conn.close()


# On PostgreSQL: the test database of SQLite is in memory here, where a second writer
# fails at once ("table is locked") instead of waiting as on a file; the real processes
# of tests/faults/test_exactly_once_faults.py share a SQLite file.
@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("first_commits", [True, False], ids=["first-commits", "first-rolls-back"])
def test_two_instances_on_one_message_serialize_on_its_inbox_row(
    broker: Any, queue_name: str, first_commits: bool
) -> None:
    using = "pg"
    # Given a first instance inside the handler, its inbox row written, its transaction
    # open for 1 s, and a second instance that starts the same message meanwhile
    message = a_message(broker, queue_name)
    inside = threading.Event()
    outcome: dict[str, Any] = {}

    def slow(msg: Message) -> None:
        Receipt.objects.using(using).create(source=msg.id, note="first")
        inside.set()
        time.sleep(1.0)
        if not first_commits:
            raise RuntimeError("the first instance failed")

    def second(msg: Message) -> None:
        Receipt.objects.using(using).create(source=msg.id, note="second")

    def run(name: str, handler: Callable[[Message], None]) -> None:
        wrapped = inbox.atomic_handler(handler, queue=queue_name, consumer="billing", using=using)
        try:
            outcome[name] = wrapped(message)
        except Exception as exc:
            outcome[name] = exc
        finally:
            _close_connections()

    first = threading.Thread(target=run, args=("first", slow))
    first.start()
    assert inside.wait(10)
    began = time.monotonic()
    later = threading.Thread(target=run, args=("second", second))
    later.start()
    first.join(20)
    later.join(20)
    # Then the second waited for the first's transaction, and skipped when it committed,
    # or ran when it rolled back: one receipt either way
    assert time.monotonic() - began >= 0.5
    notes = list(
        Receipt.objects.using(using).filter(source=message.id).values_list("note", flat=True)
    )
    if first_commits:
        assert outcome == {"first": None, "second": DUPLICATE}
        assert notes == ["first"]
    else:
        assert isinstance(outcome["first"], RuntimeError) and outcome["second"] is None
        assert notes == ["second"]
    assert InboxEntry.objects.using(using).filter(message_id=message.id).count() == 1


# -- in a worker ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_redelivery_after_the_commit_is_acknowledged_without_running_again(
    broker: Any, queue_name: str
) -> None:
    # Given an atomic consumer whose first instance committed a message's transaction
    # and died before its acknowledgement (its lease of 1 s not renewed)
    ran: list[str] = []

    def handler(message: Message) -> None:
        ran.append(message.id)
        Receipt.objects.create(source=message.id)

    run = inbox.atomic_handler(handler, queue=queue_name, consumer="billing", using="default")
    policy = RetryPolicy.from_seconds(
        max_retries=3, backoff=0.05, max_backoff=0.1, visibility_timeout=1
    )
    broker.consumers.ensure(queue_name, "billing")
    sent = broker.publish(queue_name, {"n": 1})
    sub = broker.subscribe(queue_name, "billing", "dead-instance", policy=policy)
    (delivery,) = sub.fetch(count=1, block_ms=1000)
    assert run(delivery.message) is None  # committed; never acknowledged

    # When a worker takes it over
    def closing(message: Message) -> Any:  # the handler thread's connection is its own
        try:
            return run(message)
        finally:
            _close_connections()

    spec = ConsumerSpec(queue_name, "billing", closing, policy)
    worker = Worker(
        broker, [spec], WorkerOptions(block_ms=100, stats_interval=0, reclaim_interval=0.2)
    )
    runner = threading.Thread(target=worker.run, daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + 20
        while worker.totals()["skipped"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        worker.stop()
        runner.join(15)
    # Then it was acknowledged without running the handler again, and counted as skipped
    assert ran == [sent]
    assert Receipt.objects.filter(source=sent).count() == 1
    assert worker.totals()["skipped"] == 1, worker.totals()
    with broker.subscribe(queue_name, "billing", "after") as after:
        assert after.fetch(count=1, block_ms=200) == []
    assert (broker.stats(queue_name).consumers[0].in_flight) == 0


# -- the inbox stays small --------------------------------------------------------------


@pytest.mark.django_db
def test_old_rows_are_pruned_in_bounded_batches(settings: Any, queue_name: str) -> None:
    InboxEntry.objects.bulk_create(
        InboxEntry(queue=queue_name, consumer="billing", message_id=f"m{i}") for i in range(25)
    )
    old = InboxEntry.objects.filter(message_id__in=[f"m{i}" for i in range(20)])
    old.update(handled_at=dt.datetime(2020, 1, 1, tzinfo=dt.UTC))
    # A bounded call deletes at most rounds x batch rows
    assert inbox.prune(batch=4, rounds=2) == 8
    assert inbox.prune(batch=4, rounds=100) == 12
    assert InboxEntry.objects.filter(queue=queue_name).count() == 5
    assert inbox.count(queue=queue_name) == {(queue_name, "billing"): 5}


@pytest.mark.django_db
def test_the_inbox_command_counts_and_prunes(queue_name: str) -> None:
    InboxEntry.objects.bulk_create(
        InboxEntry(queue=queue_name, consumer=c, message_id=f"m{i}")
        for c in ("billing", "audit")
        for i in range(3)
    )
    out = io.StringIO()
    call_command("redisq", "inbox", "count", "--queue", queue_name, stdout=out)
    lines = out.getvalue().splitlines()
    assert [line.split() for line in lines[1:]] == [
        [queue_name, "audit", "3"],
        [queue_name, "billing", "3"],
    ]
    out = io.StringIO()
    call_command("redisq", "inbox", "prune", stdout=out)  # nothing is 7 days old
    assert out.getvalue().strip() == "Deleted 0 inbox row(s)."
    out = io.StringIO()
    time.sleep(1.1)
    call_command("redisq", "inbox", "prune", "--older-than", "1", stdout=out)
    assert out.getvalue().strip() == "Deleted 6 inbox row(s)."


@pytest.mark.usefixtures("restore_registry")
def test_check_warns_when_rows_are_pruned_before_a_replay_could_deliver_again(
    settings: Any, queue_name: str
) -> None:
    from redisq_django.checks import check_inbox_retention

    @consumer(queue_name, name="billing", atomic=True, visibility_timeout=30)
    def billing(message: Message) -> None:
        pass

    @consumer(queue_name, name="audit")  # not atomic: no inbox, no warning
    def audit(message: Message) -> None:
        pass

    settings.REDISQ = {**settings.REDISQ, "REPLAY_WINDOW": 3600, "INBOX_RETENTION": 7200}
    assert [w for w in check_inbox_retention() if queue_name in w.msg] == []
    settings.REDISQ = {**settings.REDISQ, "INBOX_RETENTION": 600}
    (warning,) = [w for w in check_inbox_retention() if queue_name in w.msg]
    assert warning.id == "redisq_django.W021"
    assert f"{queue_name}/billing" in warning.msg and "3600 s" in warning.msg
    assert "REPLAY_WINDOW" in warning.msg and "at least 3600" in warning.hint
    # A lease longer than the replay window sets the horizon (a lost ack after a commit)
    settings.REDISQ = {**settings.REDISQ, "REPLAY_WINDOW": 0, "INBOX_RETENTION": 10}
    (warning,) = [w for w in check_inbox_retention() if queue_name in w.msg]
    assert "30 s" in warning.msg and "visibility_timeout" in warning.msg
