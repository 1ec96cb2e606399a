"""What staff do from a live page: pause and resume, deliver a delayed message or a retry
now, end poison messages (dead letters now, or deleted), replay a consumer from a point
(earliest, a time, an id), release an ordered consumer's held-back key, purge (typed
confirmation).

Every change is a POST with CSRF protection (the admin's views), needs the model's
change permission (a purge, which destroys messages, its delete permission too), is
reported through ``messages`` and written to the admin history (``LogEntry``) of the
consumer's or queue's row. Replay, release and purge first show a
confirmation page (a GET that changes nothing). Redis is reached through the admin's
broker (short timeouts, no retries): a sick Redis gives an error message, not a hang.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.utils.translation import gettext as _

from redisq_django import operations
from redisq_django.admin.common import PAUSED_LOG, RESUMED_LOG
from redisq_django.admin.live.access import admin_broker, forget_figures
from redisq_django.admin.live.held_keys import decode_key, encode_key
from redisq_django.admin.live.lists import UNDELIVERABLE
from redisq_django.admin.live.scope import LiveScope
from redisq_django.core import Broker
from redisq_django.core.errors import RedisqError
from redisq_django.core.operator import S_DELAYED, S_RETRY, Ended, Undeliverable, split_ref
from redisq_django.core.wire import visible
from redisq_django.models import Queue

CONSUMER_ACTIONS = ("pause", "resume", "deliver", "end", "delete", "replay", "release", "purge")
QUEUE_ACTIONS = ("pause", "resume", "deliver", "end", "delete", "purge")
#: Actions that show a confirmation page first.
CONFIRMED = ("replay", "release", "purge")
#: Actions that destroy messages: they need the delete permission too.
DESTRUCTIVE = ("purge", "delete")
#: Messages one End or Delete takes at most (a list's page shows up to 200).
MAX_ENDED = 200
#: Start points a replay offers.
STARTS = ("earliest", "time", "id")

_FAILED = object()


class LiveActions:
    """The actions of the live pages of one admin (its :class:`~.scope.LiveScope`)."""

    def __init__(self, scope: LiveScope) -> None:
        self.scope = scope
        self.owner = scope.owner

    def view(
        self, request: HttpRequest, queue: str, name: str | None = None, action: str = ""
    ) -> HttpResponse:
        """``…/do/<action>/``: a confirmation page (GET) or the action (POST)."""
        if not self.owner.has_change_permission(request):
            raise PermissionDenied
        self.scope.check(request, queue, name)
        if action not in (CONSUMER_ACTIONS if name is not None else QUEUE_ACTIONS):
            raise Http404(_("No such action: %(action)s") % {"action": action})
        if action in DESTRUCTIVE and not self.owner.has_delete_permission(request):
            raise PermissionDenied  # destroying messages is more than changing a row
        if request.method == "GET" and action in CONFIRMED:
            return self._confirm_page(request, queue, name, action)
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        row = self.scope.row(queue, name)
        if action in ("pause", "resume"):
            self._pause(request, row, action == "pause")
        elif action == "deliver":
            self._deliver(request, queue, name, row, request.POST.get("ref", ""))
        elif action == "replay":
            self._replay(request, queue, name or "", row)
        elif action == "release":
            self._release(request, queue, name or "", row)
        elif action in ("end", "delete"):
            refs = list(dict.fromkeys(request.POST.getlist("ref")))[:MAX_ENDED]
            if action == "delete" and refs and request.POST.get("confirmed") != "yes":
                return self._confirm_page(request, queue, name, action, refs)
            self._end(request, queue, name, row, refs, delete=action == "delete")
        elif action == "purge":
            if request.POST.get("confirm_name") != (name or queue):
                self.owner.message_user(
                    request,
                    _("Nothing was purged: type the name %(name)s exactly to confirm.")
                    % {"name": name or queue},
                    messages.ERROR,
                )
                return self._confirm_page(request, queue, name, action)
            if name is None and request.POST.get("lose_unarchived") != "yes":
                costs = self._purge_costs(request, queue)
                if costs is None or costs:
                    self.owner.message_user(
                        request,
                        _(
                            "Nothing was purged: messages not yet archived would be lost. Tick "
                            "the box that says so to purge anyway."
                        ),
                        messages.ERROR,
                    )
                    return self._confirm_page(request, queue, name, action)
            self._purge(request, queue, name, row)
        return HttpResponseRedirect(self.scope.back(request, queue, name))

    # -- helpers ------------------------------------------------------------------------

    def _record(self, request: HttpRequest, row: Any, queue: str, text: str) -> None:
        """Write ``text`` to the admin history of ``row`` (a consumer without a row: its
        queue's row; neither: nothing to write it to, and the message says so)."""
        target = row if row is not None else Queue.objects.filter(name=queue).first()
        if target is None:
            self.owner.message_user(
                request,
                _("Not recorded in the admin history: there is no database row for %(q)s.")
                % {"q": queue},
                messages.WARNING,
            )
            return
        self.owner.log_change(request, target, text)

    def _redis(self, request: HttpRequest, what: str, work: Callable[[Broker], Any]) -> Any:
        """``work(admin_broker())``; on failure an error message, and ``_FAILED``."""
        try:
            result = work(admin_broker())
        except (RedisqError, redis.RedisError, OSError) as exc:
            self.owner.message_user(
                request,
                _("%(what)s failed: %(error)s. Try again once Redis answers.")
                % {"what": what, "error": str(exc).rstrip(".")},
                messages.ERROR,
            )
            return _FAILED
        forget_figures()  # the page shows the change's effect at once
        return result

    # -- the actions --------------------------------------------------------------------

    def _pause(self, request: HttpRequest, row: Any, paused: bool) -> None:
        if row is None:
            self.owner.message_user(
                request,
                _(
                    "Only a consumer or queue with a database row can be paused: start a worker "
                    "that declares it first."
                ),
                messages.ERROR,
            )
            return
        if row.paused != paused:
            row.paused = paused
            row.save(update_fields=["paused", "updated_at"])
            self._record(request, row, "", PAUSED_LOG if paused else RESUMED_LOG)
        text = _("Paused %(what)s.") if paused else _("Resumed %(what)s.")
        self.owner.message_user(
            request,
            "{} {}".format(
                text % {"what": str(row)}, _("Running workers apply the change within seconds.")
            ),
            messages.SUCCESS,
        )

    def _deliver(
        self, request: HttpRequest, queue: str, name: str | None, row: Any, ref: str
    ) -> None:
        where = ref.partition(":")[0]
        if where not in (S_DELAYED, S_RETRY) or (where == S_RETRY and not name):
            self.owner.message_user(
                request,
                _("Only a delayed message or a retry can be delivered now."),
                messages.ERROR,
            )
            return

        def work(broker: Broker) -> str | Undeliverable | None:
            try:
                return broker.operator.deliver_now(queue, name, ref)
            except Undeliverable as refused:  # not an outage: said in its own words
                return refused

        new_id = self._redis(request, _("Delivering it now"), work)
        if isinstance(new_id, Undeliverable):  # no button offers it; a hand-made POST
            self.owner.message_user(request, str(UNDELIVERABLE), messages.ERROR)
            return
        if new_id is _FAILED:
            return
        # A partitioned queue's ref ends in @<partition> (core/operator/partition_pages.py).
        partitioned = admin_broker().partitions.count(queue) > 1
        message_id = (split_ref(ref)[0] if partitioned else ref).split(":", 2)[-1]
        if new_id is None:
            self.owner.message_user(
                request,
                _(
                    "Message %(id)s was not delivered now: it is no longer waiting (it came due, "
                    "or someone delivered it first)."
                )
                % {"id": message_id},
                messages.WARNING,
            )
            return
        what = _("delayed message") if where == S_DELAYED else _("retry")
        self._record(request, row, queue, operations.delivered_log(where, message_id))
        self.owner.message_user(
            request,
            _("Delivered %(what)s %(id)s now.") % {"what": what, "id": message_id},
            messages.SUCCESS,
        )

    def _end(
        self,
        request: HttpRequest,
        queue: str,
        name: str | None,
        row: Any,
        refs: list[str],
        *,
        delete: bool,
    ) -> None:
        if not refs:
            self.owner.message_user(
                request, _("No message was chosen: tick the messages first."), messages.ERROR
            )
            return
        user = getattr(request.user, "get_username", lambda: "")()
        refused: list[str] = []
        # Outside the work: what was ended before Redis failed half-way is still recorded
        results: list[Ended] = []

        def work(broker: Broker) -> None:
            for ref in refs:
                try:
                    results.append(
                        broker.operator.end_message(queue, name, ref, by=user, delete=delete)
                    )
                except ValueError as exc:
                    refused.append(str(exc))

        self._redis(request, _("Deleting") if delete else _("Ending"), work)
        for why in refused[:3]:
            self.owner.message_user(request, why, messages.ERROR)
        ended = [r.entry.message_id for r in results if r.outcome == "ended" and r.entry]
        gone = sum(r.outcome == "gone" for r in results)
        running = [r.entry.message_id for r in results if r.outcome == "in_flight" and r.entry]
        marked = [r for r in results if r.outcome == "marked" and r.entry]
        read = [r.entry.message_id for r in results if r.outcome == "read" and r.entry]
        if marked:
            ids = [r.entry.message_id for r in marked if r.entry]
            consumers = sorted({c for r in marked for c in r.consumers})
            self._record(request, row, queue, operations.marked_log(ids, consumers, delete=delete))
            text = (
                _(
                    "%(n)d message(s) waiting in the log marked for %(consumers)s: %(ids)s. "
                    "Their workers delete them, without running them, when they read them; "
                    "the queue's other consumers still receive them."
                )
                if delete
                else _(
                    "%(n)d message(s) waiting in the log marked for %(consumers)s: %(ids)s. "
                    "Their workers make them dead letters (reason ended), without running "
                    "them, when they read them; the queue's other consumers still receive "
                    "them. A worker of another client that does not honour marks would run "
                    "them (PROTOCOL.md)."
                )
            )
            shown = ", ".join(ids[:10]) + (" …" if len(ids) > 10 else "")
            self.owner.message_user(
                request,
                text % {"n": len(ids), "consumers": ", ".join(consumers), "ids": shown},
                messages.SUCCESS,
            )
        if read:
            self.owner.message_user(
                request,
                _(
                    "Not ended, read already by their consumers (in flight or handled): "
                    "%(ids)s. End their retry if they fail."
                )
                % {"ids": ", ".join(read[:10])},
                messages.WARNING,
            )
        if ended:
            self._record(request, row, queue, operations.ended_log(ended, delete=delete))
            text = (
                _("Deleted %(n)d message(s) for good: %(ids)s.")
                if delete
                else _(
                    "Ended %(n)d message(s): %(ids)s. They are dead letters now (a delayed "
                    "message one for each consumer): Retry on the dead letters brings them "
                    "back. A key they held passed to its next message."
                )
            )
            shown = ", ".join(ended[:10]) + (" …" if len(ended) > 10 else "")
            self.owner.message_user(
                request, text % {"n": len(ended), "ids": shown}, messages.SUCCESS
            )
        if gone:
            self.owner.message_user(
                request,
                _(
                    "%(n)d message(s) no longer waited there: they came due, were delivered "
                    "now or were ended by someone else meanwhile."
                )
                % {"n": gone},
                messages.WARNING,
            )
        if running:
            self.owner.message_user(
                request,
                _(
                    "Not ended, their consumer read them meanwhile (in flight): %(ids)s. End "
                    "their retry if they fail."
                )
                % {"ids": ", ".join(running[:10])},
                messages.WARNING,
            )

    def _start(self, request: HttpRequest) -> str:
        kind = request.POST.get("start") or request.GET.get("start") or "earliest"
        value = (request.POST.get("value") or request.GET.get("value") or "").strip()
        return "earliest" if kind == "earliest" else value

    def _replay(self, request: HttpRequest, queue: str, name: str, row: Any) -> None:
        try:
            start = operations.parse_start(self._start(request))
        except ValueError as exc:
            self.owner.message_user(request, str(exc), messages.ERROR)
            return
        done = self._redis(request, _("Replay"), lambda b: b.consumers.reset(queue, name, start))
        if done is _FAILED:
            return
        shown = self._start(request)
        self._record(request, row, queue, f"Replayed from {shown}")
        self.owner.message_user(
            request,
            _("%(c)s receives again every message from %(start)s that is still in the log.")
            % {"c": f"{queue}/{name}", "start": shown},
            messages.SUCCESS,
        )

    def _release(self, request: HttpRequest, queue: str, name: str, row: Any) -> None:
        try:
            key = decode_key(request.POST.get("key"))
        except ValueError as exc:
            self.owner.message_user(request, _not_a_key(exc), messages.ERROR)
            return
        if key is None:
            self.owner.message_user(request, _("No ordering key was named."), messages.ERROR)
            return

        def work(broker: Broker) -> bool:
            return broker.operator.release_key(queue, name, key)

        released = self._redis(request, _("Releasing the key"), work)
        if released is _FAILED:
            return
        if not released:
            self.owner.message_user(
                request,
                _(
                    "Ordering key %(key)s is not held back (any more): nothing was released. "
                    "Its holder finished meanwhile, or someone released it first."
                )
                % {"key": visible(key)},
                messages.WARNING,
            )
            return
        self._record(request, row, queue, operations.released_key_log(key))
        self.owner.message_user(
            request,
            _(
                "Released ordering key %(key)s of %(c)s: the next of its waiting messages went "
                "to the consumer's input and holds the key now."
            )
            % {"key": visible(key), "c": f"{queue}/{name}"},
            messages.SUCCESS,
        )

    def _purge(self, request: HttpRequest, queue: str, name: str | None, row: Any) -> None:
        if name is None:
            done = self._redis(request, _("Purge"), lambda b: b.purge(queue))
            if done is _FAILED:
                return
            self._record(request, row, queue, operations.PURGED_QUEUE_LOG)
            self.owner.message_user(
                request,
                _(
                    "Purged %(q)s: its log, delayed messages, retries and dead letters in Redis "
                    "are gone; its consumers stay registered."
                )
                % {"q": queue},
                messages.SUCCESS,
            )
            return

        def work(broker: Broker) -> tuple[int, int]:
            return broker.operator.purge_consumer(queue, name)

        removed = self._redis(request, _("Purge"), work)
        if removed is _FAILED:
            return
        retries, direct = removed
        self._record(request, row, queue, operations.purged_consumer_log(retries, direct))
        self.owner.message_user(
            request,
            _(
                "Purged %(c)s: its backlog is skipped, %(r)d retries and %(d)d messages of its "
                "private input are discarded; in-flight messages finish as usual."
            )
            % {"c": f"{queue}/{name}", "r": retries, "d": direct},
            messages.SUCCESS,
        )

    def _purge_costs(self, request: HttpRequest, queue: str) -> list[str] | None:
        """What purging ``queue`` costs its archives, one line each (empty: nothing);
        None when Redis did not say (the page then asks as if something were lost)."""
        try:
            return operations.purge_costs(queue, admin_broker())
        except (RedisqError, redis.RedisError, OSError):
            return None

    def _confirm_page(
        self,
        request: HttpRequest,
        queue: str,
        name: str | None,
        action: str,
        refs: list[str] | None = None,
    ) -> HttpResponse:
        try:
            key = decode_key(request.GET.get("key") or request.POST.get("key"))
        except ValueError as exc:
            raise Http404(_not_a_key(exc)) from None
        if action == "release" and key is None:
            raise Http404(_("No ordering key was named: use Release… on a held-back key."))
        titles = {
            "replay": _("Replay %(what)s?") % {"what": f"{queue}/{name}"},
            "release": _("Release ordering key %(key)s of %(what)s?")
            % {"key": visible(key or ""), "what": f"{queue}/{name}"},
            "purge": _("Purge %(what)s?") % {"what": f"{queue}/{name}" if name else queue},
            "delete": _("Delete %(n)d message(s) of %(what)s?")
            % {"n": len(refs or ()), "what": f"{queue}/{name}" if name else queue},
        }
        context = {
            **self.owner.admin_site.each_context(request),
            **self.scope.base_context(request, queue, name),
            "action": action,
            "action_url": request.path,
            "back_url": self.scope.back(request, queue, name),
            "confirm_name": name or queue,
            "start": request.GET.get("start") or request.POST.get("start") or "earliest",
            "value": request.GET.get("value") or request.POST.get("value") or "",
            "starts": STARTS,
            "held_key": key,
            "held_key_field": encode_key(key) if key is not None else "",
            "title": titles[action],
            "refs": [(ref, message_id_of(ref)) for ref in refs or ()],
        }
        if action == "purge" and name is None:
            costs = self._purge_costs(request, queue)
            context["purge_costs"] = costs
            context["purge_costs_unknown"] = costs is None
        return TemplateResponse(request, "admin/redisq_django/live/confirm.html", context)


def message_id_of(ref: str) -> str:
    """The message id a list's ref ends in (``retry:<due>:<id>``, ``delayed:…``), or
    the entry id of a stream's (``direct:<entry id>``), without its partition."""
    return split_ref(ref)[0].split(":", 2)[-1]


def _not_a_key(exc: ValueError) -> str:
    """What an operator reads when a Release form names no ordering key that can be."""
    return _(
        "Nothing was released: the form's key is not an ordering key (%(why)s). Use "
        "Release… on a key of the live page's Keys held back, or 'manage.py redisq "
        "release-key'."
    ) % {"why": exc}
