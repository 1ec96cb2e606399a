"""The filters in force on the dead letters, in a real browser at 1280 px: each is a
chip with its own remove link, the cause's error pattern too, and after a cause's Retry all no
filter nobody can see is left on, so another error class shows its dead letters, not 0
(issue 36, point 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Page, expect

from redisq_django.connection import get_broker
from redisq_django.core.dead_entry import normalise_error
from redisq_django.models import DeadLetter
from tests.support.browser_pages import assert_fits, choose_filter, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SCREEN = {"width": 1280, "height": 800}
REFUSED, TIMEOUT = "ConnectionRefusedError", "TimeoutError"
#: As in the incident: a few refusals, and many timeouts.
REFUSALS, TIMEOUTS = 12, 870


def dead(queue: str, error_class: str, messages: list[str]) -> None:
    DeadLetter.objects.bulk_create(
        DeadLetter(
            queue=queue,
            consumer="billing",
            message_id=f"{error_class}-{i:04}",
            payload=json.dumps({"n": i}),
            envelope={"id": f"{error_class}-{i:04}", "payload": json.dumps({"n": i})},
            reason="failed",
            error_class=error_class,
            error_message=message,
            error_key=normalise_error(message),
            attempts=6,
        )
        for i, message in enumerate(messages)
    )


@pytest.fixture
def incident(redisq_settings: Any, queue_name: str) -> str:
    get_broker().consumers.ensure(queue_name, "billing")
    dead(queue_name, REFUSED, [f"connection refused 10.0.{i}.7:5432" for i in range(REFUSALS)])
    dead(queue_name, TIMEOUT, [f"timed out after {i}s" for i in range(TIMEOUTS)])
    return queue_name


def chip(page: Page, params: str) -> Any:
    return page.locator(f'#redisq-filter-chips .redisq-chip[data-params="{params}"]')


def test_after_retry_all_of_a_cause_every_filter_shows_and_another_class_counts_right(
    page: Page, live_server: Any, ops: User, incident: str, artifacts: Path
) -> None:
    page.set_viewport_size(SCREEN)
    log_in(page, live_server, ops)
    page.goto(live_server.url + reverse("admin:redisq_django_deadletter_changelist"))

    # Given the causes, and the list of the refusals through their Show link
    page.locator("#redisq-causes-link").click()
    refusals = page.locator("#redisq-causes tr.redisq-cause").filter(has_text=REFUSED)
    refusals.get_by_role("link", name="Show").click()

    # Then every filter it applies is a chip, the error's pattern too, each removable
    expect(page.locator("#changelist .paginator")).to_contain_text(f"{REFUSALS} dead letters")
    error = chip(page, "error_key")
    expect(error).to_contain_text("error: connection refused <ip>:<port>")
    expect(error.locator(".redisq-chip-text")).to_have_attribute(
        "title", "error: connection refused <ip>:<port>"
    )
    for params in ("queue", "consumer", "error_class", "status__exact", "error_key"):
        expect(chip(page, params).locator("a.redisq-chip-remove")).to_have_count(1)
    page.screenshot(path=str(artifacts / "deadletters-chips-1280.png"))
    assert_fits(page, "the list of a cause")

    # When staff go back to the causes and retry the refusals, confirming
    page.go_back()
    refusals.get_by_role("link", name="Retry all").click()
    page.get_by_role("button", name="Yes, I'm sure").click()

    # Then they are back on the causes, told so; the timeouts are the one cause left,
    # and the page's filters are chips (status dead is the page's own: not removable)
    expect(page.locator("ul.messagelist li.success")).to_have_text(
        f"Sent {REFUSALS} dead letters again, each to its own consumer."
    )
    assert "/causes/" in page.url and "error_key" not in page.url
    causes = page.locator("#redisq-causes tr.redisq-cause")
    expect(causes).to_have_count(1)
    expect(causes.locator("td.redisq-count")).to_have_text(str(TIMEOUTS))
    expect(chip(page, "status__exact")).to_have_text("status: dead")
    expect(chip(page, "status__exact").locator("a")).to_have_count(0)
    page.screenshot(path=str(artifacts / "deadletters-causes-after-retry-1280.png"))

    # When they open the list and choose the other error class
    page.get_by_role("link", name="Back to the list").click()
    choose_filter(page, "error class", TIMEOUT)

    # Then its 870 dead letters are listed, under chips that say so
    expect(page.locator("#changelist .paginator")).to_contain_text(f"{TIMEOUTS} dead letters")
    expect(page.locator("#redisq-filter-chips .redisq-chip")).to_have_count(2)
    expect(chip(page, "error_class")).to_contain_text(f"error class: {TIMEOUT}")

    # And a chip's remove link removes that filter alone: without status, the refusals (retried)
    # are there again for their class
    choose_filter(page, "error class", REFUSED)
    expect(page.locator("#changelist .paginator")).to_contain_text("0 dead letters")
    chip(page, "status__exact").locator("a.redisq-chip-remove").click()
    expect(page.locator("#changelist .paginator")).to_contain_text(f"{REFUSALS} dead letters")
    expect(page.locator("#redisq-filter-chips .redisq-chip")).to_have_count(1)


def test_the_filter_menus_open_one_at_a_time_and_close_on_escape(
    page: Page, live_server: Any, ops: User, incident: str
) -> None:
    # Given the list at 1280 px: the filters are a bar of closed menus above it
    page.set_viewport_size(SCREEN)
    log_in(page, live_server, ops)
    page.goto(live_server.url + reverse("admin:redisq_django_deadletter_changelist"))
    menus = page.locator("#changelist-filter details")
    assert menus.evaluate_all("all => all.map(d => d.open)") == [False] * menus.count()
    bar = page.locator("#changelist-filter").bounding_box()
    table = page.locator("#result_list").bounding_box()
    assert bar and table and bar["y"] < table["y"]  # above the list, not beside it

    # When one opens, then another, then Escape is pressed
    first, second = menus.nth(0), menus.nth(1)
    first.locator("summary").click()
    expect(first.locator("ul")).to_be_visible()
    assert_fits(page, "an open filter menu")
    second.locator("summary").click()
    expect(second.locator("ul")).to_be_visible()
    expect(first.locator("ul")).to_be_hidden()
    page.keyboard.press("Escape")
    expect(second.locator("ul")).to_be_hidden()
