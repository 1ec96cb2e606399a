"""The public testing helpers (issue 38, point 1): ``capture``, ``drain``, dead letters,
delayed messages and schedule ticks on a real redis-server, each test under a prefix of
its own (the ``redisq`` fixture of our pytest plugin), and the ``TestCase`` mixin."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import transaction
from django.test import TestCase, override_settings

from redisq_django import Message, Reject, publish, publish_on_commit
from redisq_django.connection import get_broker
from redisq_django.consuming.declarations import consumer, registry
from redisq_django.schedules import declared as schedules_declared
from redisq_django.testing import (
    DrainError,
    IsolatedQueues,
    RedisqTestMixin,
    capture,
    dead_letters,
    drain,
)
from tests.shopapp.models import Receipt

# Drain runs the worker's scripts (fail, deliver now, settle): on every server we support.
pytestmark = pytest.mark.servers


@pytest.fixture
def restore_registry() -> Iterator[None]:
    saved = dict(registry._declarations)
    saved_schedules = dict(schedules_declared.registry._declarations)
    try:
        yield
    finally:
        registry._declarations.clear()
        registry._declarations.update(saved)
        schedules_declared.registry._declarations.clear()
        schedules_declared.registry._declarations.update(saved_schedules)


@pytest.fixture
def queues(redisq_settings: Any, restore_registry: None, redisq: IsolatedQueues) -> IsolatedQueues:
    """The plugin's fixture, on the session server, with declarations undone after."""
    return redisq


# -- isolation ----------------------------------------------------------------------------


def test_each_test_gets_a_prefix_of_its_own_and_it_is_removed_after(
    redisq_settings: Any, redis_client: Any
) -> None:
    # Given the plugin's isolation, entered and left by hand as the fixture does
    from redisq_django.testing import isolated_queues

    with isolated_queues() as one, isolated_queues() as two:
        # When each publishes under its prefix
        assert one.prefix != two.prefix
        assert get_broker().config.prefix == two.prefix  # the innermost is in force
        publish("orders", {"n": 1})
        keys = redis_client.keys(f"{two.prefix}:*")
        assert keys

    # Then nothing of either is left, and the settings' prefix is back
    assert redis_client.keys(f"{one.prefix}:*") == []
    assert redis_client.keys(f"{two.prefix}:*") == []
    assert get_broker().config.prefix == "redisq"


# -- capture ------------------------------------------------------------------------------


def test_capture_collects_queue_payload_key_and_delay(queues: IsolatedQueues) -> None:
    publish("before", {"n": 0})  # before the block: not captured

    with capture() as published:
        first = publish("orders", {"order": 1}, key="order-1")
        publish("emails", {"to": "a@example.com"}, headers={"lang": "fr"})
        later = publish("orders", {"order": 2}, delay=60)

    # (Redis keeps no order across queues: within one millisecond, by queue name)
    assert sorted((m.queue, str(m.payload)) for m in published) == [
        ("emails", "{'to': 'a@example.com'}"),
        ("orders", "{'order': 1}"),
        ("orders", "{'order': 2}"),
    ]
    now, delayed = published.to("orders")
    assert now.id == first and now.key == "order-1"
    assert now.delay is None and now.due_at is None
    (mail,) = published.to("emails")
    assert mail.headers["lang"] == "fr"
    assert delayed.id == later
    assert delayed.delay == pytest.approx(60, abs=1)
    assert published.payloads("orders") == [{"order": 1}, {"order": 2}]
    assert [m.payload for m in queues.published.to("before")] == [{"n": 0}]


@pytest.mark.django_db
def test_capture_publishes_on_commit_inside_a_test_transaction(queues: IsolatedQueues) -> None:
    # Given a test in a transaction that never commits (pytest-django's django_db)
    with capture() as published, transaction.atomic():
        publish_on_commit("orders", {"order": 7})
    with capture() as more:
        publish_on_commit("orders", {"order": 8})  # the same test transaction, again

    # Then each block published its own message, once
    assert published.payloads() == [{"order": 7}]
    assert more.payloads() == [{"order": 8}]
    assert queues.published.payloads("orders") == [{"order": 7}, {"order": 8}]


