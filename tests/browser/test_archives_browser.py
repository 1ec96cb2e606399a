"""Removing a named archive from its queue's admin page in a real browser: the archive
listed with its position and lag, a confirmation page, then retention no longer waits
for it (C14: removal is explicit)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Page, expect

from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.models import Queue
from tests.support.browser_pages import PASSWORD, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_archive_is_removed_from_the_queue_page_after_confirmation(
    page: Page, live_server: Any, redisq_settings: Any
) -> None:
    # Given a queue whose consumer acked everything, and an archive that stored 2 of 5
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "REPLAY_WINDOW": 0}
    live.clear()
    broker = get_broker()
    broker.consumers.ensure("shop", "billing")
    ids = broker.publish_many("shop", [{"n": n} for n in range(5)])
    with broker.subscribe("shop", "billing") as sub:
        sub.ack(sub.fetch(count=10, block_ms=200))
    broker.archives.register("shop", "nightly", "messages", ids[1])
    row = Queue.objects.create(name="shop")
    log_in(page, live_server, User.objects.create_superuser("ops", password=PASSWORD))

    # When staff open the queue's page: the archive, its position and lag
    page.goto(f"{live_server.url}{reverse('admin:redisq_django_queue_change', args=[row.pk])}")
    archive = page.locator("table.redisq-archives tbody tr")
    expect(archive).to_have_count(1)
    cells = archive.locator("td")
    for i, text in enumerate(["nightly", "messages", ids[1], "3"]):
        expect(cells.nth(i)).to_have_text(text)
    # And remove it, confirming
    archive.get_by_role("link", name="Remove…").click()
    expect(page.locator("#redisq-confirm-question")).to_contain_text("Remove archive nightly")
    page.locator("#redisq-confirm").click()

    # Then it is gone from the page and from Redis, and retention trims what it held
    expect(page.locator("ul.messagelist li.success")).to_contain_text("Removed archive nightly")
    expect(page.locator("table.redisq-archives")).to_have_count(0)
    assert broker.archives.states("shop") == []
    assert broker.trim("shop") == (5, 0)
