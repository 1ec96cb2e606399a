"""Partial states said precisely, with Django's test client on a real Redis: a queue whose
instances are alive but one of whose consumers has stalled names that consumer in its
warning, and a queue with one paused consumer among active ones does not read *Active*."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.models import Consumer, Queue

pytestmark = pytest.mark.django_db


@pytest.fixture
def orders(redisq_settings: Any, queue_name: str) -> Queue:
    """A queue of its own (the session's server is shared: a fixed name would meet other
    tests' consumers of that name), here called *orders*: ``fast`` with 3 instances alive
    (its backlog drained), ``slow`` with a backlog of 5 and no instance alive (stalled),
    ``mail`` paused with an instance alive."""
    broker = get_broker()
    queue = Queue.objects.create(name=queue_name)
    for name in ("fast", "slow", "mail"):
        Consumer.objects.create(
            queue=queue, name=name, handler=f"shop.{name}", paused=name == "mail"
        )
        broker.consumers.ensure(queue_name, name)
    broker.publish_many(queue_name, [{"n": i} for i in range(5)])
    # Instances that stay alive: subscriptions never left (leaving withdraws them)
    for consumer, instance in [("fast", "fast-1"), ("fast", "fast-2"), ("fast", "fast-3"),
                               ("mail", "mail-1")]:  # fmt: skip
        sub = broker.subscribe(queue_name, consumer, instance)
        sub.heartbeat(60_000)
        sub.ack(sub.fetch(count=100, block_ms=200))
    live.clear()
    return queue


def overview_line(html: str, queue: str) -> str:
    """The overview's row of ``queue`` after its name (the name itself left out:
    a test's queue name may contain the words the row is checked for)."""
    found = re.search(
        rf'<tr class="redisq-queue"><th><a href="[^"]*"><span class="redisq-name">'
        rf"{re.escape(queue)}</span></a></th>.*?</tr>",
        html.replace("<wbr>", ""),  # the name's wrapping points
        re.S,
    )
    assert found, html
    return found.group(0).split(f">{queue}</span></a>", 1)[1]


def text(html: str) -> str:
    """The text of ``html`` without tags, its spaces collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def test_the_overview_names_the_stalled_consumer_and_the_partial_pause(
    orders: Queue, root: Client
) -> None:
    # When the overview shows queue orders (4 instances alive, slow stalled, mail paused)
    page = root.get(reverse("admin:redisq_django_overview_changelist")).content.decode()
    line = text(overview_line(page, orders.name))
    # Then its warning says which consumer it concerns, and its state the partial pause
    assert "4 ⚠ consumer `slow`: backlog, no instance alive" in line
    assert "Active · 1 of 3 consumers paused" in line
    assert "Active Active" not in line  # no plain "Active" badge beside it
    # And the JSON the page polls says the same
    data = root.get(reverse("admin:redisq_django_overview_data")).json()
    assert "consumer `slow`: backlog, no instance alive" in text(data["html"]["table"])
    assert "1 of 3 consumers paused" in text(data["html"]["table"])


def test_the_queue_list_names_the_stalled_consumer_and_the_partial_pause(
    orders: Queue, root: Client
) -> None:
    page = root.get(reverse("admin:redisq_django_queue_changelist")).content.decode()
    page = page.replace("<wbr>", "")  # the name's wrapping points
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", page, re.S) if f">{orders.name}<" in r)
    state = re.search(r'<td class="field-state">(.*?)</td>', row, re.S)
    instances = re.search(r'<td class="field-instances_alive">(.*?)</td>', row, re.S)
    assert state and instances, row
    assert text(state.group(1)) == "Active · 1 of 3 consumers paused"
    assert text(instances.group(1)) == "4 ⚠ consumer `slow`: backlog, no instance alive"


def test_the_queue_live_page_names_the_stalled_consumer_and_the_partial_pause(
    orders: Queue, root: Client
) -> None:
    page = text(
        root.get(reverse("admin:redisq_django_queue_live", args=[orders.name])).content.decode()
    )
    assert "Active · 1 of 3 consumers paused" in page
    assert "Consumer `slow` has a backlog and no instance alive" in page
    assert "4 ⚠ consumer `slow`: backlog, no instance alive" in page


def test_every_consumer_paused_and_a_paused_queue_say_so(orders: Queue, root: Client) -> None:
    # Given every consumer of orders paused
    Consumer.objects.filter(queue=orders).update(paused=True)
    overview = reverse("admin:redisq_django_overview_changelist")
    line = text(overview_line(root.get(overview).content.decode(), orders.name))
    assert "Active · all 3 consumers paused" in line
    # Given the queue itself paused: Paused, whatever its consumers
    Queue.objects.filter(pk=orders.pk).update(paused=True)
    line = text(overview_line(root.get(overview).content.decode(), orders.name))
    assert "Paused" in line and "consumers paused" not in line
    # And with none paused: Active
    Queue.objects.filter(pk=orders.pk).update(paused=False)
    Consumer.objects.filter(queue=orders).update(paused=False)
    line = text(overview_line(root.get(overview).content.decode(), orders.name))
    assert "Active" in line and "paused" not in line


def test_a_consumer_page_keeps_its_own_warning(orders: Queue, root: Client) -> None:
    # The consumer's own pages speak of that consumer only: slow warns, fast does not
    slow = Consumer.objects.get(queue=orders, name="slow")
    fast = Consumer.objects.get(queue=orders, name="fast")
    slow_page = root.get(reverse("admin:redisq_django_consumer_change", args=[slow.pk]))
    fast_page = root.get(reverse("admin:redisq_django_consumer_change", args=[fast.pk]))
    assert "no instance of this consumer is alive" in slow_page.content.decode()
    assert "no instance of this consumer is alive" not in fast_page.content.decode()


def test_the_queue_page_names_the_stalled_consumer_and_the_partial_pause(
    orders: Queue, root: Client
) -> None:
    page = text(
        root.get(reverse("admin:redisq_django_queue_change", args=[orders.pk])).content.decode()
    )
    assert "⚠ consumer `slow`: backlog, no instance alive." in page
    assert "Active · 1 of 3 consumers paused" in page
    assert "4 ⚠ consumer `slow`: backlog, no instance alive" in page
