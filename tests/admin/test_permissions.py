"""The console's permission matrix, with Django's test client: every page and every action
as an anonymous visitor, staff without permissions, a view-only user, a user who may
change but not delete, and a superuser. No 500 anywhere; no action beyond the permission,
asserted on what Redis and the database hold after each POST."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from redisq_django.models import Consumer, DeadLetter, Queue
from tests.support.live_data import Live

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]

KINDS = ("anonymous", "nobody", "viewer", "changer", "root")


def user_client(kind: str) -> Client:
    """A client logged in as ``kind`` (one of :data:`KINDS`)."""
    client = Client()
    if kind == "anonymous":
        return client
    if kind == "root":
        client.force_login(User.objects.create_superuser("root", password="pw"))
        return client
    user = User.objects.create_user(kind, password="pw", is_staff=True)
    verbs = {"nobody": (), "viewer": ("view",), "changer": ("view", "change")}[kind]
    for verb in verbs:
        user.user_permissions.add(
            *Permission.objects.filter(
                content_type__app_label="redisq_django", codename__startswith=f"{verb}_"
            )
        )
    client.force_login(user)
    return client


def pages(queue: str, made: Live) -> list[str]:
    """Every console page that shows ``queue`` of :func:`live_consumer`."""
    q = Queue.objects.get(name=queue)
    billing = Consumer.objects.get(queue=q, name="billing")
    consumer_live = reverse("admin:redisq_django_consumer_live", args=[queue, "billing"])
    queue_live = reverse("admin:redisq_django_queue_live", args=[queue])
    dead = DeadLetter.objects.first()
    out = [
        reverse("admin:redisq_django_overview_changelist"),
        reverse("admin:redisq_django_overview_data"),
        reverse("admin:redisq_django_queue_changelist"),
        reverse("admin:redisq_django_queue_change", args=[q.pk]),
        reverse("admin:redisq_django_consumer_changelist"),
        reverse("admin:redisq_django_consumer_change", args=[billing.pk]),
        reverse("admin:redisq_django_schedule_changelist"),
        reverse("admin:redisq_django_taskresults_changelist"),
        reverse("admin:redisq_django_deadletter_changelist"),
        reverse("admin:redisq_django_deadletter_causes") + "?status__exact=dead",
        queue_live,
        *(f"{queue_live}?list={name}" for name in ("consumers", "delayed", "log")),
        reverse("admin:redisq_django_queue_live_data", args=[queue]) + "?charts=1",
        consumer_live,
        *(
            f"{consumer_live}?list={name}"
            for name in ("waiting", "delayed", "retrying", "in_flight", "instances", "dead")
        ),
        reverse("admin:redisq_django_consumer_live_data", args=[queue, "billing"]) + "?charts=1",
        reverse("admin:redisq_django_consumer_live_message", args=[queue, "billing"])
        + f"?ref=log:{made.running.entry_id.decode() if made.running else ''}",
    ]
    if dead is not None:
        out.append(reverse("admin:redisq_django_deadletter_change", args=[dead.pk]))
    return out


def state(broker: Any, queue: str) -> dict[str, Any]:
    """What an action could change: lengths in Redis, positions, the paused flags."""
    keys = broker.keys(queue)
    g = keys.group("billing")
    client = broker.client
    groups = {info["name"]: info["last-delivered-id"] for info in client.xinfo_groups(keys.log)}
    return {
        "log": client.xlen(keys.log),
        "delayed": client.zcard(keys.delayed),
        "retry": client.zcard(g.retry),
        "direct": client.xlen(g.direct) if client.exists(g.direct) else 0,
        "position": groups.get(b"billing"),
        "queue_paused": Queue.objects.get(name=queue).paused,
        "billing_paused": Consumer.objects.get(queue__name=queue, name="billing").paused,
        "dead_in_redis": client.xlen(g.dead) if client.exists(g.dead) else 0,
    }


@pytest.mark.parametrize("kind", KINDS)
def test_every_console_page_answers_each_kind_of_user_as_its_permissions_allow(
    made: Live, queue_name: str, kind: str
) -> None:
    # Given the console's pages, with every kind of message of a queue in Redis
    client = user_client(kind)
    # When each kind of user opens each page
    got = {url: client.get(url) for url in pages(queue_name, made)}
    # Then: anonymous visitors go to the login page, staff without permissions are
    # refused, everyone with the view permission sees every page; never a 500
    for url, response in got.items():
        if kind == "anonymous":
            assert response.status_code == 302, url
            assert response["Location"].startswith(reverse("admin:login")), url
        elif kind == "nobody":
            assert response.status_code == 403, url
        else:
            assert response.status_code == 200, (url, response.status_code)


def actions(queue: str, made: Live) -> list[tuple[str, str, dict[str, str]]]:
    """(name, url, POST data) of every live-page action on ``queue`` and on billing."""

    def url(action: str, consumer: str | None = None) -> str:
        if consumer is None:
            return reverse("admin:redisq_django_queue_live_action", args=[queue, action])
        return reverse("admin:redisq_django_consumer_live_action", args=[queue, consumer, action])

    return [
        ("queue pause", url("pause"), {}),
        ("consumer pause", url("pause", "billing"), {}),
        ("queue deliver", url("deliver"), {"ref": "delayed:*"}),
        ("consumer deliver", url("deliver", "billing"), {"ref": "retry:*"}),
        ("consumer replay", url("replay", "billing"), {"start": "earliest"}),
        ("consumer purge", url("purge", "billing"), {"confirm_name": "billing"}),
        ("queue purge", url("purge"), {"confirm_name": queue}),
    ]


def _ref(broker: Any, queue: str, where: str) -> str:
    """The ref of the first delayed message, or of billing's first retry."""
    keys = broker.keys(queue)
    zset = keys.delayed if where == "delayed" else keys.group("billing").retry
    member, score = broker.client.zrange(zset, 0, 0, withscores=True)[0]
    return f"{where}:{int(score)}:{json.loads(member)['id']}"


