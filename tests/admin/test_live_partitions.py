"""The live pages of a partitioned queue (``REDISQ["PARTITIONS"]``): one queue whose
figures add up over its partitions, lists that hold every partition's messages with refs
that name their partition, a message page that says which, and deliver-now that reaches
it. Django's test client, real Redis."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.core import Place, partition_of
from redisq_django.models import Consumer, Queue

pytestmark = pytest.mark.django_db

K = 3
REF = re.compile(rb'<tr data-ref="([^"]+)"')


@pytest.fixture
def shop(redisq_settings: Any, queue_name: str) -> dict[str, Any]:
    """A queue of 3 partitions, consumer billing; 9 keyed messages (one of partition 1 in
    flight) and 2 delayed."""
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "PARTITIONS": {queue_name: K}}
    live.clear()
    broker = get_broker()
    q = Queue.objects.create(name=queue_name)
    Consumer.objects.create(queue=q, name="billing", handler="shop.consumers.billing")
    broker.consumers.ensure(queue_name, "billing")
    keys = {broker.publish(queue_name, {"n": n}, key=f"k{n}"): f"k{n}" for n in range(9)}
    delayed = [broker.publish(queue_name, {"later": n}, delay=3600 + n) for n in range(2)]
    sub = broker.subscribe(Place(queue_name, 1), "billing", "worker-1")
    [taken] = sub.fetch(count=1, block_ms=200)
    return {"broker": broker, "keys": keys, "delayed": delayed, "taken": taken}


def url(queue: str, what: str = "", consumer: str | None = "billing") -> str:
    if consumer is None:
        return reverse(f"admin:redisq_django_queue_live{what}", args=[queue])
    return reverse(f"admin:redisq_django_consumer_live{what}", args=[queue, consumer])


def refs(client: Client, page: str, **params: Any) -> list[str]:
    response = client.get(page, params)
    assert response.status_code == 200
    return [r.decode() for r in REF.findall(response.content)]


def test_figures_and_lists_are_the_whole_queue(
    root: Client, shop: dict[str, Any], queue_name: str
) -> None:
    # When staff open billing's live page and its JSON, and the queue's
    figures = root.get(url(queue_name, "_data")).json()["figures"]
    queue_figures = root.get(url(queue_name, "_data", None)).json()["figures"]
    waiting = refs(root, url(queue_name), list="waiting")
    in_flight = refs(root, url(queue_name), list="in_flight")
    log = refs(root, url(queue_name, consumer=None), list="log", n=4)

    # Then the figures add up over the 3 partitions
    assert (figures["backlog"], figures["in_flight"], figures["delayed"]) == (8, 1, 2)
    assert (queue_figures["length"], queue_figures["backlog"]) == (9, 8)
    assert queue_figures["partitions"] == K  # the admin shows K on the queue's page
    assert "partitions" not in figures  # (a consumer's page: its figures only)
    page = root.get(url(queue_name, consumer=None)).content.decode()
    assert 'id="redisq-fig-partitions"' in page
    # and each list row names its partition (the one of its message's key)
    assert len(waiting) == 8 and len(log) == 4
    assert in_flight == [f"log:{shop['taken'].entry_id.decode()}@1"]
    broker = shop["broker"]
    for ref in waiting:
        entry = broker.operator.find(queue_name, "billing", ref)
        assert ref.endswith(f"@{partition_of(shop['keys'][entry.message_id], K)}")


def test_a_message_page_says_its_partition_and_deliver_now_reaches_it(
    root: Client, shop: dict[str, Any], queue_name: str
) -> None:
    # Given the delayed list's first row (a ref naming its partition)
    first = refs(root, url(queue_name), list="delayed")[0]
    part = int(first.rpartition("@")[2])
    # When staff open it, then deliver it now
    page = root.get(url(queue_name, "_message"), {"ref": first}).content.decode()
    action = reverse(
        "admin:redisq_django_consumer_live_action", args=[queue_name, "billing", "deliver"]
    )
    done = root.post(action, {"ref": first}, follow=True)

    # Then the page names the message and its partition
    assert f"Message {shop['delayed'][0]}" in page
    assert f'<p id="redisq-partition">Partition {part}</p>' in page
    # and it is delivered, its own id in the message, into that partition's log
    assert f"Delivered delayed message {shop['delayed'][0]} now." in done.content.decode()
    log = shop["broker"].keys(queue_name).partition(part).log
    assert shop["broker"].client.xlen(log) == 1 + sum(
        partition_of(k, K) == part for k in shop["keys"].values()
    )
    # and a ref without its partition is no message of this queue
    bare = first.rpartition("@")[0]
    assert root.get(url(queue_name, "_message"), {"ref": bare}).status_code == 404
