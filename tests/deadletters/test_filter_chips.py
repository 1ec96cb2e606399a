"""Every filter in force on the dead letters and their causes is a chip with its own
remove link, the ones no sidebar filter shows too (a cause's error pattern, a lookup
typed into the address, the search), and a cause's Retry all returns to the causes,
leaving no filter behind that nobody can see (issue 36, point 4). Django's test client
on a real Redis."""

from __future__ import annotations

import html
import json
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils.http import urlencode

from redisq_django.core.dead_entry import normalise_error
from redisq_django.models import DeadLetter
from tests.support.reading import read_all

pytestmark = [pytest.mark.django_db, pytest.mark.site_broker]

LIST = reverse("admin:redisq_django_deadletter_changelist")
CAUSES = reverse("admin:redisq_django_deadletter_causes")
REFUSED = "ConnectionRefusedError"
TIMEOUT = "TimeoutError"


@pytest.fixture
def ops() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", password="pw"))
    return client


def dead(broker: Any, queue: str, error_class: str, messages: list[str]) -> None:
    """Dead letters of billing, one per error message, as the sink stores them."""
    broker.consumers.ensure(queue, "billing")
    DeadLetter.objects.bulk_create(
        DeadLetter(
            queue=queue,
            consumer="billing",
            message_id=f"{error_class}-{i}",
            payload=json.dumps({"n": i}),
            envelope={"id": f"{error_class}-{i}", "payload": json.dumps({"n": i})},
            reason="failed",
            error_class=error_class,
            error_message=message,
            error_key=normalise_error(message),
            attempts=6,
        )
        for i, message in enumerate(messages)
    )


@pytest.fixture
def incident(broker: Any, queue_name: str) -> str:
    """3 connection refusals and 5 timeouts of billing."""
    dead(broker, queue_name, REFUSED, [f"connection refused 10.0.0.{i}:5432" for i in range(3)])
    dead(
        broker,
        queue_name,
        TIMEOUT,
        [f"timed out after {i}.5s reading orders/{i}" for i in range(5)],
    )
    return queue_name


def query_of(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(html.unescape(url)).query)


def chips(page: Any) -> list[tuple[str, str, str | None]]:
    """The chips of a page: (the parameters it sets, its text, its remove link or None)."""
    box = re.search(r'<div class="redisq-chips".*?</div>', page.content.decode(), re.S)
    if box is None:
        return []
    found = []
    for chip in re.findall(r'<span class="redisq-chip" (.*?)</span>\n', box.group(0), re.S):
        params = re.search(r'data-params="([^"]*)"', chip).group(1)  # type: ignore[union-attr]
        text = re.search(r'class="redisq-chip-text"[^>]*>(.*?)</span>(<a|$)', chip, re.S)
        remove = re.search(r'class="redisq-chip-remove" href="([^"]*)"', chip)
        words = re.sub(r"<[^>]+>", "", text.group(1)) if text else ""  # type: ignore[union-attr]
        found.append((params, html.unescape(words), remove.group(1) if remove else None))
    return found


def count(page: Any) -> int:
    return int(page.context["cl"].result_count)


def link(page: Any, css_class: str, row_text: str) -> str:
    """The href of the link of class ``css_class`` in the causes row holding ``row_text``."""
    row = next(r for r in page.content.decode().split("<tr") if row_text in r)
    found = re.search(rf'href="([^"]*)" class="{css_class}"', row)
    assert found, row
    return html.unescape(found.group(1))


def test_after_retry_all_of_a_cause_another_error_class_shows_its_dead_letters(
    incident: str, broker: Any, ops: Client
) -> None:
    # Given the causes of billing's dead letters (the page adds status dead)
    causes = ops.get(CAUSES, {"queue": incident}, follow=True)
    assert [c.count for c, _ in causes.context["causes"]] == [5, 3]

    # When staff press Retry all on the connection refusals, and confirm
    retry = link(causes, "redisq-retry-cause", "connection refused")
    summary = ops.get(retry)
    assert b"Retry these 3 dead letters?" in summary.content
    done = ops.post(retry)

    # Then they are sent again, and the page they return to is the causes page they
    # left, with its own filters: no error pattern, no error class left in force
    assert sorted(m.id for m in read_all(broker, incident, "billing")) == [
        f"{REFUSED}-{i}" for i in range(3)
    ]
    assert done.status_code == 302
    back = done["Location"]
    assert back.startswith(CAUSES)
    assert query_of(back) == {"queue": [incident], "status__exact": ["dead"]}
    after = ops.get(back)
    assert "Sent 3 dead letters again" in after.content.decode()
    assert [(c.error_class, c.count) for c, _ in after.context["causes"]] == [(TIMEOUT, 5)]
    # ... where every filter in force is a chip: status dead is the page's own
    assert [(p, t) for p, t, _ in chips(after)] == [
        ("queue", f"queue: {incident}"),
        ("status__exact", "status: dead"),
    ]
    assert chips(after)[1][2] is None

    # When staff open the list of the retried cause (its Show link: error pattern and
    # status dead) and then choose the other error class in the sidebar
    show = ops.get(link(causes, "redisq-show", "connection refused"))
    assert count(show) == 0
    cl = show.context["cl"]
    spec = next(s for s in cl.filter_specs if s.title == "error class")
    choice = next(c for c in spec.choices(cl) if c["display"] == TIMEOUT)
    other = ops.get(LIST + choice["query_string"])

    # Then its 5 dead letters are listed, not 0: choosing a class drops the pattern
    assert count(other) == 5
    assert "error_key" not in query_of(choice["query_string"])


