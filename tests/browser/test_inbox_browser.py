"""The inbox of ``atomic=True`` consumers in the admin, in a real browser (chromium
through Playwright) against the live server: staff find it on the index, search it by
exact message id, filter it by consumer, and can only look (no add, no change, no
delete: a forged POST changes nothing); a consumer's page says whether it handles
messages exactly once and how many duplicates its inbox skipped in the last hour; a
user without the permission sees no inbox. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect

from redisq_django.admin import live
from redisq_django.core.ids import new_message_id
from redisq_django.models import Consumer, InboxEntry, Queue
from tests.support.browser_pages import log_in, result_rows, staff

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.site_broker]

#: The inbox's link on the admin index (its verbose plural, capitalised).
INBOX_LINK = re.compile(r"^Inbox\b")
#: The flow-control row of an ``atomic=True`` consumer.
ATOMIC = "exactly once (atomic)"

#: A forged POST from the page, with the page's CSRF token and these form fields.
FORGE = """async ([url, fields]) => {
    const body = new FormData();
    for (const [name, value] of Object.entries(fields)) body.append(name, value);
    const response = await fetch(url, {method: "POST", body, credentials: "same-origin"});
    return [response.status, await response.text()];
}"""


@pytest.fixture(autouse=True)
def _fresh_admin_reads(broker: Any) -> None:
    """The admin reads the session server of this test (no cached client or outage)."""
    live.clear()


def changelist(live_server: Any) -> str:
    return live_server.url + reverse("admin:redisq_django_inboxentry_changelist")


def handled(queue: str, consumer: str, *message_ids: str) -> list[InboxEntry]:
    """Inbox rows of ``queue``/``consumer``, as its handlers' transactions write them."""
    return [
        InboxEntry.objects.create(queue=queue, consumer=consumer, message_id=message_id)
        for message_id in message_ids
    ]


def snapshot() -> list[tuple[int, str, str, str, Any]]:
    """Every inbox row, all its fields."""
    return list(
        InboxEntry.objects.order_by("pk").values_list(
            "pk", "queue", "consumer", "message_id", "handled_at"
        )
    )


def atomic_consumer(queue: str, name: str, declared_atomic: str) -> Consumer:
    """Consumer ``queue``/``name`` as a worker declaring ``atomic`` writes it ("" when the
    code does not declare it, else the database alias)."""
    return Consumer.objects.create(
        queue=Queue.objects.get_or_create(name=queue)[0],
        name=name,
        handler=f"shop.consumers.{name}",
        declared_atomic=declared_atomic,
    )


def flow(page: Page) -> dict[str, list[str]]:
    """The flow-control table of a consumer's page: limit -> [setting, now]."""
    expect(page.locator("#redisq-flow")).to_be_visible()
    texts: list[list[str]] = page.locator("#redisq-flow tbody tr").evaluate_all(
        "rows => rows.map(r => [...r.cells].map(c => c.textContent.trim()))"
    )
    return {limit: rest for limit, *rest in texts}


# -- tests -----------------------------------------------------------------------------


