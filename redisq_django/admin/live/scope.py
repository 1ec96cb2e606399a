"""Whose live pages these are: the consumer's or the queue's admin, and what it lets a
user see and do; the addresses, the checks and the context that the pages
(:mod:`~redisq_django.admin.live.pages`) and their actions
(:mod:`~redisq_django.admin.live.page_actions`) share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.db.models import Model
from django.http import Http404, HttpRequest
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode

from redisq_django.admin.common import BREADCRUMBS_OL
from redisq_django.core.errors import InvalidName
from redisq_django.core.keys import validate_name
from redisq_django.models import Consumer, Queue

#: Whose pages: a logical consumer's (``queue/name``) or a queue's.
CONSUMER, QUEUE = "consumer", "queue"


class LiveOwner(Protocol):
    """What the live pages need of the admin that shows them (the consumer's or the
    queue's ``ModelAdmin``): its site, its model, its permissions, its messages and
    history, and how its pages look."""

    @property
    def admin_site(self) -> AdminSite: ...

    @property
    def model(self) -> type[Model]: ...

    @property
    def glossary(self) -> tuple[str, ...]:
        """The figures explained under the page (keys of ``figures.HELP``)."""

    @property
    def refresh_seconds(self) -> int:
        """Seconds between two refreshes of a live page."""

    @property
    def chart_refresh_seconds(self) -> int:
        """Seconds between two refreshes of its charts (a point is a minute)."""

    def has_view_permission(self, request: HttpRequest, obj: Any = ...) -> bool: ...

    def has_change_permission(self, request: HttpRequest, obj: Any = ...) -> bool: ...

    def has_delete_permission(self, request: HttpRequest, obj: Any = ...) -> bool: ...

    def message_user(self, request: HttpRequest, message: str, level: int = ...) -> None: ...

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any: ...


@dataclass(frozen=True)
class LiveScope:
    """The live pages of one admin: ``owner`` shows them, ``kind`` says whose
    (:data:`CONSUMER` or :data:`QUEUE`), and so which URL names they have."""

    owner: LiveOwner
    kind: str

    @property
    def url_name(self) -> str:
        """The page's URL name (its data, message and action URLs add a suffix)."""
        return f"redisq_django_{self.kind}_live"

    def check(self, request: HttpRequest, queue: str, name: str | None) -> None:
        """Refuse a user without the view permission, and names no queue or consumer can
        have (404, saying why)."""
        if not self.owner.has_view_permission(request):
            raise PermissionDenied
        try:
            validate_name("queue", queue)
            if name is not None:
                validate_name("consumer", name)
        except InvalidName as exc:
            raise Http404(str(exc)) from None

    def urls(self, queue: str, name: str | None) -> dict[str, str]:
        base = f"admin:{self.url_name}"
        args = [queue, name] if name is not None else [queue]
        return {
            "page_url": reverse(base, args=args),
            "data_url": reverse(f"{base}_data", args=args),
            "message_url": reverse(f"{base}_message", args=args),
            "queue_url": reverse("admin:redisq_django_queue_live", args=[queue]),
            "overview_url": reverse("admin:redisq_django_overview_changelist"),
            "dead_url": reverse("admin:redisq_django_deadletter_changelist")
            + "?"
            + urlencode(
                {"queue": queue, **({"consumer": name} if name else {}), "status__exact": "dead"}
            ),
        }

    def action_url(self, queue: str, name: str | None, action: str) -> str:
        args = [queue, name, action] if name is not None else [queue, action]
        return reverse(f"admin:{self.url_name}_action", args=args)

    def base_context(self, request: HttpRequest, queue: str, name: str | None) -> dict[str, Any]:
        """What every live page, message page and confirmation page shows."""
        can_change = self.owner.has_change_permission(request)
        return {
            **self.urls(queue, name),
            "queue": queue,
            "consumer": name,
            "kind": self.kind,
            "opts": self.owner.model._meta,
            "breadcrumbs_ol": BREADCRUMBS_OL,
            "can_change": can_change,
            "can_purge": can_change and self.owner.has_delete_permission(request),
        }

    def row(self, queue: str, name: str | None) -> Consumer | Queue | None:
        """The database row of the consumer (``name``) or queue, if there is one."""
        if name is not None:
            return (
                Consumer.objects.select_related("queue")
                .filter(queue__name=queue, name=name)
                .first()
            )
        return Queue.objects.filter(name=queue).first()

    def back(self, request: HttpRequest, queue: str, name: str | None) -> str:
        """Where to go after an action: the form's ``next`` when it is this site's, else
        the live page."""
        target = request.POST.get("next") or request.GET.get("next") or ""
        if target and url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            return target
        args = [queue, name] if name is not None else [queue]
        return reverse(f"admin:{self.url_name}", args=args)
