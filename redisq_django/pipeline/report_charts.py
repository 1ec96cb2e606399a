"""The report's charts: a JSON spec per chart, drawn in the page by charts.js (uPlot).

One chart per concern (throughput, failures, latency, backlog), each with a handful of
lines at most: the largest keep theirs and the rest are folded here into one "other (N)"
line, summed for counts and the backlog and their maximum for latencies (a sum of p95s
means nothing). Every chart shares one time axis, from the first bucket of the range's data
to its last (not the range asked for, whose days before a short incident would squeeze it
into a sliver), in UTC like the rest of the report.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

Row = dict[str, Any]
Values = list[float | None]

#: Lines per chart, "other" included (charts.js's Okabe-Ito palette has 8 colours).
MAX_SERIES = 6
#: Points per line at most on a dense axis (a year of hours is 8,760).
MAX_POINTS = 20_000
#: Chart height in pixels; the width follows the page's.
HEIGHT = 260
EMPTY = "No data in the range."
#: What must not appear raw in a script element's text (JSON keeps its meaning escaped).
_SCRIPT_UNSAFE = str.maketrans({"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"})


@dataclass(frozen=True, slots=True)
class Line:
    """One line: its label and a value (or None, a gap) per point of the shared axis."""

    label: str
    values: Values
    other: bool = False  # a fold of several (charts.js draws it grey)


@dataclass(frozen=True, slots=True)
class ChartGroup:
    """Lines of one kind on a chart, folded to ``keep`` lines at most."""

    series: list[Line]
    keep: int
    other: str  # the folded line's label, with {n}
    combine: Callable[[Iterable[float]], float] = sum


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart as the page needs it: the spec, and the summary for its aria-label."""

    spec: dict[str, Any]
    summary: str


def spec_json(spec: dict[str, Any]) -> str:
    """``spec`` as the text of a ``<script type="application/json">`` element: ``<``,
    ``>`` and ``&`` escaped, so no queue name or label can end the element."""
    return json.dumps(spec, separators=(",", ":"), allow_nan=False).translate(_SCRIPT_UNSAFE)


def axis(rows: Iterable[Row], step: timedelta) -> list[datetime]:
    """The shared time axis: every bucket from the rows' first to their last, those
    without a row included (a quiet hour is a zero or a flat backlog, not a straight line
    between its neighbours); only the buckets the rows hold beyond :data:`MAX_POINTS`."""
    held = sorted({row["bucket"] for row in rows if row.get("bucket") is not None})
    if not held or (held[-1] - held[0]) / step >= MAX_POINTS:
        return held
    return [held[0] + i * step for i in range(int((held[-1] - held[0]) / step) + 1)]


def _consumer(row: Row) -> str:
    return f"{row['queue']} / {row['consumer']}"


def _lines(
    rows: Iterable[Row],
    times: Sequence[datetime],
    key: Callable[[Row], str],
    value: str,
    *,
    missing: float | None,
    carry: bool = False,
) -> list[Line]:
    """A line per ``key`` over ``times``; a bucket without a row is ``missing`` (0 for
    counts, a gap for percentiles) or, with ``carry``, the line's last value (a backlog
    stays what it was while nothing happens)."""
    index = {t: i for i, t in enumerate(times)}
    found: dict[str, dict[int, float | None]] = {}
    for row in rows:
        if row.get("bucket") not in index:
            continue
        v = row.get(value)
        found.setdefault(key(row), {})[index[row["bucket"]]] = None if v is None else float(v)
    out = []
    for label in sorted(found):
        points, values, last = found[label], [], None
        for i in range(len(times)):
            if i in points:
                last = points[i]
                values.append(last)
            else:
                values.append(last if carry else missing)
        out.append(Line(label, values))
    return out


def _size(series: Line, combine: Callable[[Iterable[float]], float]) -> float:
    present = [v for v in series.values if v is not None]
    return combine(present) if present else 0.0


