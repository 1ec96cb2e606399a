"""Worker middleware for Django: database-connection hygiene around each batch, and the
middleware a ``runconsumer`` runs (metrics and tracing when asked for)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from django.db import close_old_connections

from redisq_django.conf import get_settings
from redisq_django.core.message import Message
from redisq_django.core.worker import Middleware

logger = logging.getLogger("redisq.worker")


class DjangoDatabaseMiddleware(Middleware):
    """Closes stale or broken database connections around each fetched batch, as Django
    does around each request, so a long-running worker survives database restarts."""

    def before_batch(self, messages: Sequence[Message]) -> None:
        close_old_connections()

    def after_batch(self, messages: Sequence[Message]) -> None:
        close_old_connections()


def worker_middleware(*, metrics: bool = False) -> list[Middleware]:
    """The middleware of a worker: database hygiene; OpenTelemetry tracing when
    ``REDISQ['TRACING']`` is on; Prometheus counters with ``metrics``
    (``runconsumer --metrics-port``).

    Raises:
        MissingExtra: a library asked for is not installed (the message names the extra).
    """
    out: list[Middleware] = [DjangoDatabaseMiddleware()]
    if get_settings()["TRACING"]:
        from redisq_django.metrics import tracing as metrics_tracing

        tracing = metrics_tracing.get_tracing()
        if tracing.live():
            out.append(tracing)
        else:  # every span would be a no-op: cost nothing per message instead
            logger.warning(
                "REDISQ['TRACING'] is on, but this process has no OpenTelemetry SDK "
                "(no TracerProvider is set): handlers are not traced. Configure the SDK in "
                "your settings or an AppConfig.ready()."
            )
    if metrics:
        from redisq_django.metrics.worker import PrometheusMiddleware

        out.append(PrometheusMiddleware())
    return out
