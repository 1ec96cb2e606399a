"""The ``report`` job on a generated archive with known answers.

The archive is written here with Spark in the archive's layout and schemas (no Redis):
three logical consumers on two queues, messages a minute apart, handled after known
delays, some retried, some dead, a redrive, plus rows outside the range and of a queue
that is filtered out. Expected figures are computed from the same rows in plain Python.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = datetime(2026, 11, 20, 0, 0, tzinfo=UTC)
SINCE, UNTIL = T0, T0 + timedelta(hours=12)
ACCURACY = 10000


def _event(
    queue: str, consumer: str, event: str, at: datetime, mid: str, attempt: int, **kw: Any
) -> dict[str, Any]:
    return {
        "queue": queue,
        "consumer": consumer,
        "instance": "h:1",
        "event": event,
        "time": at,
        "entry_id": mid,
        "message_id": mid,
        "attempt": attempt,
        **kw,
    }


def generate() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, events) rows: orders (billing, mail), audit (archiver), noise (filtered)."""
    messages: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for i in range(120):  # orders: one a minute from 00:00 to 01:59
        mid = f"o{i}"
        at = T0 + timedelta(minutes=i)
        messages.append({"queue": "orders", "message_id": mid, "published_at": at, "attempts": 0})
        events.append(
            _event(
                "orders",
                "billing",
                "handled",
                at + timedelta(milliseconds=10 * (i + 1)),
                mid,
                1,
                duration_ms=i % 7 + 1,
            )
        )
        if i < 100:
            events.append(
                _event(
                    "orders", "mail", "handled", at + timedelta(seconds=2), mid, 1, duration_ms=50
                )
            )
        elif i < 110:
            events.append(
                _event(
                    "orders",
                    "mail",
                    "retried",
                    at + timedelta(seconds=1),
                    mid,
                    1,
                    error_class="SMTPError",
                    error_message="421 <busy>",
                )
            )
            events.append(
                _event(
                    "orders",
                    "mail",
                    "dead",
                    at + timedelta(seconds=3),
                    mid,
                    2,
                    error_class="SMTPError",
                    error_message="421 <busy>",
                    reason="failed",
                )
            )
        # 110..119: mail never got to them (a backlog of 10; the dead ones are settled)
    events.append(_event("orders", "mail", "redriven", T0 + timedelta(hours=3), "o100", 2))
    for i in range(30):  # audit: every 10 minutes from 00:00 to 04:50, handled after 1 s
        mid = f"a{i}"
        at = T0 + timedelta(minutes=10 * i)
        messages.append({"queue": "audit", "message_id": mid, "published_at": at, "attempts": 0})
        attempt = 1
        if i % 10 == 0:
            events.append(
                _event(
                    "audit",
                    "archiver",
                    "retried",
                    at + timedelta(milliseconds=500),
                    mid,
                    1,
                    error_class="KeyError",
                    error_message="'x'",
                )
            )
            attempt = 2
        events.append(
            _event(
                "audit",
                "archiver",
                "handled",
                at + timedelta(seconds=1),
                mid,
                attempt,
                duration_ms=200,
            )
        )
    # Outside the range: a day before and at/after the end; and a queue not asked for.
    for at in (T0 - timedelta(days=1), UNTIL, UNTIL + timedelta(days=1)):
        mid = f"out{at:%d%H}"
        messages.append({"queue": "orders", "message_id": mid, "published_at": at, "attempts": 0})
        events.append(_event("orders", "billing", "handled", at, mid, 1, duration_ms=1))
    messages.append({"queue": "noise", "message_id": "n1", "published_at": T0, "attempts": 0})
    events.append(_event("noise", "x", "dead", T0, "n1", 1, error_class="Boom", reason="failed"))
    return messages, events


def write_archive(spark: Any, root: Path) -> None:
    from pyspark.sql import functions as F

    from redisq_django.pipeline.archive import archive_frame
    from redisq_django.pipeline.schemas import EVENTS, MESSAGES

    messages, events = generate()
    for table, rows, schema in (("messages", messages, MESSAGES), ("events", events, EVENTS)):
        full = [tuple(row.get(f.name) for f in schema.fields) for row in rows]
        frame = archive_frame(spark.createDataFrame(full, schema), table)
        frame.coalesce(1).write.partitionBy("queue", "date").parquet(f"{root}/{table}")
    assert F is not None


