"""Trend charts of the live pages: per-minute trends as data, drawn in the browser.

Each chart is a ``<figure>`` holding a ``<div class="redisq-uplot">`` and, inside it, a
``<script type="application/json">`` spec (``static/redisq_django/charts.js`` documents
the format) that ``RedisqCharts.drawAll`` draws with the vendored uPlot. The figure's
``data-total-*`` attributes carry the sums and the div's ``aria-label`` a summary in words,
so that what the charts say is in the page even where no script runs.

Why data and a script where these were server-drawn SVG: an operator reading an incident
needs the values under the pointer (hover), a close look at a few minutes of a long range
(zoom by drag) and a range of their choosing (5 minutes to 48 hours) drawn with readable,
labelled axes. A static drawing can do none of that without a reload per question; the
spec stays data (a JSON script is never run), so a Content-Security-Policy needs nothing
but the static files allowed.

:func:`trend_charts` turns per-minute trends (``core/trends.py``) into the four charts of
the live pages: throughput, failures, backlog and handler time; :func:`partition_charts`
adds a partitioned queue's published and handled per minute, a line per partition.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils import timezone
from django.utils.html import format_html, format_html_join, json_script
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from redisq_django.core.trends import (
    BACKLOG,
    DEAD,
    FAILED,
    HANDLED,
    HANDLER_MS,
    MINUTE_MS,
    PUBLISHED,
    RETRIED,
    Bucket,
    Trend,
)

#: The ranges a page offers: name -> (minutes shown, minutes per point).
RANGES: dict[str, tuple[int, int]] = {
    "5m": (5, 1),
    "15m": (15, 1),
    "1h": (60, 1),
    "6h": (360, 5),
    "24h": (1440, 15),
    "48h": (2880, 30),
}
#: What the range links read.
RANGE_LABELS: dict[str, str] = {
    "5m": "5 min",
    "15m": "15 min",
    "1h": "1 h",
    "6h": "6 h",
    "24h": "24 h",
    "48h": "48 h",
}
DEFAULT_RANGE = "1h"
#: Pixels: tall enough to read a trend, short enough for two charts on a laptop's screen.
HEIGHT = 220
#: Lines of a chart by partition before the smallest are summed into one "other": as
#: many as charts.js has colours told apart.
MAX_PARTITION_LINES = 8


@dataclass(frozen=True)
class Series:
    """One line: its label, its key (the ``data-total-<key>`` attribute) and a value per
    point (None: none)."""

    label: str
    key: str
    values: Sequence[float | None]
    total: float | None = None  # what the figure's data attribute says (None: not shown)


def range_of(name: str | None) -> tuple[str, int, int]:
    """The named range (an unknown name: the default): name, minutes, minutes per point."""
    key = name if name in RANGES else DEFAULT_RANGE
    return (key, *RANGES[key])


def range_links(url_of: Callable[[str], str]) -> list[tuple[str, str, str]]:
    """Each range's name, label and link (``url_of(name)``), shortest first."""
    return [(r, RANGE_LABELS[r], url_of(r)) for r in RANGES]


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 10 or float(value).is_integer() else f"{value:,.1f}"


