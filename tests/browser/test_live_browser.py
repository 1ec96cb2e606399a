"""The live pages in a real browser: every list of a consumer and of a queue at 1440x900
and 390x844 (screenshots in test-artifacts/, no sideways scrolling), the page updating
itself from its JSON endpoint without a reload and pausing on demand, deliver now and a
typed purge, an ordered consumer's held-back keys released, and charts whose totals are
what was published, handled and failed."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Page, expect

from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.core import ConsumerSpec, Message, Reject, RetryPolicy
from redisq_django.core.wire import visible
from redisq_django.core.worker import Worker, WorkerOptions
from redisq_django.models import Consumer, Queue
from tests.support.browser_pages import SIZES, assert_fits, log_in
from tests.support.held_data import CONSUMER, ODD_KEY, held_consumer
from tests.support.live_data import CART_KEY, Live, live_consumer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def made(redisq_settings: Any) -> Live:
    live.clear()
    return live_consumer(get_broker(), "shop")


def consumer_page(made: Live, name: str = "billing") -> str:
    return reverse("admin:redisq_django_consumer_live", args=[made.queue, name])


def queue_page(made: Live) -> str:
    return reverse("admin:redisq_django_queue_live", args=[made.queue])


def rows(page: Page) -> Any:
    return page.locator("#redisq-list tbody tr")


def ids(page: Page) -> list[str]:
    return [
        r.rsplit(":", 1)[-1] for r in rows(page).evaluate_all("rs => rs.map(r => r.dataset.ref)")
    ]


@pytest.mark.parametrize("size", list(SIZES))
def test_every_list_fits_the_screen_and_shows_what_it_should(
    page: Page, live_server: Any, ops: User, made: Live, size: str, artifacts: Path
) -> None:
    log_in(page, live_server, ops)
    page.set_viewport_size(SIZES[size])
    expected = {
        "waiting": made.waiting,
        "delayed": made.delayed,
        "retrying": sorted(made.retrying),
        "in_flight": made.in_flight,
        "instances": ["worker-1"],
    }
    for name in ("waiting", "delayed", "retrying", "in_flight", "instances", "dead"):
        page.goto(f"{live_server.url}{consumer_page(made)}?list={name}")
        page.screenshot(path=str(artifacts / f"live-consumer-{name}-{size}.png"), full_page=True)
        assert_fits(page, f"consumer {name} at {size}px")
        expect(page.locator(f"#redisq-tab-{name}")).to_have_attribute("aria-current", "page")
        if name in expected:
            got = ids(page)
            assert (sorted(got) if name == "retrying" else got) == expected[name], name
        if name in ("delayed", "retrying", "in_flight", "waiting"):
            # Each message's ordering key beside its id, when it has one
            keys = rows(page).evaluate_all(
                "rs => rs.map(r => r.querySelector('.redisq-key')?.textContent ?? null)"
            )
            assert (
                keys
                == {
                    "delayed": ["order-0", "order-1"],
                    "retrying": [CART_KEY] * 2,
                    "in_flight": [CART_KEY] * 3,
                    "waiting": [None] * len(made.waiting),
                }[name]
            ), name
    expect(page.locator("#redisq-dead-link")).to_be_visible()
    for name in ("consumers", "delayed", "log"):
        page.goto(f"{live_server.url}{queue_page(made)}?list={name}")
        page.screenshot(path=str(artifacts / f"live-queue-{name}-{size}.png"), full_page=True)
        assert_fits(page, f"queue {name} at {size}px")
    published = made.retrying + made.dead + made.in_flight + made.waiting  # in that order
    assert ids(page) == published[::-1]  # the log, newest first
    # A message's own page, and the purge confirmation
    page.goto(f"{live_server.url}{consumer_page(made)}?list=retrying")
    rows(page).first.locator("a.redisq-msg").click()
    expect(page.locator("#redisq-last-error")).to_contain_text("Error")
    expect(page.locator("#redisq-ordering-key")).to_have_text(f"Ordering key: {CART_KEY}")
    page.screenshot(path=str(artifacts / f"live-message-{size}.png"), full_page=True)
    assert_fits(page, f"message at {size}px")
    page.goto(f"{live_server.url}{consumer_page(made)}")
    page.locator("#redisq-purge").click()
    expect(page.locator("#redisq-confirm-question")).to_contain_text("Purge shop/billing")
    page.screenshot(path=str(artifacts / f"live-purge-{size}.png"), full_page=True)
    assert_fits(page, f"purge confirmation at {size}px")


def test_the_page_updates_itself_without_reloading_and_pauses_on_demand(
    page: Page, live_server: Any, ops: User, made: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the live page of billing, refreshing every second
    monkeypatch.setattr(admin.site._registry[Consumer], "refresh_seconds", 1)
    broker = get_broker()
    log_in(page, live_server, ops)
    page.goto(f"{live_server.url}{consumer_page(made)}")
    backlog = page.locator("#redisq-fig-backlog .redisq-value")
    expect(backlog).to_have_text("6")
    page.evaluate("window.redisqMarker = 'the same page'")

    # When more messages arrive, the figures and the list follow, without a reload
    broker.publish_many(made.queue, [{"order": 300 + n} for n in range(3)])
    expect(backlog).to_have_text("9", timeout=8_000)
    expect(rows(page)).to_have_count(9)
    assert page.evaluate("window.redisqMarker") == "the same page"
    assert int(page.locator("#redisq-live").get_attribute("data-polls") or 0) >= 1
    expect(page.locator("#redisq-live-status")).to_have_text(re.compile(r"Updated \d+ s ago"))

    # When staff pause the updates, nothing changes until they resume
    page.locator("#redisq-live-toggle").click()
    expect(page.locator("#redisq-live-status")).to_contain_text("Updates paused")
    expect(page.locator("#redisq-live-toggle")).to_have_attribute("aria-pressed", "true")
    broker.publish_many(made.queue, [{"order": 400 + n} for n in range(2)])
    time.sleep(2.5)
    expect(backlog).to_have_text("9")
    page.locator("#redisq-live-toggle").click()
    expect(backlog).to_have_text("11", timeout=8_000)
    expect(page.locator("#redisq-live-toggle")).to_have_text("Pause updates")


def test_deliver_now_and_a_typed_purge_from_the_page(
    page: Page, live_server: Any, ops: User, made: Live
) -> None:
    broker = get_broker()
    with broker.subscribe(made.queue, "email") as sub:  # email with nothing left to do
        sub.ack(sub.fetch(count=100, block_ms=100))
    log_in(page, live_server, ops)
    page.goto(f"{live_server.url}{consumer_page(made)}?list=delayed")

    # Deliver the second delayed message now: it is the next one email receives
    rows(page).nth(1).get_by_role("button", name="Deliver now").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text(
        f"Delivered delayed message {made.delayed[1]} now."
    )
    assert ids(page) == [made.delayed[0]]
    with broker.subscribe(made.queue, "email") as sub:
        got = sub.fetch(count=10, block_ms=200)
        sub.ack(got)
    assert [m.id for m in got] == [made.delayed[1]]

    # Purge billing: the wrong name purges nothing, the right one discards its backlog
    page.locator("#redisq-purge").click()
    page.locator("#redisq-confirm-name").fill("billin")
    page.locator("#redisq-confirm").click()
    expect(page.locator("ul.messagelist li.error")).to_contain_text("Nothing was purged")
    page.locator("#redisq-confirm-name").fill("billing")
    page.locator("#redisq-confirm").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text("Purged shop/billing")
    expect(page.locator("#redisq-fig-backlog .redisq-value")).to_have_text("0")
    expect(page.locator("#redisq-fig-retrying .redisq-value")).to_have_text("0")
    expect(page.locator("#redisq-fig-in_flight .redisq-value")).to_have_text("3")


def test_purging_a_queue_an_archive_lags_behind_says_so_in_red_and_wants_the_box_ticked(
    page: Page, live_server: Any, ops: User, made: Live, artifacts: Path
) -> None:
    # Given archive "default" that has stored none of the queue's 12 messages
    broker = get_broker()
    broker.archives.register(made.queue, "default", "messages", "earliest")
    log_in(page, live_server, ops)
    page.goto(live_server.url + queue_page(made))

    # When staff choose Purge…: the loss is on the confirmation page, in red
    page.locator("#redisq-purge").click()
    costs = page.locator("#redisq-purge-costs")
    expect(costs).to_be_visible()
    expect(costs.locator("li")).to_have_text(
        ["12 messages not yet archived by 'default' will be lost"]
    )
    expect(costs.locator("li")).to_have_css("color", "rgb(186, 33, 33)")
    page.screenshot(path=str(artifacts / "live-purge-archive-lags-1440.png"), full_page=True)

    # When the name is typed but the box is not ticked: the browser does not send it
    page.locator("#redisq-confirm-name").fill(made.queue)
    page.locator("#redisq-confirm").click()
    expect(page.locator("#redisq-lose-unarchived")).to_be_visible()
    assert page.locator("#redisq-lose-unarchived").evaluate("e => !e.validity.valid")
    assert broker.stats(made.queue).length == 12

    # When ticked too: purged, and the archive's gap record says a purge removed them
    page.locator("#redisq-lose-unarchived").check()
    page.locator("#redisq-confirm").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text(f"Purged {made.queue}")
    assert broker.stats(made.queue).length == 0
    gap = broker.archives.gap(made.queue, "default", "messages")
    assert gap is not None and gap.purge is not None and gap.purge.count == 12


def test_a_held_back_key_says_why_and_is_released_from_the_page(
    page: Page, live_server: Any, ops: User, redisq_settings: Any, artifacts: Path
) -> None:
    # Given ordered consumer ledger, whose key retry-me is held by a message retrying in
    # an hour, and whose odd key (markup, quotes, a line break, an emoji) by one running
    live.clear()
    made = held_consumer(get_broker(), "ledgers")
    log_in(page, live_server, ops)
    url = reverse("admin:redisq_django_consumer_live", args=[made.queue, CONSUMER])
    page.goto(live_server.url + url)
    held = page.locator("#redisq-held-list tbody tr")
    expect(held).to_have_count(4)
    page.screenshot(path=str(artifacts / "live-held-keys-1440.png"), full_page=True)

    # Then each row says why, the odd key shown as the text it is (its line break as \n)
    retry = page.locator('#redisq-held-list tr[data-key="retry-me"]')
    expect(retry).to_contain_text("retrying at")
    expect(retry).to_contain_text("after: ValueError: card declined")
    odd = held.first
    assert odd.locator("code.redisq-key").evaluate("e => e.textContent") == visible(ODD_KEY)
    expect(odd).to_contain_text("running on i1")

    # When staff press Release… on retry-me, and confirm
    retry.get_by_role("button", name="Release…").click()
    expect(page.locator("#redisq-confirm-question")).to_contain_text(
        "Release ordering key retry-me of ledgers/ledger"
    )
    page.locator("#redisq-confirm").click()
    # Then they are told, and its next message holds the key, queued in the input
    expect(page.locator("ul.messagelist li.success")).to_contain_text(
        "Released ordering key retry-me"
    )
    expect(retry).to_contain_text("queued in the consumer's input")
    expect(retry.locator("td").nth(1)).to_have_text("1")

    # And the odd key is released just as well (its line break survives the form)
    odd.get_by_role("button", name="Release…").click()
    page.locator("#redisq-confirm").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text("Released ordering key")
    got = made.sub.fetch(count=100, block_ms=200)
    assert sorted(m.id for m in got if m.key in ("retry-me", ODD_KEY)) == sorted(
        [made.later["retry-me"][0], made.later[ODD_KEY][0]]
    )


def test_a_right_to_left_key_reads_as_its_escapes_on_the_held_keys_list(
    page: Page, live_server: Any, ops: User, redisq_settings: Any, artifacts: Path
) -> None:
    # Given a key held back whose text is "\u202egnp.exe" (raw, it reads "exe.png")
    live.clear()
    broker = get_broker()
    Consumer.objects.create(
        queue=Queue.objects.create(name="uploads"), name="ledger", handler="shop.x.ledger"
    )
    broker.consumers.ensure("uploads", "ledger")
    broker.publish_many("uploads", [{"n": 0}, {"n": 1}], key="\u202egnp.exe")
    sub = broker.subscribe("uploads", "ledger", "i1", ordered=True)
    assert len(sub.fetch(count=10, block_ms=200)) == 1
    # When staff open the consumer's live page
    log_in(page, live_server, ops)
    page.goto(
        live_server.url + reverse("admin:redisq_django_consumer_live", args=["uploads", "ledger"])
    )
    key = page.locator("#redisq-held-list tbody tr code.redisq-key")
    expect(key).to_have_count(1)
    page.screenshot(path=str(artifacts / "live-held-bidi-key.png"), full_page=True)
    # Then the key reads as its escape, left to right, as the console shows it
    assert key.evaluate("e => e.innerText") == "\\u202egnp.exe"
    assert "\u202e" not in page.locator("#redisq-held-list").inner_text()
    # And Release… still acts on the key itself
    page.locator("#redisq-held-list").get_by_role("button", name="Release…").click()
    expect(page.locator("#redisq-confirm-key")).to_have_text("\\u202egnp.exe")
    page.locator("#redisq-confirm").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text(
        "Released ordering key \\u202egnp.exe"
    )
    assert [d.payload["n"] for d in sub.fetch(count=10, block_ms=200)] == [1]


def test_the_charts_add_up_to_what_was_published_handled_and_failed(
    page: Page, live_server: Any, ops: User, redisq_settings: Any, artifacts: Path
) -> None:
    # Given 30 messages handled by a worker that fails 4 of them once and rejects 2
    broker = get_broker()
    q = Queue.objects.create(name="trend")
    Consumer.objects.create(queue=q, name="billing", handler="shop.consumers.billing")
    broker.consumers.ensure("trend", "billing")
    broker.publish_many("trend", [{"n": n} for n in range(30)])
    seen: set[int] = set()
    lock = threading.Lock()

    def handler(message: Message) -> None:
        n = message.payload["n"]
        with lock:
            first = n not in seen
            seen.add(n)
        if n in (3, 13, 23, 27) and first:
            raise ValueError("once")
        if n in (9, 19):
            raise Reject("never")

    spec = ConsumerSpec(
        "trend", "billing", handler, policy=RetryPolicy(backoff_s=0.01, max_backoff_s=0.02)
    )
    assert (
        Worker(broker, [spec], WorkerOptions(block_ms=50, burst=True, stats_interval=0)).run() == 0
    )

    # When staff look at its live page
    log_in(page, live_server, ops)
    trend_page = reverse("admin:redisq_django_consumer_live", args=["trend", "billing"])
    page.goto(f"{live_server.url}{trend_page}")
    page.screenshot(path=str(artifacts / "live-trends-1440.png"), full_page=True)

    # Then the charts' totals are what happened
    throughput = page.locator("#redisq-chart-throughput")
    expect(throughput).to_have_attribute("data-total-published", "30")
    expect(throughput).to_have_attribute("data-total-handled", "28")
    failures = page.locator("#redisq-chart-failures")
    expect(failures).to_have_attribute("data-total-failed", "6")
    expect(failures).to_have_attribute("data-total-retried", "4")
    expect(failures).to_have_attribute("data-total-dead", "2")
    # ... and the overview shows the same, for every queue
    page.goto(f"{live_server.url}{reverse('admin:redisq_django_overview_changelist')}")
    expect(page.locator("#redisq-chart-throughput")).to_have_attribute("data-total-handled", "28")
    page.screenshot(path=str(artifacts / "live-overview-1440.png"), full_page=True)
