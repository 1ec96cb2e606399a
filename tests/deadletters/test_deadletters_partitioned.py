"""Dead letters of a partitioned queue: read from every partition (merged, oldest first),
sunk from every partition into rows that remember their partition, and a retry sends each
back to the partition it died in (a keyed one: its key's), where an instance of that
partition receives it."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from redisq_django import deadletters
from redisq_django.connection import get_broker
from redisq_django.core import Broker, PartitionedQueueError, Place, partition_of
from redisq_django.core.dead_letters import redrive_target
from redisq_django.core.keys import queue_keys
from redisq_django.core.partitions import Partitions
from redisq_django.models import DeadLetter

K = 4


pytestmark = [pytest.mark.django_db, pytest.mark.site_broker(queue_partitions=K)]


def kill_all(broker: Broker, queue: str, consumer: str = "billing") -> dict[str, int]:
    """Reject every message of every partition; returns message id -> its partition."""
    died: dict[str, int] = {}
    for p in range(K):
        with broker.subscribe(Place(queue, p), consumer, f"killer-{p}") as sub:
            for _ in range(20):  # bounded: a few fetches empty a partition
                got = sub.fetch(count=50, block_ms=50)
                if not got:
                    break
                for delivery in got:
                    sub.reject(delivery, ValueError("declined"))
                    died[delivery.message.id] = p
    return died


def received(broker: Broker, queue: str, consumer: str = "billing") -> dict[str, int]:
    """Fetch (and ack) what each partition's instances receive: message id -> partition."""
    got: dict[str, int] = {}
    for p in range(K):
        with broker.subscribe(Place(queue, p), consumer, f"reader-{p}") as sub:
            for _ in range(20):
                batch = sub.fetch(count=50, block_ms=50)
                if not batch:
                    break
                sub.ack(batch)
                got.update((d.message.id, p) for d in batch)
    return got


def publish_some(broker: Broker, queue: str) -> dict[str, str | None]:
    """Ten keyed messages (spread over the partitions by key) and six without a key
    (taking turns); returns message id -> key."""
    broker.consumers.ensure(queue, "billing")
    sent: dict[str, str | None] = {}
    for n in range(10):
        sent[broker.publish(queue, {"n": n}, key=f"order-{n}")] = f"order-{n}"
    for n in range(6):
        sent[broker.publish(queue, {"loose": n})] = None
    return sent


def test_dead_letters_of_every_partition_are_read_merged_and_per_partition(
    broker: Broker, queue_name: str
) -> None:
    # Given dead letters in every partition of a queue of 4
    sent = publish_some(broker, queue_name)
    died = kill_all(broker, queue_name)
    assert set(died) == set(sent) and set(died.values()) == set(range(K))
    # Then all are read, oldest first, each naming its partition
    letters = broker.dead_letters.read(queue_name, "billing")
    assert {d.id: d.partition for d in letters} == died
    times = [d.last_failed_at for d in letters]
    assert times == sorted(times)  # type: ignore[type-var]
    assert len(broker.dead_letters.read(queue_name, "billing", count=5)) == 5
    # And one partition's alone
    two = broker.dead_letters.read(Place(queue_name, 2), "billing")
    assert {d.id for d in two} == {m for m, p in died.items() if p == 2}
    # A dead letter's entry id is no address without its partition
    with pytest.raises(PartitionedQueueError, match=r"Place\(.*, 0\) to Place\(.*, 3\)"):
        broker.dead_letters.redrive(queue_name, "billing", two[0].entry_id)
    with pytest.raises(PartitionedQueueError, match=r"Place\(.*, 0\) to Place\(.*, 3\)"):
        broker.dead_letters.delete(Place(queue_name, K), "billing", [two[0].entry_id])
    # Re-driven from Redis, it goes back to its partition only
    assert broker.dead_letters.redrive(Place(queue_name, 2), "billing", two[0].entry_id)
    assert received(broker, queue_name) == {two[0].id: 2}


