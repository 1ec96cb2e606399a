"""Dead-letter triage at scale with Django's test client: retry and discard thousands
from a filter (never one form field per row), dead letters by cause, every death kept, the
detail page's links and undecodable entries, and the operator command calling the same
functions."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.http import urlencode

from redisq_django import deadletters
from redisq_django.connection import get_broker
from redisq_django.deadletters import triage
from redisq_django.models import DeadLetter, DeadLetterFailure
from tests.support.console_data import failure, kill, many_dead, undecodable
from tests.support.reading import read_all

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]

CHANGELIST = "admin:redisq_django_deadletter_changelist"


@pytest.fixture
def ops() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", password="pw"))
    return client


def hidden_fields(html: str) -> list[tuple[str, str]]:
    """The hidden inputs of the page's confirmation form."""
    form = re.search(r'<form method="post" action="[^"]*">(.*?)</form>', html, re.S)
    assert form, html[:2000]
    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(1))
    return [f for f in found if f[0] != "csrfmiddlewaretoken"]


@pytest.mark.slow
def test_retry_5000_selected_across_pages_in_one_action(
    queue_name: str, broker: Any, ops: Client
) -> None:
    # Given 5,000 dead letters of billing and 10 of email
    ids = many_dead(broker, queue_name, "billing", 5000)
    many_dead(broker, queue_name, "email", 10)
    url = reverse(CHANGELIST) + "?" + urlencode({"queue": queue_name, "consumer": "billing"})

    # When staff tick the page, choose "select all 5000" and run Retry
    page_ids = DeadLetter.objects.filter(consumer="billing").values_list("pk", flat=True)[:100]
    first = ops.post(
        url,
        {
            "action": "retry_selected",
            "select_across": "1",
            "index": "0",
            "_selected_action": list(page_ids),
        },
    )

    # Then the confirmation summarises, and its form carries no field per row
    assert first.status_code == 200
    html = first.content.decode()
    assert "Retry these 5000 dead letters?" in html
    assert f"{queue_name}/billing" in html and "ValueError" in html
    assert html.count("<li>") <= 20  # a sample, not the rows
    fields = hidden_fields(html)
    assert ("select_across", "1") in fields and ("post", "yes") in fields
    assert len([f for f in fields if f[0] == "_selected_action"]) == 1  # Django wants one
    assert len(fields) < 10

    # When confirmed
    done = ops.post(url, dict(fields), follow=True)

    # Then all 5,000 were sent again to billing (every id, once, first attempt), none to
    # email, each row is retried and in the history, and the list kept its filters
    msgs = re.findall(r"<li class=\"[a-z]+\">(.*?)</li>", done.content.decode(), re.S)
    assert b"Sent 5000 dead letters again, each to its own consumer." in done.content, msgs
    got = read_all(broker, queue_name, "billing")
    assert sorted(m.id for m in got) == sorted(ids)
    assert {m.attempts for m in got} == {1}
    assert read_all(broker, queue_name, "email") == []
    rows = DeadLetter.objects.filter(queue=queue_name)
    assert rows.filter(consumer="billing", status="retried").count() == 5000
    assert rows.filter(consumer="email", status="dead").count() == 10
    assert LogEntry.objects.filter(action_flag=CHANGE, user__username="ops").count() == 5000
    assert "consumer=billing" in done.redirect_chain[-1][0]


@pytest.mark.slow
def test_discard_5000_matching_the_filter_from_the_all_matching_page(
    queue_name: str, broker: Any, ops: Client
) -> None:
    # Given 5,000 dead letters of billing, and 3 of another error class
    many_dead(broker, queue_name, "billing", 5000)
    many_dead(broker, queue_name, "audit", 3, error_class="KeyError")
    query = urlencode({"queue": queue_name, "error_class": "ValueError"})
    url = reverse("admin:redisq_django_deadletter_matching", args=["discard"]) + "?" + query

    # When staff open "Discard all matching" for the filter
    summary = ops.get(url)

    # Then it says how many, of which consumers and errors, with a sample
    html = summary.content.decode()
    assert "Discard these 5000 dead letters?" in html
    assert re.search(rf"{queue_name}/billing</td><td>5000<", html)
    assert "KeyError" not in html
    assert len(re.findall(r"<li>", html)) <= 20
    assert hidden_fields(html) == []  # the filter is in the URL, not in fields
    back = re.search(r'<a href="([^"]+)" class="button cancel-link">', html)
    assert back and "error_class=ValueError" in back.group(1)

    # When confirmed, then every one is discarded, the others untouched, all recorded
    done = ops.post(url, follow=True)
    assert b"Discarded 5000 dead letters." in done.content
    rows = DeadLetter.objects.filter(queue=queue_name)
    assert rows.filter(status="discarded").count() == 5000
    assert rows.filter(consumer="audit", status="dead").count() == 3
    assert set(LogEntry.objects.values_list("change_message", flat=True)) == {"Discarded"}
    assert LogEntry.objects.count() == 5000


