"""The ordering key from Django code (issue 25, step 1): ``publish``, ``publish_many``,
their async twins and ``publish_on_commit`` take ``key=``; model events name it per
instance; an outbox row keeps it until the relay sends it. Real redis-server, SQLite and
PostgreSQL, real transactions."""

from __future__ import annotations

import decimal
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from redisq_django import apublish, apublish_many, publish, publish_many
from redisq_django.connection import get_broker
from redisq_django.core import InvalidKey
from redisq_django.models import OutboxMessage
from redisq_django.publishing import events, publish_on_commit
from redisq_django.publishing.events import publish_bulk_events, publish_model_events
from redisq_django.publishing.outbox import relay_once
from tests.shopapp.models import Order
from tests.support.aio import run_async
from tests.support.databases import Rollback, on_both_databases
from tests.support.redis_server import RedisServer


def keys_in_log(queue: str) -> dict[str, str | None]:
    """Message id -> the ``key`` field of each entry of ``queue``'s log (None: none)."""
    broker = get_broker()
    out: dict[str, str | None] = {}
    for entry_id, fields in broker.client.xrange(broker.keys(queue).log):
        key = fields.get(b"key")
        out[fields.get(b"id", entry_id).decode()] = None if key is None else key.decode()
    return out


def handled_keys(queue: str, expected: int) -> dict[str, str | None]:
    """Message id -> ``message.key`` as logical consumer "billing" (from the start) gets it."""
    broker = get_broker()
    broker.consumers.ensure(queue, "billing", "earliest")
    sub = broker.subscribe(queue, "billing", "i1")
    out: dict[str, str | None] = {}
    for _ in range(50):
        if len(out) >= expected:
            break
        batch = sub.fetch(count=100, block_ms=50)
        out.update({m.id: m.key for m in batch})
        sub.ack(batch)
    return out


def test_publish_and_publish_many_and_their_async_twins_carry_the_key(
    redisq_settings: Any, queue_name: str
) -> None:
    one = publish(queue_name, {"n": 1}, key="order-1")
    many = publish_many(queue_name, [{"n": 2}, {"n": 3}], key="order-2")
    later = publish(queue_name, {"n": 4}, key="order-3", delay=0.05)
    one_async = run_async(apublish(queue_name, {"n": 5}, key="order-4"))
    many_async = run_async(apublish_many(queue_name, [{"n": 6}], key="order-5", delay=0.05))
    plain = publish(queue_name, {"n": 7})
    assert handled_keys(queue_name, 8) == {
        one: "order-1",
        many[0]: "order-2",
        many[1]: "order-2",
        later: "order-3",
        one_async: "order-4",
        many_async[0]: "order-5",
        plain: None,
    }


@pytest.mark.django_db(transaction=True)
def test_an_invalid_key_is_refused_at_every_call_and_nothing_is_sent(
    redisq_settings: Any, queue_name: str, redis_client: redis.Redis
) -> None:
    calls = [
        lambda: publish(queue_name, 1, key=""),
        lambda: publish_many(queue_name, [1], key="k" * 257),
        lambda: run_async(apublish(queue_name, 1, key=7)),  # type: ignore[arg-type]
        lambda: run_async(apublish_many(queue_name, [1], key="")),
    ]
    with transaction.atomic():
        calls.append(lambda: publish_on_commit(queue_name, 1, key=""))
        for call in calls:
            with pytest.raises(InvalidKey):
                call()
    keys = get_broker().keys(queue_name)
    assert redis_client.exists(keys.log, keys.delayed) == 0


@on_both_databases
def test_publish_on_commit_with_a_key_lands_after_the_commit_only(
    redisq_settings: Any, queue_name: str, alias: str
) -> None:
    # Given a transaction that rolls back, and one that commits
    with pytest.raises(Rollback), transaction.atomic(using=alias):
        publish_on_commit(queue_name, {"n": 0}, key="order-0", using=alias)
        raise Rollback
    with transaction.atomic(using=alias):
        first = publish_on_commit(queue_name, {"n": 1}, key="order-1", using=alias)
        second = publish_on_commit(queue_name, {"n": 2}, key="order-1", using=alias, delay=0.05)
        # Then nothing is sent before the commit...
        assert keys_in_log(queue_name) == {}
    # ...and after it, the committed ones only, with their key
    assert keys_in_log(queue_name) == {first: "order-1"}
    assert handled_keys(queue_name, 2) == {first: "order-1", second: "order-1"}


