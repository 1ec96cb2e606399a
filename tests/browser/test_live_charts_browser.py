"""The live pages' charts in a real browser: drawn by charts.js from their specs, values
in the legend under the pointer, a chosen range redrawn over its whole span, zoom by
drag kept across the live refresh that swaps them, time labels that never overlap
however far a chart is zoomed in, no console error; screenshots in test-artifacts/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.urls import reverse
from playwright.sync_api import ConsoleMessage, Page, expect

from redisq_django.admin import live
from redisq_django.connection import get_broker
from redisq_django.models import Consumer, Queue
from tests.support.browser_pages import log_in
from tests.support.live_data import Live, live_consumer

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHARTS = "#redisq-live .redisq-uplot"


@pytest.fixture
def made(redisq_settings: Any) -> Live:
    live.clear()
    return live_consumer(get_broker(), "charts")


@pytest.fixture
def errors(page: Page) -> list[str]:
    """The page's console errors and uncaught exceptions."""
    seen: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        where = message.location.get("url", "")
        if message.type == "error" and not where.endswith("/favicon.ico"):  # the test site has none
            seen.append(f"{message.text} ({where})")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: seen.append(str(exc)))
    page.on(
        "response",
        lambda r: seen.append(f"{r.status} {r.url}") if r.status >= 400 else None,
    )
    return seen


def x_span(page: Page, chart: str) -> float:
    """Seconds the time axis of chart ``chart`` spans, as uPlot drew it."""
    return float(
        page.locator(f"#{chart} .redisq-uplot").evaluate(
            "el => el._redisqChart.scales.x.max - el._redisqChart.scales.x.min"
        )
    )


def test_the_charts_are_drawn_read_on_hover_and_follow_the_chosen_range(
    page: Page, live_server: Any, ops: User, made: Live, errors: list[str], artifacts: Path
) -> None:
    # Given a consumer with published, failed, retried and dead messages
    log_in(page, live_server, ops)
    url = reverse("admin:redisq_django_consumer_live", args=[made.queue, "billing"])

    # When staff open its live page (1 h by default)
    page.goto(f"{live_server.url}{url}")

    # Then the four charts are drawn, full width, ~220 px high, over the whole hour
    charts = page.locator(CHARTS)
    expect(charts).to_have_count(4)
    for i in range(4):
        expect(charts.nth(i)).to_have_attribute("data-drawn", "1" if i > 1 else ("2", "3")[i])
    content = page.locator("#content-main").bounding_box()
    canvas = page.locator("#redisq-chart-throughput canvas").bounding_box()
    assert content and canvas
    assert canvas["width"] >= content["width"] * 0.85 and 180 <= canvas["height"] <= 260
    assert x_span(page, "redisq-chart-throughput") == 3600
    # ... the backlog among them, sampled by the open page itself (no worker runs)
    backlog = page.locator("#redisq-chart-backlog .redisq-uplot").evaluate(
        "el => el._redisqChart.data[1].filter(v => v !== null)"
    )
    assert backlog[-1:] == [6]
    page.screenshot(path=str(artifacts / "live-charts-1h-1440.png"), full_page=True)

    # When the pointer rests on the failures chart, at the minute with the most failures
    chart = page.locator("#redisq-chart-failures .redisq-uplot")
    at = chart.evaluate(
        """el => {
          const u = el._redisqChart, failed = u.data[1];
          const i = failed.indexOf(Math.max(...failed.map(v => v || 0)));
          return {x: u.valToPos(u.data[0][i], "x"), values: u.data.slice(1).map(s => s[i])};
        }"""
    )
    box = page.locator("#redisq-chart-failures .u-over").bounding_box()
    assert box and at["values"][0] > 0
    page.mouse.move(box["x"] + at["x"], box["y"] + box["height"] / 2)

    # Then its legend shows the values of that minute: failed, retried, dead per minute
    values = page.locator("#redisq-chart-failures .u-legend .u-series .u-value")
    expect(values.nth(0)).not_to_have_text("")
    expect(values).to_have_text([re.compile(r".+"), *(f"{v:g} per minute" for v in at["values"])])
    # (live_consumer failed 3, retried 2, dead 1: all within a minute or two)
    assert sum(at["values"]) >= 1

    # When they choose "5 min"
    page.get_by_role("link", name="5 min", exact=True).click()

    # Then the charts are drawn again over 5 minutes
    expect(page.get_by_role("link", name="5 min", exact=True)).to_have_attribute(
        "aria-current", "true"
    )
    expect(charts.first).to_have_attribute("data-drawn", "2")
    for chart in ("throughput", "failures", "backlog", "duration"):
        assert x_span(page, f"redisq-chart-{chart}") == 300
    page.screenshot(path=str(artifacts / "live-charts-5m-1440.png"), full_page=False)
    assert errors == []