def test_a_bulk_retry_stops_at_its_time_budget_and_says_how_many_are_left(
    queue_name: str, broker: Any
) -> None:
    # Given 1,200 dead letters and no time at all to spend (each call does one chunk)
    many_dead(broker, queue_name, "billing", 1200)
    rows = DeadLetter.objects.filter(queue=queue_name)

    # When retried with a zero budget, then one chunk is done and the rest is left
    first = triage.retry_matching(rows, budget_s=0, chunk=500)
    assert (first.done, first.remaining, first.error) == (500, 700, "")
    # ... and running it again continues where it stopped, until none is left
    second = triage.retry_matching(rows, chunk=500)
    assert (second.done, second.remaining) == (700, 0)
    assert len(read_all(broker, queue_name, "billing")) == 1200


def test_redis_down_during_a_bulk_retry_leaves_the_rest_dead(
    settings: Any, volatile_redis_server: Any, queue_name: str
) -> None:
    settings.REDISQ = {"URL": volatile_redis_server.url}
    broker = get_broker()
    many_dead(broker, queue_name, "billing", 30)
    volatile_redis_server.stop()
    result = triage.retry_matching(DeadLetter.objects.all(), chunk=10)
    assert result.done == 0 and result.remaining == 30 and "Cannot reach Redis" in result.error
    assert DeadLetter.objects.filter(status="dead").count() == 30


def test_causes_by_consumer_error_class_and_normalised_message(
    queue_name: str, broker: Any, ops: Client
) -> None:
    # Given 3 card declines differing by order number, a KeyError, and one of email
    broker.consumers.ensure(queue_name, "billing")
    for order in (1041, 2093, 3337):
        kill(broker, queue_name, "billing", {"o": order}, failure(f"card declined {order}"))
    kill(broker, queue_name, "billing", {"o": 9}, KeyError("customer"))
    broker.consumers.ensure(queue_name, "email")
    kill(broker, queue_name, "email", {"o": 1}, failure("card declined 77"))
    for consumer in ("billing", "email"):
        deadletters.sink(queue_name, consumer)

    # When staff open the causes page
    page = ops.get(reverse("admin:redisq_django_deadletter_causes"), {"queue": queue_name})
    page = ops.get(page["Location"])  # status "dead" added to the filter

    # Then there are three causes, the largest first, with counts and seen times
    causes = page.context["causes"]
    assert [(c.consumer, c.error_class, c.error_key, c.count) for c, _ in causes] == [
        ("billing", "ValueError", "card declined <n>", 3),
        ("billing", "KeyError", "<str>", 1),
        ("email", "ValueError", "card declined <n>", 1),
    ]
    assert causes[0][0].first_seen <= causes[0][0].last_seen

    # When the largest cause is retried through its link, then exactly its 3 are sent
    read_all(broker, queue_name, "billing")  # (what billing had not read yet)
    retry_url = reverse("admin:redisq_django_deadletter_matching", args=["retry"])
    summary = ops.get(f"{retry_url}?{causes[0][1]}")
    assert b"Retry these 3 dead letters?" in summary.content
    ops.post(f"{retry_url}?{causes[0][1]}")
    assert sorted(m.payload["o"] for m in read_all(broker, queue_name, "billing")) == [
        1041,
        2093,
        3337,
    ]
    assert DeadLetter.objects.filter(status="dead").count() == 2


def test_the_causes_and_summary_pages_cost_the_same_queries_for_10_or_500_rows(
    queue_name: str, broker: Any, ops: Client, django_assert_num_queries: Any
) -> None:
    causes = reverse("admin:redisq_django_deadletter_causes") + "?status__exact=dead"
    summary = reverse("admin:redisq_django_deadletter_matching", args=["retry"])
    many_dead(broker, queue_name, "billing", 10)
    counts = []
    for url in (causes, summary):
        with CaptureQueriesContext(connection) as ten:
            assert ops.get(url).status_code == 200
        counts.append(len(ten))
    many_dead(broker, queue_name, "email", 490)
    for url, count in zip((causes, summary), counts, strict=True):
        with django_assert_num_queries(count):
            assert ops.get(url).status_code == 200


