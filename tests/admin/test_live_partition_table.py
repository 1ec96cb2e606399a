"""A partitioned queue's live page side by side per partition: each partition's backlog,
rates, oldest unacknowledged age and threads in a table and a chart, the hot and the
stuck partition flagged with the reason, and instances counted as worker processes.
Django's test client, real Redis; the flag rules also as the pure function they are."""

from __future__ import annotations

import re
import time
from html import unescape
from html.parser import HTMLParser
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.admin.live.partition_rows import RATE_MINUTES, PartitionRow, flags
from redisq_django.connection import get_broker
from tests.support.hung_server import HungServer
from tests.support.partition_data import HANDLED, PUBLISHED, K, Skewed, skewed_queue

pytestmark = pytest.mark.django_db


class Rows(HTMLParser):
    """The per-partition table: partition -> (its row's classes, figure -> cell text,
    figure -> the cell's classes)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[int, dict[str, Any]] = {}
        self._row: dict[str, Any] | None = None
        self._figure: str | None = None
        self._in_table = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "table" and a.get("id") == "redisq-partitions":
            self._in_table = True
        elif self._in_table and tag == "tr" and a.get("data-partition") is not None:
            self._row = {"class": (a.get("class") or "").split(), "cells": {}, "css": {}}
            self.rows[int(a["data-partition"] or 0)] = self._row
        elif self._row is not None and tag == "td" and a.get("data-figure"):
            self._figure = a["data-figure"]
            self._row["cells"][self._figure] = ""
            self._row["css"][self._figure] = (a.get("class") or "").split()

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._figure = None
        elif tag == "table":
            self._in_table = False

    def handle_data(self, data: str) -> None:
        if self._row is not None and self._figure is not None:
            self._row["cells"][self._figure] += data.strip()


def rows_of(html: str) -> dict[int, dict[str, Any]]:
    parser = Rows()
    parser.feed(html)
    return parser.rows


def text(html: str) -> str:
    """The text of ``html``, its spaces collapsed."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def page_url(queue: str, what: str = "") -> str:
    return reverse(f"admin:redisq_django_queue_live{what}", args=[queue])


@pytest.fixture
def skewed(redisq_settings: Any, queue_name: str) -> Skewed:
    redisq_settings.REDISQ = {**redisq_settings.REDISQ, "PARTITIONS": {queue_name: K}}
    return skewed_queue(get_broker(), queue_name)


def rate(n: float) -> str:
    per_minute = n / RATE_MINUTES
    return f"{per_minute:.0f}" if per_minute.is_integer() else f"{per_minute:.1f}"


def test_each_partition_has_its_row_and_the_hot_and_stuck_ones_say_why(
    root: Client, skewed: Skewed
) -> None:
    # When staff open the queue's live page
    html = root.get(page_url(skewed.queue)).content.decode()
    rows = rows_of(html)

    # Then it has a row per partition with that partition's own figures
    assert sorted(rows) == list(range(K))
    for part, row in rows.items():
        cells = row["cells"]
        assert int(cells["backlog"]) == skewed.backlog[part], part
        assert cells["in_flight"] == "0"
        assert cells["published_rate"] == rate(PUBLISHED[part])
        assert cells["handled_rate"] == rate(HANDLED if part == 0 else 0)
        assert int(cells["threads"]) == skewed.threads[part]
        assert cells["oldest_unacked"].endswith("s")  # seconds old: published just now
    # ... its handled rate headed as what it is: billing's and audit's added up (no match
    # for published, which each of them must handle)
    heads = re.search(r'<table[^>]*id="redisq-partitions".*?</thead>', html, re.S)
    assert heads and "handled / min (all 2 consumers, added up)" in text(heads[0])
    # and the hot partition 2 is flagged, its backlog and publish rate marked
    assert "redisq-partition-hot" in rows[2]["class"]
    assert {f for f, css in rows[2]["css"].items() if "redisq-flagged" in css} == {
        "backlog",
        "published_rate",
    }
    # and partition 3, where audit has no instance, is stuck
    assert "redisq-partition-stuck" in rows[3]["class"]
    assert "redisq-flagged" in rows[3]["css"]["threads"]
    # and the others are not flagged
    assert rows[0]["class"] == rows[1]["class"] == []
    # and the page says why, in words, above the table and with the rules
    flagged = text(html.split('id="redisq-partitions-flagged"', 1)[1].split("</div>", 1)[0])
    assert "2 partitions stand out" in flagged
    assert "Partition 2 — hot: backlog 80, 10 times the other partitions' median (8)" in flagged
    assert "hot: 8 published per minute, 10 times the other partitions' median (0.8)" in flagged
    assert (
        "Partition 3 — stuck: consumer `audit` has 3 waiting here and no instance alive on "
        "this partition (it has instances on the others)" in flagged
    )
    assert "A partition is flagged hot when its backlog or its publish rate is at least 3" in text(
        html
    )


