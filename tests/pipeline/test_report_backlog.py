"""The report's backlog and consumers on an incident's archive: a bulk retry of dead letters,
messages published before the range and settled in it, a consumer stalled the whole range.

Written with Spark in the archive's layout (as tests/pipeline/test_report.py does), the
expected figures following from the rows; and once end to end, on a real queue whose
dead letters are re-driven by the broker and archived by the archive job.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow]

T0 = datetime(2026, 11, 20, 0, 0, tzinfo=UTC)
SINCE, UNTIL = T0, T0 + timedelta(hours=12)
#: Waiting for "webhook" at the end: m90..m99, re-driven and not handled again.
WAITING_AT_END = 10


def _event(consumer: str, event: str, at: datetime, mid: str, attempt: int, **kw: Any) -> Any:
    return {
        "queue": "hooks",
        "consumer": consumer,
        "instance": "" if event == "redriven" else "h:1",
        "event": event,
        "time": at,
        "entry_id": mid,
        "message_id": mid,
        "attempt": attempt,
        **kw,
    }


def generate() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(messages, events) of queue ``hooks`` with consumers ``webhook`` and ``slow``."""
    messages: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    # Before the range: e0..e4 published; "slow" handles e0 and then stalls for good.
    for i in range(5):
        at = T0 - timedelta(hours=1)
        messages.append({"queue": "hooks", "message_id": f"e{i}", "published_at": at})
        # "webhook" settles them in the range's first minute, before anything is published.
        events.append(_event("webhook", "handled", T0 + timedelta(seconds=10 + i), f"e{i}", 1))
    events.append(_event("slow", "handled", T0 - timedelta(minutes=50), "e0", 1))
    # In the range: m0..m99 every 10 s from 00:02; m60..m99 fail twice and die.
    for i in range(100):
        mid, at = f"m{i}", T0 + timedelta(minutes=2, seconds=10 * i)
        messages.append({"queue": "hooks", "message_id": mid, "published_at": at})
        if i < 60:
            events.append(_event("webhook", "handled", at + timedelta(seconds=5), mid, 1))
            continue
        failure = {"error_class": "HTTPError", "error_message": "502"}
        events.append(_event("webhook", "retried", at + timedelta(seconds=5), mid, 1, **failure))
        dead_at = at + timedelta(minutes=5)
        events.append(_event("webhook", "dead", dead_at, mid, 2, reason="failed", **failure))
        # The bulk retry at 01:00 re-drives all 40; m60..m89 are handled, m90..m99 wait.
        events.append(_event("webhook", "redriven", T0 + timedelta(hours=1), mid, 0))
        if i < 90:
            handled_at = T0 + timedelta(hours=1, minutes=1, seconds=i)
            events.append(_event("webhook", "handled", handled_at, mid, 1))
    return messages, events


def write_archive(spark: Any, root: Path) -> None:
    """The rows as the archive job lays them out (queue and date partitions)."""
    from redisq_django.pipeline.archive import archive_frame
    from redisq_django.pipeline.schemas import EVENTS, MESSAGES

    messages, events = generate()
    for table, rows, schema in (("messages", messages, MESSAGES), ("events", events, EVENTS)):
        full = [tuple(row.get(f.name) for f in schema.fields) for row in rows]
        frame = archive_frame(spark.createDataFrame(full, schema), table)
        frame.coalesce(1).write.partitionBy("queue", "date").parquet(f"{root}/{table}")