@pytest.mark.django_db
def test_capture_leaves_nothing_published_after_a_rollback(queues: IsolatedQueues) -> None:
    with capture() as published:
        try:
            with transaction.atomic():
                publish_on_commit("orders", {"order": 9})
                raise RuntimeError("rolled back")
        except RuntimeError:
            pass
    assert list(published) == []


# -- drain --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_drain_runs_every_consumer_of_a_queue_in_this_thread(queues: IsolatedQueues) -> None:
    # Given two consumers of orders, one of which publishes to another queue
    @consumer("orders", name="billing")
    def billing(message: Message) -> None:
        Receipt.objects.create(source=message.id, note="billed")

    @consumer("orders", name="email")
    def email(message: Message) -> None:
        publish("mail", {"order": message.payload["order"]})

    @consumer("mail", name="smtp")
    def smtp(message: Message) -> None:
        Receipt.objects.create(source=message.id, note="mailed")

    ids = [publish("orders", {"order": n}) for n in range(3)]

    # When the test drains orders and mail
    result = drain("orders", "mail")

    # Then the rows are there (written in the test's own transaction), and counted
    assert sorted(Receipt.objects.filter(note="billed").values_list("source", flat=True)) == ids
    assert Receipt.objects.filter(note="mailed").count() == 3
    assert result[("orders", "billing")].handled == 3
    assert result[("orders", "email")].handled == 3
    assert result[("mail", "smtp")].handled == 3
    assert result.total.failed == 0 and not result.failures


@pytest.mark.django_db
def test_drain_sees_messages_published_before_a_late_consumer(queues: IsolatedQueues) -> None:
    # Given messages published before their consumer was declared (start="latest")
    ids = [publish("orders", {"order": n}) for n in range(2)]

    @consumer("orders", name="late")
    def late(message: Message) -> None:
        Receipt.objects.create(source=message.id)

    # When drained
    drain("orders")

    # Then it got every message of the test
    assert sorted(Receipt.objects.values_list("source", flat=True)) == ids


@pytest.mark.django_db
def test_drain_compresses_retries_and_keeps_dead_letters(queues: IsolatedQueues) -> None:
    # Given a consumer that fails twice then succeeds, and one that always fails,
    # both with a backoff of an hour
    calls: dict[str, int] = {}

    @consumer("orders", name="flaky", max_retries=3, backoff=3600)
    def flaky(message: Message) -> None:
        calls[message.id] = calls.get(message.id, 0) + 1
        if message.attempts < 3:
            raise ConnectionError("try again")

    @consumer("orders", name="poison", max_retries=2, backoff=3600)
    def poison(message: Message) -> None:
        raise ValueError(f"cannot handle {message.payload}")

    message_id = publish("orders", {"order": 1})

    # When drained (at once: no backoff waited)
    result = drain("orders")

    # Then the flaky one succeeded on its third attempt, the poison one is a dead letter
    # after max_retries + 1 attempts, and both are counted
    assert calls == {message_id: 3}
    assert result[("orders", "flaky")].handled == 1
    assert result[("orders", "flaky")].retried == 2
    assert result[("orders", "poison")].dead == 1
    assert result[("orders", "poison")].failed == 3
    (letter,) = dead_letters("orders", "poison")
    assert letter.id == message_id
    assert letter.attempts == 3
    assert letter.error_class.endswith("ValueError")
    assert [f.consumer for f in result.failures].count("poison") == 3
    assert dead_letters("orders", "flaky") == []


@pytest.mark.django_db
def test_a_rejected_message_is_dead_at_once(queues: IsolatedQueues) -> None:
    @consumer("orders", name="strict", max_retries=5)
    def strict(message: Message) -> None:
        raise Reject("no such order")

    publish("orders", {"order": 404})
    result = drain("orders")
    assert result[("orders", "strict")].dead == 1
    (letter,) = queues.dead_letters("orders")
    assert letter.reason == "rejected" and letter.attempts == 1


@pytest.mark.django_db
def test_a_queue_that_never_empties_is_a_clear_error(queues: IsolatedQueues) -> None:
    @consumer("loop", name="echo")
    def echo(message: Message) -> None:
        publish("loop", {"n": message.payload["n"] + 1})

    publish("loop", {"n": 0})
    with pytest.raises(DrainError, match="max_messages=50"):
        drain("loop", max_messages=50)


