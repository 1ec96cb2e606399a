"""Ending poison messages in a real browser (issue 36, point 1): ticks that survive the
page's own refreshes, End on a selection, Delete… that asks first, and End holder on an
ordered consumer's retrying poison message, whose key moves on in order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Page, expect

from redisq_django import deadletters
from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.models import Consumer, DeadLetter
from tests.support.browser_pages import log_in
from tests.support.held_data import CONSUMER, held_consumer
from tests.support.live_data import Live, live_consumer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def made(redisq_settings: Any) -> Live:
    live.clear()
    return live_consumer(get_broker(), "shop")


def ended(queue: str, consumer: str) -> set[str]:
    deadletters.sink(queue, consumer)
    rows = DeadLetter.objects.filter(queue=queue, consumer=consumer, reason="ended")
    return set(rows.values_list("message_id", flat=True))


def test_ticked_retries_survive_refreshes_and_end_together(
    page: Page,
    live_server: Any,
    ops: User,
    made: Live,
    monkeypatch: pytest.MonkeyPatch,
    artifacts: Path,
) -> None:
    # Given billing's retrying list, refreshing itself every second
    monkeypatch.setattr(admin.site._registry[Consumer], "refresh_seconds", 1)
    log_in(page, live_server, ops)
    url = reverse("admin:redisq_django_consumer_live", args=[made.queue, "billing"])
    page.goto(f"{live_server.url}{url}?list=retrying")
    ticks = page.locator("#redisq-list input.redisq-tick")
    expect(ticks).to_have_count(2)

    # When staff tick both, and the page refreshes meanwhile
    polls = int(page.locator("#redisq-live").get_attribute("data-polls") or 0)
    ticks.nth(0).check()
    ticks.nth(1).check()
    page.wait_for_function(
        f"Number(document.getElementById('redisq-live').dataset.polls) > {polls + 1}",
        timeout=10_000,
    )
    expect(page.locator("#redisq-list input.redisq-tick:checked")).to_have_count(2)
    page.screenshot(path=str(artifacts / "live-end-selection.png"), full_page=True)

    # And press End
    page.locator("#redisq-end-selected").click()

    # Then they are told, the list is empty, and both are dead letters (reason ended)
    expect(page.locator("ul.messagelist li.success")).to_contain_text("Ended 2 message(s)")
    expect(page.locator("#redisq-list-empty")).to_be_visible()
    assert ended(made.queue, "billing") == set(made.retrying)


def test_delete_asks_first_and_a_held_keys_holder_is_ended(
    page: Page, live_server: Any, ops: User, made: Live, redisq_settings: Any
) -> None:
    log_in(page, live_server, ops)
    # Delete… one delayed message from its own page: asked first, then gone for good
    url = reverse("admin:redisq_django_queue_live", args=[made.queue])
    page.goto(f"{live_server.url}{url}?list=delayed")
    page.locator("#redisq-list tbody tr").first.locator("a.redisq-msg").click()
    page.locator("#redisq-delete").click()
    expect(page.locator("#redisq-confirm-ids")).to_contain_text(made.delayed[0])
    page.locator("#redisq-confirm").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text("Deleted 1 message(s)")
    page.goto(f"{live_server.url}{url}?list=delayed")
    expect(page.locator("#redisq-list tbody tr")).to_have_count(1)
    assert ended(made.queue, "billing") == set()

    # End holder on an ordered consumer's retrying poison message: its key moves on
    held = held_consumer(get_broker(), "ledgers")
    ledger = reverse("admin:redisq_django_consumer_live", args=[held.queue, CONSUMER])
    page.goto(live_server.url + ledger)
    row = page.locator('#redisq-held-list tr[data-key="retry-me"]')
    row.get_by_role("button", name="End holder").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text("Ended 1 message(s)")
    expect(row).to_contain_text("queued in the consumer's input")
    assert ended(held.queue, CONSUMER) == {held.holders["retry-me"]}
    got = held.sub.fetch(count=100, block_ms=200)
    assert [m.id for m in got if m.key == "retry-me"] == [held.later["retry-me"][0]]


def test_waiting_log_rows_are_ended_for_their_consumer_and_the_page_says_when(
    page: Page, live_server: Any, ops: User, made: Live, artifacts: Path
) -> None:
    # Given billing's waiting list: its log rows have boxes to tick
    log_in(page, live_server, ops)
    url = reverse("admin:redisq_django_consumer_live", args=[made.queue, "billing"])
    page.goto(f"{live_server.url}{url}?list=waiting")
    ticks = page.locator("#redisq-list input.redisq-tick")
    expect(ticks).to_have_count(len(made.waiting))

    # When staff tick two and press End
    ticks.nth(0).check()
    ticks.nth(3).check()
    page.locator("#redisq-end-selected").click()

    # Then the page says they are marked for billing and die when read, not now
    note = page.locator("ul.messagelist li.success")
    expect(note).to_contain_text("2 message(s) waiting in the log marked for billing")
    expect(note).to_contain_text("when they read them")
    page.screenshot(path=str(artifacts / "live-end-waiting.png"), full_page=True)
    assert ended(made.queue, "billing") == set()
    # ... and when billing's worker reads them, they are dead letters, never handled
    sub = get_broker().subscribe(made.queue, "billing", "worker-9")
    got = sub.fetch(count=100, block_ms=500)
    sub.ack(got)
    chosen = {made.waiting[0], made.waiting[3]}
    assert {m.id for m in got} & set(made.waiting) == set(made.waiting) - chosen
    assert ended(made.queue, "billing") == chosen

    # Delete… from a waiting message's own page, on the queue's log: asked first
    queue_url = reverse("admin:redisq_django_queue_live", args=[made.queue])
    message = reverse("admin:redisq_django_queue_live_message", args=[made.queue])
    page.goto(f"{live_server.url}{message}?ref=log:{made.waiting[5]}")
    page.locator("#redisq-delete").click()
    expect(page.locator("#redisq-confirm-ids")).to_contain_text(made.waiting[5])
    page.locator("#redisq-confirm").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text(
        "1 message(s) waiting in the log marked for email"
    )
    page.goto(f"{live_server.url}{queue_url}?list=log")
    expect(page.locator("#redisq-list input.redisq-tick").first).to_be_visible()
