"""The report's one self-contained HTML page, and where it goes: ``ROOT/reports/<UTC time>/``
with ``ROOT/reports/latest`` pointing at the newest, or a directory of the user's.

The page stands alone and opens offline from ``file://``: its CSS, the vendored uPlot and
charts.js are inlined (:mod:`.report_assets`), and each chart is a JSON spec in a
``<script type="application/json">`` element that charts.js draws. Every piece of text that
comes from the data (queue and consumer names, error classes and messages, message ids)
goes through :func:`html.escape`, or for a spec :func:`.report_charts.spec_json`, which
escapes ``<``, ``>`` and ``&``; the page's own scripts never build HTML from it.
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from redisq_django.pipeline import report_assets, report_charts
from redisq_django.pipeline.options import JobError, join_path, normalize_root

Row = dict[str, Any]
REPORTS_DIR = "reports"
#: ``ROOT/reports/latest``: a symlink to the newest default report (or a text file with
#: its directory's name); the admin's report view reads it.
LATEST = "latest"

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem 2rem;color:#222}
h1{font-size:1.4rem;margin:0 0 .3rem}h2{font-size:1.1rem;margin:1.6rem 0 .4rem}
.meta{color:#555}figure.chart{margin:0 0 1.2rem;max-width:1400px}
body:has(.redisq-uplot[data-drawn]) .charts-off{display:none}
.charts-off{border-left:3px solid #E69F00;padding-left:.5rem}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ccc;padding:.2rem .5rem}
th{background:#f3f3f3;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
"""
#: Columns holding milliseconds, shown as people read durations (850 ms, 12.3 s, 2.05 min).
DURATIONS = frozenset(f"{kind}_p{p}" for kind in ("latency", "duration") for p in (50, 95, 99))
_CHARTS = ("throughput", "failures", "latency", "backlog")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReportData:
    """The aggregates a page is drawn from (rows as plain dicts, already small)."""

    since: datetime
    until: datetime
    bucket: str
    made_at: datetime
    queues: Sequence[str] = ()
    accuracy: int = 10000
    counts: Sequence[Row] = field(default_factory=list)
    latency: Sequence[Row] = field(default_factory=list)
    backlog: Sequence[Row] = field(default_factory=list)
    attempts: Sequence[Row] = field(default_factory=list)
    errors: Sequence[Row] = field(default_factory=list)
    totals: Sequence[Row] = field(default_factory=list)
    #: Entries never archived (removed before the archive stored them), one line each.
    gaps: Sequence[str] = ()

    def queue_names(self) -> tuple[str, ...]:
        """The queues asked for, else those found in the range."""
        if self.queues:
            return tuple(self.queues)
        return tuple(sorted({str(r["queue"]) for r in self.totals if r.get("queue")}))


def e(value: Any) -> str:
    """``value`` as escaped text; None as a dash."""
    return "-" if value is None else html.escape(str(value))


def _time(value: Any) -> str:
    return e(value.strftime("%Y-%m-%d %H:%M:%S UTC") if isinstance(value, datetime) else value)


def duration(ms: float | None) -> str:
    """Milliseconds as people read them, as charts.js shows them: ``0.25 ms``, ``8.5 ms``,
    ``850 ms``, ``12.3 s``, ``2.05 min``, ``1.5 h``; None as a dash."""
    if ms is None:
        return "-"
    size = abs(ms)
    if size == 0:
        return "0"
    if size < 1:
        return f"{ms:.2f} ms"
    if size < 1000:
        return f"{ms:.1f} ms" if size < 10 else f"{round(ms)} ms"
    for unit, scale in (("s", 1000), ("min", 60_000), ("h", 3_600_000)):
        if size < scale * (60 if unit != "h" else float("inf")):
            return f"{_trim(ms / scale)} {unit}"
    raise AssertionError("unreachable: hours take any size")


def _trim(value: float) -> str:
    """Three significant figures at most, no trailing zeros: 12.3, 120, 1.5."""
    size = abs(value)
    text = f"{value:.0f}" if size >= 100 else f"{value:.1f}" if size >= 10 else f"{value:.2f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _num(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}"


