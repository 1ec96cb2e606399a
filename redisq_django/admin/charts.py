"""Trend charts drawn on the server as inline SVG: no script, no CDN, no image files.

Each chart is a ``<figure>``: a caption with its legend, the largest value of its scale,
an SVG of lines (its strokes keep their width however the SVG is stretched, so one
drawing fits a phone and a wide screen), the first and last times, and a column per
point whose tooltip gives the values. Its ``data-total-*`` attributes carry the sums.

:func:`trend_charts` turns per-minute trends (``core/trends.py``) into the three charts
of the live pages: throughput, failures, backlog (and handler time).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext as _

from redisq_django.core.trends import (
    BACKLOG,
    DEAD,
    FAILED,
    HANDLED,
    HANDLER_MS,
    PUBLISHED,
    RETRIED,
    Bucket,
    Trend,
)

#: The ranges a page offers: name -> (minutes shown, minutes per point).
RANGES: dict[str, tuple[int, int]] = {
    "1h": (60, 1),
    "6h": (360, 5),
    "24h": (1440, 15),
    "48h": (2880, 30),
}
DEFAULT_RANGE = "1h"

WIDTH, HEIGHT = 600, 100
#: Strokes keep their width however the drawing is stretched.
_FIXED_STROKE = mark_safe('vector-effect="non-scaling-stroke"')


@dataclass(frozen=True)
class Series:
    """One line: its label, its colour (a css class) and a value per point (None: none)."""

    label: str
    css: str
    values: Sequence[float | None]
    total: float | None = None  # what the caption's data attribute says (None: not shown)


def range_of(name: str | None) -> tuple[str, int, int]:
    """The named range (an unknown name: the default): name, minutes, minutes per point."""
    key = name if name in RANGES else DEFAULT_RANGE
    return (key, *RANGES[key])


def _ceiling(value: float) -> float:
    """A round scale maximum at or above ``value`` (1, 2 or 5 times a power of 10)."""
    if value <= 1:
        return 1
    magnitude = 10 ** (len(str(int(value))) - 1)
    for step in (1, 2, 5, 10):
        if value <= step * magnitude:
            return float(step * magnitude)
    return float(10 * magnitude)


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 10 or float(value).is_integer() else f"{value:,.1f}"


def _time(ms: int) -> str:
    return timezone.localtime(dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)).strftime("%H:%M")


def chart(
    chart_id: str,
    title: str,
    unit: str,
    series: Sequence[Series],
    starts_ms: Sequence[int],
    empty_text: str = "",
) -> SafeString:
    """One chart of ``series`` over the points starting at ``starts_ms``; ``empty_text``
    is shown over it when it has nothing but gaps (and zeros, for counted series)."""
    n = len(starts_ms)
    peak = max((v for s in series for v in s.values if v is not None), default=0.0)
    top = _ceiling(peak)

    def x(i: int) -> float:
        return 0.0 if n < 2 else i * WIDTH / (n - 1)

    def y(v: float) -> float:
        return HEIGHT - v / top * HEIGHT

    lines = []
    for s in series:
        runs: list[list[str]] = [[]]
        for i, v in enumerate(s.values):
            if v is None:
                runs.append([])
            else:
                runs[-1].append(f"{x(i):.1f},{y(v):.1f}")
        for run in runs:
            if len(run) == 1:  # a lone point: a dot, as a line of no length shows nothing
                run.append(run[0])
            if run:
                lines.append((s.css, " ".join(run)))
    step = WIDTH / max(1, n - 1) if n > 1 else WIDTH
    columns = [
        (
            f"{max(0.0, x(i) - step / 2):.1f}",
            f"{step:.1f}",
            " · ".join([_time(start)] + [f"{s.label} {_number(s.values[i])}" for s in series]),
        )
        for i, start in enumerate(starts_ms)
    ]
    svg = format_html(
        '<svg class="redisq-chart-svg" viewBox="0 0 {} {}" preserveAspectRatio="none" '
        'role="img" aria-label="{}">'
        '<line class="redisq-grid" x1="0" y1="0.5" x2="{}" y2="0.5" {}/>'
        '<line class="redisq-grid" x1="0" y1="{}" x2="{}" y2="{}" {}/>'
        "{}{}</svg>",
        WIDTH,
        HEIGHT,
        _summary(title, series),
        WIDTH,
        _FIXED_STROKE,
        HEIGHT / 2,
        WIDTH,
        HEIGHT / 2,
        _FIXED_STROKE,
        format_html_join(
            "",
            '<polyline class="{}" points="{}" fill="none" vector-effect="non-scaling-stroke"/>',
            lines,
        ),
        format_html_join(
            "",
            '<rect x="{}" y="0" width="{}" height="' + str(HEIGHT) + '"><title>{}</title></rect>',
            columns,
        ),
    )
    legend = format_html_join(
        "", '<span class="redisq-key {}">{}</span>', ((s.css, s.label) for s in series)
    )
    totals = format_html_join(
        "",
        ' data-total-{}="{}"',
        (
            (s.css.removeprefix("redisq-s-"), _number(s.total))
            for s in series
            if s.total is not None
        ),
    )
    empty = (
        format_html('<span class="redisq-chart-empty">{}</span>', empty_text)
        if all(v is None or (v == 0 and s.total is not None) for s in series for v in s.values)
        else ""
    )
    first = _time(starts_ms[0]) if starts_ms else ""
    last = _time(starts_ms[-1]) if starts_ms else ""
    return format_html(
        '<figure class="redisq-chart" id="{}"{}><figcaption><strong>{}</strong> {}</figcaption>'
        '<div class="redisq-chart-plot"><span class="redisq-chart-top">{} {}</span>{}{}</div>'
        '<div class="redisq-chart-x"><span>{}</span><span>{}</span></div></figure>',
        chart_id,
        totals,
        title,
        legend,
        _number(top),
        unit,
        svg,
        empty,
        first,
        last,
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
    trends: Sequence[Trend], consumers: Sequence[str] | None, range_name: str | None
) -> SafeString:
    """Throughput, failures, backlog and handler time over ``trends`` (summed over the
    queues given), for every consumer or only ``consumers``.

    Counters are per minute (a point of several minutes shows their average per minute);
    the backlog is the largest sample of each point (sampled by running workers every
    15 s: a point without any worker running has none).
    """
    _name, minutes, size = range_of(range_name)
    columns: list[list[Bucket]] = [t.buckets(size) for t in trends]
    if not columns or not columns[0]:
        return format_html("")
    points = list(zip(*columns, strict=True))
    starts = [group[0].start_ms for group in points]
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

    throughput = [
        Series(
            _("published"),
            "redisq-s-published",
            per_minute(PUBLISHED, None),
            total(PUBLISHED, None),
        ),
        Series(_("handled"), "redisq-s-handled", per_minute(HANDLED, names), total(HANDLED, names)),
    ]
    failures = [
        Series(_("failed"), "redisq-s-failed", per_minute(FAILED, names), total(FAILED, names)),
        Series(_("retried"), "redisq-s-retried", per_minute(RETRIED, names), total(RETRIED, names)),
        Series(_("dead"), "redisq-s-dead", per_minute(DEAD, names), total(DEAD, names)),
    ]
    per_min = _("/min")
    nothing = _("nothing in this range")
    return format_html(
        '<div class="redisq-charts" data-minutes="{}">{}{}{}{}</div>',
        minutes,
        chart("redisq-chart-throughput", _("Throughput"), per_min, throughput, starts, nothing),
        chart("redisq-chart-failures", _("Failures"), per_min, failures, starts, nothing),
        chart(
            "redisq-chart-backlog",
            _("Backlog"),
            "",
            [Series(_("backlog"), "redisq-s-backlog", backlog())],
            starts,
            _("no samples: running workers sample it every 15 s"),
        ),
        chart(
            "redisq-chart-duration",
            _("Handler time"),
            "ms",
            [Series(_("average"), "redisq-s-duration", handler_ms())],
            starts,
            _("no handler ran in this range"),
        ),
    )
