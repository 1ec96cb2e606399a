"""A partitioned queue's live page in a real browser: the table of its partitions with the
hot and the stuck one highlighted and explained, the charts by partition drawn by
charts.js (a line per partition), the table kept through the live refresh, a page that
fits 1,280 px and a phone; screenshots in test-artifacts/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import Page, expect

from redisq_django.connection import get_broker
from tests.support.browser_pages import SIZES, assert_fits, log_in
from tests.support.partition_data import PUBLISHED, K, Skewed, skewed_queue

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def skewed(redisq_settings: Any, queue_name: str) -> Skewed:
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "PARTITIONS": {queue_name: K}}
    return skewed_queue(get_broker(), queue_name)


def test_the_partitions_table_and_chart_show_the_hot_and_the_stuck_partition(
    page: Page, live_server: Any, ops: User, skewed: Skewed, artifacts: Path
) -> None:
    # Given staff on a laptop's screen
    page.set_viewport_size({"width": 1280, "height": 900})
    log_in(page, live_server, ops)
    url = reverse("admin:redisq_django_queue_live", args=[skewed.queue])

    # When they open the partitioned queue's live page
    page.goto(f"{live_server.url}{url}")

    # Then the table has a row per partition, partition 2 hot and 3 stuck, said in words
    table = page.locator("#redisq-partitions")
    expect(table.locator("tbody tr")).to_have_count(K)
    hot_row = "redisq-partition-flagged redisq-partition-hot"
    expect(table.locator('tr[data-partition="2"]')).to_have_class(hot_row)
    expect(table.locator('tr[data-partition="3"] .redisq-flag-stuck')).to_have_text("stuck")
    expect(table.locator('tr[data-partition="2"] td[data-figure="backlog"]')).to_have_text(
        str(skewed.backlog[2])
    )
    flagged = page.locator("#redisq-partitions-flagged")
    expect(flagged).to_contain_text("Partition 2 — hot: backlog 80")
    expect(flagged).to_contain_text("Partition 3 — stuck: consumer `audit`")
    # and the flagged row stands out: its background is not the others'
    background = "el => getComputedStyle(el).backgroundColor"
    hot = table.locator('tr[data-partition="2"] td[data-figure="backlog"]').evaluate(background)
    calm = table.locator('tr[data-partition="0"] td[data-figure="backlog"]').evaluate(background)
    assert hot != calm
    # and the instances are the one worker process, its threads beside
    expect(page.locator("#redisq-fig-instances .redisq-value")).to_have_text("1 (15 threads)")

    # and charts.js draws the charts by partition, a line per partition, with the totals
    for chart, totals in (("published", PUBLISHED), ("handled", None)):
        figure = page.locator(f"#redisq-chart-partitions-{chart}")
        expect(figure.locator(".redisq-uplot")).to_have_attribute("data-drawn", str(K))
        expect(figure.locator("canvas")).to_have_count(1)
        if totals:
            for part, n in totals.items():
                expect(figure).to_have_attribute(f"data-total-p{part}-published", str(n))
        legend = figure.locator(".u-legend .u-series .u-label")
        expect(legend).to_have_text(["Time", *(f"partition {i}" for i in range(K))])
    # and the page fits a laptop's screen
    assert_fits(page, "queue partitions 1280")
    page.locator("#redisq-partitions-title").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "live-partitions-1280.png"), full_page=True)
    section = page.locator("section.redisq-partitions")
    section.screenshot(path=str(artifacts / "live-partitions-table-1280.png"))

    # When the page refreshes itself (every few seconds)
    polls = page.locator("#redisq-live")
    expect(polls).not_to_have_attribute("data-polls", "0", timeout=15_000)

    # Then the table is still there, with the same flags
    expect(table.locator("tbody tr")).to_have_count(K)
    expect(page.locator('#redisq-partitions tr[data-partition="2"]')).to_have_class(hot_row)

    # And on a phone the page fits too, the table as cards
    page.set_viewport_size(SIZES["390"])
    page.reload()
    expect(table.locator("tbody tr")).to_have_count(K)
    assert_fits(page, "queue partitions 390")
    page.screenshot(path=str(artifacts / "live-partitions-390.png"), full_page=True)
