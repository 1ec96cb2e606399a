"""The report's charts: matplotlib figures rendered to inline SVG strings.

The page must stand alone (no CDN, no file next to it), so each figure is saved with the
SVG backend into memory and its ``<svg>`` element embedded in the HTML. Text stays text
(``svg.fonttype: none``: smaller, searchable, drawn in the page's font) and is never
parsed as mathtext (a ``$`` in a queue name is just a character).
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import matplotlib
import numpy as np

matplotlib.use("Agg")  # no display here; set before pyplot is imported

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.dates import AutoDateLocator, ConciseDateFormatter
from matplotlib.ticker import FuncFormatter

Row = dict[str, Any]

#: Typed loosely: matplotlib types rcParams keys as one long Literal.
_RC: dict[Any, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "redisq-report",  # stable element ids: same data, same page
    "text.parse_math": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "font.size": 9,
}
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)
_STYLES = {"p50": ":", "p95": "--", "p99": "-"}


Span = tuple[datetime, datetime]

#: Legend entries in one column before the legend gets a second one.
LEGEND_ROWS = 12


def _naive_utc(when: datetime) -> np.datetime64:
    # numpy datetime64 (naive UTC): matplotlib's own date axis, no time zone guessing.
    return np.datetime64(when.astimezone(UTC).replace(tzinfo=None), "ms")


def svg(draw: Callable[[Axes], None], *, title: str, ylabel: str, span: Span) -> str:
    """A figure drawn by ``draw`` on one Axes, as an ``<svg>`` element (no XML prolog).

    The time axis always shows the report's range (``span``): left to itself matplotlib
    widens a single bucket to years around it.
    """
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(9, 3.2), layout="constrained")
        try:
            draw(ax)
            ax.set_xlim(_naive_utc(span[0]), _naive_utc(span[1]))  # type: ignore[arg-type]
            ax.set_title(title, loc="left")
            ax.set_ylabel(ylabel)
            locator = AutoDateLocator()  # type: ignore[no-untyped-call]
            ax.xaxis.set_major_locator(locator)
            ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]
            entries = len(ax.get_legend_handles_labels()[0])
            if entries:
                # Many series (a line per consumer and percentile): the legend gets columns
                # and the figure the height it needs, or the plot would be squeezed to nothing.
                columns = 1 if entries <= LEGEND_ROWS else 2
                rows = math.ceil(entries / columns)
                fig.set_size_inches(9 + 2 * (columns - 1), max(3.2, 0.9 + 0.19 * rows))
                ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), ncols=columns)
            else:
                ax.text(0.5, 0.5, "no data in the range", transform=ax.transAxes, ha="center")
            buffer = io.StringIO()
            fig.savefig(buffer, format="svg")
        finally:
            plt.close(fig)
    text = buffer.getvalue()
    # The prolog cannot stand inside HTML; the RDF metadata only names namespaces.
    return _METADATA.sub("", text[text.index("<svg") :], count=1)


def _series(
    rows: Iterable[Row], key: Callable[[Row], str], value: str
) -> dict[str, tuple[list[datetime], list[float]]]:
    """label -> (bucket times, values), rows with a null value left out."""
    out: dict[str, tuple[list[datetime], list[float]]] = {}
    for row in rows:
        if row.get(value) is None or row.get("bucket") is None:
            continue
        xs, ys = out.setdefault(key(row), ([], []))
        xs.append(row["bucket"])
        ys.append(float(row[value]))
    return out


def _consumer(row: Row) -> str:
    return f"{row['queue']} / {row['consumer']}"


def _lines(ax: Axes, series: dict[str, tuple[list[datetime], list[float]]], **kw: Any) -> None:
    for label, (xs, ys) in sorted(series.items()):
        times = np.array([_naive_utc(x) for x in xs], "datetime64[ms]")
        # Bigger markers when a series has few points: a single bucket is a dot, not a line.
        size = 6 if len(xs) < 3 else 3
        ax.plot(times, np.array(ys), marker="o", markersize=size, label=label, **kw)


def throughput_chart(counts: Sequence[Row], unit: str, span: Span) -> str:
    """Published per queue (dashed) and handled per consumer, per bucket."""
    per_queue = list({(r["queue"], r["bucket"]): r for r in counts}.values())

    def draw(ax: Axes) -> None:
        _lines(ax, _series(per_queue, lambda r: f"{r['queue']} published", "published"), ls="--")
        consumers = [r for r in counts if r.get("consumer")]
        _lines(ax, _series(consumers, lambda r: f"{_consumer(r)} handled", "handled"))

    return svg(draw, title="Throughput", ylabel=f"messages per {unit}", span=span)


def failures_chart(counts: Sequence[Row], unit: str, span: Span) -> str:
    """Retried and dead per consumer, per bucket."""
    consumers = [r for r in counts if r.get("consumer")]

    def draw(ax: Axes) -> None:
        _lines(ax, _series(consumers, lambda r: f"{_consumer(r)} retried", "retried"), ls="--")
        _lines(ax, _series(consumers, lambda r: f"{_consumer(r)} dead", "dead"))

    return svg(draw, title="Failures (retried, dead)", ylabel=f"events per {unit}", span=span)


def _labelled(suffix: str) -> Callable[[Row], str]:
    return lambda row: f"{_consumer(row)} {suffix}"


def latency_chart(latency: Sequence[Row], span: Span) -> str:
    """Publish → handled latency p50 (dotted), p95 (dashed), p99 per consumer."""

    def draw(ax: Axes) -> None:
        values = []
        for p, style in _STYLES.items():
            series = _series(latency, _labelled(p), f"latency_{p}")
            _lines(ax, series, ls=style)
            values += [v for _, ys in series.values() for v in ys]
        # A log scale only when latencies span decades; within one decade it would show no
        # tick at all.
        if values and max(values) > 50 * max(min(values), 1.0):
            ax.set_yscale("symlog", linthresh=1.0)
            # The log scale's own labels are mathtext ("10^3"), which parse_math=False
            # would print raw: plain numbers instead.
            ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value:g}"))

    return svg(draw, title="Latency, publish to handled", ylabel="ms", span=span)


def backlog_chart(backlog: Sequence[Row], span: Span) -> str:
    """Published minus handled + dead, cumulated from the range's start, per consumer."""

    def draw(ax: Axes) -> None:
        _lines(ax, _series(backlog, _consumer, "backlog"), drawstyle="steps-post")

    return svg(draw, title="Backlog since the range began", ylabel="messages", span=span)