@on_both_databases
def test_an_outbox_row_keeps_the_key_through_a_redis_outage_until_the_relay_sends_it(
    settings: Any, queue_name: str, alias: str, fresh_redis_server: RedisServer
) -> None:
    # Given the outbox on, and a Redis that goes away before the commit
    settings.REDISQ = {"URL": fresh_redis_server.url, "OUTBOX": True}
    with transaction.atomic(using=alias):
        mid = publish_on_commit(queue_name, {"n": 1}, key="order-9", using=alias)
        no_key = publish_on_commit(queue_name, {"n": 2}, using=alias)
        fresh_redis_server.stop()
    # Then the rows wait unsent, holding the key
    rows = {r.message_id: r for r in OutboxMessage.objects.using(alias).all()}
    assert (rows[mid].key, rows[mid].sent_at) == ("order-9", None)
    assert (rows[no_key].key, rows[no_key].sent_at) == ("", None)
    # When Redis is back and the relay sends them
    fresh_redis_server.restart()
    assert relay_once(using=alias) == 2
    # Then the message has its key again, and the other none
    assert handled_keys(queue_name, 2) == {mid: "order-9", no_key: None}


@pytest.fixture
def keyed_order_events(queue_name: str) -> Iterator[str]:
    """Order's model events also go to ``queue_name``, keyed ``order-<pk>`` (a callable),
    for the test only."""
    publish_model_events(
        Order, queue=queue_name, on=("created", "updated"), key=lambda o, e: f"order-{o.pk}"
    )
    yield queue_name
    uid = f"redisq:shopapp.order:{queue_name}"
    post_save.disconnect(sender=Order, dispatch_uid=uid)
    post_delete.disconnect(sender=Order, dispatch_uid=uid)
    events._registrations[:] = [r for r in events._registrations if r.queue != queue_name]


@on_both_databases
def test_model_events_carry_the_key_each_instance_names(
    redisq_settings: Any, keyed_order_events: str, alias: str
) -> None:
    queue = keyed_order_events
    # When two orders are created and one updated in a transaction, and one bulk event
    with transaction.atomic(using=alias):
        a = Order.objects.using(alias).create(total=decimal.Decimal("1.00"))
        b = Order.objects.using(alias).create(total=decimal.Decimal("2.00"))
        a.note = "paid"
        a.save(using=alias)
        bulk = publish_bulk_events([b], "updated", using=alias)  # shopapp's queue too
        assert keys_in_log(queue) == {}
    # Then each event carries its order's key
    got = handled_keys(queue, 4)
    assert sorted(got.values()) == sorted([f"order-{a.pk}"] * 2 + [f"order-{b.pk}"] * 2)
    [mine] = [i for i in bulk if i in got]
    assert got[mine] == f"order-{b.pk}"


@pytest.mark.django_db(transaction=True)
def test_a_model_event_key_may_name_a_field(redisq_settings: Any, queue_name: str) -> None:
    publish_model_events(Order, queue=queue_name, on=("created",), key="note")
    try:
        with_note = Order.objects.create(total=decimal.Decimal("1.00"), note="customer-7")
        publish_model_events(Order, queue=queue_name, on=("created",), key="pk")
        by_pk = Order.objects.create(total=decimal.Decimal("2.00"))
    finally:
        uid = f"redisq:shopapp.order:{queue_name}"
        post_save.disconnect(sender=Order, dispatch_uid=uid)
        events._registrations[:] = [r for r in events._registrations if r.queue != queue_name]
    assert sorted(v for v in keys_in_log(queue_name).values() if v is not None) == sorted(
        ["customer-7", str(by_pk.pk)]
    )
    assert with_note.pk != by_pk.pk
    with pytest.raises(TypeError, match="key must be a field name"):
        publish_model_events(Order, queue=queue_name, key=42)  # type: ignore[arg-type]