def within(value: float, values: list[float], p: float) -> bool:
    """Whether ``value`` is one of ``values`` whose rank is within the documented
    accuracy (n / ACCURACY, at least one rank) of the exact ``p`` percentile's."""
    ordered = sorted(values)
    n = len(ordered)
    exact = max(math.ceil(p * n) - 1, 0)
    slack = max(1, math.ceil(n / ACCURACY))
    window = ordered[max(exact - slack, 0) : exact + slack + 1]
    return any(abs(value - v) < 1e-6 for v in window)


@pytest.fixture(scope="module")
def made(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from redisq_django.pipeline.report import ReportOptions, report

    root = tmp_path_factory.mktemp("archive")
    write_archive(spark, root)
    # Hours asked for: the data spans five hours, which alone would get minutes.
    options = ReportOptions(
        root=str(root), since=SINCE, until=UNTIL, queues=("orders", "audit"), bucket="hour"
    )
    return root, report(spark, options)


def read(spark: Any, summary: Any, name: str) -> list[dict[str, Any]]:
    """An aggregate's rows, timestamps as aware UTC datetimes (PySpark gives local naive)."""
    rows = spark.read.parquet(str(summary.out_dir / f"{name}.parquet")).collect()
    return [
        {k: v.astimezone(UTC) if isinstance(v, datetime) else v for k, v in r.asDict().items()}
        for r in rows
    ]


def test_totals_are_exact(spark: Any, made: Any) -> None:
    root, summary = made
    totals = {(r["queue"], r["consumer"]): r for r in read(spark, summary, "totals")}
    assert set(totals) == {("orders", "billing"), ("orders", "mail"), ("audit", "archiver")}
    b, m, a = totals["orders", "billing"], totals["orders", "mail"], totals["audit", "archiver"]
    assert (b["published"], b["handled"], b["failed"], b["dead"]) == (120, 120, 0, 0)
    assert (m["published"], m["handled"], m["retried"], m["dead"], m["failed"], m["redriven"]) == (
        120,
        100,
        10,
        10,
        20,
        1,
    )
    assert (a["published"], a["handled"], a["retried"], a["dead"]) == (30, 30, 3, 0)
    assert summary.totals == {
        "published": 150,
        "handled": 250,
        "failed": 23,
        "dead": 10,
        "redriven": 1,
    }
    assert summary.bucket == "hour" and summary.consumers == 3
    assert summary.out_dir.parent == root / "reports"
    assert (root / "reports" / "latest" / "report.html").is_file()
    assert str(summary.html) in summary.line()


def test_percentiles_within_accuracy(spark: Any, made: Any) -> None:
    _, summary = made
    totals = {(r["queue"], r["consumer"]): r for r in read(spark, summary, "totals")}
    billing_latency = [10.0 * (i + 1) for i in range(120)]
    billing_duration = [float(i % 7 + 1) for i in range(120)]
    for p in (50, 95, 99):
        row = totals["orders", "billing"]
        assert within(row[f"latency_p{p}"], billing_latency, p / 100), (p, row)
        assert within(row[f"duration_p{p}"], billing_duration, p / 100), (p, row)
        assert totals["orders", "mail"][f"latency_p{p}"] == 2000.0
        assert totals["audit", "archiver"][f"duration_p{p}"] == 200.0
    hourly = {(r["consumer"], r["bucket"].hour): r for r in read(spark, summary, "latency")}
    first_hour = billing_latency[:60]
    assert hourly["billing", 0]["handled"] == 60
    assert within(hourly["billing", 0]["latency_p95"], first_hour, 0.95)


def test_buckets_backlog_attempts_errors(spark: Any, made: Any) -> None:
    _, summary = made
    counts = {
        (r["queue"], r["consumer"], r["bucket"].hour): r for r in read(spark, summary, "counts")
    }
    assert counts["orders", "billing", 0]["published"] == 60
    assert counts["orders", "billing", 1]["handled"] == 60
    assert (counts["orders", "mail", 1]["handled"], counts["orders", "mail", 1]["dead"]) == (40, 10)
    assert counts["orders", "mail", 3]["redriven"] == 1
    assert counts["audit", "archiver", 4]["published"] == 6
    backlog = {
        (r["consumer"], r["bucket"].hour): r["backlog"] for r in read(spark, summary, "backlog")
    }
    # o100, re-driven at 03:00, waits for mail again.
    assert backlog["mail", 0] == 0 and backlog["mail", 1] == 10 and backlog["mail", 3] == 11
    assert backlog["billing", 1] == 0 and backlog["archiver", 4] == 0
    attempts = {
        (r["consumer"], r["event"], r["attempt"]): r["count"]
        for r in read(spark, summary, "attempts")
    }
    assert attempts == {
        ("billing", "handled", 1): 120,
        ("mail", "handled", 1): 100,
        ("mail", "dead", 2): 10,
        ("archiver", "handled", 1): 27,
        ("archiver", "handled", 2): 3,
    }
    errors = {(r["consumer"], r["error_class"]): r for r in read(spark, summary, "errors")}
    assert set(errors) == {("mail", "SMTPError"), ("archiver", "KeyError")}
    smtp = errors["mail", "SMTPError"]
    assert smtp["count"] == 20 and smtp["sample_message_id"] == "o100"
    assert smtp["first_seen"] == T0 + timedelta(minutes=100, seconds=1)
    assert smtp["last_seen"] == T0 + timedelta(minutes=109, seconds=3)
    assert errors["archiver", "KeyError"]["count"] == 3


def specs(page: str) -> list[dict[str, Any]]:
    """The chart specs of a report page, in order."""
    found = re.findall(r'<script type="application/json">(.*?)</script>', page, re.DOTALL)
    return [json.loads(text) for text in found]


def test_page_is_self_contained_and_escaped(made: Any) -> None:
    _, summary = made
    page = summary.html.read_text()
    assert page.count('class="redisq-uplot"') == 4 and len(specs(page)) == 4
    # uPlot and charts.js are inlined; nothing is loaded from anywhere.
    assert "uPlot" in page and "RedisqCharts" in page and '<meta charset="utf-8">' in page
    for external in ("<link", "src=", 'href="http', "url(http", "@import", "<script src"):
        assert external not in page
    assert "421 &lt;busy&gt;" in page and "<busy>" not in page
    assert "orders, audit" in page and "2026-11-20 00:00:00 UTC" in page
    # Latencies as people read them (billing's p99 is about 1.2 s), never "1,190.0".
    totals = page.split('id="report-totals"', 1)[1].split("</table>", 1)[0]
    assert re.search(r">1\.\d+ s<", totals) and ".0<" not in totals


def test_minute_buckets_and_explicit_out(spark: Any, made: Any, tmp_path: Path) -> None:
    from redisq_django.pipeline.report import ReportOptions, report

    root, _ = made
    latest = (root / "reports" / "latest").resolve()
    options = ReportOptions(
        root=str(root),
        out=str(tmp_path / "r"),
        since=T0,
        until=T0 + timedelta(minutes=30),
        queues=("orders",),
    )
    summary = report(spark, options)
    assert summary.bucket == "minute" and summary.html == tmp_path / "r" / "report.html"
    counts = read(spark, summary, "counts")
    assert {r["consumer"] for r in counts} == {"billing", "mail"}
    assert sum(r["published"] for r in counts if r["consumer"] == "billing") == 30
    assert all(r["published"] == 1 for r in counts)
    assert (root / "reports" / "latest").resolve() == latest  # --out leaves latest alone


def test_parse_time_and_options() -> None:
    from redisq_django.pipeline.job_options import parse_time
    from redisq_django.pipeline.options import OptionError
    from redisq_django.pipeline.report import ReportOptions

    assert parse_time("2026-11-20", "--since") == T0
    assert parse_time("2026-11-20", "--until", end=True) == T0 + timedelta(days=1)
    assert parse_time("2026-11-20T01:00", "--since") == T0 + timedelta(hours=1)
    assert parse_time("2026-11-20T02:00+01:00", "--since") == T0 + timedelta(hours=1)
    with pytest.raises(OptionError, match="ISO date or time"):
        parse_time("yesterday", "--since")
    with pytest.raises(OptionError, match="before --until"):
        ReportOptions(root="/x", since=T0, until=T0)
    since, until = ReportOptions(root="/x").window()
    assert until - since == timedelta(days=7)


def test_cli_report_prints_one_line_with_the_page(
    spark: Any, made: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from redisq_django.pipeline.cli import main

    root, _ = made
    argv = ["report", "--root", str(root), "--since", "2026-11-20", "--until", "2026-11-20"]
    assert main([*argv, "--queue", "audit", "--master", "local[2]"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and out[0].endswith("report.html")
    # A day asked for, five hours of data: minutes.
    assert "per minute, 1 queue(s), 1 consumer(s): published=30 handled=30" in out[0]
    page = (root / "reports" / "latest" / "report.html").read_text()
    assert "audit" in page and "2026-11-21 00:00:00 UTC" in page
    assert spark.sparkContext._jsc is not None  # the shared session was not stopped


def test_manage_py_report_uses_archive_root(spark: Any, made: Any, settings: Any) -> None:
    import io

    from django.core.management import call_command

    root, _ = made
    settings.REDISQ = {"ARCHIVE_ROOT": str(root)}
    out = io.StringIO()
    argv = ["--since", "2026-11-20T00:00", "--until", "2026-11-20T12:00", "--queue", "orders"]
    argv += ["--bucket", "hour"]
    call_command("redisq_pipeline", "report", *argv, stdout=out)
    line = out.getvalue().strip()
    assert "published=120 handled=220 failed=20 dead=10 redriven=1" in line
    assert " per hour, " in line and line.endswith("report.html")
    assert str(root / "reports") in line


def test_empty_archive_still_makes_a_page(spark: Any, tmp_path: Path) -> None:
    from redisq_django.pipeline.report import ReportOptions, report

    summary = report(spark, ReportOptions(root=str(tmp_path), since=SINCE, until=UNTIL))

    assert summary.totals == {"published": 0, "handled": 0, "failed": 0, "dead": 0, "redriven": 0}
    page = summary.html.read_text()
    assert "No messages or events in the range." in page
    assert [spec["x"] for spec in specs(page)] == [[]] * 4
    assert (tmp_path / "reports" / "latest" / "report.html").is_file()


def test_a_remote_root_needs_a_local_out(spark: Any) -> None:
    from redisq_django.pipeline.options import JobError
    from redisq_django.pipeline.report import ReportOptions, report

    with pytest.raises(JobError, match="pass --out with a local directory"):
        report(spark, ReportOptions(root="s3a://bucket/redisq", since=SINCE, until=UNTIL))


def test_many_consumers_fold_into_a_handful_of_lines() -> None:
    from redisq_django.pipeline.report_charts import (
        MAX_SERIES,
        axis,
        backlog_chart,
        latency_chart,
        spec_json,
    )

    # 9 consumers over 24 hours, one named to end a script element.
    start = datetime(2026, 11, 1, tzinfo=UTC)
    rows = [
        {
            "queue": "q",
            "consumer": f"c{i}</script>",
            "bucket": start + timedelta(hours=h),
            "backlog": i * 10 + h,
            "latency_p95": float(1000 * i + h),
        }
        for i in range(9)
        for h in range(24)
        if not (i == 8 and h == 3)  # a bucket without a row: the backlog carries on
    ]
    times = axis(rows, timedelta(hours=1))
    assert len(times) == 24 and axis(rows[:1] + rows[-1:], timedelta(hours=1)) == times
    backlog = backlog_chart(rows, times).spec
    labels = [s["label"] for s in backlog["series"]]
    assert len(labels) == MAX_SERIES and labels[-1] == "other (4)"
    assert backlog["series"][-1]["other"] is True
    # The largest keep their lines; "other" sums the backlog of the rest.
    assert labels[0] == "q / c8</script>"
    assert backlog["series"][-1]["values"][0] == sum(i * 10 for i in range(4))
    assert backlog["series"][0]["values"][3] == 82  # carried from 02:00
    assert (backlog["xMin"], backlog["xMax"]) == (times[0].timestamp(), times[-1].timestamp())
    # Latency: "other" is the highest of the rest, never a sum of percentiles.
    latency = latency_chart(rows, times).spec
    assert latency["series"][-1]["values"][0] == 3000.0 and latency["unit"] == "ms"
    text = spec_json(backlog)
    assert "</script>" not in text and json.loads(text) == backlog


def test_durations_read_as_people_read_them() -> None:
    from redisq_django.pipeline.report_html import duration

    assert [duration(v) for v in (None, 0, 0.25, 8.5, 850, 12_345, 123_146.0, 7_200_000)] == [
        "-",
        "0",
        "0.25 ms",
        "8.5 ms",
        "850 ms",
        "12.3 s",
        "2.05 min",
        "2 h",
    ]


def test_inlined_assets_cannot_end_their_element_and_need_no_spark() -> None:
    import subprocess
    import sys

    from redisq_django.pipeline.report_assets import _inline, inline_head, scripts

    assert _inline("a</script>b<!--c</STYLE>") == "a<\\/script>b<\\!--c<\\/STYLE>"
    head = inline_head()
    assert head.count("<script>") == 2 and head.count("</script>") == 2
    assert "RedisqCharts" in scripts()[1] and "uPlot" in scripts()[0]
    # The admin may read the scripts' hashes without the pipeline's dependencies.
    code = (
        "import sys; from redisq_django.pipeline.report_assets import script_sources; "
        "print(script_sources()); print(sorted(m for m in ('pyspark', 'pyarrow', 'django') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    sources, imported = out.stdout.splitlines()
    assert sources.count("'sha256-") == 2 and imported == "[]"
