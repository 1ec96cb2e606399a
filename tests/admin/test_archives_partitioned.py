"""The archives of a partitioned queue in the admin and the shell: an archive's position
in each partition (their ids are their own), and removing it removes it from all."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.core.partitions.place import Place
from redisq_django.models import Queue

K = 3


pytestmark = [pytest.mark.django_db, pytest.mark.site_broker(REPLAY_WINDOW=0, queue_partitions=K)]


@pytest.fixture
def archived(broker: Any, queue_name: str) -> dict[int, str]:
    """Two acked messages per partition; archive "parts-nightly" stored the first of partition
    1 only. Returns each partition's first entry id."""
    broker.consumers.ensure(queue_name, "billing", "earliest")
    for n in range(2 * K):
        broker.publish(queue_name, {"n": n})
    first: dict[int, str] = {}
    for p in range(K):
        with broker.subscribe(Place(queue_name, p), "billing", f"i{p}") as sub:
            got = sub.fetch(count=10, block_ms=200)
            sub.ack(got)
            first[p] = min(
                (d.entry_id.decode() for d in got), key=lambda i: tuple(map(int, i.split("-")))
            )
    broker.archives.register_all(queue_name, "parts-nightly", "messages")
    broker.archives.commit(Place(queue_name, 1), "parts-nightly", "messages", first[1])
    return first


def test_the_queue_page_shows_an_archives_position_in_each_partition(
    broker: Any, archived: dict[int, str], queue_name: str
) -> None:
    row = Queue.objects.create(name=queue_name)
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_superuser("ops", password="pw"))
    # The page: a partition column, one row per partition with its own position and lag
    page = client.get(reverse("admin:redisq_django_queue_change", args=[row.pk]))
    text = page.content.decode()
    assert "<th>partition</th>" in text
    cells = re.findall(r"<tr><td>parts-nightly</td><td>messages</td>(.*?)</tr>", text)
    shown = [re.findall(r"<td>(.*?)</td>", c)[:3] for c in cells]
    assert shown == [["0", "0-0", "2"], ["1", archived[1], "1"], ["2", "0-0", "2"]]
    # The confirmation page lists each partition's position
    url = reverse("admin:redisq_django_queue_archive_remove", args=[queue_name, "parts-nightly"])
    confirm = client.get(url)
    assert confirm.content.decode().count("partition ") >= K
    # Removing it removes it from every partition
    token = confirm.cookies["csrftoken"].value
    assert client.post(url, {"csrfmiddlewaretoken": token}).status_code == 302
    assert broker.archives.states(queue_name) == []
    assert broker.trim(queue_name) == (2 * K, 0)


def test_the_shell_lists_an_archive_per_partition(
    broker: Any, archived: dict[int, str], queue_name: str
) -> None:
    out = io.StringIO()
    call_command("redisq", "archives", "list", "--queue", queue_name, stdout=out)
    lines = [line.split() for line in out.getvalue().splitlines()[1 : K + 1]]
    assert [(w[0], w[1], w[3], w[4]) for w in lines] == [
        (f"{queue_name}#0", "parts-nightly", "0-0", "2"),
        (f"{queue_name}#1", "parts-nightly", archived[1], "1"),
        (f"{queue_name}#2", "parts-nightly", "0-0", "2"),
    ]


def test_an_unpartitioned_queues_page_has_no_partition_column(
    redisq_settings: Any, queue_name: str
) -> None:
    live.clear()
    broker = get_broker()
    broker.consumers.ensure(queue_name, "billing")
    broker.archives.register(queue_name, "parts-nightly", "messages", "latest")
    row = Queue.objects.create(name=queue_name)
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_queue"))
    client = Client()
    client.force_login(viewer)
    text = client.get(reverse("admin:redisq_django_queue_change", args=[row.pk])).content
    assert b"<td>parts-nightly</td><td>messages</td>" in text and b"<th>partition</th>" not in text