def test_every_filter_in_force_is_a_chip_whose_x_removes_it_alone(
    incident: str, ops: Client
) -> None:
    # Given the list of a cause as its Show link opens it: queue, consumer, error class,
    # the error's pattern and status dead, and a search
    cause = {
        "queue": incident,
        "consumer": "billing",
        "error_class": TIMEOUT,
        "error_key": "timed out after <duration> reading orders/<n>",
        "status__exact": "dead",
        "q": "reading",
    }
    page = ops.get(f"{LIST}?{urlencode(cause)}")
    assert count(page) == 5

    # Then each of them is a chip, the pattern with its placeholders, the search last
    found = chips(page)
    assert [(p, t) for p, t, _ in found] == [
        ("queue", f"queue: {incident}"),
        ("consumer", "consumer: billing"),
        ("error_class", f"error class: {TIMEOUT}"),
        ("status__exact", "status: dead"),
        ("error_key", "error: timed out after <duration> reading orders/<n>"),
        ("q", "search: reading"),
    ]
    assert '<var class="redisq-var">&lt;duration&gt;</var>' in page.content.decode()

    # And each remove link leads to the same list without that filter alone, which answers
    for params, _text, remove in found:
        assert remove is not None
        left = {k: [v] for k, v in cause.items() if k != params}
        assert query_of(remove) == left, params
        assert ops.get(html.unescape(remove)).status_code == 200
    # ... removing the error pattern and the class lists every dead letter of billing
    without = {k: v for k, v in cause.items() if k not in ("error_key", "error_class", "q")}
    assert count(ops.get(LIST, without)) == 8

    # And "Clear all", here and Django's in the filters, clears every one of them
    cleared = re.search(r'<a href="([^"]*)" class="redisq-chips-clear"', page.content.decode())
    assert cleared and html.unescape(cleared.group(1)) == LIST
    assert page.context["cl"].clear_all_filters_qs == LIST
    assert count(ops.get(LIST)) == 8


def test_lookups_typed_into_the_address_and_the_date_are_chips_too(
    incident: str, ops: Client
) -> None:
    # Given a list filtered by lookups no sidebar filter owns, and a day of the dates
    DeadLetter.objects.update(last_failed_at="2026-05-03T10:00:00Z")
    query = {
        "message_id__startswith": f"{TIMEOUT}-",
        "attempts__gte": "6",
        "last_failed_at__year": "2026",
        "last_failed_at__month": "5",
        "last_failed_at__day": "3",
        "o": "2",  # an order: how the rows show, not which
    }
    page = ops.get(LIST, query)
    assert count(page) == 5

    # Then each is a chip in words; the day is one chip, the order none
    found = chips(page)
    assert [(p, t) for p, t, _ in found] == [
        (
            "last_failed_at__year last_failed_at__month last_failed_at__day",
            "last failure: 2026-05-03",
        ),
        ("message_id__startswith", f"message id: starts with {TIMEOUT}-"),
        ("attempts__gte", "attempts: ≥ 6"),
    ]
    # And each remove link keeps the order and the other filters
    day = query_of(found[0][2] or "")
    assert day == {"message_id__startswith": [f"{TIMEOUT}-"], "attempts__gte": ["6"], "o": ["2"]}
    assert count(ops.get(LIST + "?" + urlsplit(html.unescape(found[1][2] or "")).query)) == 8


def test_the_causes_page_shows_its_filters_and_a_by_task_listing_keeps_its_kind(
    incident: str, ops: Client
) -> None:
    # Given the causes by task of billing's timeouts
    page = ops.get(
        CAUSES,
        {"queue": incident, "error_class": TIMEOUT, "status__exact": "dead", "by": "task"},
    )
    assert [c.count for c, _ in page.context["causes"]] == [5]

    # Then the queue and the class are chips, the kind of listing is none, and removing
    # the class keeps the listing by task
    found = chips(page)
    assert [p for p, _, _ in found] == ["queue", "error_class", "status__exact"]
    remove_class = found[1][2] or ""
    assert query_of(remove_class) == {
        "queue": [incident],
        "status__exact": ["dead"],
        "by": ["task"],
    }
    assert [c.count for c, _ in ops.get(html.unescape(remove_class)).context["causes"]] == [8]
