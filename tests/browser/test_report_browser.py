"""The report page in chromium: opened from disk (file://), charts.js draws every chart
with the inlined uPlot (no request, no console error), the legend shows values on hover,
many consumers fold into "other", and its tables hold the rows; screenshots go to
test-artifacts/.

The page is drawn from hand-made aggregates by the job's own renderer (no JVM needed:
tests/pipeline/test_report.py covers the Spark side, and that the page is written).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.browser]

T0 = datetime(2026, 11, 20, tzinfo=UTC)
CONSUMERS = [("orders", "billing"), ("orders", "mail"), ("audit", "archiver")]
CHARTS = ("throughput", "failures", "latency", "backlog")


def aggregates() -> dict[str, list[dict[str, Any]]]:
    """Twelve hourly buckets of three consumers, shaped like the job's Parquet rows."""
    counts, latency, backlog = [], [], []
    for (queue, consumer), k in zip(CONSUMERS, (1, 2, 3), strict=True):
        backlog_total = 0
        for h in range(12):
            bucket = T0 + timedelta(hours=h)
            published, handled = 100 + 10 * h, 100 + 10 * h - k * (h % 3)
            retried, dead = k * (h % 4), h % 2
            backlog_total += published - handled - dead
            counts.append(
                {
                    "queue": queue,
                    "consumer": consumer,
                    "bucket": bucket,
                    "published": published,
                    "handled": handled,
                    "failed": retried + dead,
                    "retried": retried,
                    "dead": dead,
                    "redriven": 0,
                }
            )
            latency.append(
                {
                    "queue": queue,
                    "consumer": consumer,
                    "bucket": bucket,
                    "handled": handled,
                    "latency_p50": 20.0 * k + h,
                    "latency_p95": 80.0 * k + h,
                    "latency_p99": 300.0 * k + h,
                    "duration_p50": 5.0,
                    "duration_p95": 9.0,
                    "duration_p99": 20.0,
                }
            )
            backlog.append(
                {"queue": queue, "consumer": consumer, "bucket": bucket, "backlog": backlog_total}
            )
    errors = [
        {
            "queue": "orders",
            "consumer": "mail",
            "error_class": "SMTPError",
            "count": 42,
            "first_seen": T0,
            "last_seen": T0 + timedelta(hours=11),
            "sample_message_id": "1-0",
            "last_message": "421 <script>alert(1)</script>",
        },
        {
            "queue": "audit",
            "consumer": "archiver",
            "error_class": "KeyError",
            "count": 3,
            "first_seen": T0,
            "last_seen": T0 + timedelta(hours=2),
            "sample_message_id": "2-0",
            "last_message": "'x'",
        },
    ]
    totals = [
        {
            "queue": q,
            "consumer": c,
            "published": 1860,
            "handled": 1800,
            "failed": 12,
            "retried": 6,
            "dead": 6,
            "redriven": 0,
            "latency_p50": 21.0,
            "latency_p95": 90.5,
            "latency_p99": 310.0,
            "duration_p50": 5.0,
            "duration_p95": 9.0,
            "duration_p99": 20.0,
        }
        for q, c in CONSUMERS
    ]
    attempts = [
        {"queue": "orders", "consumer": "mail", "event": "handled", "attempt": 1, "count": 1790}
    ]
    return {
        "counts": counts,
        "latency": latency,
        "backlog": backlog,
        "errors": errors,
        "totals": totals,
        "attempts": attempts,
    }


def write_page(path: Path, aggregates: dict[str, list[dict[str, Any]]]) -> Path:
    """The report page of ``aggregates`` over twelve hours from T0."""
    from redisq_django.pipeline.report_html import ReportData, write_html

    data = ReportData(
        since=T0,
        until=T0 + timedelta(hours=12),
        bucket="hour",
        made_at=datetime.now(UTC),
        **aggregates,
    )
    return write_html(data, path)


@pytest.fixture
def report_page(tmp_path: Path) -> Path:
    return write_page(tmp_path / "report.html", aggregates())


class Watch:
    """What a page did besides drawing: console errors, page errors, requests, dialogs."""

    def __init__(self, page: Any) -> None:
        self.errors: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("request", lambda r: self.requests.append(r.url))
        page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))


def drawn(page: Any) -> list[dict[str, Any]]:
    """Each chart: its id, the lines drawn, the canvas size and the time axis's ends."""
    result: list[dict[str, Any]] = page.evaluate(
        """() => [...document.querySelectorAll("figure.chart .redisq-uplot")].map(el => {
            const chart = el._redisqChart, canvas = el.querySelector("canvas");
            return {
                id: el.closest("figure").id,
                drawn: el.dataset.drawn === undefined ? null : Number(el.dataset.drawn),
                width: canvas ? canvas.getBoundingClientRect().width : 0,
                height: canvas ? canvas.getBoundingClientRect().height : 0,
                xMin: chart ? chart.scales.x.min : null,
                xMax: chart ? chart.scales.x.max : null,
                labels: chart ? chart.series.slice(1).map(s => s.label) : [],
            };
        })"""
    )
    return result