@pytest.mark.django_db
def test_delayed_messages_wait_unless_the_test_delivers_them(queues: IsolatedQueues) -> None:
    @consumer("orders", name="billing")
    def billing(message: Message) -> None:
        Receipt.objects.create(source=message.id)

    later = publish("orders", {"order": 1}, delay=3600)
    assert drain("orders").total.handled == 0

    assert queues.deliver_delayed("orders") == 1
    assert drain("orders").total.handled == 1
    assert list(Receipt.objects.values_list("source", flat=True)) == [later]

    publish("orders", {"order": 2}, eta=dt.datetime(2100, 1, 1, tzinfo=dt.UTC))
    assert drain("orders", delayed=True).total.handled == 1


@pytest.mark.django_db
def test_a_schedule_tick_fires_without_waiting(queues: IsolatedQueues) -> None:
    from redisq_django.schedules import periodic

    periodic("nightly", every=dt.timedelta(hours=24), queue="reports", payload={"kind": "n"})

    @consumer("reports", name="writer", start="earliest")
    def writer(message: Message) -> None:
        Receipt.objects.create(source=message.id)

    tick = dt.datetime(2030, 1, 2, tzinfo=dt.UTC)
    with capture() as published:
        message_id = queues.fire_schedule("nightly", at=tick)
        assert queues.fire_schedule("nightly", at=tick) == message_id  # published once
    assert published.payloads("reports") == [{"kind": "n"}]
    assert drain("reports").total.handled == 1
    assert list(Receipt.objects.values_list("source", flat=True)) == [message_id]


# -- Django's TestCase ---------------------------------------------------------------------


@pytest.fixture
def _session_url(request: pytest.FixtureRequest, redis_url: str) -> None:
    request.cls.redis_url = redis_url


@pytest.mark.usefixtures("_session_url")
class MixinTests(RedisqTestMixin, TestCase):
    """The mixin in a TestCase: the test's transaction never commits."""

    redis_url: str

    def setUp(self) -> None:
        self.enterContext(override_settings(REDISQ={"URL": self.redis_url}))
        saved = dict(registry._declarations)
        self.addCleanup(registry._declarations.update, saved)
        self.addCleanup(registry._declarations.clear)
        super().setUp()

    def test_publish_on_commit_capture_and_drain(self) -> None:
        @consumer("orders", name="billing")
        def billing(message: Message) -> None:
            Receipt.objects.create(source=message.id, note=str(message.payload["order"]))

        with self.redisq.capture() as published, transaction.atomic():
            publish_on_commit("orders", {"order": 5})

        self.assertEqual(published.payloads(), [{"order": 5}])
        result = self.redisq.drain("orders")
        self.assertEqual(result[("orders", "billing")].handled, 1)
        self.assertEqual(list(Receipt.objects.values_list("note", flat=True)), ["5"])
        self.assertTrue(self.redisq.prefix.startswith("redisq-test-"))


# -- without a Redis in the settings --------------------------------------------------------


@pytest.mark.slow  # starts a redis-server
def test_a_private_server_is_started_when_the_settings_redis_does_not_answer(
    settings: Any,
    redis_server_binary: str,
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
) -> None:
    import os

    from redisq_django.testing import isolated_queues, isolation

    # Given settings naming a port nothing listens on, and redis-server on PATH
    settings.REDISQ = {"URL": "redis://127.0.0.1:1/0"}
    bin_dir = os.path.dirname(redis_server_binary)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(isolation, "_private", [])

    # When a test is isolated
    try:
        with isolated_queues() as queues:
            # Then it runs on a private server of its own
            assert queues.url is not None and queues.url != redis_url
            with capture(on_commit=False) as published:
                publish("orders", {"n": 1})
            assert published.payloads() == [{"n": 1}]
    finally:
        for server in isolation._private:
            server.stop()