def fold(group: ChartGroup) -> list[Line]:
    """The ``keep - 1`` largest lines and one "other (N)" line of the rest (or all
    lines, when they fit)."""
    if len(group.series) <= group.keep:
        return group.series
    ranked = sorted(group.series, key=lambda s: -_size(s, group.combine))
    kept, rest = ranked[: group.keep - 1], ranked[group.keep - 1 :]
    other: Values = []
    for i in range(len(rest[0].values)):
        present = [v for s in rest if (v := s.values[i]) is not None]
        other.append(group.combine(present) if present else None)
    return [*kept, Line(group.other.format(n=len(rest)), other, other=True)]


def chart(title: str, unit: str, times: Sequence[datetime], groups: Sequence[ChartGroup]) -> Chart:
    """A chart's spec for charts.js (see its header) and its summary in words."""
    series = [s for g in groups for s in fold(g)]
    x = [int(t.timestamp()) for t in times]
    spec: dict[str, Any] = {
        "title": title,
        "unit": unit,
        "x": x,
        "series": [
            {"label": s.label, "values": s.values, **({"other": True} if s.other else {})}
            for s in series
        ],
        "empty": EMPTY,
        "maxSeries": MAX_SERIES,
        "height": HEIGHT,
        "tz": "UTC",
    }
    if x:
        spec["xMin"], spec["xMax"] = x[0], x[-1]
    lines = ", ".join(s.label for s in series) or "no data"
    return Chart(spec, f"{title}: {lines}")


def _shares(first: Sequence[Line], second: Sequence[Line], cap: int) -> tuple[int, int]:
    """How many lines each of two groups keeps: ``first`` at most ``cap`` (all of
    :data:`MAX_SERIES` when ``second`` is empty), ``second`` the rest."""
    keep = min(len(first), cap if second else MAX_SERIES)
    return keep, MAX_SERIES - keep


def throughput_chart(counts: Sequence[Row], bucket: str, times: Sequence[datetime]) -> Chart:
    """Published per queue and handled per consumer, per bucket."""
    per_queue = list({(r["queue"], r["bucket"]): r for r in counts}.values())
    published = _lines(
        per_queue, times, lambda r: f"{r['queue']} published", "published", missing=0
    )
    consumers = [r for r in counts if r.get("consumer")]
    handled = _lines(consumers, times, lambda r: f"{_consumer(r)} handled", "handled", missing=0)
    queues, rest = _shares(published, handled, 2)
    groups = [
        ChartGroup(published, queues, "other ({n} queues) published"),
        ChartGroup(handled, rest, "other ({n}) handled"),
    ]
    return chart(f"Throughput per {bucket}", f"per {bucket}", times, groups)


def failures_chart(counts: Sequence[Row], bucket: str, times: Sequence[datetime]) -> Chart:
    """Dead and retried per consumer, per bucket (consumers without any left out)."""
    consumers = [r for r in counts if r.get("consumer")]

    def lines(kind: str) -> list[Line]:
        found = _lines(consumers, times, lambda r: f"{_consumer(r)} {kind}", kind, missing=0)
        return [s for s in found if any(s.values)]

    dead, retried = lines("dead"), lines("retried")
    keep_dead, keep_retried = _shares(dead, retried, MAX_SERIES // 2)
    groups = [
        ChartGroup(dead, keep_dead, "other ({n}) dead"),
        ChartGroup(retried, keep_retried, "other ({n}) retried"),
    ]
    return chart(f"Failures per {bucket} (dead, retried)", f"per {bucket}", times, groups)


def latency_chart(latency: Sequence[Row], times: Sequence[datetime]) -> Chart:
    """Publish → handled latency p95 per consumer (the totals table has p50 and p99)."""
    p95 = _lines(latency, times, _consumer, "latency_p95", missing=None)
    groups = [ChartGroup(p95, MAX_SERIES, "other ({n}), the highest", combine=max)]
    return chart("Latency p95, publish to handled", "ms", times, groups)


def backlog_chart(backlog: Sequence[Row], times: Sequence[datetime]) -> Chart:
    """What waits for each consumer at each bucket's end."""
    lines = _lines(backlog, times, _consumer, "backlog", missing=None, carry=True)
    return chart(
        "Backlog (messages waiting)",
        "messages",
        times,
        [ChartGroup(lines, MAX_SERIES, "other ({n})")],
    )
