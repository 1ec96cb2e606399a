"""The report's one self-contained HTML page (inline CSS, inline SVG charts, no scripts),
and where it goes: ``ROOT/reports/<UTC time>/`` with ``ROOT/reports/latest`` pointing at
the newest, or a directory of the user's.

Every piece of text that comes from the data (queue and consumer names, error classes and
messages, message ids) goes through :func:`html.escape`; the charts are matplotlib's SVG,
whose text the SVG writer escapes itself.
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from redisq_django.pipeline import report_charts
from redisq_django.pipeline.options import JobError, join_path, normalize_root

Row = dict[str, Any]
REPORTS_DIR = "reports"
#: ``ROOT/reports/latest``: a symlink to the newest default report (or a text file with
#: its directory's name); the admin's report view reads it.
LATEST = "latest"

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem 2rem;color:#222}
h1{font-size:1.4rem;margin:0 0 .3rem}h2{font-size:1.1rem;margin:1.6rem 0 .4rem}
.meta{color:#555}.chart svg{max-width:100%;height:auto}
table{border-collapse:collapse;font-size:13px}th,td{border:1px solid #ccc;padding:.2rem .5rem}
th{background:#f3f3f3;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
"""


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
            if isinstance(value, (int, float)) and not isinstance(value, bool):
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
    ("latency_p50", "latency p50 (ms)"),
    ("latency_p95", "p95"),
    ("latency_p99", "p99"),
    ("duration_p50", "duration p50 (ms)"),
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
    span = (data.since, data.until)
    charts = [
        report_charts.throughput_chart(data.counts, data.bucket, span),
        report_charts.failures_chart(data.counts, data.bucket, span),
        report_charts.latency_chart(data.latency, span),
        report_charts.backlog_chart(data.backlog, span),
    ]
    names = ["throughput", "failures", "latency", "backlog"]
    figures = "".join(
        f'<figure class="chart" id="chart-{name}">{chart}</figure>'
        for name, chart in zip(names, charts, strict=True)
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>redisq report {_time(data.since)} to {_time(data.until)}</title>
<style>{_CSS}</style></head><body>
<h1>redisq history report</h1>
<p class="meta" id="report-meta">Range <b>{_time(data.since)}</b> to <b>{_time(data.until)}</b>
(per {e(data.bucket)}); queues: <b id="report-queues">{e(queues)}</b>;
made {_time(data.made_at)}.</p>
<p class="meta">Percentiles are Spark's <code>percentile_approx</code> with accuracy
{data.accuracy}: each is a value whose rank is within n/{data.accuracy} of the exact rank.
Backlog counts only messages published since the range began.</p>
{_gaps(data.gaps)}<h2>Totals</h2>
{table(data.totals, _TOTALS, css_id="report-totals", empty="No messages or events in the range.")}
<h2>Charts</h2>
{figures}
<h2>Top error classes</h2>
{table(data.errors, _ERRORS, css_id="report-errors", empty="No retried or dead events.")}
<h2>Attempts of handled and dead messages</h2>
{table(data.attempts, _ATTEMPTS, css_id="report-attempts", empty="No handled or dead events.")}
</body></html>
"""


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
