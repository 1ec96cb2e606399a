"""A consumer's flow control on its admin page, in a real browser (chromium through
Playwright) against the live server: the limits the code declares and what they do now
in Redis (slots in use, attempts stopped by the time limit, a rate at its limit),
overrides that lift or change them, an invalid rate refused, and a viewer who may look
but not change; screenshots go to test-artifacts/.

The test-client versions of the override checks are in tests/admin/test_console_status.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.urls import reverse
from playwright.sync_api import Page, expect

from redisq_django.admin import live
from redisq_django.core import trends
from redisq_django.core.batch import run_batch
from redisq_django.core.clock import now_ms
from redisq_django.core.limits import Rate, RateLimit, Slots
from redisq_django.models import Consumer, Queue
from tests.support.browser_pages import log_in, staff

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.site_broker]

#: What the rate's "now" column says, below and at the limit.
BELOW = "below its limit now"
AT_LIMIT = "at its limit now: messages wait in the queue for their turn"
HOUR_MS = 3_600_000


@pytest.fixture(autouse=True)
def _fresh_admin_reads(broker: Any) -> None:
    """The admin reads the session server of this test (no cached client or outage)."""
    live.clear()


def flow_consumer(queue: str, name: str = "billing", **declared: Any) -> Consumer:
    """Consumer ``queue``/``name`` as a worker declaring these limits writes it."""
    return Consumer.objects.create(
        queue=Queue.objects.get_or_create(name=queue)[0],
        name=name,
        handler="shop.consumers.billing",
        **declared,
    )


def change_page(live_server: Any, consumer: Consumer) -> str:
    return live_server.url + reverse("admin:redisq_django_consumer_change", args=[consumer.pk])


def table(page: Page, selector: str) -> list[list[str]]:
    """The text of each cell of the body rows of table ``selector``."""
    rows = page.locator(f"{selector} tbody tr")
    texts: list[list[str]] = rows.evaluate_all(
        "rows => rows.map(r => [...r.cells].map(c => c.textContent.trim()))"
    )
    return texts


def flow(page: Page) -> dict[str, list[str]]:
    """The flow-control table: limit -> [setting, now]."""
    expect(page.locator("#redisq-flow")).to_be_visible()
    return {limit: rest for limit, *rest in table(page, "#redisq-flow")}


def effective(page: Page) -> dict[str, list[str]]:
    """The effective-settings table: setting -> [value, from]."""
    return {name: rest for name, *rest in table(page, "table.redisq-effective")}


def count_timed_out(broker: Any, queue: str, consumer: str, n: int, at_ms: int) -> None:
    """``n`` attempts of ``consumer`` stopped at its time limit, counted in the trends of
    the minute of ``at_ms``, as the worker counts them."""
    counter = trends.Counter(broker.keys(queue))
    field = trends.per_consumer(trends.TIMED_OUT, consumer)
    run_batch(broker.client, counter.commands({field: n}, now=at_ms), transaction=False)


# -- tests -----------------------------------------------------------------------------


def test_the_declared_limits_and_what_they_do_now(
    page: Page, live_server: Any, broker: Any, queue_name: str, artifacts: Path
) -> None:
    # Given a consumer whose code declares 20/s (2/s per ordering key), 3 in flight and
    # a 30 s time limit
    billing = flow_consumer(
        queue_name,
        declared_rate="20/s",
        declared_rate_per_key="2/s",
        declared_max_in_flight=3,
        declared_time_limit=30,
    )
    # ... an instance holding 2 of its 3 slots
    slots_key = broker.keys(queue_name).group("billing").slots
    slots = Slots(broker.client, broker.scripts, slots_key, 3, 60_000)
    assert slots.take("inst-a", 0, 2) == (2, None)
    # ... and 2 attempts stopped at the time limit in the last hour (one now, one two
    # minutes ago), one two hours ago, and 7 of another consumer of the queue
    now = now_ms()
    count_timed_out(broker, queue_name, "billing", 1, now)
    count_timed_out(broker, queue_name, "billing", 1, now - 120_000)
    count_timed_out(broker, queue_name, "billing", 1, now - 2 * HOUR_MS)
    count_timed_out(broker, queue_name, "email", 7, now)

    # When staff open its page
    log_in(page, live_server, staff("ops", "view_consumer", "change_consumer"))
    page.goto(change_page(live_server, billing))

    # Then the flow-control table says each limit and what it does now
    assert flow(page) == {
        "rate": ["20/s, bursts of 2", BELOW],
        "rate per key": ["2/s, bursts of 1", ""],
        "max in flight": ["3", "2 in use now"],
        "time limit": ["30 s", "2 attempt(s) stopped at the limit in the last hour"],
        "exactly once (atomic)": ["off", ""],
    }
    # ... and the effective settings say they come from the code
    settings = effective(page)
    assert settings["rate"] == ["20/s", "code"]
    assert settings["rate_per_key"] == ["2/s", "code"]
    assert settings["max_in_flight"] == ["3", "code"]
    assert settings["time_limit"] == ["30.0", "code"]
    page.locator("#redisq-flow").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "consumer-flow-control.png"), full_page=True)

    # ... and once both slots are given back, none is in use
    slots.give("inst-a", 2, 2)
    page.reload()
    assert flow(page)["max in flight"] == ["3", "0 in use now"]


def test_a_consumer_at_its_rate_limit_and_one_without_limits(
    page: Page, live_server: Any, broker: Any, queue_name: str
) -> None:
    # Given a consumer declared at 1 message a minute that has just started one, and
    # another consumer of the queue with no limit at all
    slow = flow_consumer(queue_name, "slow", declared_rate="1/m")
    free = flow_consumer(queue_name, "free")
    rate_key = broker.keys(queue_name).group("slow").rate
    limit = RateLimit(broker.client, broker.scripts, rate_key, Rate.parse("1/m"))
    assert limit.take(1).count == 1
    log_in(page, live_server, staff("ops", "view_consumer", "change_consumer"))

    # Then the first's page says messages wait for their turn
    page.goto(change_page(live_server, slow))
    assert flow(page)["rate"] == ["1/m, bursts of 1", AT_LIMIT]
    # ... and the other's says no limit applies, from neither the code nor an override
    page.goto(change_page(live_server, free))
    assert flow(page) == {
        "rate": ["no limit", BELOW],
        "rate per key": ["no limit", ""],
        "max in flight": ["no limit", "0 in use now"],
        "time limit": ["no limit", "0 attempt(s) stopped at the limit in the last hour"],
        "exactly once (atomic)": ["off", ""],
    }
    settings = effective(page)
    for name in ("rate", "rate_per_key", "max_in_flight", "time_limit"):
        assert settings[name] == ["no limit", "settings"], name


def test_overrides_change_and_lift_the_code_limits(
    page: Page, live_server: Any, broker: Any, queue_name: str, artifacts: Path
) -> None:
    # Given the consumer of 20/s, 3 in flight, 30 s
    billing = flow_consumer(
        queue_name, declared_rate="20/s", declared_max_in_flight=3, declared_time_limit=30
    )
    log_in(page, live_server, staff("ops", "view_consumer", "change_consumer"))
    page.goto(change_page(live_server, billing))

    # When staff override the rate to 5/s, lift max in flight with 0, and save
    page.locator("#id_rate").fill("5/s")
    page.locator("#id_max_in_flight").fill("0")
    page.get_by_role("button", name="Save", exact=True).click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text("was changed successfully")

    # Then the row keeps both overrides (and the others empty)
    billing.refresh_from_db()
    assert (billing.rate, billing.max_in_flight) == ("5/s", 0)
    assert (billing.burst, billing.time_limit) == (None, None)
    (entry,) = LogEntry.objects.filter(action_flag=CHANGE)
    assert entry.user.username == "ops"
    assert "5/s" in entry.get_change_message()

    # ... and its page again shows the new rate and no limit in flight
    page.goto(change_page(live_server, billing))
    expect(page.locator("#id_rate")).to_have_value("5/s")
    expect(page.locator("#id_max_in_flight")).to_have_value("0")
    assert flow(page) == {
        "rate": ["5/s, bursts of 1", BELOW],
        "rate per key": ["no limit", ""],
        "max in flight": ["no limit", "0 in use now"],
        "time limit": ["30 s", "0 attempt(s) stopped at the limit in the last hour"],
        "exactly once (atomic)": ["off", ""],
    }
    settings = effective(page)
    assert settings["rate"] == ["5/s", "admin override"]
    assert settings["max_in_flight"] == ["no limit", "admin override"]
    assert settings["time_limit"] == ["30.0", "code"]
    page.screenshot(path=str(artifacts / "consumer-flow-overrides.png"), full_page=True)

    # ... and "off" lifts the code's rate too
    page.locator("#id_rate").fill("off")
    page.get_by_role("button", name="Save and continue editing").click()
    expect(page.locator("ul.messagelist li.success")).to_contain_text("was changed successfully")
    assert flow(page)["rate"] == ["no limit", BELOW]
    assert effective(page)["rate"] == ["no limit", "admin override"]
    billing.refresh_from_db()
    assert billing.rate == "off"


def test_an_invalid_rate_is_refused_and_nothing_is_saved(
    page: Page, live_server: Any, broker: Any, queue_name: str
) -> None:
    billing = flow_consumer(queue_name, declared_rate="20/s", declared_max_in_flight=3)
    log_in(page, live_server, staff("ops", "view_consumer", "change_consumer"))
    page.goto(change_page(live_server, billing))

    # When staff type a rate with no valid period, beside a valid max in flight
    page.locator("#id_rate").fill("5/x")
    page.locator("#id_max_in_flight").fill("4")
    page.get_by_role("button", name="Save", exact=True).click()

    # Then the form comes back with the error under the rate, and the typed values
    expect(page.locator(".errornote")).to_be_visible()
    expect(page.locator(".field-rate .errorlist")).to_contain_text("is not a rate")
    expect(page.locator(".field-max_in_flight .errorlist")).to_have_count(0)
    expect(page.locator("#id_rate")).to_have_value("5/x")
    expect(page.locator("ul.messagelist li.success")).to_have_count(0)
    # ... and nothing changed: the row, the history, the limits shown
    billing.refresh_from_db()
    assert (billing.rate, billing.max_in_flight) == ("", None)
    assert not LogEntry.objects.filter(action_flag=CHANGE).exists()
    page.goto(change_page(live_server, billing))
    assert flow(page)["rate"] == ["20/s, bursts of 2", BELOW]
    assert flow(page)["max in flight"] == ["3", "0 in use now"]


def test_a_viewer_sees_the_limits_but_cannot_change_them(
    page: Page, live_server: Any, broker: Any, queue_name: str
) -> None:
    billing = flow_consumer(
        queue_name, declared_rate="20/s", declared_max_in_flight=3, declared_time_limit=30
    )
    billing.rate = "5/s"
    billing.save()
    log_in(page, live_server, staff("viewer", "view_consumer"))
    page.goto(change_page(live_server, billing))

    # The flow-control table shows, the overrides as text: no field, no save button
    assert flow(page)["rate"] == ["5/s, bursts of 1", BELOW]
    expect(page.locator(".field-rate .readonly")).to_have_text("5/s")
    expect(page.locator("#id_rate")).to_have_count(0)
    expect(page.locator("#id_max_in_flight")).to_have_count(0)
    expect(page.locator('input[name="_save"]')).to_have_count(0)
    expect(page.locator('input[name="_continue"]')).to_have_count(0)

    # A forged POST from the page, with a valid CSRF token, is refused
    token = page.locator('input[name="csrfmiddlewaretoken"]').first.get_attribute("value")
    status = page.evaluate(
        """async ([url, token]) => {
            const body = new FormData();
            body.append("csrfmiddlewaretoken", token);
            body.append("enabled", "on");
            body.append("rate", "off");
            const response = await fetch(url, {method: "POST", body, credentials: "same-origin"});
            return response.status;
        }""",
        [reverse("admin:redisq_django_consumer_change", args=[billing.pk]), token],
    )
    assert status == 403
    billing.refresh_from_db()
    assert billing.rate == "5/s"