def test_no_redis_at_all_is_a_clear_error(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from redisq_django.testing import NoTestRedis, isolated_queues, isolation

    settings.REDISQ = {"URL": "redis://127.0.0.1:1/0"}
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(isolation, "_private", [])
    with pytest.raises(NoTestRedis, match="no redis-server on PATH"), isolated_queues():
        pass


# -- async consumers -------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_async_consumer_is_drained_too(queues: IsolatedQueues) -> None:
    seen: list[Any] = []

    @consumer("clicks", name="counter")
    async def counter(message: Message) -> None:
        seen.append(message.payload["n"])

    for n in range(3):
        publish("clicks", {"n": n})
    result = drain("clicks")
    assert sorted(seen) == [0, 1, 2]
    assert result[("clicks", "counter")].handled == 3


@pytest.mark.django_db
def test_a_partitioned_queue_is_captured_and_drained_on_every_partition(
    redisq_settings: Any, restore_registry: None
) -> None:
    from redisq_django.testing import isolated_queues

    # Given a queue of 3 partitions and a consumer that always fails on odd orders
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "PARTITIONS": {"orders": 3}}

    @consumer("orders", name="billing", max_retries=1)
    def billing(message: Message) -> None:
        if message.payload["order"] % 2:
            raise ValueError("odd")
        Receipt.objects.create(source=message.id)

    with isolated_queues() as queues:
        # When orders of many keys are published, then drained
        with capture() as published:
            ids = [publish("orders", {"order": n}, key=f"order-{n}") for n in range(6)]
        result = drain("orders")

        # Then each was captured once, handled or dead, whatever its partition
        assert sorted(m.id for m in published) == sorted(ids)
        assert result[("orders", "billing")].handled == 3
        assert result[("orders", "billing")].dead == 3
        dead = queues.dead_letters("orders", "billing")
        assert sorted(d.payload["order"] for d in dead) == [1, 3, 5]
        assert all(d.attempts == 2 for d in dead)


@pytest.mark.django_db
def test_django_tasks_are_drained_to_their_end(
    settings: Any, redis_url: str, redis_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib
    import uuid

    from django.tasks import TaskResultStatus

    from redisq_django.testing import isolated_queues

    # Given TASKS on redisq, a task that fails twice then succeeds, and one that fails
    settings.REDISQ = {"URL": redis_url}
    settings.TASKS = {
        "default": {"BACKEND": "redisq_django.tasks.RedisqBackend", "QUEUES": ["default"]}
    }
    monkeypatch.setenv("REDISQ_TEST_RUNS_URL", redis_url)
    tasks = importlib.import_module("tests.tasks.sample_tasks")
    runs = f"runs-{uuid.uuid4().hex}"

    with isolated_queues() as queues:
        with capture() as published:
            flaky = tasks.flaky.enqueue(runs, 2)
            failing = tasks.failing.enqueue("no")
        assert [m.queue for m in published] == ["tasks.default"] * 2

        # When the task queue is drained
        drain("default")

        # Then each ended as its retries say, in this thread
        flaky.refresh()
        failing.refresh()
        assert flaky.status == TaskResultStatus.SUCCESSFUL
        assert flaky.return_value == 3 and len(flaky.errors) == 2
        assert failing.status == TaskResultStatus.FAILED
        (letter,) = queues.dead_letters("tasks.default")
        assert letter.error_class.endswith("ValueError")
    redis_client.delete(runs)


@pytest.mark.django_db
def test_max_messages_is_a_bound_not_an_error_when_the_queue_empties(
    queues: IsolatedQueues,
) -> None:
    @consumer("orders", name="billing")
    def billing(message: Message) -> None:
        pass

    for n in range(5):
        publish("orders", {"order": n})
    assert drain("orders", max_messages=5).total.handled == 5


def test_the_cleanup_deletes_only_its_own_prefix_and_takes_a_glob_literally(
    redisq_settings: Any, redis_client: Any
) -> None:
    from redisq_django.testing.isolation import delete_prefix

    # Given keys of a prefix with glob characters, of a longer prefix, and of another
    redis_client.mset({"p[1]*:a": 1, "p[1]*:b": 2, "p[1]*x:c": 3, "p1:d": 4})
    for n in range(1200):  # more than one batch
        redis_client.set(f"p[1]*:{{q}}:{n}", n)

    # When the first prefix is deleted
    deleted = delete_prefix("p[1]*")

    # Then only its keys are gone
    assert deleted == 1202
    assert redis_client.keys(r"p\[1\]\*:*") == []
    assert redis_client.exists("p1:d", "p[1]*x:c") == 2
    redis_client.delete("p1:d", "p[1]*x:c")