def chart(
    chart_id: str,
    title: str,
    unit: str,
    series: Sequence[Series],
    starts_ms: Sequence[int],
    span_ms: tuple[int, int],
    empty_text: str = "",
    max_series: int | None = None,
    other_label: str | None = None,
) -> SafeString:
    """One chart of ``series`` over the points starting at ``starts_ms``, its time axis
    spanning ``span_ms`` (the whole range, however few points it holds); ``empty_text``
    is shown over it when it has nothing but gaps (and zeros, for counted series);
    ``max_series``: lines before the smallest are folded into one (charts.js' default: 6),
    labelled ``other_label`` (``{n}``: how many; default ``other ({n})``).
    """
    empty = all(v is None or (v == 0 and s.total is not None) for s in series for v in s.values)
    spec: dict[str, Any] = {
        "title": title,
        "unit": unit,
        "x": [start // 1000 for start in starts_ms],
        "xMin": span_ms[0] // 1000,
        "xMax": span_ms[1] // 1000,
        "series": [
            {"label": s.label, "values": [None if v is None else round(v, 3) for v in s.values]}
            for s in series
        ],
        "height": HEIGHT,
        "tz": timezone.get_current_timezone_name(),
    }
    if empty and empty_text:
        spec["empty"] = empty_text
    if max_series is not None:
        spec["maxSeries"] = max_series
    if other_label is not None:
        spec["otherLabel"] = other_label
    totals = format_html_join(
        "",
        ' data-total-{}="{}"',
        ((s.key, _number(s.total)) for s in series if s.total is not None),
    )
    return format_html(
        '<figure class="redisq-chart" id="{}"{}>'
        '<div class="redisq-uplot" role="img" aria-label="{}">{}</div></figure>',
        chart_id,
        totals,
        _summary(title, series),
        json_script(spec),
    )


def _summary(title: str, series: Sequence[Series]) -> str:
    parts = []
    for s in series:
        seen = [v for v in s.values if v is not None]
        total = f"{_number(s.total)} in all, " if s.total is not None else ""
        peak = _number(max(seen)) if seen else "-"
        parts.append(f"{s.label}: {total}at most {peak}")
    return f"{title}: " + "; ".join(parts)


def unknown_charts(error: str) -> SafeString:
    """What stands in for the charts when Redis could not be read."""
    return format_html(
        '<p class="redisq-charts-unknown"><span class="redisq-unknown" title="{}">?</span> {}</p>',
        error,
        _("Trends unknown: Redis is unreachable."),
    )


def trend_charts(
    trends: Sequence[Trend],
    consumers: Sequence[str] | None,
    range_name: str | None,
    *,
    handled_by_consumer: bool = False,
) -> SafeString:
    """Throughput, failures, backlog and handler time over ``trends`` (summed over the
    queues given), for every consumer or only ``consumers``.

    Counters are per minute (a point of several minutes shows their average per minute);
    the backlog is the largest sample of each point (sampled every 15 s for every consumer
    while any worker runs, or while a live page is open: ``core/trends.py``).

    Every consumer receives every message of its queue, so handled summed over several
    consumers is not comparable with published (3 consumers keeping up with 1,200
    published a minute handle 3,600). ``handled_by_consumer`` (a queue's page) draws a
    handled line per consumer, each comparable with published, so that one falling
    behind shows; otherwise the summed line says in its label how many it adds up.
    """
    _name, minutes, size = range_of(range_name)
    columns: list[list[Bucket]] = [t.buckets(size) for t in trends]
    if not columns or not columns[0]:
        return format_html("")
    points = list(zip(*columns, strict=True))
    starts = [group[0].start_ms for group in points]
    first = trends[0].first_minute * MINUTE_MS
    span = (first, first + minutes * MINUTE_MS)
    names = (
        sorted({c for t in trends for c in t.consumers()}) if consumers is None else list(consumers)
    )

    def per_minute(name: str, of: Sequence[str] | None) -> list[float | None]:
        return [sum(b.total(name, of) for b in group) / group[0].size for group in points]

    def total(name: str, of: Sequence[str] | None) -> float:
        return float(sum(b.total(name, of) for group in points for b in group))

    def backlog() -> list[float | None]:
        out: list[float | None] = []
        for group in points:
            samples = [s for b in group if (s := b.sample(BACKLOG, names)) is not None]
            out.append(float(sum(samples)) if samples else None)
        return out

    def handler_ms() -> list[float | None]:
        out: list[float | None] = []
        for group in points:
            runs = sum(b.total(HANDLED, names) + b.total(FAILED, names) for b in group)
            spent = sum(b.total(HANDLER_MS, names) for b in group)
            out.append(spent / runs if runs else None)
        return out

    def counted(label: str, name: str, of: Sequence[str] | None) -> Series:
        return Series(label, name, per_minute(name, of), total(name, of))

    throughput = [counted(_("published"), PUBLISHED, None)]
    other_label = None
    if handled_by_consumer:
        throughput += [
            Series(
                _("handled by %(consumer)s") % {"consumer": name},
                f"handled-{i}",
                per_minute(HANDLED, [name]),
                total(HANDLED, [name]),
            )
            for i, name in enumerate(names)
        ]
        other_label = _("handled by {n} other consumers, added up")
    else:
        # The overview's consumers of every queue, each counted once per queue.
        n = len(names) if consumers is not None else sum(len(t.consumers()) for t in trends)
        label = (
            _("handled")
            if n <= 1
            else ngettext(
                "handled (all %(n)d consumer, added up)",
                "handled (all %(n)d consumers, added up)",
                n,
            )
            % {"n": n}
        )
        throughput.append(counted(label, HANDLED, names))

    per_min = _("per minute")
    nothing = _("nothing in this range")
    return format_html(
        '<div class="redisq-charts" data-minutes="{}">{}{}{}{}</div>',
        minutes,
        chart(
            "redisq-chart-throughput",
            _("Throughput"),
            per_min,
            throughput,
            starts,
            span,
            nothing,
            MAX_PARTITION_LINES if handled_by_consumer else None,
            other_label,
        ),
        chart(
            "redisq-chart-failures",
            _("Failures"),
            per_min,
            [
                counted(_("failed"), FAILED, names),
                counted(_("retried"), RETRIED, names),
                counted(_("dead"), DEAD, names),
            ],
            starts,
            span,
            nothing,
        ),
        chart(
            "redisq-chart-backlog",
            _("Backlog"),
            _("messages"),
            [Series(_("backlog"), BACKLOG, backlog())],
            starts,
            span,
            _("no samples yet: sampled every 15 s while a worker runs or this page is open"),
        ),
        chart(
            "redisq-chart-duration",
            _("Handler time (average)"),
            "ms",
            [Series(_("average"), "duration", handler_ms())],
            starts,
            span,
            _("no handler ran in this range"),
        ),
    )


def partition_charts(trend: Trend, range_name: str | None) -> SafeString:
    """A partitioned queue's published and handled (all consumers) per minute, a line per
    partition (:attr:`Trend.partitions`): a hot partition's line stands above the others, a
    stuck one's handled line lies at zero while the others' do not. Nothing for a queue of
    one partition."""
    if not trend.partitions:
        return SafeString("")
    _name, minutes, size = range_of(range_name)
    columns = [p.buckets(size) for p in trend.partitions]
    if not columns[0]:
        return SafeString("")
    starts = [b.start_ms for b in columns[0]]
    first = trend.first_minute * MINUTE_MS
    span = (first, first + minutes * MINUTE_MS)

    def lines(name: str) -> list[Series]:
        out = []
        for i, (part, buckets) in enumerate(zip(trend.partitions, columns, strict=True)):
            of = None if name == PUBLISHED else part.consumers()
            values = [b.total(name, of) / b.size for b in buckets]
            total = float(sum(b.total(name, of) for b in buckets))
            out.append(Series(_("partition %(n)d") % {"n": i}, f"p{i}-{name}", values, total))
        return out

    per_min = _("per minute")
    nothing = _("nothing in this range")
    return format_html(
        '<div class="redisq-charts redisq-partition-charts" data-minutes="{}">{}{}</div>',
        minutes,
        chart(
            "redisq-chart-partitions-published",
            _("Published, by partition"),
            per_min,
            lines(PUBLISHED),
            starts,
            span,
            nothing,
            MAX_PARTITION_LINES,
        ),
        chart(
            "redisq-chart-partitions-handled",
            _("Handled, by partition (all consumers)"),
            per_min,
            lines(HANDLED),
            starts,
            span,
            nothing,
            MAX_PARTITION_LINES,
        ),
    )
