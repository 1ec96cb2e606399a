"""The admin with Django's test client: permissions, POST-only, CSRF, escaping, the
confirmation step, stats, the admin history and changelists whose query count does not
grow with their rows (the browser flow is in tests/browser)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from redisq_django.connection import get_broker
from redisq_django.models import Consumer, DeadLetter, Queue
from tests.support.admin_pages import cell, make_dead, staff

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]


def history() -> set[tuple[int, str, str]]:
    """The admin history: (object id, username, message) of every change entry."""
    return {
        (int(e.object_id), e.user.username, e.change_message)
        for e in LogEntry.objects.filter(action_flag=CHANGE)
    }


def test_retry_button_redrives_to_that_consumer_only(queue_name: str, broker: Any) -> None:
    # Given a dead letter of billing, and another consumer of the same queue
    broker.consumers.ensure(queue_name, "email", start="earliest")
    row = make_dead(broker, queue_name, {"order": 1})
    with broker.subscribe(queue_name, "email") as email:
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
    with broker.subscribe(queue_name, "billing") as billing:
        again = billing.fetch(count=10, block_ms=300)
    assert [m.id for m in again] == [row.message_id] and again[0].attempts == 1
    with broker.subscribe(queue_name, "email") as email:
        assert email.fetch(count=10, block_ms=100) == []
    follow = client.get(response["Location"])
    assert (
        f"Message {row.message_id} sent again to {queue_name}/billing.".encode() in follow.content
    )
    # ... and the admin history says who retried it, and where it went
    (entry,) = LogEntry.objects.all()
    assert (entry.user.username, entry.action_flag) == ("ops", CHANGE)
    assert entry.get_edited_object() == row
    assert entry.change_message == f"Retried: sent again to {queue_name}/billing"

    # Pressing it again (the row is no longer dead) changes and records nothing
    again_page = client.post(
        reverse("admin:redisq_django_deadletter_retry", args=[row.pk]),
        {"csrfmiddlewaretoken": token},
        follow=True,
    )
    assert f"Message {row.message_id} is retried; not retried.".encode() in again_page.content
    assert LogEntry.objects.count() == 1


def test_retry_returns_to_the_filtered_list_it_came_from(queue_name: str, broker: Any) -> None:
    row = make_dead(broker, queue_name, {"order": 9})
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


def test_retry_needs_post_csrf_and_permission(queue_name: str, broker: Any) -> None:
    row = make_dead(broker, queue_name, {"order": 2})
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


def test_payload_and_traceback_are_escaped(queue_name: str, broker: Any) -> None:
    row = make_dead(broker, queue_name, {"note": "<script>alert('x')</script>"})
    client = Client()
    client.force_login(staff("viewer", "view_deadletter"))
    page = client.get(reverse("admin:redisq_django_deadletter_change", args=[row.pk]))
    assert page.status_code == 200
    assert b"<script>alert" not in page.content
    assert b"&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in page.content
    assert b"card declined &lt;b&gt;" in page.content


def test_a_dead_letters_ordering_key_is_shown_escaped_in_the_list_and_on_its_page(
    queue_name: str, broker: Any
) -> None:
    # Given a dead letter whose message had a key holding markup, and one without
    keyed = make_dead(broker, queue_name, {"order": 5}, key="<i>order-5</i>")
    plain = make_dead(broker, queue_name, {"order": 6})
    assert keyed.envelope["key"] == "<i>order-5</i>"  # kept with the fields a retry sends
    client = Client()
    client.force_login(staff("viewer", "view_deadletter"))
    escaped = "&lt;i&gt;order-5&lt;/i&gt;"
    # Then its page shows the key, escaped; the other's page shows none
    page = client.get(reverse("admin:redisq_django_deadletter_change", args=[keyed.pk]))
    text = page.content.decode()
    assert "<i>order-5" not in text
    assert re.search(r"(?i)ordering key:</label>\s*<div class=\"readonly\">" + escaped, text)
    other = client.get(reverse("admin:redisq_django_deadletter_change", args=[plain.pk]))
    assert re.search(
        r"(?i)ordering key:</label>\s*<div class=\"readonly\">-<", other.content.decode()
    )
    # And the list shows it after the message id
    listing = client.get(reverse("admin:redisq_django_deadletter_changelist")).content.decode()
    assert f'<span class="redisq-key">{escaped}</span>' in listing
    assert listing.count('class="redisq-key"') == 1


def test_actions_ask_for_confirmation_then_act(queue_name: str, broker: Any) -> None:
    rows = [make_dead(broker, queue_name, {"order": n}) for n in (3, 4)]
    client = Client()
    client.force_login(staff("ops", "view_deadletter", "retry_deadletter"))
    url = reverse("admin:redisq_django_deadletter_changelist")
    data = {"action": "discard_selected", "_selected_action": [r.pk for r in rows]}

    confirm = client.post(url, data)
    assert confirm.status_code == 200 and b"Yes, I" in confirm.content
    assert DeadLetter.objects.filter(status=DeadLetter.Status.DEAD).count() == 2

    done = client.post(url, {**data, "post": "yes"}, follow=True)
    assert b"Discarded 2 dead letters." in done.content
    assert DeadLetter.objects.filter(status=DeadLetter.Status.DISCARDED).count() == 2
    assert history() == {(row.pk, "ops", "Discarded") for row in rows}


def test_retry_action_sends_each_again_and_records_it(queue_name: str, broker: Any) -> None:
    # Given two dead letters of billing and one already discarded
    rows = [make_dead(broker, queue_name, {"order": n}) for n in (10, 11)]
    gone = make_dead(broker, queue_name, {"order": 12})
    gone.status = DeadLetter.Status.DISCARDED
    gone.save()
    client = Client()
    client.force_login(staff("ops", "view_deadletter", "retry_deadletter"))
    url = reverse("admin:redisq_django_deadletter_changelist")

    # When staff retry all three and confirm
    selected = [r.pk for r in (*rows, gone)]
    data = {"action": "retry_selected", "_selected_action": selected, "post": "yes"}
    done = client.post(url, data, follow=True)

    # Then the two dead ones are sent again and recorded; the discarded one is not
    assert b"Sent 2 dead letters again, each to its own consumer." in done.content
    with broker.subscribe(queue_name, "billing") as billing:
        again = billing.fetch(count=10, block_ms=300)
    assert {m.id for m in again} == {r.message_id for r in rows}
    retried = f"Retried: sent again to {queue_name}/billing"
    assert history() == {(row.pk, "ops", retried) for row in rows}

    # ... and a single one reads in the singular
    one = make_dead(broker, queue_name, {"order": 13})
    done = client.post(url, {**data, "_selected_action": [one.pk]}, follow=True)
    assert b"Sent 1 dead letter again, to its own consumer." in done.content


def test_actions_are_hidden_without_the_permission(queue_name: str, broker: Any) -> None:
    make_dead(broker, queue_name, {"order": 5})
    client = Client()
    client.force_login(staff("viewer", "view_deadletter"))
    page = client.get(reverse("admin:redisq_django_deadletter_changelist"))
    assert b"retry_selected" not in page.content and b"discard_selected" not in page.content


def test_filters_and_search(queue_name: str, broker: Any) -> None:
    make_dead(broker, queue_name, {"order": 6, "sku": "needle-123"})
    make_dead(broker, queue_name, {"order": 7}, consumer="email")
    client = Client()
    client.force_login(staff("viewer", "view_deadletter"))
    url = reverse("admin:redisq_django_deadletter_changelist")
    found = client.get(url, {"q": "needle-123"})
    assert found.context["cl"].result_count == 1
    by_consumer = client.get(url, {"consumer": "email"})
    assert by_consumer.context["cl"].result_count == 1
    by_error = client.get(url, {"error_class": "ValueError", "status__exact": "dead"})
    assert by_error.context["cl"].result_count == 2


# The overview lists every queue in Redis: its figures must be this test's only.
@pytest.mark.usefixtures("empty_redis")
def test_queue_stats_columns_and_overview(queue_name: str, broker: Any) -> None:
    broker.consumers.ensure(queue_name, "billing")
    broker.publish_many(queue_name, [{"n": n} for n in range(3)])
    Queue.objects.create(name=queue_name)
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    page = client.get(reverse("admin:redisq_django_queue_changelist"))
    assert page.status_code == 200
    assert cell(page.content, "length", queue_name) == ["3"]
    assert cell(page.content, "backlog", queue_name) == ["3"]
    overview = client.get(reverse("admin:redisq_django_overview_changelist"))
    assert overview.status_code == 200
    # ... refreshed in place from its JSON endpoint, not by reloading the page
    data_url = reverse("admin:redisq_django_overview_data")
    assert b'http-equiv="refresh"' not in overview.content and b"billing" in overview.content
    assert f'data-url="{data_url}"'.encode() in overview.content
    assert "billing" in client.get(data_url).json()["html"]["table"]
    index = client.get(reverse("admin:index"))
    assert reverse("admin:redisq_django_overview_changelist").encode() in index.content


# The overview lists every queue in Redis: its figures must be this test's only.
@pytest.mark.usefixtures("empty_redis")
def test_archive_lag_is_shown_when_history_is_on(queue_name: str, redisq_settings: Any) -> None:
    # Given history on, 5 messages of which the archive stored 2
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "HISTORY": True}
    broker = get_broker()
    broker.consumers.ensure(queue_name, "billing")
    ids = broker.publish_many(queue_name, [{"n": n} for n in range(5)])
    broker.archives.register(queue_name, "default", "messages", ids[1])
    Queue.objects.create(name=queue_name)
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    # Then the queue list and the overview show the archive 3 messages behind
    page = client.get(reverse("admin:redisq_django_queue_changelist"))
    assert cell(page.content, "archive_lag", queue_name) == ["3"]
    overview = client.get(reverse("admin:redisq_django_overview_changelist"))
    assert b"archive lag" in overview.content
    assert re.search(r'data-label="archive lag"><span [^>]*>3</span>', overview.content.decode())


def test_archive_lag_column_is_absent_when_history_is_off(queue_name: str, broker: Any) -> None:
    Queue.objects.create(name=queue_name)
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    page = client.get(reverse("admin:redisq_django_queue_changelist"))
    assert b'class="field-archive_lag' not in page.content


def test_pause_action_on_consumers(queue_name: str, broker: Any) -> None:
    queue = Queue.objects.create(name=queue_name)
    consumer = Consumer.objects.create(queue=queue, name="billing", handler="x.y")
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    done = client.post(
        reverse("admin:redisq_django_consumer_changelist"),
        {"action": "pause", "_selected_action": [consumer.pk]},
        follow=True,
    )
    consumer.refresh_from_db()
    assert consumer.paused
    assert b"Paused 1 consumer. Running workers apply the change within seconds." in done.content
    assert history() == {(consumer.pk, "root", "Paused")}


def test_pause_and_resume_queues_are_counted_and_recorded(queue_name: str, broker: Any) -> None:
    # Given two queues, one of them already paused
    shop = Queue.objects.create(name=queue_name)
    audit = Queue.objects.create(name=f"{queue_name}.audit", paused=True)
    client = Client()
    client.force_login(staff("ops", "view_queue", "change_queue"))
    url = reverse("admin:redisq_django_queue_changelist")
    both = [shop.pk, audit.pk]

    # When staff pause both, then resume both
    paused = client.post(url, {"action": "pause", "_selected_action": both}, follow=True)
    resumed = client.post(url, {"action": "resume", "_selected_action": both}, follow=True)

    # Then each says how many it changed, and the history has one entry per change
    assert b"Paused 1 queue." in paused.content
    assert b"Resumed 2 queues." in resumed.content
    assert {q.paused for q in Queue.objects.all()} == {False}
    assert sorted(
        LogEntry.objects.filter(action_flag=CHANGE).values_list("object_id", "change_message")
    ) == sorted([(str(shop.pk), "Paused"), (str(shop.pk), "Resumed"), (str(audit.pk), "Resumed")])
    assert {e.user.username for e in LogEntry.objects.all()} == {"ops"}


# -- query counts ----------------------------------------------------------------------


def add_queues(prefix: str, total: int) -> None:
    """Queues <prefix>.q00, <prefix>.q01, ... up to ``total``, each with a consumer and a
    dead letter."""
    # Counted by prefix: the declared consumers' queues have rows of their own.
    for i in range(Queue.objects.filter(name__startswith=f"{prefix}.q").count(), total):
        queue = Queue.objects.create(name=f"{prefix}.q{i:02}")
        Consumer.objects.create(queue=queue, name="c", handler="x.y")
        DeadLetter.objects.create(
            queue=queue.name, consumer="c", message_id=f"m{i}", payload="{}", reason="failed"
        )


@pytest.mark.parametrize("model", ["queue", "consumer", "overview", "deadletter"])
def test_changelist_query_count_does_not_grow_with_rows(
    queue_name: str,
    broker: Any,
    django_assert_num_queries: Any,
    model: str,
    request: pytest.FixtureRequest,
) -> None:
    if model == "overview":
        # The overview lists every queue in Redis too: only this test's rows, please.
        request.getfixturevalue("empty_redis")
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    url = reverse(f"admin:redisq_django_{model}_changelist")

    # Given 2 rows, the page costs some queries
    add_queues(queue_name, 2)
    with CaptureQueriesContext(connection) as two:
        assert client.get(url).status_code == 200

    # When there are 20, it costs the same (live Redis figures are not queries)
    add_queues(queue_name, 20)
    with django_assert_num_queries(len(two)):
        page_20 = client.get(url)
    assert page_20.status_code == 200
    assert page_20.content.count(f"{queue_name}.q19".encode()) >= 1


@pytest.mark.parametrize(("model", "most"), [("queue", 3), ("consumer", 2)])
def test_dead_column_counts_dead_rows_and_sorts(
    queue_name: str, broker: Any, model: str, most: int
) -> None:
    # Given shop/billing with two dead rows (and one retried), shop/email with one, and
    # audit/archive with none
    shop = Queue.objects.create(name=queue_name)
    Consumer.objects.create(queue=shop, name="billing", handler="x.y")
    Consumer.objects.create(queue=shop, name="email", handler="x.y")
    audit = Queue.objects.create(name=f"{queue_name}.audit")
    Consumer.objects.create(queue=audit, name="archive", handler="x.y")
    for n, (consumer, status) in enumerate(
        [
            ("billing", DeadLetter.Status.DEAD),
            ("billing", DeadLetter.Status.RETRIED),
            ("email", DeadLetter.Status.DEAD),
            ("billing", DeadLetter.Status.DEAD),
        ]
    ):
        DeadLetter.objects.create(
            queue=queue_name,
            consumer=consumer,
            message_id=f"m{n}",
            payload="{}",
            reason="failed",
            status=status,
        )
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    url = reverse(f"admin:redisq_django_{model}_changelist")

    # When sorted by the dead column, most first
    column = list(client.get(url).context["cl"].list_display).index("dead")
    listed = client.get(url, {"o": f"-{column}"})

    # Then the column shows the dead rows (Redis holds none) and the most are first
    assert listed.context["cl"].result_list[0].dead_rows == most
    dead = cell(listed.content, "dead")
    assert dead[0] == str(most) and "0" in dead
