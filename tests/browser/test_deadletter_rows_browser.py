"""The dead-letter list in a real browser at 1366x768: one line per row however long
the message ids, errors and payloads (cut with an ellipsis, the full value in the
tooltip), so 100 rows fit in about 100 lines; a task's dead letter shows its task."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Page, expect

from redisq_django.models import DeadLetter
from tests.support.browser_pages import PASSWORD, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROWS = 100
LAPTOP = {"width": 1366, "height": 768}


def long_dead_letters(n: int) -> list[DeadLetter]:
    """``n`` dead letters with ids of 64 characters, errors and payloads of kilobytes
    without spaces to break at, one of them a task's; the odd ones with an ordering key
    of 256 bytes."""
    made = []
    now = timezone.now()
    for i in range(n):
        message_id = f"{i:04}-" + "order-2b7e151628aed2a6abf7158809cf4f3c-" * 2
        payload = json.dumps({"order": i, "sku": "X" * 400, "lines": list(range(200))})
        made.append(
            DeadLetter(
                queue="shop.orders.with-a-rather-long-queue-name",
                consumer="tasks" if i == 0 else "billing-consumer-with-a-long-name",
                task="shop.tasks.fulfil_the_order_and_notify_the_warehouse" if i == 0 else "",
                message_id=message_id[:64],
                payload=payload,
                envelope={
                    "id": message_id[:64],
                    "payload": payload,
                    "published_at": "1",
                    **({"key": f"customer-{i:04}-" + "k" * 242} if i % 2 else {}),
                },
                reason="failed",
                error_class="shop.errors.WarehouseRejectedTheOrderError",
                error_message=f"warehouse rejected {message_id}: " + "no-stock/" * 300,
                error_key="warehouse rejected <id>: …",
                attempts=6,
                last_failed_at=now - dt.timedelta(minutes=i),  # the first is the newest
            )
        )
    return DeadLetter.objects.bulk_create(made)


def test_100_dead_letters_are_100_lines(
    page: Page, live_server: Any, redisq_settings: Any, artifacts: Path
) -> None:
    # Given 100 dead letters with long ids, errors and payloads
    rows = long_dead_letters(ROWS)
    ops = User.objects.create_superuser("ops", password=PASSWORD)

    # When staff open the dead-letter list on a 1366x768 laptop
    page.set_viewport_size(LAPTOP)
    log_in(page, live_server, ops)
    page.goto(live_server.url + reverse("admin:redisq_django_deadletter_changelist"))
    page.screenshot(path=str(artifacts / "deadletters-100-rows-1366.png"), full_page=True)

    # Then every row is one line high, and the page is short enough to scroll through
    found = page.evaluate(
        """() => {
        const rows = [...document.querySelectorAll('#result_list tbody tr')];
        const cell = document.querySelector('#result_list tbody td');
        return {
            heights: rows.map(r => r.getBoundingClientRect().height),
            line: parseFloat(getComputedStyle(cell).lineHeight)
                || parseFloat(getComputedStyle(cell).fontSize) * 1.2,
            page: document.documentElement.scrollHeight,
            table: [document.querySelector('#result_list').scrollWidth,
                    document.querySelector('#changelist .results').clientWidth],
        };
    }"""
    )
    assert len(found["heights"]) == ROWS
    tallest = max(found["heights"])
    assert tallest <= 2 * found["line"], (tallest, found["line"])
    assert found["page"] < 4000, found["page"]
    table, box = found["table"]
    assert table <= box + 1, f"the list is {table}px wide in {box}px: it scrolls sideways"

    # And the ids and payloads are cut, whole in their tooltips
    first = page.locator("#result_list tbody tr").filter(has_text=rows[0].message_id[:10])
    expect(first.locator(".redisq-id")).to_have_attribute("title", rows[0].message_id)
    payload = first.locator(".redisq-payload")
    assert payload.get_attribute("title", timeout=5000) == rows[0].payload[:999] + "…"
    assert payload.evaluate("el => el.scrollWidth > el.clientWidth")  # cut, with an ellipsis
    # And a dead letter's ordering key follows its id on the same line, whole in the tooltip
    key = rows[1].envelope["key"]
    second = page.locator("#result_list tbody tr").filter(has_text=rows[1].message_id[:10])
    expect(second.locator(".redisq-id")).to_have_attribute(
        "title", f"{rows[1].message_id} (ordering key: {key})"
    )
    expect(second.locator(".redisq-key")).to_have_text(key)
    assert first.locator(".redisq-key").count() == 0
    # And the task's dead letter shows its task instead of tasks.<queue>/tasks
    expect(first.locator("td.field-where")).to_have_text(
        "shop.tasks.fulfil_the_order_and_notify_the_warehouse"
    )
