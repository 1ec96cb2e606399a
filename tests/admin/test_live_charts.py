"""The live pages' trends as data for charts.js, with Django's test client: one JSON spec
per concern whose time axis spans the chosen range (5 min to 48 h), totals kept in the
markup, the chart library loaded from the app's static files, no chart script inline."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from redisq_django.admin import live
from redisq_django.connection import get_broker
from tests.support.live_data import Live, live_consumer

pytestmark = pytest.mark.django_db

FIGURE = re.compile(
    r'<figure class="redisq-chart" id="(?P<id>[^"]+)"(?P<attrs>[^>]*)>'
    r'<div class="redisq-uplot" role="img" aria-label="(?P<label>[^"]*)">'
    r'<script type="application/json">(?P<spec>.*?)</script></div></figure>',
    re.S,
)
SPANS = {"5m": 5, "15m": 15, "1h": 60, "6h": 360, "24h": 1440, "48h": 2880}


@pytest.fixture
def made(redisq_settings: Any, queue_name: str) -> Live:
    live.clear()
    return live_consumer(get_broker(), queue_name)


def charts_of(html: str) -> dict[str, tuple[dict[str, str], dict[str, Any]]]:
    """Each chart's id -> (its data-total-* attributes, its spec)."""
    out = {}
    for m in FIGURE.finditer(html):
        totals = dict(re.findall(r'data-total-([a-z0-9-]+)="([^"]*)"', m["attrs"]))
        out[m["id"]] = (totals, json.loads(m["spec"]))
    return out


def data_url(queue: str, consumer: str | None) -> str:
    if consumer is None:
        return reverse("admin:redisq_django_queue_live_data", args=[queue])
    return reverse("admin:redisq_django_consumer_live_data", args=[queue, consumer])


@pytest.mark.parametrize("consumer", ["billing", None])
def test_each_concern_is_one_spec_spanning_the_chosen_range(
    root: Client, made: Live, consumer: str | None
) -> None:
    for name, minutes in SPANS.items():
        data = root.get(data_url(made.queue, consumer), {"charts": "1", "range": name}).json()
        charts = charts_of(data["html"]["charts"])
        assert list(charts) == [
            "redisq-chart-throughput",
            "redisq-chart-failures",
            "redisq-chart-backlog",
            "redisq-chart-duration",
        ]
        for _totals, spec in charts.values():
            assert spec["xMax"] - spec["xMin"] == minutes * 60
            assert spec["xMin"] <= min(spec["x"]) and max(spec["x"]) < spec["xMax"]
            assert all(len(s["values"]) == len(spec["x"]) for s in spec["series"])
            assert spec["height"] >= 200
        # the units label the value axes
        units = {k: spec["unit"] for k, (_t, spec) in charts.items()}
        assert units == {
            "redisq-chart-throughput": "per minute",
            "redisq-chart-failures": "per minute",
            "redisq-chart-backlog": "messages",
            "redisq-chart-duration": "ms",
        }
        # the totals are what live_consumer did: 6 + 6 waiting + 2 delayed published,
        # billing failed 3 (2 retried, 1 dead)
        throughput, _spec = charts["redisq-chart-throughput"]
        assert throughput["published"] == "14"
        failures, spec = charts["redisq-chart-failures"]
        assert failures == {"failed": "3", "retried": "2", "dead": "1"}
        assert [s["label"] for s in spec["series"]] == ["failed", "retried", "dead"]
        assert sum(v or 0 for v in spec["series"][0]["values"]) > 0


def test_the_page_offers_every_range_and_loads_the_chart_library_as_static_files(
    root: Client, made: Live
) -> None:
    url = reverse("admin:redisq_django_consumer_live", args=[made.queue, "billing"])
    page = root.get(url, {"range": "15m"}).content.decode()
    links = re.findall(r'<a href="[^"]*range=(\w+)" data-range="\w+"([^>]*)>([^<]+)</a>', page)
    assert [(r, label) for r, _on, label in links] == [
        ("5m", "5 min"),
        ("15m", "15 min"),
        ("1h", "1 h"),
        ("6h", "6 h"),
        ("24h", "24 h"),
        ("48h", "48 h"),
    ]
    assert [r for r, on, _label in links if "redisq-tab-on" in on] == ["15m"]
    sources = re.findall(r'<script src="(/static/redisq_django/[^"]+)"', page)
    assert sources == [
        "/static/redisq_django/vendor/uplot/uPlot.iife.min.js",
        "/static/redisq_django/charts.js",
    ]
    assert "/static/redisq_django/vendor/uplot/uPlot.min.css" in page
    # The only inline script that runs is the live poll's; the charts are data.
    inline = re.findall(r"<script(?![^>]*\bsrc=)([^>]*)>", page)
    assert sorted(inline) == sorted([""] + [' type="application/json"'] * 4), inline
    assert len(charts_of(page)) == 4
    assert "About these charts" in page


def test_a_spec_cannot_close_its_script_element(root: Client, made: Live) -> None:
    # A consumer name cannot hold "<", but a title or label might one day: the spec is
    # escaped as json_script does, so "</script" never appears inside it.
    data = root.get(data_url(made.queue, "billing"), {"charts": "1"}).json()
    for m in FIGURE.finditer(data["html"]["charts"]):
        assert "<" not in m["spec"]


def test_handled_is_drawn_per_consumer_on_a_queue_page_and_said_summed_on_the_overview(
    root: Client, redisq_settings: Any, queue_name: str
) -> None:
    # Given a queue with 6 messages published, all handled by billing, 2 by email
    live.clear()
    broker = get_broker()
    for name in ("billing", "email"):
        broker.consumers.ensure(queue_name, name)
    broker.publish_many(queue_name, [{"n": n} for n in range(6)])
    for name, count in (("billing", 6), ("email", 2)):
        with broker.subscribe(queue_name, name) as sub:
            sub.ack(sub.fetch(count=count, block_ms=500))

    # When staff open the queue's charts
    data = root.get(data_url(queue_name, None), {"charts": "1", "range": "15m"}).json()
    totals, spec = charts_of(data["html"]["charts"])["redisq-chart-throughput"]
    # Then published stands beside a handled line per consumer, each comparable with it,
    # never one line of 8 "handled" against 6 published
    assert [s["label"] for s in spec["series"]] == [
        "published",
        "handled by billing",
        "handled by email",
    ]
    assert totals == {"published": "6", "handled-0": "6", "handled-1": "2"}
    assert spec["maxSeries"] >= 3 and "added up" in spec["otherLabel"]

    # When they open a consumer's charts, its own handled line is what it handled
    data = root.get(data_url(queue_name, "email"), {"charts": "1", "range": "15m"}).json()
    totals, spec = charts_of(data["html"]["charts"])["redisq-chart-throughput"]
    assert [s["label"] for s in spec["series"]] == ["published", "handled"]
    assert totals == {"published": "6", "handled": "2"}

    # When they open the overview (every queue: no room for a line per consumer)
    page = root.get(reverse("admin:redisq_django_overview_changelist"), {"range": "15m"})
    totals, spec = charts_of(page.content.decode())["redisq-chart-throughput"]
    # Then its handled line says it adds consumers up, and how many
    handled = spec["series"][1]["label"]
    assert re.fullmatch(r"handled \(all \d+ consumers, added up\)", handled), handled
    assert int(re.search(r"\d+", handled)[0]) >= 2