#: What each kind may do of the live pages' actions (the superuser: everything).
ALLOWED: dict[str, set[str]] = {
    "anonymous": set(),
    "nobody": set(),
    "viewer": set(),
    "changer": {
        "queue pause",
        "consumer pause",
        "queue deliver",
        "consumer deliver",
        "consumer replay",
    },
}


@pytest.mark.parametrize("kind", KINDS)
def test_no_user_does_more_than_their_permissions_allow(
    broker: Any, made: Live, queue_name: str, kind: str
) -> None:
    # Given a queue with every kind of message, and a user of each kind
    client = user_client(kind)
    for name, url, data in actions(queue_name, made):
        if "ref" in data:
            data = {"ref": _ref(broker, queue_name, data["ref"].partition(":")[0])}
        before = state(broker, queue_name)
        # When the user posts the action (confirmed, where it asks for a confirmation)
        response = client.post(url, data)
        after = state(broker, queue_name)
        # Then it is done only when the permission allows it, and never answers 500
        allowed = kind == "root" or name in ALLOWED[kind]
        assert response.status_code != 500, name
        if kind == "anonymous":
            assert response.status_code == 302, name
            assert response["Location"].startswith(reverse("admin:login")), name
        elif allowed:
            assert response.status_code == 302, (name, response.status_code)
            assert after != before, name
        else:
            assert response.status_code == 403, (name, response.status_code)
            assert after == before, name
        if name.endswith("pause") and allowed:  # resume, so the next action finds it running
            assert client.post(url.replace("/pause/", "/resume/")).status_code == 302


@pytest.mark.parametrize("kind", ["viewer", "changer"])
def test_purge_is_neither_offered_nor_confirmable_without_the_delete_permission(
    made: Live, queue_name: str, kind: str
) -> None:
    # Given a user who may view (or change) queues and consumers but not delete them
    client = user_client(kind)
    queue_page = reverse("admin:redisq_django_queue_live", args=[queue_name])
    consumer_page = reverse("admin:redisq_django_consumer_live", args=[queue_name, "billing"])
    # When they open the live pages and the purge confirmation pages
    shown = [client.get(queue_page), client.get(consumer_page)]
    confirms = [client.get(f"{page}do/purge/") for page in (queue_page, consumer_page)]
    # Then no page offers a purge, and the confirmation is refused
    assert [r.status_code for r in shown] == [200, 200]
    assert all(b'id="redisq-purge"' not in r.content for r in shown)
    assert [r.status_code for r in confirms] == [403, 403]


def test_a_superuser_is_offered_the_purge(made: Live, queue_name: str) -> None:
    client = user_client("root")
    page = client.get(reverse("admin:redisq_django_queue_live", args=[queue_name]))
    assert b'id="redisq-purge"' in page.content


@pytest.mark.parametrize("kind", ["viewer", "changer"])
def test_changelist_actions_beyond_the_permission_do_nothing(
    made: Live, queue_name: str, kind: str
) -> None:
    # Given a user without the delete permission (the viewer: without change either)
    client = user_client(kind)
    q = Queue.objects.get(name=queue_name)
    url = reverse("admin:redisq_django_queue_changelist")
    # When they post the changelist's delete and pause actions on the queue's row
    for action in ("delete_selected", "pause"):
        response = client.post(url, {"action": action, "_selected_action": [q.pk], "post": "yes"})
        assert response.status_code in (200, 302, 403), (action, response.status_code)
    # Then the row is still there; a viewer did not pause it, a changer did
    q.refresh_from_db()
    assert q.paused is (kind == "changer")