def hover_values(page: Any, chart_id: str) -> list[str]:
    """The legend's values of ``chart_id`` (the time first) with the pointer in the middle
    of its plot."""
    from playwright.sync_api import expect

    page.locator(f"#{chart_id} .u-over").hover()
    values = page.locator(f"#{chart_id} .u-legend .u-series .u-value")
    expect(values.first).not_to_have_text("--")  # uPlot's text with no point under it
    return [values.nth(i).inner_text() for i in range(values.count())]


def test_report_page_renders_charts_and_tables(
    browser: Any, report_page: Path, artifacts: Path
) -> None:
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    watch = Watch(page)
    try:
        page.goto(report_page.as_uri())
        assert page.title().startswith("redisq report 2026-11-20 00:00:00 UTC")
        assert "audit, orders" in page.locator("#report-queues").inner_text()

        charts = drawn(page)
        assert [c["id"] for c in charts] == [f"chart-{n}" for n in CHARTS]
        for chart in charts:
            # Drawn, readable, on the data's own time axis (the first and last bucket).
            assert chart["drawn"] and 1 <= chart["drawn"] <= 6, chart
            assert chart["width"] > 1000 and chart["height"] >= 200, chart
            assert chart["xMin"] == T0.timestamp(), chart
            assert chart["xMax"] == (T0 + timedelta(hours=11)).timestamp(), chart
        assert "orders / billing handled" in charts[0]["labels"]
        assert page.locator(".charts-off").is_hidden()  # the scripts ran

        # Hover: the legend shows the values under the pointer, durations as people read them.
        throughput = hover_values(page, "chart-throughput")
        assert re.fullmatch(r"2026-11-20 \d\d:\d\d", throughput[0]), throughput
        assert all(v[0].isdigit() for v in throughput[1:]), throughput
        # The time axis in 24-hour ISO style, not uPlot's US one (11/20/26, 1pm)
        ticks = page.evaluate(
            """() => document.querySelector("#chart-throughput .redisq-uplot")
                ._redisqChart.axes[0]._values.filter(t => t)"""
        )
        assert ticks and all(re.fullmatch(r"\d\d:\d\d(\n2026-11-20)?", t) for t in ticks), ticks
        latency = hover_values(page, "chart-latency")
        assert all(v.endswith((" ms", " s")) for v in latency[1:]), latency

        rows = page.locator("#report-errors tbody tr")
        assert rows.count() == 2
        assert "SMTPError" in rows.nth(0).inner_text()
        assert "421 <script>alert(1)</script>" in rows.nth(0).inner_text()  # shown as text
        totals = page.locator("#report-totals tbody tr")
        assert totals.count() == 3
        assert "310 ms" in totals.nth(0).inner_text()  # not "310.0"
        assert watch.dialogs == []  # the escaped script never ran
        assert watch.errors == []
        assert watch.requests == [report_page.as_uri()]  # self-contained: nothing else fetched

        page.screenshot(path=str(artifacts / "report-1440x900.png"))
        page.screenshot(path=str(artifacts / "report-full.png"), full_page=True)
    finally:
        page.close()


def many_consumers() -> dict[str, list[dict[str, Any]]]:
    """Twelve consumers, one of them stalled (0 handled, a growing backlog), and hostile
    names in the labels."""
    base = aggregates()
    counts, latency, backlog, totals = [], [], [], []
    for n in range(12):
        queue, consumer = "shop", f"c{n:02d}" if n else "stalled</script><b>"
        for h in range(12):
            bucket = T0 + timedelta(hours=h)
            handled = 0 if n == 0 else 10 * n
            counts.append(
                {
                    "queue": queue,
                    "consumer": consumer,
                    "bucket": bucket,
                    "published": 120,
                    "handled": handled,
                    "failed": n % 3,
                    "retried": n % 3,
                    "dead": n % 2,
                    "redriven": 0,
                }
            )
            if handled:
                latency.append(
                    {
                        "queue": queue,
                        "consumer": consumer,
                        "bucket": bucket,
                        "handled": handled,
                        "latency_p50": 100.0 * n,
                        "latency_p95": 1000.0 * n + h * 60_000,
                        "latency_p99": 2000.0 * n,
                        "duration_p50": 5.0,
                        "duration_p95": 9.0,
                        "duration_p99": 20.0,
                    }
                )
            backlog.append(
                {
                    "queue": queue,
                    "consumer": consumer,
                    "bucket": bucket,
                    "backlog": (120 - handled) * (h + 1),
                }
            )
        totals.append(
            {
                "queue": queue,
                "consumer": consumer,
                "published": 1440,
                "handled": 0 if n == 0 else 120 * n,
                "latency_p95": None,
            }
        )
    return {**base, "counts": counts, "latency": latency, "backlog": backlog, "totals": totals}


