"""The live overview: one table of every queue and consumer, with their states, figures
and warnings, and the trends of all queues; refreshed in place from a small JSON
endpoint, it answers within a second when Redis is down or hung."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseNotFound, JsonResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.translation import gettext_lazy as _

from redisq_django import figures
from redisq_django.admin.common import BREADCRUMBS_OL, ReadOnlyPages
from redisq_django.admin.live import (
    answered_ago_ms,
    live_stats,
    overview_trends,
    queue_names,
    range_links,
    range_of,
    trend_charts,
    unknown_charts,
)
from redisq_django.admin.problems import new_dead_letters, problems
from redisq_django.conf import get_settings
from redisq_django.core.clock import now_ms
from redisq_django.core.keys import readable_names
from redisq_django.core.stats import ConsumerStats, QueueStats
from redisq_django.figures import HELP, consumer_state
from redisq_django.models import Consumer, DeadLetter, Overview, Queue
from redisq_django.pipeline import report_assets
from redisq_django.publishing.outbox import pending_count


def dead_rows_by_consumer() -> dict[str, dict[str, int]]:
    """queue -> consumer -> dead letters in status *dead*, in one query."""
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    rows = (
        DeadLetter.objects.filter(status=DeadLetter.Status.DEAD)
        .order_by()
        .values_list("queue", "consumer")
        .annotate(n=Count("pk"))
    )
    for queue, consumer, n in rows:
        counts[queue][consumer] = n
    return dict(counts)  # plain: a template lookup must not add keys


#: The report page loads nothing and runs only the chart scripts this version of the
#: package inlines into it (allowed by their hashes): anything else in a report file, which
#: holds archived payloads and error texts, stays inert on the admin's origin.
REPORT_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    f"script-src {report_assets.script_sources()}"
)


def latest_report() -> tuple[Path | None, str]:
    """The newest default report of ``manage.py redisq_pipeline report``
    (``ARCHIVE_ROOT/reports/latest/report.html``), or None and why there is none.

    Only reads files: the admin never imports PySpark.
    """
    root = get_settings().get("ARCHIVE_ROOT")
    if not root:
        return None, "REDISQ['ARCHIVE_ROOT'] is not set, so there is no archive to report on."
    parts = urlsplit(str(root))
    if len(parts.scheme) > 1 and parts.scheme != "file":
        return None, f"The archive root {root} is not a local directory; open its report there."
    reports = Path(unquote(parts.path) if parts.scheme == "file" else str(root)) / "reports"
    latest = reports / "latest"
    if latest.is_file() and not latest.is_dir():  # where symlinks fail: the name, as text
        name = latest.read_text().strip()
        latest = reports / name if name and "/" not in name and name != ".." else latest
    page = latest / "report.html"
    if not page.is_file():
        return None, (
            f"No report yet in {reports}: run `manage.py redisq_pipeline report` "
            "(it writes reports/<time>/report.html and points reports/latest at it)."
        )
    return page, ""


@admin.register(Overview)
class OverviewAdmin(ReadOnlyPages):
    """One live table of every queue and consumer (linked from the index)."""

    #: Seconds between refreshes of the overview page.
    refresh_seconds = 5
    #: Seconds between refreshes of its charts.
    chart_refresh_seconds = 30

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("redisq_django.view_queue")

    def get_urls(self) -> list[URLPattern]:
        info = (self.model._meta.app_label, self.model._meta.model_name)
        report = path(
            "report/",
            self.admin_site.admin_view(self.report_view),
            name="{}_{}_report".format(*info),
        )
        data = path(
            "data/", self.admin_site.admin_view(self.data_view), name="{}_{}_data".format(*info)
        )
        return [report, data, *super().get_urls()]

    def data_view(self, request: HttpRequest) -> JsonResponse:
        """The overview's regions as JSON (the page polls it instead of reloading)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        charts = request.GET.get("charts") == "1"
        context = self.overview_page_context(request, charts=charts)
        regions = {"banner": "banner", "problems": "problems", "table": "overview_table"}
        if charts:
            regions["charts"] = "live/charts"
        html = {
            region: render_to_string(f"admin/redisq_django/{name}.html", context, request)
            for region, name in regions.items()
        }
        return JsonResponse(
            {
                "updated": context["read_at_ms"],
                "error": context["redisq_error"],
                "answered_ago_ms": context["answered_ago_ms"],
                "html": html,
            }
        )

    def overview_page_context(self, request: HttpRequest, *, charts: bool) -> dict[str, Any]:
        """The overview's table and (``charts``) the trends of every queue."""
        context = overview_context()
        range_name = range_of(request.GET.get("range"))[0]
        context.update(
            read_at_ms=now_ms(),
            answered_ago_ms=answered_ago_ms(),
            refresh_seconds=self.refresh_seconds,
            chart_refresh_seconds=self.chart_refresh_seconds,
            range_name=range_name,
            ranges=range_links(lambda r: "?" + urlencode({"range": r})),
        )
        if charts:
            found, error = overview_trends([q.name for q in context["queues"]], range_name)
            context["charts"] = (
                trend_charts(found, None, range_name)
                if found is not None
                else unknown_charts(error)
            )
        return context

    def report_view(self, request: HttpRequest) -> HttpResponse:
        """The latest history report, as the self-contained page the job wrote."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        page, why = latest_report()
        if page is None:
            return HttpResponseNotFound(why, content_type="text/plain; charset=utf-8")
        response = HttpResponse(page.read_bytes(), content_type="text/html; charset=utf-8")
        response["Content-Security-Policy"] = REPORT_CSP
        return response

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            **self.overview_page_context(request, charts=True),
            "title": _("Queues overview"),
            "outbox_waiting": pending_count(),
            "data_url": reverse("admin:redisq_django_overview_data"),
            "opts": self.model._meta,
            "breadcrumbs_ol": BREADCRUMBS_OL,
        }
        return TemplateResponse(request, "admin/redisq_django/overview.html", context)


@dataclass(frozen=True)
class ConsumerLine:
    """One consumer's line of the overview: its row (None: only in Redis) and figures."""

    name: str
    row: Consumer | None
    stats: ConsumerStats | None
    dead_rows: int

    @property
    def state(self) -> str:
        return consumer_state(self.row) if self.row else "undeclared"