def test_the_sink_drains_every_partition_and_rows_remember_theirs(
    broker: Broker, queue_name: str
) -> None:
    # Given dead letters in every partition
    sent = publish_some(broker, queue_name)
    died = kill_all(broker, queue_name)
    # When the sink runs
    assert deadletters.sink(queue_name, "billing") == len(sent)
    # Then every one is a row that says where it died, and none is left in Redis
    rows = {r.message_id: r for r in DeadLetter.objects.filter(queue=queue_name)}
    assert {m: r.partition for m, r in rows.items()} == died
    for message_id, key in sent.items():
        if key is not None:
            assert rows[message_id].partition == partition_of(key, K)
    assert broker.dead_letters.read(queue_name, "billing") == []


def test_a_retry_sends_each_dead_letter_back_to_its_partition(
    broker: Broker, queue_name: str
) -> None:
    # Given sunk dead letters of every partition (keyed, and others that took turns)
    publish_some(broker, queue_name)
    died = kill_all(broker, queue_name)
    deadletters.sink(queue_name, "billing")
    # When they are all retried
    rows = list(DeadLetter.objects.filter(queue=queue_name))
    assert deadletters.retry(rows) == len(died)
    # Then each is received by the instances of the partition it died in
    assert received(broker, queue_name) == died


def test_the_admin_shows_the_partition_a_dead_letter_died_in(
    broker: Broker, queue_name: str
) -> None:
    # Given a sunk dead letter of partition p, and an unpartitioned queue's
    broker.consumers.ensure(queue_name, "billing")
    broker.publish(queue_name, {"n": 1}, key="order-1")
    p = partition_of("order-1", K)
    kill_all(broker, queue_name)
    plain_queue = f"{queue_name}.plain"
    broker.consumers.ensure(plain_queue, "billing")
    broker.publish(plain_queue, {"n": 2})
    with broker.subscribe(plain_queue, "billing") as sub:
        (delivery,) = sub.fetch(count=1, block_ms=500)
        sub.reject(delivery, ValueError("declined"))
    deadletters.sink_all([(queue_name, "billing"), (plain_queue, "billing")])
    row = DeadLetter.objects.get(queue=queue_name)
    plain = DeadLetter.objects.get(queue=plain_queue)
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_deadletter"))
    client = Client()
    client.force_login(viewer)
    # Then its page and the list say which partition; the other's say none
    page = client.get(reverse("admin:redisq_django_deadletter_change", args=[row.pk]))
    shown = re.search(
        r'(?is)partition:</label>.*?<div class="readonly">(.*?)<', page.content.decode()
    )
    assert shown is not None and shown.group(1) == str(p)
    other = client.get(reverse("admin:redisq_django_deadletter_change", args=[plain.pk]))
    assert b"partition:</label>" not in other.content.lower()
    listing = client.get(reverse("admin:redisq_django_deadletter_changelist")).content.decode()
    assert f"{queue_name}#{p}/billing" in listing and f"{plain_queue}/billing" in listing


def test_unpartitioned_dead_letters_have_no_partition(
    redisq_settings: Any, queue_name: str
) -> None:
    broker = get_broker()
    broker.consumers.ensure(queue_name, "billing")
    message_id = broker.publish(queue_name, {"n": 1})
    with broker.subscribe(queue_name, "billing") as sub:
        (delivery,) = sub.fetch(count=1, block_ms=500)
        sub.reject(delivery, ValueError("declined"))
    (letter,) = broker.dead_letters.read(queue_name, "billing")
    assert letter.partition is None
    with pytest.raises(PartitionedQueueError, match="not partitioned"):
        broker.dead_letters.read(Place(queue_name, 0), "billing")
    assert deadletters.sink(queue_name, "billing") == 1
    assert DeadLetter.objects.get(message_id=message_id).partition is None


def test_a_retry_after_a_repartition_goes_where_its_key_goes_now() -> None:
    base = queue_keys("redisq", "orders")
    two, eight = Partitions(base, 2), Partitions(base, 8)
    keyed = {b"key": b"order-7", b"id": b"m-1", b"payload": b"{}"}
    loose = {b"id": b"m-2", b"payload": b"{}"}
    # A keyed message: its key's partition under the queue's number of partitions now
    assert redrive_target(base, eight, keyed, 1).part == partition_of("order-7", 8)
    # Another: the partition it died in while the queue has it, else its id's
    assert redrive_target(base, two, loose, 1).part == 1
    assert redrive_target(base, two, loose, 5).part == partition_of("m-2", 2)
    # An unpartitioned queue (now): its keys, whatever partition it died in
    assert redrive_target(base, None, keyed, 3) == base