def test_staff_search_and_filter_the_inbox_and_can_only_look(
    page: Page, live_server: Any, queue_name: str, artifacts: Path
) -> None:
    # Given 3 messages billing handled and 2 audit handled (one of them also billing's:
    # both consumers of the queue handle each message)
    ids = [new_message_id() for _ in range(4)]
    billing = handled(queue_name, "billing", ids[0], ids[1], ids[2])
    # (a task's row keeps its return value)
    InboxEntry.objects.filter(pk=billing[2].pk).update(result='{"total": 12}')
    audit = handled(queue_name, "audit", ids[0], ids[3])
    before = snapshot()

    # When staff who may view the inbox open it from the admin index
    log_in(page, live_server, staff("ops", "view_inboxentry"))
    app = page.locator("#content-main .app-redisq_django")
    expect(app).to_contain_text("Redis queues")
    app.get_by_role("link", name=INBOX_LINK).click()
    expect(page).to_have_url(changelist(live_server))

    # Then all 5 rows are listed, each with its queue, consumer and message id
    expect(result_rows(page)).to_have_count(5)
    for entry in [*billing, *audit]:
        row = result_rows(page).filter(has_text=entry.message_id).filter(has_text=entry.consumer)
        expect(row).to_have_count(1)
        expect(row.locator("td.field-queue")).to_have_text(queue_name)
    # ... with no Add button, no action select, no delete action
    expect(page.locator("a.addlink")).to_have_count(0)
    expect(page.get_by_role("link", name=re.compile(r"^Add\b"))).to_have_count(0)
    expect(page.locator('select[name="action"]')).to_have_count(0)
    expect(page.locator("input.action-select")).to_have_count(0)
    expect(page.locator('option[value="delete_selected"]')).to_have_count(0)
    page.screenshot(path=str(artifacts / "inbox-list.png"), full_page=True)

    # When they search a message id billing alone handled: exactly that row
    page.locator("#searchbar").fill(ids[1])
    page.locator("#searchbar").press("Enter")
    expect(result_rows(page)).to_have_count(1)
    expect(result_rows(page).first.locator("th, td").first).to_have_text(ids[1])
    expect(result_rows(page).first.locator("td.field-consumer")).to_have_text("billing")
    # ... and the search is exact: the first 12 characters of an id (its time) find none
    page.locator("#searchbar").fill(ids[1][:12])
    page.locator("#searchbar").press("Enter")
    expect(result_rows(page)).to_have_count(0)

    # When they search the message both handled: its row of each consumer
    page.locator("#searchbar").fill(ids[0])
    page.locator("#searchbar").press("Enter")
    expect(result_rows(page)).to_have_count(2)
    # ... and filter on consumer audit: audit's row alone
    consumer_filter = page.locator('#changelist-filter details[data-filter-title="consumer"]')
    consumer_filter.get_by_role("link", name="audit", exact=True).click()
    expect(page).to_have_url(re.compile(r"[?&]consumer=audit(&|$)"))
    expect(result_rows(page)).to_have_count(1)
    expect(result_rows(page).first.locator("td.field-consumer")).to_have_text("audit")

    # When they filter on consumer billing, without a search: billing's 3 rows
    page.goto(changelist(live_server))
    consumer_filter.get_by_role("link", name="billing", exact=True).click()
    expect(page).to_have_url(f"{changelist(live_server)}?consumer=billing")
    expect(result_rows(page)).to_have_count(3)
    for entry in billing:
        expect(result_rows(page).filter(has_text=entry.message_id)).to_have_count(1)
    expect(result_rows(page).filter(has_text=ids[3])).to_have_count(0)

    # When they open one of billing's rows: it shows read-only, no field, no Save
    result_rows(page).filter(has_text=ids[2]).get_by_role("link", name=ids[2]).click()
    entry = billing[2]
    change_url = reverse("admin:redisq_django_inboxentry_change", args=[entry.pk])
    expect(page).to_have_url(re.compile(re.escape(live_server.url + change_url)))
    heading = page.get_by_role("heading", level=2, name=f"{queue_name}/billing {ids[2]}")
    expect(heading).to_be_visible()
    form = page.locator("#content-main form")
    expect(form.locator(".field-message_id .readonly")).to_have_text(ids[2])
    expect(form.locator(".field-queue .readonly")).to_have_text(queue_name)
    expect(form.locator(".field-consumer .readonly")).to_have_text("billing")
    expect(form.locator(".field-result .readonly")).to_have_text('{"total": 12}')
    expect(form.locator('input:not([type="hidden"]), textarea, select')).to_have_count(0)
    expect(page.locator('input[name="_save"]')).to_have_count(0)
    expect(page.locator('input[name="_continue"]')).to_have_count(0)
    expect(page.locator('input[name="_addanother"]')).to_have_count(0)
    expect(page.locator("a.deletelink")).to_have_count(0)
    page.screenshot(path=str(artifacts / "inbox-entry.png"), full_page=True)

    # A forged POST to the change page, with a valid CSRF token: refused, nothing changed
    token = page.locator('input[name="csrfmiddlewaretoken"]').first.get_attribute("value")
    assert token
    status, body = page.evaluate(
        FORGE,
        [
            change_url,
            {
                "csrfmiddlewaretoken": token,
                "queue": queue_name,
                "consumer": "billing",
                "message_id": "forged",
            },
        ],
    )
    assert status == 403 and "CSRF" not in body, (status, body[:300])
    # ... to its delete page too (deleting the row would let the message be handled again)
    delete_url = reverse("admin:redisq_django_inboxentry_delete", args=[entry.pk])
    status, body = page.evaluate(FORGE, [delete_url, {"csrfmiddlewaretoken": token, "post": "yes"}])
    assert status == 403 and "CSRF" not in body, (status, body[:300])
    # ... to the add page
    add_url = reverse("admin:redisq_django_inboxentry_add")
    status, body = page.evaluate(
        FORGE,
        [
            add_url,
            {
                "csrfmiddlewaretoken": token,
                "queue": queue_name,
                "consumer": "billing",
                "message_id": "forged",
            },
        ],
    )
    assert status == 403 and "CSRF" not in body, (status, body[:300])
    # ... and the admin's bulk delete on the list, which it does not offer: the list
    # comes back as if nothing had been posted
    status, body = page.evaluate(
        FORGE,
        [
            reverse("admin:redisq_django_inboxentry_changelist"),
            {
                "csrfmiddlewaretoken": token,
                "action": "delete_selected",
                "_selected_action": str(entry.pk),
                "post": "yes",
            },
        ],
    )
    assert status == 200 and 'id="result_list"' in body, (status, body[:300])
    assert snapshot() == before