@pytest.fixture(scope="module")
def root(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("incident")
    write_archive(spark, path)
    return path


def read(spark: Any, summary: Any, name: str) -> list[dict[str, Any]]:
    """An aggregate's rows, timestamps as aware UTC datetimes."""
    rows = spark.read.parquet(str(summary.out_dir / f"{name}.parquet")).collect()
    return [
        {k: v.astimezone(UTC) if isinstance(v, datetime) else v for k, v in r.asDict().items()}
        for r in rows
    ]


def test_backlog_after_a_bulk_retry_is_never_negative_and_ends_true(
    spark: Any, root: Path, tmp_path: Path
) -> None:
    from redisq_django.pipeline.report import ReportOptions, report

    # Given an incident's archive; when the report covers it
    options = ReportOptions(root=str(root), out=str(tmp_path / "r"), since=SINCE, until=UNTIL)
    summary = report(spark, options)

    # Then the webhook's backlog never dips below zero and ends at what really waits
    backlog = sorted(
        (r for r in read(spark, summary, "backlog") if r["consumer"] == "webhook"),
        key=lambda r: r["bucket"],
    )
    assert backlog and min(r["backlog"] for r in backlog) >= 0
    assert backlog[-1]["backlog"] == WAITING_AT_END
    # e0..e4 were waiting when the range began: the least start the events allow.
    assert backlog[0]["start"] == 5 and backlog[0]["backlog"] == 0
    assert backlog[-1]["redriven_total"] == 40
    # Before the bulk retry nothing waits: 5 + 100 settled (65 handled, 40 dead).
    before = [r for r in backlog if r["bucket"] < T0 + timedelta(hours=1)]
    assert before[-1]["backlog"] == 0 and before[-1]["settled_total"] == 105


def test_a_consumer_stalled_the_whole_range_is_reported(
    spark: Any, root: Path, tmp_path: Path
) -> None:
    from redisq_django.pipeline.report import ReportOptions, report

    # Given "slow", whose only event is before the range; when the report covers the range
    options = ReportOptions(root=str(root), out=str(tmp_path / "r"), since=SINCE, until=UNTIL)
    summary = report(spark, options)

    # Then it has its row of the totals (nothing handled) and a backlog of all published
    totals = {r["consumer"]: r for r in read(spark, summary, "totals")}
    assert set(totals) == {"webhook", "slow"} and summary.consumers == 2
    assert (totals["slow"]["published"], totals["slow"]["handled"]) == (100, 0)
    assert (totals["webhook"]["handled"], totals["webhook"]["redriven"]) == (95, 40)
    slow = sorted(
        (r for r in read(spark, summary, "backlog") if r["consumer"] == "slow"),
        key=lambda r: r["bucket"],
    )
    assert slow[-1]["backlog"] == 100 and min(r["backlog"] for r in slow) >= 0
    page = summary.html.read_text()
    assert "slow" in page.split('id="report-totals"', 1)[1].split("</table>", 1)[0]


def test_a_week_with_an_hour_of_data_is_drawn_on_the_data_axis(
    spark: Any, root: Path, tmp_path: Path
) -> None:
    import json
    import re

    from redisq_django.pipeline.report import ReportOptions, report

    # Given a week's range whose data sits in its last hours; when the report covers it
    until = T0 + timedelta(hours=3)
    options = ReportOptions(
        root=str(root), out=str(tmp_path / "r"), since=until - timedelta(days=7), until=until
    )
    summary = report(spark, options)

    # Then it counts per minute and every chart's axis spans the data, not the week
    assert summary.bucket == "minute"
    page = summary.html.read_text()
    found = re.findall(r'<script type="application/json">(.*?)</script>', page)
    charts = [json.loads(text) for text in found]
    first = (T0 - timedelta(hours=1)).timestamp()  # e0..e4 published
    last = (T0 + timedelta(hours=1, minutes=2)).timestamp()  # m89 handled at 01:02:29
    assert len(charts) == 4
    for chart in charts:
        assert (chart["xMin"], chart["xMax"]) == (first, last), chart["title"]
        assert len(chart["series"]) <= 6
    backlog = next(c for c in charts if c["title"].startswith("Backlog"))
    assert {s["label"] for s in backlog["series"]} == {"hooks / webhook", "hooks / slow"}


def test_on_a_real_queue_the_backlog_after_a_bulk_retry_is_what_redis_says(
    queue_name: str, spark: Any, redis_client: Any, redis_url: str, tmp_path: Path
) -> None:
    from redisq_django.core import Broker, CoreConfig, Failure
    from redisq_django.pipeline.archive import archive
    from redisq_django.pipeline.options import ArchiveOptions
    from redisq_django.pipeline.report import ReportOptions, report

    # Given history on, "webhook" rejecting 8 of 20 messages, every dead letter re-driven
    # (a bulk retry) and 5 of them handled again; "stalled" handled one and stopped
    broker = Broker(redis_client, CoreConfig(history=True, replay_window_ms=0))
    started = datetime.now(UTC) - timedelta(minutes=1)
    for consumer in ("webhook", "stalled"):
        broker.consumers.ensure(queue_name, consumer)
    broker.publish_many(queue_name, [{"n": n} for n in range(20)])
    webhook = broker.subscribe(queue_name, "webhook", "w1")
    batch = webhook.fetch(count=20, block_ms=1000)
    assert len(batch) == 20
    for delivery in batch[:8]:
        webhook.reject(delivery, Failure("HTTPError", "502"))
    webhook.ack(batch[8:])
    stalled = broker.subscribe(queue_name, "stalled", "s1")
    (first,) = stalled.fetch(count=1, block_ms=1000)
    stalled.ack([first])
    dead = broker.dead_letters.read(queue_name, "webhook")
    assert len(dead) == 8
    assert all(broker.dead_letters.redrive(queue_name, "webhook", d.entry_id) for d in dead)
    again = webhook.fetch(count=5, block_ms=1000)
    assert len(again) == 5
    webhook.ack(again)
    waiting = {c.name: c.backlog + c.in_flight for c in broker.stats(queue_name).consumers}
    assert waiting == {"webhook": 3, "stalled": 19}

    # When the archive stores it and the report covers it
    root = tmp_path / "archive"
    archive(spark, ArchiveOptions(redis_url=redis_url, root=str(root), queues=(queue_name,)))
    options = ReportOptions(
        root=str(root),
        out=str(tmp_path / "r"),
        since=started,
        until=datetime.now(UTC) + timedelta(minutes=1),
    )
    summary = report(spark, options)

    # Then each consumer's backlog ends at what Redis says waits, and never went negative
    rows = sorted(read(spark, summary, "backlog"), key=lambda r: r["bucket"])
    assert all(r["backlog"] >= 0 for r in rows)
    last = {r["consumer"]: r["backlog"] for r in rows}
    assert last == waiting
    totals = {r["consumer"]: r for r in read(spark, summary, "totals")}
    assert (totals["webhook"]["dead"], totals["webhook"]["redriven"]) == (8, 8)