def test_every_death_is_kept_and_the_sink_stays_idempotent(
    queue_name: str, broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a message that died, was retried, and died again with another error
    broker.consumers.ensure(queue_name, "billing")
    message_id = kill(broker, queue_name, "billing", {"o": 1}, failure("card declined 1"))
    deadletters.sink(queue_name, "billing")
    row = DeadLetter.objects.get(message_id=message_id)
    first_failed = row.first_failed_at
    assert deadletters.retry([row]) == 1
    with broker.subscribe(queue_name, "billing") as sub:
        (again,) = sub.fetch(count=1, block_ms=500)
        sub.reject(again, KeyError("customer"))

    # When the sink stores it but crashes before deleting it from Redis, then stores it
    # again on its next round
    with monkeypatch.context() as crash:
        crash.setattr(type(broker.dead_letters), "delete", lambda *args, **kwargs: 0)
        deadletters.sink(queue_name, "billing")
    assert len(broker.dead_letters.read(queue_name, "billing")) == 1
    deadletters.sink(queue_name, "billing")
    assert broker.dead_letters.read(queue_name, "billing") == []

    # Then the row shows the latest death, keeps the first failure time and counts two
    # deaths; both failures are kept, once each, newest first
    row.refresh_from_db()
    assert (row.status, row.deaths, row.retry_count) == ("dead", 2, 1)
    assert row.error_class == "KeyError" and row.first_failed_at == first_failed
    failures = list(row.failures.all())
    assert [f.error_class for f in failures] == ["KeyError", "ValueError"]
    assert failures[1].error_message == "card declined 1"
    assert "card declined 1" in failures[1].traceback
    assert DeadLetterFailure.objects.filter(dead_letter=row).count() == 2


def test_the_detail_page_has_the_error_and_retry_at_the_top_and_related_links(
    queue_name: str, broker: Any, ops: Client
) -> None:
    from tests.support.console_data import incident

    made = incident(broker, queue_name)
    row = made.row("long")
    page = ops.get(reverse("admin:redisq_django_deadletter_change", args=[row.pk]))
    html = page.content.decode()
    top = html.index('id="redisq-top"')
    # error and Retry come before the payload and the traceback
    assert top < html.index("tax service answered 503") < html.index('class="redisq-json"')
    assert top < html.index("redisq-retry") < html.index('class="redisq-json"')
    assert '<details class="redisq-fold" open><summary>payload' in html
    assert "every death (newest first)" in html.lower()
    consumer = made_consumer_url(queue_name)
    assert f'href="{consumer}"' in html
    assert 'id="redisq-queue-link"' in html and 'id="redisq-cause-link"' in html


def made_consumer_url(queue: str) -> str:
    from redisq_django.models import Consumer

    pk = Consumer.objects.get(queue__name=queue, name="billing").pk
    return reverse("admin:redisq_django_consumer_change", args=[pk])


def test_an_undecodable_entry_says_why_offers_discard_and_its_raw_fields(
    queue_name: str, broker: Any, ops: Client
) -> None:
    # Given an undecodable dead letter
    broker.consumers.ensure(queue_name, "billing")
    undecodable(broker, queue_name, "billing", "garbage-1")
    deadletters.sink(queue_name, "billing")
    row = DeadLetter.objects.get(message_id="garbage-1")

    # Its page has no Retry, says why, and offers Discard and the raw fields
    page = ops.get(reverse("admin:redisq_django_deadletter_change", args=[row.pk]))
    html = page.content.decode()
    assert "redisq-retry" not in html
    assert "Cannot be retried:" in html and "undecodable" in html
    assert "redisq-discard" in html
    raw = ops.get(reverse("admin:redisq_django_deadletter_raw", args=[row.pk]))
    assert raw["Content-Disposition"] == f'attachment; filename="dead-letter-{row.pk}.json"'
    data = json.loads(raw.content)
    assert data["reason"] == "undecodable" and "not json" in data["payload_as_stored"]
    # ... a forced retry is refused with the reason; Discard works and is recorded
    forced = ops.post(reverse("admin:redisq_django_deadletter_retry", args=[row.pk]), follow=True)
    assert b"was not retried. It is undecodable" in forced.content
    ops.post(reverse("admin:redisq_django_deadletter_discard", args=[row.pk]))
    row.refresh_from_db()
    assert row.status == "discarded"
    assert LogEntry.objects.get().change_message == "Discarded"
    assert broker.client.xlen(broker.keys(queue_name).group("billing").direct) == 0


def test_no_take_me_back_keeps_the_filters(queue_name: str, broker: Any, ops: Client) -> None:
    many_dead(broker, queue_name, "billing", 3)
    query = urlencode({"queue": queue_name, "q": "declined"})
    rows = list(DeadLetter.objects.values_list("pk", flat=True))
    page = ops.post(
        reverse(CHANGELIST) + "?" + query,
        {"action": "discard_selected", "_selected_action": rows[:2], "index": "0"},
    )
    back = re.search(r'<a href="([^"]+)" class="button cancel-link">', page.content.decode())
    assert back and back.group(1).endswith("?" + query.replace("&", "&amp;"))
    fields = hidden_fields(page.content.decode())
    assert sorted(v for k, v in fields if k == "_selected_action") == sorted(map(str, rows[:2]))


def test_search_covers_headers_and_error_classes(queue_name: str, broker: Any, ops: Client) -> None:
    broker.consumers.ensure(queue_name, "billing")
    message_id = broker.publish(queue_name, {"o": 1}, headers={"tenant": "acme-needle"})
    with broker.subscribe(queue_name, "billing") as sub:
        (message,) = sub.fetch(count=1, block_ms=500)
        sub.reject(message, failure("nope"))
    deadletters.sink(queue_name, "billing")
    found = ops.get(reverse(CHANGELIST), {"q": "acme-needle"})
    assert [r.message_id for r in found.context["cl"].result_list] == [message_id]


def test_the_command_lists_causes_and_retries_one_recording_the_user(
    queue_name: str, broker: Any
) -> None:
    many_dead(broker, queue_name, "billing", 4)
    many_dead(broker, queue_name, "billing-b", 2, error_class="KeyError")
    User.objects.create_user("ops")
    out = io.StringIO()
    call_command("redisq", "dead", "causes", "--queue", queue_name, stdout=out)
    assert re.search(
        rf"4\s+{queue_name}\s+billing\s+ValueError\s+card declined for order <n>", out.getvalue()
    )
    out = io.StringIO()
    call_command(
        "redisq",
        "dead",
        "retry",
        "--all",
        "--queue",
        queue_name,
        "--error-class",
        "ValueError",
        "--error",
        "card declined for order <n>",
        "--user",
        "ops",
        stdout=out,
    )
    assert "Re-drove 4 dead letter(s)" in out.getvalue()
    assert DeadLetter.objects.filter(status="retried").count() == 4
    assert LogEntry.objects.filter(user__username="ops").count() == 4
    assert len(read_all(broker, queue_name, "billing")) == 4


def test_the_names_of_0_9_for_causes_still_work_and_say_the_new_one(
    queue_name: str, broker: Any, ops: Client
) -> None:
    # Given dead letters of one cause
    many_dead(broker, queue_name, "billing", 3)

    # When a bookmark of the old page is opened, then it lands on the causes page, its
    # filters kept
    query = f"queue={queue_name}&status__exact=dead&by=task"
    old = ops.get(f"{reverse('admin:redisq_django_deadletter_groups')}?{query}")
    assert old.status_code == 301
    assert old["Location"] == f"{reverse('admin:redisq_django_deadletter_causes')}?{query}"
    page = ops.get(old["Location"])
    assert [(c.consumer, c.count) for c, _ in page.context["causes"]] == [("billing", 3)]

    # When the old sub-command runs, then it lists the same causes and says the new name
    out, err = io.StringIO(), io.StringIO()
    call_command("redisq", "dead", "groups", "--queue", queue_name, stdout=out, stderr=err)
    new = io.StringIO()
    call_command("redisq", "dead", "causes", "--queue", queue_name, stdout=new)
    assert out.getvalue() == new.getvalue()
    assert re.search(rf"3\s+{queue_name}\s+billing\s+ValueError", new.getvalue())
    assert "'redisq dead groups' is deprecated" in err.getvalue()
    assert "use 'redisq dead causes'" in err.getvalue()

    # When Python code uses the old names, then they are the new ones, with a warning
    rows = DeadLetter.objects.filter(queue=queue_name)
    with pytest.warns(DeprecationWarning, match=r"deadletters\.causes"):
        old_function = deadletters.groups
    with pytest.warns(DeprecationWarning, match=r"deadletters\.Cause"):
        assert deadletters.Group is deadletters.Cause
    with pytest.warns(DeprecationWarning, match="CAUSES_LIMIT"):
        assert deadletters.GROUPS_LIMIT == deadletters.CAUSES_LIMIT
    assert old_function(rows) == deadletters.causes(rows)


def test_retry_all_matching_with_redis_down_says_so_and_changes_nothing(
    settings: Any, volatile_redis_server: Any, queue_name: str, ops: Client
) -> None:
    settings.REDISQ = {"URL": volatile_redis_server.url}
    many_dead(get_broker(), queue_name, "billing", 30)
    volatile_redis_server.stop()
    url = reverse("admin:redisq_django_deadletter_matching", args=["retry"])
    done = ops.post(f"{url}?queue={queue_name}", follow=True)
    (message,) = [str(m) for m in done.context["messages"]]
    assert (
        message.startswith("Stopped: Cannot reach Redis at ")
        and "30 matching dead letters are still dead" in message
    )
    assert DeadLetter.objects.filter(status="dead").count() == 30
    assert LogEntry.objects.count() == 0
