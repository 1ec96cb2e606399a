"""The dead-letter admin in a real browser (chromium through Playwright) against the live
server: log in through the login form, filter, press Retry while a real worker consumes
the queue, permissions, escaping; screenshots go to test-artifacts/.

The test-client versions of these checks are in tests/admin/test_admin.py.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect

from redisq_django.core.handler import ConsumerSpec
from redisq_django.core.message import Message
from redisq_django.core.retry import RetryPolicy
from redisq_django.core.worker import Worker, WorkerOptions
from redisq_django.models import DeadLetter
from tests.support.admin_pages import make_dead
from tests.support.browser_pages import choose_filter, log_in, result_rows, staff

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.site_broker]

#: Longest wait for anything the browser or the worker does.
WAIT_S = 10.0


# -- helpers ---------------------------------------------------------------------------


def assert_styled_breadcrumbs(page: Page) -> None:
    """The breadcrumbs bar has the admin's background (its markup differs by version)."""
    bar = page.locator('nav[aria-label="Breadcrumbs"] .breadcrumbs')
    expect(bar).to_be_visible()
    background = bar.evaluate("el => getComputedStyle(el).backgroundColor")
    assert background not in ("rgba(0, 0, 0, 0)", "transparent"), background


class RecordingWorker:
    """A real core :class:`Worker` in a background thread, running logical consumers of
    one queue whose handlers record (message id, attempts) and ack."""

    def __init__(self, broker: Any, queue: str, consumers: tuple[str, ...]) -> None:
        self.seen: dict[str, list[tuple[str, int]]] = {name: [] for name in consumers}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        specs = [
            ConsumerSpec(
                queue=queue,
                name=name,
                handler=self._handler(name),
                policy=RetryPolicy(
                    max_retries=3, backoff_s=0.1, max_backoff_s=1.0, visibility_timeout_ms=30_000
                ),
            )
            for name in consumers
        ]
        options = WorkerOptions(block_ms=100, grace_period=5.0, stats_interval=0)
        self.worker = Worker(broker, specs, options)
        self.thread = threading.Thread(target=self.worker.run, name="redisq-test-worker")

    def _handler(self, name: str) -> Any:
        def handle(message: Message) -> None:
            with self._changed:
                self.seen[name].append((message.id, message.attempts))
                self._changed.notify_all()

        return handle

    def wait_seen(self, name: str, count: int) -> list[tuple[str, int]]:
        """What ``name`` handled, once it has handled at least ``count`` messages."""
        with self._changed:
            self._changed.wait_for(lambda: len(self.seen[name]) >= count, timeout=WAIT_S)
            seen = list(self.seen[name])
        assert len(seen) >= count, f"{name} handled {seen} within {WAIT_S}s, expected {count}"
        return seen

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Warm stop: in-flight handlers finish and are acked."""
        self.worker.stop()
        self.thread.join(timeout=WAIT_S)
        assert not self.thread.is_alive(), "the worker did not stop"
        assert not self.worker.crashed


@pytest.fixture
def shop_worker(broker: Any) -> Iterator[RecordingWorker]:
    """A worker running shop/billing and shop/email (stopped after the test, if not yet)."""
    worker = RecordingWorker(broker, "shop", ("billing", "email"))
    try:
        yield worker
    finally:
        if worker.thread.is_alive():
            worker.stop()


# -- tests -----------------------------------------------------------------------------


def test_retry_from_the_list_is_handled_again_by_a_running_consumer(
    page: Page,
    live_server: Any,
    broker: Any,
    shop_worker: RecordingWorker,
    artifacts: Path,
) -> None:
    # Given a dead letter of shop/billing, one of another queue, and a worker running
    # billing and email (email, another consumer of shop, has handled the message once)
    broker.consumers.ensure("shop", "email", start="earliest")
    row = make_dead(broker, "shop", {"order": 1, "sku": "needle-1"})
    other = make_dead(broker, "audit", {"entry": 2}, consumer="archive")
    shop_worker.start()
    assert shop_worker.wait_seen("email", 1) == [(row.message_id, 1)]
    ops = staff("ops", "view_deadletter", "retry_deadletter", "view_queue")

    # When staff log in, open the dead letters from the index and filter on billing
    log_in(page, live_server, ops)
    page.locator("#content-main").get_by_role("link", name="Dead letters", exact=True).click()
    expect(result_rows(page)).to_have_count(2)
    expect(page.locator("#changelist-filter")).to_be_visible()
    choose_filter(page, "consumer", "billing")
    expect(page).to_have_url(f"{live_server.url}/admin/redisq_django/deadletter/?consumer=billing")
    expect(result_rows(page)).to_have_count(1)
    listed = result_rows(page).first
    expect(listed).to_contain_text(row.message_id)
    expect(listed.locator("td.field-status")).to_have_text("dead")

    # ... and press Retry on that row
    listed.get_by_role("button", name="Retry").click()

    # Then the success message shows, and the running worker handles it again, as a
    # first attempt of the same message, in billing only
    expect(page.locator("ul.messagelist li.success")).to_have_text(
        f"Message {row.message_id} sent again to shop/billing."
    )
    assert shop_worker.wait_seen("billing", 1) == [(row.message_id, 1)]
    page.screenshot(path=str(artifacts / "deadletters-list.png"), full_page=True)

    # ... back on the same filtered list, which shows it retried, with no Retry button
    assert "consumer=billing" in page.url
    page.reload()
    expect(page.locator("ul.messagelist")).to_have_count(0)
    retried = result_rows(page).filter(has_text=row.message_id)
    expect(retried.locator("td.field-status")).to_have_text("retried")
    expect(retried.locator("td.field-retry_count")).to_have_text("1")
    expect(retried.get_by_role("button", name="Retry")).to_have_count(0)
    # ... while the other consumer's dead letter is untouched
    page.goto(live_server.url + reverse("admin:redisq_django_deadletter_changelist"))
    still_dead = result_rows(page).filter(has_text=other.message_id)
    expect(still_dead.locator("td.field-status")).to_have_text("dead")
    expect(still_dead.get_by_role("button", name="Retry")).to_have_count(1)
    row.refresh_from_db()
    assert row.status == DeadLetter.Status.RETRIED and row.retried_by == ops

    # ... and the live overview (linked from the index) shows both queues, the running
    # instances and the dead letter left in the database
    page.goto(f"{live_server.url}{reverse('admin:index')}")
    page.get_by_role("link", name="Overview (live)").click()
    overview = page.locator("#redisq-overview")
    queues = overview.locator("tr.redisq-queue")
    expect(queues.filter(has_text="shop")).to_have_count(1)
    expect(queues.filter(has_text="audit")).to_have_count(1)
    billing = overview.locator("tr.redisq-consumer").filter(has_text="billing")
    expect(billing.locator('td[data-label="instances"]')).to_have_text("1")
    archive = overview.locator("tr.redisq-consumer").filter(has_text="archive")
    expect(archive.locator('td[data-label="dead"]')).to_have_text("1")  # rows + Redis
    assert_styled_breadcrumbs(page)
    page.screenshot(path=str(artifacts / "overview.png"), full_page=True)

    # ... and once the worker has stopped, email has seen the message only once and has
    # nothing waiting: the retry went to billing alone
    shop_worker.stop()
    assert shop_worker.seen == {
        "billing": [(row.message_id, 1)],
        "email": [(row.message_id, 1)],
    }
    for name in ("billing", "email"):
        with broker.subscribe("shop", name) as sub:
            assert sub.fetch(count=10, block_ms=100) == []


def test_without_the_permission_no_retry_button_and_a_forged_post_is_refused(
    page: Page, live_server: Any, broker: Any
) -> None:
    row = make_dead(broker, "shop", {"order": 3})
    viewer = staff("viewer", "view_deadletter")
    log_in(page, live_server, viewer)
    changelist = f"{live_server.url}{reverse('admin:redisq_django_deadletter_changelist')}"

    # The list shows the row, with neither the Retry button nor the bulk actions
    page.goto(changelist)
    expect(result_rows(page)).to_have_count(1)
    expect(result_rows(page).first).to_contain_text(row.message_id)
    expect(page.locator("button.redisq-retry")).to_have_count(0)
    expect(page.locator("th.column-retry_button")).to_have_count(0)
    expect(page.locator('select[name="action"]')).to_have_count(0)
    # ... nor does the detail page
    result_rows(page).first.get_by_role("link", name=row.message_id).click()
    heading = page.get_by_role("heading", level=2, name=f"shop/billing {row.message_id}")
    expect(heading).to_be_visible()
    expect(page.locator("button.redisq-retry")).to_have_count(0)

    # A forged POST from the page, with a valid CSRF token: refused by the permission
    retry_url = reverse("admin:redisq_django_deadletter_retry", args=[row.pk])
    token = page.locator('input[name="csrfmiddlewaretoken"]').first.get_attribute("value")
    forge = """async ([url, token]) => {
        const body = new FormData();
        if (token) body.append("csrfmiddlewaretoken", token);
        const response = await fetch(url, {method: "POST", body, credentials: "same-origin"});
        return [response.status, await response.text()];
    }"""
    status, body = page.evaluate(forge, [retry_url, token])
    assert status == 403 and "CSRF" not in body, body[:300]
    # ... and one without a token: refused by the CSRF check
    status, body = page.evaluate(forge, [retry_url, None])
    assert status == 403 and "CSRF verification failed" in body, body[:300]

    # Nothing changed, and billing was sent nothing
    row.refresh_from_db()
    assert row.status == DeadLetter.Status.DEAD and row.retry_count == 0
    with broker.subscribe("shop", "billing") as sub:
        assert sub.fetch(count=10, block_ms=100) == []


def test_a_script_payload_renders_as_text(page: Page, live_server: Any, broker: Any) -> None:
    script = "<script>window.redisqXss = 1; alert('x')</script>"
    row = make_dead(broker, "shop", {"note": script})
    make_dead(broker, "shop", {"note": "harmless"})
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    log_in(page, live_server, staff("viewer", "view_deadletter"))

    # Search finds it by its payload; its page shows the payload and error as text
    page.goto(f"{live_server.url}{reverse('admin:redisq_django_deadletter_changelist')}")
    expect(result_rows(page)).to_have_count(2)
    page.locator("#searchbar").fill("redisqXss")
    page.locator("#searchbar").press("Enter")
    expect(result_rows(page)).to_have_count(1)
    result_rows(page).first.get_by_role("link", name=row.message_id).click()

    payload = page.locator("pre.redisq-json").first
    expect(payload).to_contain_text(script)
    expect(payload.locator("script")).to_have_count(0)
    error = page.locator("div.field-error_text div.readonly")
    expect(error).to_have_text("card declined <b>")
    expect(error.locator("b")).to_have_count(0)
    assert page.evaluate("() => window.redisqXss") is None
    assert dialogs == []


def test_bulk_discard_asks_for_confirmation(page: Page, live_server: Any, broker: Any) -> None:
    rows = [make_dead(broker, "shop", {"order": n}) for n in (4, 5)]
    log_in(page, live_server, staff("ops", "view_deadletter", "retry_deadletter"))
    page.goto(f"{live_server.url}{reverse('admin:redisq_django_deadletter_changelist')}")

    # Select one row and run the action (the admin's own JavaScript counts the selection)
    result_rows(page).filter(has_text=rows[0].message_id).locator("input.action-select").check()
    expect(page.locator(".action-counter")).to_have_text("1 of 2 selected")
    page.locator('select[name="action"]').select_option("discard_selected")
    # The action button says "Run" on Django 6 and "Go" on 5.2.
    page.get_by_role("button", name=re.compile(r"^(Run|Go)$")).click()

    # A confirmation page first, naming the row; nothing changed yet
    expect(page.locator("#content")).to_contain_text("Discard this dead letter?")
    expect(page.locator("#content li")).to_contain_text(rows[0].message_id)
    assert_styled_breadcrumbs(page)
    assert DeadLetter.objects.filter(status=DeadLetter.Status.DEAD).count() == 2

    page.get_by_role("button", name="Yes, I'm sure").click()
    expect(page.locator("ul.messagelist li.success")).to_have_text("Discarded 1 dead letter.")
    discarded = result_rows(page).filter(has_text=rows[0].message_id)
    expect(discarded.locator("td.field-status")).to_have_text("discarded")
    assert [r.status for r in DeadLetter.objects.order_by("id")] == ["discarded", "dead"]