def test_the_charts_survive_the_live_refresh(
    page: Page,
    live_server: Any,
    ops: User,
    made: Live,
    errors: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a live page refreshing every second, its charts too
    consumers = admin.site._registry[Consumer]
    monkeypatch.setattr(consumers, "refresh_seconds", 1)
    monkeypatch.setattr(consumers, "chart_refresh_seconds", 1)
    log_in(page, live_server, ops)
    url = reverse("admin:redisq_django_consumer_live", args=[made.queue, "billing"])
    page.goto(f"{live_server.url}{url}?range=15m")
    expect(page.locator(CHARTS)).to_have_count(4)
    expect(page.locator(CHARTS).first).to_have_attribute("data-drawn", "2")
    # ... and the operator, updates paused, zoomed into the throughput chart by dragging
    page.get_by_role("button", name="Pause updates").click()
    page.locator(CHARTS).evaluate_all("els => els.forEach(el => { el.dataset.before = '1'; })")
    box = page.locator("#redisq-chart-throughput .u-over").bounding_box()
    assert box
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] / 2, steps=5)
    page.mouse.up()
    window = page.locator("#redisq-chart-throughput .redisq-uplot").evaluate(
        "el => [el._redisqChart.scales.x.min, el._redisqChart.scales.x.max]"
    )
    assert 0 < window[1] - window[0] < 15 * 60 * 0.5
    page.get_by_role("button", name="Resume updates").click()

    # When the poll has swapped the charts region in (bounded by Playwright's timeout)
    expect(page.locator("#redisq-live")).not_to_have_attribute("data-polls", "0")
    expect(page.locator(f"{CHARTS}[data-before]")).to_have_count(0, timeout=10_000)

    # Then the new charts are drawn, over the range chosen
    expect(page.locator(CHARTS)).to_have_count(4)
    for i in range(4):
        expect(page.locator(CHARTS).nth(i)).to_have_attribute(
            "data-drawn", "1" if i > 1 else ("2", "3")[i]
        )
    assert x_span(page, "redisq-chart-backlog") == 900
    # ... but the throughput chart still shows the window zoomed into
    kept = page.locator("#redisq-chart-throughput .redisq-uplot").evaluate(
        "el => [el._redisqChart.scales.x.min, el._redisqChart.scales.x.max]"
    )
    assert kept == pytest.approx(window)
    # ... until a double-click zooms out to the whole range
    page.locator("#redisq-chart-throughput .u-over").dblclick()
    assert x_span(page, "redisq-chart-throughput") == 900
    assert errors == []


def test_the_overview_draws_the_trends_of_every_queue(
    page: Page, live_server: Any, ops: User, made: Live, errors: list[str]
) -> None:
    Queue.objects.get(name=made.queue)  # the overview lists it
    log_in(page, live_server, ops)
    page.goto(f"{live_server.url}{reverse('admin:redisq_django_overview_changelist')}?range=6h")
    expect(page.locator(CHARTS)).to_have_count(4)
    expect(page.locator(CHARTS).first).to_have_attribute("data-drawn", "2")
    assert x_span(page, "redisq-chart-throughput") == 6 * 3600
    assert errors == []