def table(
    rows: Iterable[Row], columns: Sequence[tuple[str, str]], *, css_id: str, empty: str
) -> str:
    """An HTML table of ``rows``; ``columns`` are (key, heading); numbers right-aligned."""
    head = "".join(f"<th>{e(title)}</th>" for _, title in columns)
    body = []
    for row in rows:
        cells = []
        for key, _ in columns:
            value = row.get(key)
            if key in DURATIONS and (value is None or isinstance(value, (int, float))):
                cells.append(f'<td class="n">{e(duration(value))}</td>')
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                cells.append(f'<td class="n">{_num(value)}</td>')
            elif isinstance(value, datetime):
                cells.append(f"<td>{_time(value)}</td>")
            else:
                cells.append(f"<td>{e(value)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    if not body:
        body.append(f'<tr class="empty"><td colspan="{len(columns)}">{e(empty)}</td></tr>')
    return (
        f'<table id="{css_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )


_TOTALS = [
    ("queue", "queue"),
    ("consumer", "consumer"),
    ("published", "published"),
    ("handled", "handled"),
    ("failed", "failed"),
    ("retried", "retried"),
    ("dead", "dead"),
    ("redriven", "redriven"),
    ("latency_p50", "latency p50"),
    ("latency_p95", "p95"),
    ("latency_p99", "p99"),
    ("duration_p50", "duration p50"),
    ("duration_p95", "p95"),
    ("duration_p99", "p99"),
]
_ERRORS = [
    ("queue", "queue"),
    ("consumer", "consumer"),
    ("error_class", "error class"),
    ("count", "count"),
    ("first_seen", "first seen"),
    ("last_seen", "last seen"),
    ("sample_message_id", "sample message id"),
    ("last_message", "last message"),
]
_ATTEMPTS = [
    ("queue", "queue"),
    ("consumer", "consumer"),
    ("event", "event"),
    ("attempt", "attempt"),
    ("count", "count"),
]


def render(data: ReportData) -> str:
    """The whole page as a string."""
    queues = ", ".join(data.queue_names()) or "none found"
    figures = "".join(
        _figure(name, chart) for name, chart in zip(_CHARTS, _charts(data), strict=True)
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>redisq report {_time(data.since)} to {_time(data.until)}</title>
<style>{_CSS}</style>
{report_assets.inline_head()}</head><body>
<h1>redisq history report</h1>
<p class="meta" id="report-meta">Range <b>{_time(data.since)}</b> to <b>{_time(data.until)}</b>
(per {e(data.bucket)}); queues: <b id="report-queues">{e(queues)}</b>;
made {_time(data.made_at)}.</p>
<p class="meta">Percentiles are Spark's <code>percentile_approx</code> with accuracy
{data.accuracy}: each is a value whose rank is within n/{data.accuracy} of the exact rank.
The backlog is what waits for each consumer: published + re-driven &minus; handled
&minus; dead, from the least start the range's events allow (never negative; exact once
the consumer was drained in the range, else a lower bound).</p>
{_gaps(data.gaps)}<h2>Totals</h2>
{table(data.totals, _TOTALS, css_id="report-totals", empty="No messages or events in the range.")}
<h2>Charts</h2>
<p class="meta charts-off">The charts are drawn by this page's own scripts, which did not
run here (JavaScript is off, or a Content-Security-Policy blocks them): the tables hold
the figures.</p>
<p class="meta">Times in UTC. Drag across a chart to zoom in, double-click to zoom out;
the legend shows the values under the pointer.</p>
{figures}
<h2>Top error classes</h2>
{table(data.errors, _ERRORS, css_id="report-errors", empty="No retried or dead events.")}
<h2>Attempts of handled and dead messages</h2>
{table(data.attempts, _ATTEMPTS, css_id="report-attempts", empty="No handled or dead events.")}
</body></html>
"""


def _charts(data: ReportData) -> list[report_charts.Chart]:
    """The four charts, on the time axis of the range's data."""
    step = timedelta(minutes=1) if data.bucket == "minute" else timedelta(hours=1)
    times = report_charts.axis(data.counts, step)
    return [
        report_charts.throughput_chart(data.counts, data.bucket, times),
        report_charts.failures_chart(data.counts, data.bucket, times),
        report_charts.latency_chart(data.latency, times),
        report_charts.backlog_chart(data.backlog, times),
    ]


def _figure(name: str, chart: report_charts.Chart) -> str:
    """A chart's element: charts.js draws the spec into the div."""
    spec = report_charts.spec_json(chart.spec)
    return (
        f'<figure class="chart" id="chart-{name}"><div class="redisq-uplot" role="img" '
        f'aria-label="{e(chart.summary)}"><script type="application/json">{spec}</script>'
        "</div></figure>\n"
    )


def _gaps(lines: Sequence[str]) -> str:
    """The entries the archive never stored, when there are any (``ROOT/_gaps``)."""
    if not lines:
        return ""
    items = "".join(f"<li>{e(line)}</li>" for line in lines)
    return (
        '<h2>Never archived</h2><p class="meta">Removed from Redis before the archive '
        'stored them (failOnDataLoss off):</p><ul id="report-gaps">' + items + "</ul>\n"
    )


def out_dir_for(out: str | None, root: str, made_at: datetime) -> tuple[Path, bool]:
    """The local directory a report goes to, created, and whether it is the default
    (``ROOT/reports/<UTC time>``, which ``latest`` then points at)."""
    if out:
        return _local_dir(out, "--out"), False
    reports = _local_dir(join_path(normalize_root(root), REPORTS_DIR), "--root")
    name = made_at.strftime("%Y-%m-%dT%H-%M-%SZ")
    target, n = reports / name, 1
    while target.exists():  # two reports in one second: keep both
        n += 1
        target = reports / f"{name}-{n}"
    target.mkdir(parents=True)
    return target, True


def _local_dir(location: str, option: str) -> Path:
    parts = urlsplit(location)
    if len(parts.scheme) > 1 and parts.scheme != "file":
        raise JobError(
            f"the report's HTML page is written with local file I/O, but {location!r} is "
            f"not local; pass --out with a local directory ({option})"
        )
    path = Path(parts.path if parts.scheme == "file" else location).expanduser().resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def point_latest(out_dir: Path) -> None:
    """Point ``<reports>/latest`` at ``out_dir`` (a relative symlink, replaced
    atomically; a text file with the directory's name where symlinks are not possible)."""
    link = out_dir.parent / LATEST
    tmp = out_dir.parent / f".{LATEST}.{os.getpid()}"
    try:
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(out_dir.name, target_is_directory=True)
        os.replace(tmp, link)
    except (OSError, NotImplementedError):
        tmp.unlink(missing_ok=True)
        if link.is_symlink() or link.is_file():
            link.unlink()
        link.write_text(out_dir.name + "\n")


def write_html(data: ReportData, path: Path) -> Path:
    """Write the page to ``path`` (through a temporary file, so a reader never sees half
    a page); returns ``path``."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(render(data), encoding="utf-8")
    tmp.replace(path)
    return path