@dataclass(frozen=True)
class QueueLine:
    """One queue's lines of the overview."""

    name: str
    paused: bool
    stats: QueueStats | None
    consumers: list[ConsumerLine]

    @property
    def dead_rows(self) -> int:
        return sum(c.dead_rows for c in self.consumers)

    @property
    def dead_in_redis(self) -> int | None:
        return self.stats.total("dead") if self.stats else None

    @property
    def stalled(self) -> list[str]:
        """The consumers with a backlog and no instance alive (the warning names them)."""
        return [c.name for c in self.consumers if c.stats and c.stats.stalled]

    @property
    def instances(self) -> SafeString:
        if self.stats is None:
            return figures.queue_instances(None, self.stalled)
        threads = self.stats.total("instances_alive")
        return figures.queue_instances(len(self.stats.workers), self.stalled, threads)

    @property
    def state(self) -> SafeString:
        """Paused, active, or active with some consumers paused."""
        rows = [c.row for c in self.consumers if c.row is not None]
        return figures.queue_badge(self.paused, sum(r.paused for r in rows), len(rows))


def overview_context() -> dict[str, Any]:
    """Every queue (in Redis or in the database) with its consumers' states and live
    figures: three queries and three Redis round trips, whatever their number."""
    names = queue_names()
    readable, unreadable = readable_names(names.value or [])
    rows = list(Consumer.objects.select_related("queue"))
    queues = {q.name: q for q in Queue.objects.all()}
    all_names = sorted(set(readable) | set(queues))
    live = live_stats(all_names)
    dead_rows = dead_rows_by_consumer()
    by_queue: dict[str, dict[str, Consumer]] = defaultdict(dict)
    for row in rows:
        by_queue[row.queue.name][row.name] = row
    lines = []
    for name in all_names:
        stats = live.queue(name)
        in_redis = {c.name for c in stats.consumers} if stats else set()
        consumer_names = sorted(set(by_queue[name]) | in_redis)
        lines.append(
            QueueLine(
                name=name,
                paused=bool(queues.get(name) and queues[name].paused),
                stats=stats,
                consumers=[
                    ConsumerLine(
                        name=c,
                        row=by_queue[name].get(c),
                        stats=live.consumer(name, c),
                        dead_rows=dead_rows.get(name, {}).get(c, 0),
                    )
                    for c in consumer_names
                ],
            )
        )
    error = names.error or live.error
    return {
        "queues": lines,
        "problems": problems(lines, error, new_dead_letters()),
        "unreadable_queues": unreadable,
        "redisq_error": error,
        "redisq_glossary": [(k, HELP[k]) for k in GLOSSARY],
    }


#: The figures the overview explains under its table.
GLOSSARY = (
    "state",
    "backlog",
    "in_flight",
    "retrying",
    "delayed",
    "dead",
    "oldest_unacked",
    "instances",
    "length",
    "dropped",
    "archive_lag",
)