def test_many_consumers_fold_into_other_and_names_stay_text(
    browser: Any, tmp_path: Path, artifacts: Path
) -> None:
    path = write_page(tmp_path / "report.html", many_consumers())
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    watch = Watch(page)
    try:
        page.goto(path.as_uri())
        charts = {c["id"]: c for c in drawn(page)}
        for chart in charts.values():
            assert chart["drawn"] and chart["drawn"] <= 6, chart
        backlog = charts["chart-backlog"]["labels"]
        # The stalled consumer has the largest backlog: it keeps its own line.
        assert "shop / stalled</script><b>" in backlog and "other (7)" in backlog
        assert any(label.startswith("other (") for label in charts["chart-latency"]["labels"])
        assert "stalled</script><b>" in page.locator("#report-totals").inner_text()
        assert page.locator("b", has_text="stalled").count() == 0  # never markup
        assert watch.errors == [] and watch.dialogs == []
        assert watch.requests == [path.as_uri()]
        page.screenshot(path=str(artifacts / "report-many-consumers.png"), full_page=True)
    finally:
        page.close()


def serve(body: bytes, policy: str) -> Any:
    """A route handler answering with the page under ``policy``."""
    headers = {"Content-Type": "text/html; charset=utf-8", "Content-Security-Policy": policy}
    return lambda route: route.fulfill(status=200, body=body, headers=headers)


def test_a_policy_allowing_only_the_report_scripts_draws_it(
    browser: Any, report_page: Path
) -> None:
    """How the admin can serve the page: ``script-src`` of the inlined scripts' hashes
    draws every chart; without a ``script-src`` the charts stay undrawn and say why."""
    from redisq_django.pipeline.report_assets import script_sources

    base = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    body = report_page.read_bytes()
    for policy, expect_drawn in ((f"{base}; script-src {script_sources()}", True), (base, False)):
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        watch = Watch(page)
        page.route("http://report.invalid/", serve(body, policy))
        try:
            page.goto("http://report.invalid/")
            charts = drawn(page)
            assert len(charts) == 4
            if expect_drawn:
                assert all(c["drawn"] for c in charts), charts
                assert watch.errors == [] and page.locator(".charts-off").is_hidden()
            else:
                assert not any(c["drawn"] for c in charts)
                assert page.locator(".charts-off").is_visible()
            assert page.locator("#report-totals tbody tr").count() == 3
            assert watch.requests == ["http://report.invalid/"]
        finally:
            page.close()


def test_long_durations_fit_their_axis_and_a_lone_bucket_gets_a_dot(
    browser: Any, tmp_path: Path
) -> None:
    data = aggregates()
    # billing handled messages in hours 0, 5, 7 and 8 only, tens of minutes after publishing
    data["latency"] = [
        {**row, "latency_p95": 1_000_000.0 + row["bucket"].hour}
        for row in data["latency"]
        if row["consumer"] == "billing" and row["bucket"].hour in (0, 5, 7, 8)
    ]
    path = write_page(tmp_path / "report.html", data)
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    watch = Watch(page)
    try:
        page.goto(path.as_uri())
        got = page.evaluate(
            """() => {
                const el = document.querySelector("#chart-latency .redisq-uplot");
                const u = el._redisqChart, axis = u.axes[1];
                // uPlot draws the axis on its canvas: measure its labels with its font.
                const ctx = document.createElement("canvas").getContext("2d");
                ctx.font = axis.font[0];
                const labels = axis._values.filter(t => t);
                const widest = Math.max(...labels.map(t => ctx.measureText(t).width));
                return {labels, need: widest + axis.ticks.size + axis.gap, size: axis._size,
                        dots: u.series[1].points.filter(u, 1, false, null)};
            }"""
        )
        # "16.7 min" and the like, each whole inside the axis
        assert any(t.endswith(" min") for t in got["labels"]), got
        assert got["need"] <= got["size"], got
        # Hours 0 and 5 stand alone between gaps; 7 and 8 make a line.
        assert got["dots"] == [0, 5], got
        assert watch.errors == []
    finally:
        page.close()


def test_a_report_of_one_bucket_spans_ten_minutes_around_it(browser: Any, tmp_path: Path) -> None:
    # A short incident reported per minute: every row in one bucket. uPlot's own range
    # for a lone time stretched it over years, the point squeezed at the edge.
    data = {
        name: [row for row in rows if row.get("bucket") in (None, T0)]
        for name, rows in aggregates().items()
    }
    assert all(data[name] for name in ("counts", "latency", "backlog"))
    path = write_page(tmp_path / "report.html", data)
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    watch = Watch(page)
    try:
        page.goto(path.as_uri())
        charts = [chart for chart in drawn(page) if chart["drawn"]]
        assert {c["id"] for c in charts} >= {"chart-throughput", "chart-latency"}, charts
        for chart in charts:
            assert (chart["xMin"], chart["xMax"]) == (
                T0.timestamp() - 300,
                T0.timestamp() + 300,
            ), chart
        assert watch.errors == []
    finally:
        page.close()