#: The time axis's tick labels as drawn (uPlot's ticks and their text, measured with the
#: axis's own font): each line of each label a box; the pairs of boxes on one line that
#: overlap.
LABEL_OVERLAPS = """el => {
  const u = el._redisqChart, axis = u.axes[0];
  const ctx = document.createElement("canvas").getContext("2d");
  ctx.font = axis.font[0];
  const boxes = [];
  let ticks = 0;
  (axis._values || []).forEach((label, i) => {
    if (label === null || label === undefined) { return; }
    ticks += 1;
    const x = u.valToPos(axis._splits[i], "x");
    String(label).split("\\n").forEach((text, line) => {
      const w = ctx.measureText(text).width;
      if (text) { boxes.push({line, text, left: x - w / 2, right: x + w / 2}); }
    });
  });
  const overlaps = [];
  boxes.forEach((a, i) => boxes.slice(i + 1).forEach(b => {
    if (a.line === b.line && a.left < b.right && b.left < a.right) {
      overlaps.push(a.text + " / " + b.text);
    }
  }));
  return {overlaps, ticks, window: u.scales.x.max - u.scales.x.min};
}"""


@pytest.mark.parametrize("width", [1280, 390])
def test_a_zoomed_chart_keeps_its_time_labels_apart(
    page: Page,
    live_server: Any,
    ops: User,
    made: Live,
    errors: list[str],
    artifacts: Path,
    width: int,
) -> None:
    # Given a consumer's live page over 1 h, at this width
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, live_server, ops)
    url = reverse("admin:redisq_django_consumer_live", args=[made.queue, "billing"])
    page.goto(f"{live_server.url}{url}")
    chart = page.locator("#redisq-chart-throughput .redisq-uplot")
    expect(chart).to_have_attribute("data-drawn", "2")
    assert chart.evaluate(LABEL_OVERLAPS)["overlaps"] == []

    # When the operator drags across a few percent of it (a minute or two)
    page.locator("#redisq-chart-throughput").scroll_into_view_if_needed()
    box = page.locator("#redisq-chart-throughput .u-over").bounding_box()
    assert box
    y = box["y"] + box["height"] / 2
    start = box["x"] + box["width"] * 0.60
    page.mouse.move(start, y)
    page.mouse.down()
    page.mouse.move(start + max(box["width"] * 0.03, 12), y, steps=5)
    page.mouse.up()
    # Then it shows that window, with time labels, none over another
    drawn = chart.evaluate(LABEL_OVERLAPS)
    assert drawn["window"] < 300 and drawn["ticks"] >= (3 if width > 1000 else 1), drawn
    assert drawn["overlaps"] == [], drawn
    page.locator("#redisq-chart-throughput").screenshot(
        path=str(artifacts / f"chart-zoomed-{width}.png")
    )

    # ... and so at every window from seconds to the whole hour, wherever it starts (a
    # label grows a second line where a minute or a day begins, or on the first tick)
    full = chart.evaluate("el => el._redisqFull")
    found = []
    for seconds in (15, 20, 30, 45, 60, 90, 120, 180, 240, 400, 600, 900, 1500, 2400, 3600):
        for step in range(12):
            start = full[0] + (full[1] - full[0] - seconds) * step / 11
            chart.evaluate(
                "(el, w) => el._redisqChart.setScale('x', {min: w[0], max: w[1]})",
                [start, start + seconds],
            )
            drawn = chart.evaluate(LABEL_OVERLAPS)
            assert drawn["ticks"] >= 1, (seconds, drawn)
            if drawn["overlaps"]:
                found.append((seconds, round(start), drawn["overlaps"]))
    assert found == []
    assert errors == []