def test_instances_are_worker_processes_and_threads_are_shown_apart(
    root: Client, skewed: Skewed
) -> None:
    # When staff read the queue's page, its JSON and its row in the list
    html = root.get(page_url(skewed.queue)).content.decode()
    data = root.get(page_url(skewed.queue, "_data")).json()
    listed = root.get(reverse("admin:redisq_django_queue_changelist")).content.decode()

    # Then one worker process runs the queue's 15 threads (3 of billing and 1 of audit
    # on each partition, audit's none on partition 3): 1 instance, not 15
    threads = sum(skewed.threads.values())
    assert (data["figures"]["instances"], data["figures"]["threads"]) == (1, threads)
    figure = html.split('id="redisq-fig-instances"', 1)[1].split("</dd>", 1)[0]
    assert text(figure).endswith(f"1 ({threads} threads)")
    row = next(r for r in re.findall(r"<tr>(.*?)</tr>", listed, re.S) if skewed.queue in r)
    cell = re.search(r'<td class="field-instances_alive">(.*?)</td>', row, re.S)
    assert cell and text(cell.group(1)) == f"1 ({threads} threads)"
    # and each consumer on the consumers list: one process, its own threads
    consumers = root.get(page_url(skewed.queue), {"list": "consumers"}).content.decode()
    assert "1 (12 threads)" in text(consumers) and "1 (3 threads)" in text(consumers)


def test_the_chart_draws_a_line_per_partition(root: Client, skewed: Skewed) -> None:
    # When the page's charts are read (the JSON the page polls every half minute)
    charts = root.get(page_url(skewed.queue, "_data"), {"charts": "1"}).json()["html"]["charts"]

    # Then beside the queue's charts, published and handled by partition, a line each
    for chart in ("published", "handled"):
        figure = re.search(
            rf'<figure class="redisq-chart" id="redisq-chart-partitions-{chart}"([^>]*)>', charts
        )
        assert figure, charts
        totals = dict(re.findall(r'data-total-p(\d)-\w+="(\d+)"', figure.group(1)))
        expected = PUBLISHED if chart == "published" else {0: HANDLED, 1: 0, 2: 0, 3: 0}
        assert {int(p): int(n) for p, n in totals.items()} == expected


def test_the_partitions_answer_with_redis_stopped(
    root: Client, settings: Any, volatile_redis_server: Any, queue_name: str
) -> None:
    # Given the skewed queue on a server that then stops
    settings.REDISQ = {"URL": volatile_redis_server.url, "PARTITIONS": {queue_name: K}}
    skewed_queue(get_broker(), queue_name)
    volatile_redis_server.stop()
    live.clear()

    # When staff open the queue's page and its JSON
    page = root.get(page_url(queue_name))
    data = root.get(page_url(queue_name, "_data"), {"charts": "1"}).json()

    # Then the page answers with a row per partition, every figure unknown, and says why
    assert page.status_code == 200 and b'id="redisq-banner"' in page.content
    rows = rows_of(page.content.decode())
    assert sorted(rows) == list(range(K))
    assert all(set(r["cells"].values()) == {"?"} for r in rows.values())
    assert "Each partition's figures are unknown: Redis is unreachable." in text(
        data["html"]["partitions"]
    )
    assert data["figures"]["instances"] is None


def test_the_partitions_answer_within_2s_with_redis_hung(root: Client, settings: Any) -> None:
    with HungServer() as hung:
        # Given a Redis that accepts and never answers, and a partitioned queue
        settings.REDISQ = {
            "URL": hung.url,
            "ADMIN_REDIS_TIMEOUT": 0.3,
            "PARTITIONS": {"orders": K},
        }
        live.clear()

        # When staff open the queue's page, and its JSON with the charts
        started = time.monotonic()
        page = root.get(page_url("orders"))
        data = root.get(page_url("orders", "_data"), {"charts": "1"}).json()

        # Then both answer within 2 s, a row per partition, every figure unknown
        assert time.monotonic() - started < 2.0
        assert page.status_code == 200 and b'id="redisq-banner"' in page.content
        rows = rows_of(data["html"]["partitions"])
        assert sorted(rows) == list(range(K))
        assert all(set(r["cells"].values()) == {"?"} for r in rows.values())
        assert "Trends unknown" in data["html"]["charts"]


# -- the rules, without Redis -------------------------------------------------------------


def row(part: int, **figures: Any) -> PartitionRow:
    return PartitionRow(part=part, **{"backlog": 5, "published": 2.0, "handled": 2.0, **figures})


def test_a_partition_that_handles_nothing_for_minutes_while_others_do_is_stuck() -> None:
    rows = [
        row(0, oldest_unacked_age_s=200.0),
        row(1, handled=0.0, oldest_unacked_age_s=RATE_MINUTES * 60 + 5),
        row(2, handled=3.5, oldest_unacked_age_s=200.0),
    ]
    [stuck] = flags(rows[1], rows)
    assert (stuck.kind, stuck.figure) == ("stuck", "handled_rate")
    assert stuck.reason.startswith(
        "nothing handled in the last 5 minutes while other partitions handled up to 3.5 per "
        "minute, and its oldest unacknowledged message is 5m old"
    )
    # ...not while its message has waited less than that (it may just have come)
    assert flags(row(1, handled=0.0, oldest_unacked_age_s=30.0), rows) == ()
    # ...nor when no partition handles anything (the queue is idle or paused: its own
    # figures and state say so)
    idle = [row(i, handled=0.0, oldest_unacked_age_s=900.0) for i in range(3)]
    assert [flags(r, idle) for r in idle] == [(), (), ()]


def test_a_partition_far_older_than_the_others_is_late_and_small_skews_are_not_flagged() -> None:
    rows = [row(0, oldest_unacked_age_s=4.0), row(1, oldest_unacked_age_s=400.0), row(2)]
    [late] = flags(rows[1], rows)
    assert late.kind == "late"
    assert late.reason == (
        "oldest unacknowledged message 7m old, 200 times the other partitions' median (2.0s)"
    )
    # A backlog 3 times the others' but only 8 more: the noise of routing, not a hot key
    small = [row(0, backlog=4), row(1, backlog=12), row(2, backlog=4)]
    assert flags(small[1], small) == ()
