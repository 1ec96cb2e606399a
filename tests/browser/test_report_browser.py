"""The report page in chromium: opened from disk (file://), its inline SVG charts render
and its tables hold the rows; screenshots at 1440x900 go to test-artifacts/.

The page is drawn from hand-made aggregates by the job's own renderer (no JVM needed:
tests/pipeline/test_report.py covers the Spark side, and that the page is written).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.browser]

T0 = datetime(2026, 11, 20, tzinfo=UTC)
CONSUMERS = [("orders", "billing"), ("orders", "mail"), ("audit", "archiver")]


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


@pytest.fixture
def report_page(tmp_path: Path) -> Path:
    from redisq_django.pipeline.report_html import ReportData, write_html

    data = ReportData(
        since=T0,
        until=T0 + timedelta(hours=12),
        bucket="hour",
        made_at=datetime.now(UTC),
        **aggregates(),
    )
    return write_html(data, tmp_path / "report.html")


def test_report_page_renders_charts_and_tables(
    browser: Any, report_page: Path, artifacts: Path
) -> None:
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(report_page.as_uri())
        assert page.title().startswith("redisq report 2026-11-20 00:00:00 UTC")
        assert "audit, orders" in page.locator("#report-queues").inner_text()

        charts = page.locator("figure.chart > svg")
        assert charts.count() == 4
        for i in range(4):
            chart = charts.nth(i)
            box = chart.bounding_box()
            assert box is not None and box["width"] > 400 and box["height"] > 100
            # Lines were drawn (one path per series, plus axes and ticks).
            assert chart.locator("path").count() > 10
        for name in ("throughput", "failures", "latency", "backlog"):
            assert page.locator(f"#chart-{name} svg").is_visible()
        assert "orders / billing" in page.locator("#chart-throughput").inner_text()
        assert "mathdefault" not in page.locator("#chart-latency").inner_text()  # no raw TeX

        rows = page.locator("#report-errors tbody tr")
        assert rows.count() == 2
        assert "SMTPError" in rows.nth(0).inner_text()
        assert "421 <script>alert(1)</script>" in rows.nth(0).inner_text()  # shown as text
        assert page.locator("#report-totals tbody tr").count() == 3
        assert dialogs == []  # the escaped script never ran
        assert requests == [report_page.as_uri()]  # self-contained: nothing else fetched

        page.screenshot(path=str(artifacts / "report-1440x900.png"))
        page.screenshot(path=str(artifacts / "report-full.png"), full_page=True)
    finally:
        page.close()
