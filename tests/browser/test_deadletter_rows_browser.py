"""The dead-letter list in a real browser: one line per row however long the message
ids, errors and payloads (cut with an ellipsis, the full value in the tooltip), so 100
rows fit in about 100 lines; a task's dead letter shows its task. At 1280 px a row
reads: the error has the width, an id shows the end that tells it from its
neighbours, times are 24-hour (issue 36, point 5); and the phone layout still fits."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from django.utils import timezone
from playwright.sync_api import Page, expect

from redisq_django.models import DeadLetter
from tests.support.browser_pages import PASSWORD, SIZES, assert_fits, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ROWS = 100
LAPTOP = {"width": 1366, "height": 768}
WIDE = {"width": 1680, "height": 900}
SCREEN = {"width": 1280, "height": 800}


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

    # And the ids are cut, whole in their tooltips; the payloads are on the rows' pages
    # below 1600 px, and cut beside the errors from there
    first = page.locator("#result_list tbody tr").filter(has_text=rows[0].message_id[:10])
    expect(first.locator(".redisq-id")).to_have_attribute("title", rows[0].message_id)
    payload = first.locator(".redisq-payload")
    expect(payload).to_be_hidden()
    page.set_viewport_size(WIDE)
    expect(payload).to_be_visible()
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


#: The characters of a cell that show: each one whose box lies inside the cell's, the
#: ellipsis's width (10 px) set aside on the side it is cut (the left, for a cell cut on
#: its left: direction rtl).
VISIBLE_TEXT = """(el) => {
    const rect = el.getBoundingClientRect();
    const rtl = getComputedStyle(el).direction === "rtl";
    const box = {left: rect.left + (rtl ? 10 : 0), right: rect.right - (rtl ? 0 : 10)};
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    const range = document.createRange();
    let seen = "";
    while (walker.nextNode()) {
        const node = walker.currentNode;
        for (let i = 0; i < node.length; i++) {
            range.setStart(node, i);
            range.setEnd(node, i + 1);
            const r = range.getBoundingClientRect();
            if (r.width > 0 && r.left >= box.left - 0.5 && r.right <= box.right + 0.5) {
                seen += node.data[i];
            }
        }
    }
    return seen;
}"""


def time_ids(n: int) -> list[str]:
    """Time-based message ids as one producer writes them within a few seconds: a time
    first (20 characters in common), then what tells them apart."""
    return [f"01a2372222680004ad18{hashlib.sha1(bytes([i])).hexdigest()[:12]}" for i in range(n)]


def test_at_1280_px_a_row_shows_its_error_the_end_of_its_id_and_a_24_hour_time(
    page: Page, live_server: Any, redisq_settings: Any, artifacts: Path
) -> None:
    # Given dead letters with time-based ids, long errors, the newest at 22:22:05 today
    tonight = timezone.localtime().replace(hour=22, minute=22, second=5, microsecond=0)
    ids = time_ids(30)
    DeadLetter.objects.bulk_create(
        DeadLetter(
            queue="shop.orders",
            consumer="billing",
            message_id=message_id,
            payload=json.dumps({"order": i}),
            envelope={"id": message_id, "payload": json.dumps({"order": i})},
            reason="failed",
            error_class="psycopg.OperationalError",
            error_message=f"connection to server at 10.0.3.{i} port 5432 failed: timeout "
            "expired while waiting for the primary to accept connections",
            attempts=6,
            last_failed_at=tonight - dt.timedelta(hours=i),
        )
        for i, message_id in enumerate(ids)
    )
    ops = User.objects.create_superuser("ops", password=PASSWORD)

    # When staff open the dead letters on a 1280 px screen
    page.set_viewport_size(SCREEN)
    log_in(page, live_server, ops)
    page.goto(live_server.url + reverse("admin:redisq_django_deadletter_changelist"))
    page.screenshot(path=str(artifacts / "deadletters-rows-1280.png"))

    # Then a row's error shows 60 characters and more, whole in its tooltip
    rows = page.locator("#result_list tbody tr")
    newest = rows.filter(has_text=ids[0])
    error = newest.locator(".redisq-error")
    seen = error.evaluate(VISIBLE_TEXT)
    assert len(seen) >= 60, (len(seen), seen)
    assert error.get_attribute("title", timeout=5000).startswith(  # type: ignore[union-attr]
        "psycopg.OperationalError: connection to server at 10.0.3.0 port 5432 failed"
    )

    # And two ids with the same 20 first characters differ in what shows: their ends
    shown = [
        rows.filter(has_text=i).locator(".redisq-id-end").evaluate(VISIBLE_TEXT) for i in ids[:2]
    ]
    assert shown[0] != shown[1], shown
    for message_id, text in zip(ids, shown, strict=False):
        assert len(text) >= 8 and message_id.endswith(text), (message_id, text)
    # ... each whole in its tooltip, and whole when selected to be copied
    expect(newest.locator(".redisq-id")).to_have_attribute("title", ids[0])
    copied = newest.locator(".redisq-id-end bdi").evaluate(
        "el => { getSelection().selectAllChildren(el); return getSelection().toString(); }"
    )
    assert copied == ids[0]

    # And the time reads as on the charts: 22:22:05, not 10:22 p.m.
    expect(newest.locator("td.field-last_failure")).to_have_text("22:22:05")
    expect(page.locator("#result_list")).not_to_contain_text("p.m.")
    assert_fits(page, "dead letters at 1280 px")

    # And on a phone the list still fits, ids showing their ends
    page.set_viewport_size(SIZES["390"])
    page.reload()
    assert_fits(page, "dead letters at 390 px")
    text = rows.filter(has_text=ids[1]).locator(".redisq-id-end").evaluate(VISIBLE_TEXT)
    assert text and ids[1].endswith(text), text
    page.screenshot(path=str(artifacts / "deadletters-rows-390.png"), full_page=True)
