"""Records any Redis client may write (PROTOCOL.md does not stop it) never make a console
page answer 500: each page shows what it can and marks the unreadable record. The
records are written with raw redis-py, as another client would."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from redisq_django.core.keys import registry_key
from tests.support.live_data import Live

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]

#: JSON nested deeper than any parser's recursion limit.
DEEP = b"[" * 100_000 + b"]" * 100_000
DEEP_OBJECT = b'{"a":' * 100_000 + b"1" + b"}" * 100_000


@pytest.fixture(params=["root", "viewer"])
def client(request: pytest.FixtureRequest) -> Client:
    """A superuser, and a user who may only view."""
    client = Client()
    if request.param == "root":
        client.force_login(User.objects.create_superuser("root", password="pw"))
        return client
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label="redisq_django", codename__startswith="view_"
        )
    )
    client.force_login(user)
    return client


def consumer_page(queue: str, list_name: str) -> str:
    url = reverse("admin:redisq_django_consumer_live", args=[queue, "billing"])
    return f"{url}?list={list_name}"


def queue_page(queue: str, list_name: str) -> str:
    return f"{reverse('admin:redisq_django_queue_live', args=[queue])}?list={list_name}"


def shown(client: Client, url: str) -> str:
    """The page at ``url``, which must answer 200."""
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def test_a_queue_name_no_client_of_ours_would_write_leaves_the_overview_up(
    broker: Any, made: Live, queue_name: str, client: Client
) -> None:
    # Given a member "evil/name" in the queue registry, next to a real queue (removed
    # after: the registry is shared by every test of the session)
    registry = registry_key(broker.config.prefix)
    broker.client.sadd(registry, "evil/name")
    try:
        # When the overview, its JSON and the queue list are opened
        overview = shown(client, reverse("admin:redisq_django_overview_changelist"))
        data = client.get(reverse("admin:redisq_django_overview_data"))
        queues = shown(client, reverse("admin:redisq_django_queue_changelist"))
    finally:
        broker.client.srem(registry, "evil/name")
    # Then they answer, show the real queue, and mark the bad name as unreadable
    assert data.status_code == 200
    assert queue_name in overview and queue_name in queues
    assert "unreadable:" in overview and "evil/name" in overview


@pytest.mark.parametrize("digits", [20, 15])
def test_a_log_entry_with_a_huge_publish_time_leaves_the_lists_up(
    broker: Any, made: Live, queue_name: str, client: Client, digits: int
) -> None:
    # Given an entry in the queue's log whose published_at has 20 digits (no wire
    # integer: the entry id's time is shown) or 15 (one, but past the calendar's end)
    broker.client.xadd(
        broker.keys(queue_name).log,
        {"v": "1", "id": "evil-1", "payload": '{"x": 1}', "published_at": "9" * digits},
    )
    # When the log and billing's waiting list are shown (the entry waits for billing)
    pages = [shown(client, queue_page(queue_name, "log"))]
    pages.append(shown(client, consumer_page(queue_name, "waiting")))
    # Then both list the entry and the other entries; a time past the calendar is
    # marked unreadable
    for page in pages:
        assert "evil-1" in page
        assert ("unreadable:" in page) is (digits == 15)
    assert made.waiting[0] in pages[1]


@pytest.mark.parametrize(
    "report",
    [
        json.dumps({"host": "h", "pid": 1, "started": "abc", "since": "abc", "ttl": "x"}).encode(),
        json.dumps({"host": "h", "started": 10**30, "since": -(10**30), "ttl": 10**30}).encode(),
        json.dumps({"host": "h", "started": 1e308, "handled": [1, {"a": 2}]}).encode(),
        DEEP,
        DEEP_OBJECT,
        b"\xff\xfe not json",
    ],
    ids=["strings", "huge-ints", "huge-float", "deep-array", "deep-object", "bytes"],
)
def test_an_instance_report_of_any_shape_leaves_the_instances_list_up(
    broker: Any, made: Live, queue_name: str, client: Client, report: bytes
) -> None:
    # Given billing's instance worker-1 whose report another client overwrote
    gkeys = broker.keys(queue_name).group("billing")
    broker.client.set(gkeys.instance("worker-1"), report)
    # When the instances list is shown
    page = shown(client, consumer_page(queue_name, "instances"))
    # Then worker-1 is listed, and what cannot be read is marked so
    assert "worker-1" in page
    assert "unreadable:" in page


@pytest.mark.parametrize("member", [DEEP, DEEP_OBJECT], ids=["deep-array", "deep-object"])
def test_deeply_nested_delayed_and_retry_entries_leave_those_lists_up(
    broker: Any, made: Live, queue_name: str, client: Client, member: bytes
) -> None:
    # Given a deeply nested member in the delayed set and in billing's retries
    keys = broker.keys(queue_name)
    broker.client.zadd(keys.delayed, {member: 1})
    broker.client.zadd(keys.group("billing").retry, {member: 1})
    # When the delayed and retrying lists are shown
    pages = [
        shown(client, queue_page(queue_name, "delayed")),
        shown(client, consumer_page(queue_name, "delayed")),
        shown(client, consumer_page(queue_name, "retrying")),
    ]
    # Then each lists its real entries and the hostile one, marked unreadable
    for page in pages:
        assert "unreadable:" in page
    assert made.delayed[0] in pages[0] and made.delayed[0] in pages[1]
    assert made.retrying[0] in pages[2]


@pytest.mark.parametrize("where", ["delayed", "retrying"])
def test_an_unreadable_delayed_or_retry_entry_is_not_offered_deliver_now_and_says_why(
    broker: Any, made: Live, queue_name: str, root: Client, where: str
) -> None:
    # Given a member no client of ours would write (no JSON object of strings) among the
    # queue's delayed messages and billing's retries
    keys = broker.keys(queue_name)
    zset = keys.delayed if where == "delayed" else keys.group("billing").retry
    broker.client.zadd(zset, {b"\xff\xfe not json": 1})
    # When staff who may act open the list
    page = shown(root, consumer_page(queue_name, where))
    rows = re.findall(r"<tr[^>]*>.*?</tr>", page, re.S)
    hostile = [r for r in rows if "not json" in r]
    real = [r for r in rows if (made.delayed[0] if where == "delayed" else made.retrying[0]) in r]
    # Then its row offers no Deliver now and says why; a readable one's still does
    assert len(hostile) == 1 and len(real) == 1
    assert "redisq-deliver" not in hostile[0]
    assert "No Deliver now" in hostile[0] and "dead letter" in hostile[0]
    assert "redisq-deliver" in real[0]
    # ... and so does its own page
    link = re.search(r'<a class="redisq-msg" href="([^"]+)"', hostile[0])
    assert link
    message = shown(root, html.unescape(link[1]))
    assert 'id="redisq-deliver-now"' not in message
    assert "No Deliver now" in message
    # ... and a hand-made POST of Deliver now is refused with the same words, nothing moved
    ref = re.search(r'data-ref="([^"]+)"', hostile[0])
    assert ref
    url = reverse(
        "admin:redisq_django_consumer_live_action", args=[queue_name, "billing", "deliver"]
    )
    done = root.post(url, {"ref": html.unescape(ref[1])}, follow=True).content.decode()
    assert "No Deliver now" in html.unescape(done)
    assert broker.client.zscore(zset, b"\xff\xfe not json") == 1
