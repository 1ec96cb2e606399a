"""The admin with Django's test client: permissions, POST-only, CSRF, escaping, the
confirmation step and stats (the browser flow is in tests/browser)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from redisq_django.connection import get_broker
from redisq_django.models import DeadLetter, Queue

pytestmark = pytest.mark.django_db


def make_dead(broker: Any, payload: Any, consumer: str = "billing") -> DeadLetter:
    """A real dead letter: published, fetched, rejected, sunk into the database."""
    from redisq_django.deadletters import sink

    broker.ensure_consumer("shop", consumer)  # latest: only what is published next
    broker.publish("shop", payload)
    with broker.subscribe("shop", consumer) as sub:
        (message,) = sub.fetch(count=1, block_ms=500)
        sub.reject(message, ValueError("card declined <b>"))
    sink("shop", consumer)
    return DeadLetter.objects.get(queue="shop", consumer=consumer, message_id=message.id)


def staff(username: str, *perms: str) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    return user


@pytest.fixture
def broker(redisq_settings: Any) -> Any:
    return get_broker()


def test_retry_button_redrives_to_that_consumer_only(broker: Any) -> None:
    # Given a dead letter of billing, and another consumer of the same queue
    broker.ensure_consumer("shop", "email", start="earliest")
    row = make_dead(broker, {"order": 1})
    with broker.subscribe("shop", "email") as email:
        email.ack(email.fetch(count=10, block_ms=100))
    client = Client(enforce_csrf_checks=True)
    client.force_login(staff("ops", "view_deadletter", "retry_deadletter"))

    # When staff open the list (which has the button) and press Retry
    page = client.get(reverse("admin:redisq_django_deadletter_changelist"))
    assert b"redisq-retry" in page.content
    token = page.cookies["csrftoken"].value
    response = client.post(
        reverse("admin:redisq_django_deadletter_retry", args=[row.pk]),
        {"csrfmiddlewaretoken": token},
    )

    # Then it is re-driven to billing only, and the row records who and when
    assert response.status_code == 302
    row.refresh_from_db()
    assert row.status == DeadLetter.Status.RETRIED and row.retry_count == 1
    assert row.retried_by.username == "ops" and row.retried_at is not None
    with broker.subscribe("shop", "billing") as billing:
        again = billing.fetch(count=10, block_ms=300)
    assert [m.id for m in again] == [row.message_id] and again[0].attempts == 1
    with broker.subscribe("shop", "email") as email:
        assert email.fetch(count=10, block_ms=100) == []
    follow = client.get(response["Location"])
    assert f"Message {row.message_id} sent again".encode() in follow.content


def test_retry_returns_to_the_filtered_list_it_came_from(broker: Any) -> None:
    row = make_dead(broker, {"order": 9})
    client = Client()
    client.force_login(staff("ops", "view_deadletter", "retry_deadletter"))
    url = reverse("admin:redisq_django_deadletter_retry", args=[row.pk])
    listed = reverse("admin:redisq_django_deadletter_changelist") + "?consumer=billing"
    back = client.post(url, HTTP_REFERER=f"http://testserver{listed}")
    assert back["Location"] == f"http://testserver{listed}"
    # never off-site
    row.status = DeadLetter.Status.DEAD
    row.save()
    elsewhere = client.post(url, HTTP_REFERER="https://evil.example/")
    assert elsewhere["Location"] == reverse("admin:redisq_django_deadletter_changelist")


def test_retry_needs_post_csrf_and_permission(broker: Any) -> None:
    row = make_dead(broker, {"order": 2})
    url = reverse("admin:redisq_django_deadletter_retry", args=[row.pk])

    viewer = Client(enforce_csrf_checks=True)
    viewer.force_login(staff("viewer", "view_deadletter"))
    page = viewer.get(reverse("admin:redisq_django_deadletter_changelist"))
    assert page.status_code == 200 and b"redisq-retry" not in page.content
    token = page.cookies["csrftoken"].value
    assert viewer.post(url, {"csrfmiddlewaretoken": token}).status_code == 403

    ops = Client(enforce_csrf_checks=True)
    ops.force_login(staff("ops", "view_deadletter", "retry_deadletter"))
    assert ops.get(url).status_code == 405
    assert ops.post(url).status_code == 403  # no CSRF token
    row.refresh_from_db()
    assert row.status == DeadLetter.Status.DEAD and row.retry_count == 0


def test_payload_and_traceback_are_escaped(broker: Any) -> None:
    row = make_dead(broker, {"note": "<script>alert('x')</script>"})
    client = Client()
    client.force_login(staff("viewer", "view_deadletter"))
    page = client.get(reverse("admin:redisq_django_deadletter_change", args=[row.pk]))
    assert page.status_code == 200
    assert b"<script>alert" not in page.content
    assert b"&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page.content
    assert b"card declined &lt;b&gt;" in page.content


def test_actions_ask_for_confirmation_then_act(broker: Any) -> None:
    rows = [make_dead(broker, {"order": n}) for n in (3, 4)]
    client = Client()
    client.force_login(staff("ops", "view_deadletter", "retry_deadletter"))
    url = reverse("admin:redisq_django_deadletter_changelist")
    data = {"action": "discard_selected", "_selected_action": [r.pk for r in rows]}

    confirm = client.post(url, data)
    assert confirm.status_code == 200 and b"Yes, I" in confirm.content
    assert DeadLetter.objects.filter(status=DeadLetter.Status.DEAD).count() == 2

    done = client.post(url, {**data, "post": "yes"}, follow=True)
    assert b"Discarded 2 dead letter(s)." in done.content
    assert DeadLetter.objects.filter(status=DeadLetter.Status.DISCARDED).count() == 2


def test_actions_are_hidden_without_the_permission(broker: Any) -> None:
    make_dead(broker, {"order": 5})
    client = Client()
    client.force_login(staff("viewer", "view_deadletter"))
    page = client.get(reverse("admin:redisq_django_deadletter_changelist"))
    assert b"retry_selected" not in page.content and b"discard_selected" not in page.content


def test_filters_and_search(broker: Any) -> None:
    make_dead(broker, {"order": 6, "sku": "needle-123"})
    make_dead(broker, {"order": 7}, consumer="email")
    client = Client()
    client.force_login(staff("viewer", "view_deadletter"))
    url = reverse("admin:redisq_django_deadletter_changelist")
    found = client.get(url, {"q": "needle-123"})
    assert found.context["cl"].result_count == 1
    by_consumer = client.get(url, {"consumer": "email"})
    assert by_consumer.context["cl"].result_count == 1
    by_error = client.get(url, {"error_class": "ValueError", "status__exact": "dead"})
    assert by_error.context["cl"].result_count == 2


def test_queue_stats_columns_and_overview(broker: Any) -> None:
    broker.ensure_consumer("shop", "billing")
    broker.publish_many("shop", [{"n": n} for n in range(3)])
    Queue.objects.create(name="shop")
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    page = client.get(reverse("admin:redisq_django_queue_changelist"))
    assert page.status_code == 200
    assert b'<td class="field-length">3</td>' in page.content
    assert b'<td class="field-lag">3</td>' in page.content
    overview = client.get(reverse("admin:redisq_django_overview_changelist"))
    assert overview.status_code == 200
    assert b'http-equiv="refresh"' in overview.content and b"billing" in overview.content
    index = client.get(reverse("admin:index"))
    assert reverse("admin:redisq_django_overview_changelist").encode() in index.content


def test_pause_action_on_consumers(broker: Any) -> None:
    from redisq_django.models import Consumer

    queue = Queue.objects.create(name="shop")
    consumer = Consumer.objects.create(queue=queue, name="billing", handler="x.y")
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    client.post(
        reverse("admin:redisq_django_consumer_changelist"),
        {"action": "pause", "_selected_action": [consumer.pk]},
    )
    consumer.refresh_from_db()
    assert consumer.paused
