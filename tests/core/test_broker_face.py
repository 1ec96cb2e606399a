"""The Broker's face (issue 33, point 3): publishing and subscribing on the Broker, the
rest on the objects it hands out, "where" as one small value; the names of 0.9 still
work for one minor version, each warning with its new place."""

from __future__ import annotations

import inspect
import re

import pytest
import redis

from redisq_django.core import Broker, CoreConfig, Place
from redisq_django.core.dead_entry import DeadReason
from redisq_django.core.dead_letters import DeadLetters
from redisq_django.core.layouts import PartitionLayouts
from redisq_django.core.logical_consumers import Consumers

#: What a caller does with the Broker itself; everything else is on an object it holds.
FACE = {
    "publish",
    "publish_many",
    "prepare",
    "prepare_many",
    "prepare_due",
    "send",
    "plan_send",
    "recorded",
    "subscribe",
    "queues",
    "stats",
    "trim",
    "purge",
    "keys",
    "where",
    "new_async_client",
}
HANDED_OUT = {
    "consumers",
    "dead_letters",
    "partitions",
    "operator",
    "task_results",
    "archives",
    "schedule_ledger",
}
#: The Broker's own state, public for the core's tests and the pipeline (its docstring).
STATE = {"client", "config", "scripts", "hooks", "codec"}


def public_names(broker: Broker) -> set[str]:
    deprecated = {
        name
        for name, member in inspect.getmembers(type(broker))
        if (member.__doc__ or "").startswith("Deprecated:")
    }
    return {n for n in dir(broker) if not n.startswith("_")} - deprecated


def test_the_broker_has_a_small_face_and_hands_out_the_rest(redis_client: redis.Redis) -> None:
    broker = Broker(redis_client)
    assert public_names(broker) == FACE | HANDED_OUT | STATE
    assert len(FACE) <= 16
    assert isinstance(broker.consumers, Consumers)
    assert isinstance(broker.dead_letters, DeadLetters)
    assert isinstance(broker.partitions, PartitionLayouts)


MOVED = {
    "ensure_consumer": "consumers.ensure",
    "reset": "consumers.reset",
    "remove_consumer": "consumers.remove",
    "partition_count": "partitions.count",
    "recorded_partitions": "partitions.recorded",
    "check_partitions": "partitions.check",
}


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_a_moved_method_still_works_and_names_its_new_place(
    redis_client: redis.Redis, queue_name: str, old: str, new: str
) -> None:
    broker = Broker(redis_client, CoreConfig(partitions={queue_name: 2}))
    broker.consumers.ensure(queue_name, "billing")
    args = {
        "ensure_consumer": (queue_name, "billing"),
        "reset": (queue_name, "billing", "earliest"),
        "remove_consumer": (queue_name, "billing"),
        "partition_count": (queue_name,),
        "recorded_partitions": (queue_name,),
        "check_partitions": (queue_name,),
    }[old]
    with pytest.warns(DeprecationWarning, match=re.escape(f"broker.{new}()")):
        result = getattr(broker, old)(*args)
    if old in {"partition_count", "recorded_partitions"}:
        assert result == 2
    if old == "remove_consumer":
        assert broker.consumers.names(queue_name) == []
    else:
        assert broker.consumers.names(queue_name) == ["billing"]


def test_the_objects_called_as_the_methods_they_were_warn_and_answer_the_same(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, CoreConfig(partitions={queue_name: 2}))
    broker.consumers.ensure(queue_name, "billing")
    with pytest.warns(DeprecationWarning, match="consumers.names"):
        assert broker.consumers(queue_name) == ["billing"]
    with pytest.warns(DeprecationWarning, match="dead_letters.read"):
        assert broker.dead_letters(queue_name, "billing") == []
    with pytest.warns(DeprecationWarning, match="partitions"):
        parts = broker.partitions(queue_name)
    assert parts is not None and parts.count == 2


def test_partition_keyword_still_works_with_a_warning_and_a_place_does_the_same(
    redis_client: redis.Redis, queue_name: str
) -> None:
    broker = Broker(redis_client, CoreConfig(partitions={queue_name: 3}))
    broker.consumers.ensure(queue_name, "billing", start="earliest")
    message_id = broker.publish(queue_name, {"n": 1}, key="k")
    place = next(p for p in broker.partitions.places(queue_name) if _holds(broker, p))

    with broker.subscribe(place, "billing") as sub:
        (delivery,) = sub.fetch(count=1, block_ms=500)
        sub.dead_letter(delivery, ValueError("bad"), DeadReason.REJECTED)
    assert [d.id for d in broker.dead_letters.read(place, "billing")] == [message_id]

    with pytest.warns(DeprecationWarning, match=rf"Place\('{queue_name}', {place.partition}\)"):
        old = broker.dead_letters.read(queue_name, "billing", partition=place.partition)
    assert [d.id for d in old] == [message_id]
    with pytest.raises(TypeError, match="partition= too"):
        broker.dead_letters.read(place, "billing", partition=0)


def _holds(broker: Broker, place: Place) -> bool:
    keys = broker.partitions.at(place, "a test")
    return bool(broker.client.xlen(keys.log))


def test_a_place_reads_back_from_its_text() -> None:
    assert Place.parse("orders#2") == Place("orders", 2) and str(Place("orders", 2)) == "orders#2"
    assert Place.parse("orders") == Place("orders") and str(Place("orders")) == "orders"
    with pytest.raises(ValueError, match="partition number"):
        Place.parse("orders#x")
