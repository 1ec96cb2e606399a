"""The live pages of a logical consumer and of a queue: figures, charts, every list and
an ordered consumer's held-back keys, refreshed in place from a small JSON endpoint; a
message's own page.

:class:`LivePages` adds them to the consumer and queue admins (``get_urls``):

- ``consumer/live/<queue>/<name>/`` (``admin:redisq_django_consumer_live``) and
  ``queue/live/<queue>/`` (``admin:redisq_django_queue_live``): the page;
- ``…/data/``: the same regions as JSON (``{"updated", "error", "figures", "html"}``),
  which the page polls every ``refresh_seconds`` of its admin instead of reloading;
- ``…/message/?ref=…``: one message (payload, headers, every field);
- ``…/do/<action>/``: the actions (:mod:`~redisq_django.admin.live.page_actions`).

Viewing needs the model's view permission, acting its change permission. Everything
read from Redis goes through :mod:`~redisq_django.admin.live.snapshots` (short timeouts, no
retries): a sick Redis gives a banner and unknown figures within a second.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import get_token
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.translation import gettext as _

from redisq_django import figures
from redisq_django.admin.detail import pretty_json
from redisq_django.admin.live import snapshots
from redisq_django.admin.live.access import answered_ago_ms, guarded
from redisq_django.admin.live.charts import (
    partition_charts,
    range_links,
    range_of,
    trend_charts,
    unknown_charts,
)
from redisq_django.admin.live.held_keys import EndForm, declared_ordered, held_context
from redisq_django.admin.live.lists import (
    BULK_FORM,
    UNDELIVERABLE,
    Links,
    consumer_rows,
    endable,
    entry_rows,
    heads,
    instance_rows,
)
from redisq_django.admin.live.page_actions import LiveActions
from redisq_django.admin.live.partition_rows import table_context
from redisq_django.admin.live.scope import CONSUMER, LiveOwner, LiveScope
from redisq_django.conf import get_core_config
from redisq_django.core.operator import (
    DELAYED,
    IN_FLIGHT,
    LOG,
    PAGE_SIZE,
    RETRYING,
    S_DELAYED,
    S_RETRY,
    WAITING,
)
from redisq_django.models import Consumer, DeadLetter, Queue

#: The regions of a live page that its JSON endpoint renders again (a consumer's page
#: also its held-back keys, ``held``; a partitioned queue's its ``partitions``).
REGIONS = ("banner", "figures", "list")
#: Query parameters of a page that its regions and links keep.
KEPT = ("list", "after", "n", "range")


class LivePages:
    """The live pages of the consumer or the queue admin (``owner``), which holds one
    and adds its :meth:`urls` to its own (``get_urls``)."""

    def __init__(self, owner: LiveOwner, kind: str) -> None:
        self.scope = LiveScope(owner, kind)
        self.owner = owner
        self.actions = LiveActions(self.scope)

    def urls(self) -> list[URLPattern]:
        """The page, its JSON, a message's page and the actions, each behind the admin
        site's login and CSRF protection (``admin_view``)."""
        view = self.owner.admin_site.admin_view
        name = self.scope.url_name
        base = (
            "live/<str:queue>/<str:name>/" if self.scope.kind == CONSUMER else "live/<str:queue>/"
        )
        return [
            path(base, view(self.page_view), name=name),
            path(base + "data/", view(self.data_view), name=f"{name}_data"),
            path(base + "message/", view(self.message_view), name=f"{name}_message"),
            path(base + "do/<str:action>/", view(self.actions.view), name=f"{name}_action"),
        ]

    # -- views --------------------------------------------------------------------------

    def page_view(self, request: HttpRequest, queue: str, name: str | None = None) -> HttpResponse:
        context = self.page_context(request, queue, name, charts=True)
        context.update(self.owner.admin_site.each_context(request))
        return TemplateResponse(request, "admin/redisq_django/live/page.html", context)

    def data_view(self, request: HttpRequest, queue: str, name: str | None = None) -> JsonResponse:
        charts = request.GET.get("charts") == "1"
        context = self.page_context(request, queue, name, charts=charts)
        regions = [
            *REGIONS,
            *(["held"] if name is not None else []),
            *(["partitions"] if context.get("partitions") else []),
            *(["charts"] if charts else []),
        ]
        html = {
            region: render_to_string(f"admin/redisq_django/live/{region}.html", context, request)
            for region in regions
        }
        snapshot = context["snapshot"]
        return JsonResponse(
            {
                "updated": snapshot.read_at_ms,
                "error": snapshot.error,
                "answered_ago_ms": context["answered_ago_ms"],
                "figures": context["numbers"],
                "html": html,
            }
        )

    def message_view(
        self, request: HttpRequest, queue: str, name: str | None = None
    ) -> HttpResponse:
        self.scope.check(request, queue, name)
        ref = request.GET.get("ref", "")
        try:
            reading = guarded(lambda b: b.operator.find(queue, name, ref))
        except ValueError as exc:
            raise Http404(str(exc)) from None
        context = {
            **self.owner.admin_site.each_context(request),
            **self.scope.base_context(request, queue, name),
            "title": _("Message %(id)s")
            % {"id": reading.value.message_id if reading.value else ref.split(":")[-1]},
            "ref": ref,
            "entry": reading.value,
            "redisq_error": reading.error,
            "payload": pretty_json(reading.value.payload_text) if reading.value else "",
            "headers": pretty_json(reading.value.headers_text) if reading.value else "",
            "fields": sorted(
                (k.decode("utf-8", "replace"), v.decode("utf-8", "replace"))
                for k, v in (reading.value.fields.items() if reading.value else ())
            ),
            "deliverable": ref.partition(":")[0] in (S_DELAYED, S_RETRY),
            "unreadable": bool(reading.value and reading.value.unreadable),
            "undeliverable": UNDELIVERABLE,
            "endable": endable(ref, name),
        }
        return TemplateResponse(request, "admin/redisq_django/live/message.html", context)

    # -- context ------------------------------------------------------------------------

    def page_context(
        self, request: HttpRequest, queue: str, name: str | None, *, charts: bool
    ) -> dict[str, Any]:
        """Everything a live page and its JSON show (read once)."""
        self.scope.check(request, queue, name)
        lists = snapshots.CONSUMER_LISTS if name is not None else snapshots.QUEUE_LISTS
        list_name = snapshots.chosen(request.GET.get("list"), lists)
        cursor = request.GET.get("after") or None
        try:
            n = int(request.GET.get("n", PAGE_SIZE))
        except ValueError:
            n = PAGE_SIZE
        range_name = range_of(request.GET.get("range"))[0]
        wanted = range_name if charts else None
        row: Consumer | Queue | None
        if name is not None:
            snapshot = snapshots.consumer_snapshot(queue, name, list_name, cursor, n, wanted)
            row = (
                Consumer.objects.select_related("queue")
                .filter(queue__name=queue, name=name)
                .first()
            )
        else:
            snapshot = snapshots.queue_snapshot(queue, list_name, cursor, n, wanted)
            row = Queue.objects.filter(name=queue).first()
        if row is None and snapshot.error == "" and not self._in_redis(snapshot, name):
            raise Http404(_("Redis and the database know no such queue or consumer."))
        context = self.scope.base_context(request, queue, name)
        dead = DeadLetter.objects.filter(queue=queue, status=DeadLetter.Status.DEAD)
        dead_rows = (dead.filter(consumer=name) if name else dead).count()
        params = {k: request.GET[k] for k in KEPT if request.GET.get(k)}
        links = Links(
            context["message_url"],
            self.scope.action_url(queue, name, "deliver"),
            get_token(request),
            f"{context['page_url']}?{urlencode(params)}",
            context["can_change"],
            name,
        )
        context.update(
            end_url=self.scope.action_url(queue, name, "end"),
            delete_url=self.scope.action_url(queue, name, "delete"),
            bulk_form=BULK_FORM,
        )
        context.update(
            snapshot=snapshot,
            row=row,
            title=f"{queue}/{name}" if name else queue,
            redisq_error=snapshot.error,
            answered_ago_ms=answered_ago_ms(),
            list_name=list_name,
            lists=self._tabs(lists, snapshot, dead_rows, context["page_url"], params),
            refresh_seconds=self.owner.refresh_seconds,
            chart_refresh_seconds=self.owner.chart_refresh_seconds,
            range_name=range_name,
            ranges=range_links(
                lambda r: f"{context['page_url']}?{urlencode({**params, 'range': r})}"
            ),
            next_url=links.next_url,
            dead_rows=dead_rows,
            redisq_glossary=[(k, figures.HELP[k]) for k in self.owner.glossary],
            **self._figures(snapshot, row, dead_rows, name, context["dead_url"]),
            **self._list(list_name, snapshot, links, params, context["page_url"], queue),
        )
        if name is not None:
            context.update(
                held_context(
                    snapshot.held,
                    declared_ordered(queue, name),
                    message_url=context["message_url"],
                    release_url=self.scope.action_url(queue, name, "release"),
                    next_url=links.next_url,
                    can_change=context["can_change"],
                    end=EndForm(context["end_url"], links.csrf_token, links.next_url),
                )
            )
        config = get_core_config()
        count = config.partitions.get(queue, 1)
        if name is None and count > 1:  # known from the settings, whether Redis answers
            context["partitions"] = table_context(
                snapshot.stats,
                snapshot.recent,
                count,
                error=snapshot.error,
                trends_on=config.trends,
            )
        if charts:
            context["charts"] = self._charts(snapshot, name, range_name)
        return context

    def _in_redis(self, snapshot: snapshots.Snapshot, name: str | None) -> bool:
        if snapshot.stats is None:
            return False
        return name is None or snapshot.consumer is not None

    def _tabs(
        self,
        lists: tuple[str, ...],
        snapshot: snapshots.Snapshot,
        dead_rows: int,
        page_url: str,
        params: dict[str, str],
    ) -> list[dict[str, Any]]:
        c, s = snapshot.consumer, snapshot.stats
        counts: dict[str, Any] = {
            WAITING: c.backlog if c else None,
            DELAYED: s.delayed if s else None,
            RETRYING: c.waiting_retry if c else None,
            IN_FLIGHT: c.in_flight if c else None,
            "instances": c.instances_alive if c else None,
            "dead": dead_rows + (c.dead if c else 0) if c or not snapshot.error else None,
            "consumers": len(s.consumers) if s else None,
            LOG: s.length if s else None,
        }
        labels = {
            WAITING: _("Waiting"),
            DELAYED: _("Delayed"),
            RETRYING: _("Retrying"),
            IN_FLIGHT: _("In flight"),
            "instances": _("Instances"),
            "dead": _("Dead"),
            "consumers": _("Consumers"),
            LOG: _("Log (newest first)"),
        }
        keep = {k: v for k, v in params.items() if k in ("n", "range")}
        return [
            {
                "key": key,
                "label": labels[key],
                "count": "?" if counts[key] is None else counts[key],
                "url": f"{page_url}?{urlencode({**keep, 'list': key})}",
            }
            for key in lists
        ]

    def _figures(
        self,
        snapshot: snapshots.Snapshot,
        row: Any,
        dead_rows: int,
        name: str | None,
        dead_url: str,
    ) -> dict[str, Any]:
        """The figures at the top, and the same as numbers for the JSON."""
        s, c = snapshot.stats, snapshot.consumer
        state: Any
        if name is not None:
            state = figures.badge(figures.consumer_state(row) if row else "undeclared")
            paused = bool(row and (row.paused or row.queue.paused))
            known = c is not None
            numbers: dict[str, Any] = {
                "backlog": c.backlog if c else None,
                "held_back": c.held_back if c else None,
                "in_flight": c.in_flight if c else None,
                "delayed": s.delayed if s else None,
                "retrying": c.waiting_retry if c else None,
                "dead": dead_rows + c.dead if c else None,
                "oldest_unacked": c.oldest_unacked_age_s if c else None,
                "instances": len(c.workers) if c else None,
                "threads": c.instances_alive if c else None,
                "paused": paused,
                "stalled": bool(c and c.stalled),
            }
        else:
            consumer_rows = list(Consumer.objects.filter(queue__name=row.name)) if row else []
            state = figures.queue_badge(
                bool(row and row.paused),
                sum(c.paused for c in consumer_rows),
                len(consumer_rows),
            )
            stalled = [x.name for x in s.consumers if x.stalled] if s else []
            known = s is not None
            numbers = {
                "backlog": s.total("backlog") if s else None,
                "held_back": s.total("held_back") if s else None,
                "in_flight": s.total("in_flight") if s else None,
                "delayed": s.delayed if s else None,
                "retrying": s.total("waiting_retry") if s else None,
                "dead": dead_rows + s.total("dead") if s else None,
                "oldest_unacked": s.oldest_unacked_age_s if s else None,
                "instances": len(s.workers) if s else None,
                "threads": s.total("instances_alive") if s else None,
                "paused": bool(row and row.paused),
                "stalled": bool(stalled),
                "stalled_consumers": stalled,
                "length": s.length if s else None,
            }
            if s is not None and len(s.partitions) > 1:  # K, shown for partitioned queues
                numbers["partitions"] = len(s.partitions)
        missing = figures.unknown() if snapshot.error else figures.absent()
        shown = []
        for key, value in numbers.items():
            if key in ("stalled", "stalled_consumers", "threads", "held_back"):  # with another
                continue
            if key == "paused":
                html = figures.badge("paused") if value else format_html("{}", _("no"))
            elif key == "oldest_unacked":
                html = figures.figure(figures.age(value), key) if known else missing
            elif key == "instances":
                threads = numbers["threads"]
                html = (
                    figures.queue_instances(value, numbers["stalled_consumers"], threads)
                    if known and name is None
                    else figures.instances(value, numbers["stalled"], threads)
                    if known
                    else missing
                )
            elif key == "backlog":
                held = numbers["held_back"] or 0
                html = figures.backlog(value, held) if value is not None else missing
            elif key == "dead":
                html = (
                    figures.figure(value if known else dead_rows, key)
                    if known or not snapshot.error
                    else figures.dead_rows_only(dead_rows)
                )
                html = format_html('<a href="{}">{}</a>', dead_url, html)
            else:
                html = figures.figure(value, key) if value is not None else missing
            shown.append({"key": key, "label": figures.LABELS.get(key, key), "html": html,
                          "help": figures.HELP[key]})  # fmt: skip
        return {"figures_shown": shown, "numbers": numbers, "state": state}

    def _list(
        self,
        list_name: str,
        snapshot: snapshots.Snapshot,
        links: Links,
        params: dict[str, str],
        page_url: str,
        queue: str,
    ) -> dict[str, Any]:
        rows = []
        known = snapshot.page is not None or snapshot.instances is not None
        if snapshot.page is not None:
            rows = entry_rows(list_name, snapshot.page.entries, links)
        elif snapshot.instances is not None:
            rows = instance_rows(snapshot.instances, links.message_url)
        elif list_name == "consumers":
            rows = self._consumer_rows(queue, snapshot)
            known = bool(rows) or snapshot.stats is not None
        next_page = None
        if snapshot.page is not None and snapshot.page.next:
            after = {**params, "list": list_name, "after": snapshot.page.next}
            next_page = f"{page_url}?{urlencode(after)}"
        first_page = None
        if params.get("after"):
            rest = {k: v for k, v in params.items() if k != "after"}
            first_page = f"{page_url}?{urlencode({**rest, 'list': list_name})}"
        entries = snapshot.page.entries if snapshot.page is not None else []
        return {
            "rows": rows,
            "bulk": links.can_change
            and any(endable(e.ref, links.consumer, in_flight=bool(e.owner)) for e in entries),
            "heads": heads(rows),
            "next_page": next_page,
            "first_page": first_page,
            "list_known": known,
        }

    def _consumer_rows(self, queue: str, snapshot: snapshots.Snapshot) -> list[Any]:
        """The queue's consumers: two queries (rows, dead counts) whatever their number."""
        rows = {
            c.name: c for c in Consumer.objects.select_related("queue").filter(queue__name=queue)
        }
        dead = dict(
            DeadLetter.objects.filter(queue=queue, status=DeadLetter.Status.DEAD)
            .order_by()
            .values_list("consumer")
            .annotate(n=Count("pk"))
            .values_list("consumer", "n")
        )
        return consumer_rows(queue, snapshot.stats, rows, dead, snapshot.error)

    def _charts(self, snapshot: snapshots.Snapshot, name: str | None, range_name: str) -> Any:
        if snapshot.trends is None:
            return unknown_charts(snapshot.error) if snapshot.error else ""
        charts = trend_charts(
            snapshot.trends, [name] if name else None, range_name, handled_by_consumer=not name
        )
        if name is not None:
            return charts
        # First, right under the partitions' table (nothing for a queue of one partition)
        return format_html("{}{}", partition_charts(snapshot.trends[0], range_name), charts)