def test_a_consumers_page_says_whether_it_handles_messages_exactly_once(
    page: Page, live_server: Any, broker: Any, queue_name: str, artifacts: Path
) -> None:
    # Given billing, declared atomic=True (the default database), whose inbox skipped two
    # duplicates, audit, not atomic, and a skip of another consumer of the queue
    billing = atomic_consumer(queue_name, "billing", "default")
    audit = atomic_consumer(queue_name, "audit", "")
    broker.operator.count_skipped(queue_name, "billing")
    broker.operator.count_skipped(queue_name, "billing")
    broker.operator.count_skipped(queue_name, "email")
    log_in(page, live_server, staff("ops", "view_consumer"))

    # Then billing's page says it handles messages exactly once, and its 2 duplicates
    page.goto(live_server.url + reverse("admin:redisq_django_consumer_change", args=[billing.pk]))
    assert flow(page)[ATOMIC] == ["on, database default", "2 duplicate(s) skipped in the last hour"]
    page.locator("#redisq-flow").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "consumer-exactly-once.png"), full_page=True)
    # ... one more skip shows on reload
    broker.operator.count_skipped(queue_name, "billing")
    page.reload()
    assert flow(page)[ATOMIC] == ["on, database default", "3 duplicate(s) skipped in the last hour"]

    # ... and audit's says off, with nothing in the "now" column
    page.goto(live_server.url + reverse("admin:redisq_django_consumer_change", args=[audit.pk]))
    assert flow(page)[ATOMIC] == ["off", ""]


def test_without_the_permission_there_is_no_inbox(
    page: Page, live_server: Any, queue_name: str
) -> None:
    handled(queue_name, "billing", new_message_id())
    (entry,) = InboxEntry.objects.all()
    # A staff user who may view consumers (so the app shows on the index) but not the inbox
    log_in(page, live_server, staff("clerk", "view_consumer"))

    # The index lists the app and its consumers, but no inbox
    app = page.locator("#content-main .app-redisq_django")
    expect(app.get_by_role("link", name="Consumers", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name=INBOX_LINK)).to_have_count(0)
    expect(page.locator('a[href*="/inboxentry/"]')).to_have_count(0)

    # ... and the inbox's pages answer 403
    response = page.goto(changelist(live_server))
    assert response is not None and response.status == 403
    change_url = reverse("admin:redisq_django_inboxentry_change", args=[entry.pk])
    response = page.goto(live_server.url + change_url)
    assert response is not None and response.status == 403
    # ... nor does the app's own index list it
    page.goto(live_server.url + reverse("admin:app_list", args=["redisq_django"]))
    expect(page.locator('a[href*="/inboxentry/"]')).to_have_count(0)
