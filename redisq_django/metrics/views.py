"""The Django ``/metrics`` view: the state of every queue and consumer, for Prometheus.

Include ``redisq_django.urls`` in the project's URLconf (``path("redisq/",
include("redisq_django.urls"))`` serves ``/redisq/metrics``). Who may read it, as
django-rq does:

* a request with ``Authorization: Bearer <REDISQ['METRICS_TOKEN']>`` (what a Prometheus
  scrape job sends, with ``authorization: {credentials: ...}``), or
* a signed-in user with the ``redisq_django.view_queue`` permission (staff who see the
  queues in the admin), to look at it in a browser.

Anyone else gets 401 (403 when signed in without the permission); never a redirect to a
login page, which a scraper would not follow. The figures come from Redis at each scrape
(:mod:`.queues`), dead letters and pauses from the database; Redis gets
:data:`REDIS_TIMEOUT_S` to answer, so a scrape of a sick Redis ends in time with
``redisq_redis_up 0``.
"""

from __future__ import annotations

import hmac
import logging

import redis
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from redis.exceptions import RedisClusterException

from redisq_django.conf import get_settings
from redisq_django.connection import quick_broker
from redisq_django.core import Broker
from redisq_django.metrics import extras
from redisq_django.metrics.gauges import PerConsumer, QueueCollector

logger = logging.getLogger("redisq.metrics")

#: The permission that lets a signed-in user read the metrics.
PERMISSION = "redisq_django.view_queue"
#: How long the view waits for Redis (connect, and each reply), seconds.
REDIS_TIMEOUT_S = 2.0


@require_GET
@never_cache
def metrics(request: HttpRequest) -> HttpResponse:
    """Every queue's and consumer's gauges in the Prometheus text format (or OpenMetrics,
    when the scraper asks for it)."""
    denied = _denied(request)
    if denied is not None:
        return denied
    try:
        prom = extras.prometheus()
    except extras.MissingExtra as exc:
        return HttpResponse(str(exc), status=501, content_type="text/plain; charset=utf-8")
    registry = prom.CollectorRegistry(auto_describe=False)
    registry.register(_collector())
    from prometheus_client.exposition import choose_encoder

    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(registry), content_type=content_type)


def _denied(request: HttpRequest) -> HttpResponse | None:
    token = get_settings()["METRICS_TOKEN"]
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if token and scheme.lower() == "bearer":
        if hmac.compare_digest(given.strip().encode(), token.encode()):
            return None
        return _unauthorized("Wrong bearer token.")
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        if user.has_perm(PERMISSION):
            return None
        return HttpResponse(
            f"Reading redisq metrics needs the {PERMISSION} permission.",
            status=403,
            content_type="text/plain; charset=utf-8",
        )
    how = (
        "Send 'Authorization: Bearer <REDISQ[\"METRICS_TOKEN\"]>'"
        if token
        else "Set REDISQ['METRICS_TOKEN'] and send it as a bearer token"
    )
    return _unauthorized(f"{how}, or sign in with the {PERMISSION} permission.")


def _unauthorized(message: str) -> HttpResponse:
    response = HttpResponse(message, status=401, content_type="text/plain; charset=utf-8")
    response["WWW-Authenticate"] = 'Bearer realm="redisq metrics"'
    return response


def _collector() -> QueueCollector:
    return QueueCollector(
        connect=_broker, queues=_declared_queues, dead_letters=_dead_letters, paused=_paused
    )


def _broker() -> Broker:
    """A broker on the client of scrapes (short timeouts, no retries)."""
    try:
        return quick_broker(REDIS_TIMEOUT_S)
    except RedisClusterException as exc:  # no node answered: the scrape says Redis is down
        raise redis.ConnectionError(str(exc)) from exc


def _declared_queues() -> list[str]:
    from redisq_django.models import Queue

    return list(Queue.objects.values_list("name", flat=True))


def _dead_letters() -> PerConsumer:
    from redisq_django.models import DeadLetter

    rows = (
        DeadLetter.objects.filter(status=DeadLetter.Status.DEAD)
        .order_by()
        .values_list("queue", "consumer")
        .annotate(n=Count("id"))
    )
    return {(q, c): n for q, c, n in rows}


def _paused() -> PerConsumer:
    from redisq_django.models import Consumer

    rows = Consumer.objects.select_related("queue").only(
        "name", "paused", "queue__name", "queue__paused"
    )
    return {(r.queue.name, r.name): float(r.paused or r.queue.paused) for r in rows}
