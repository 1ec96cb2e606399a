"""Worker middleware for Django: database-connection hygiene around each batch."""

from __future__ import annotations

from collections.abc import Sequence

from django.db import close_old_connections

from redisq_django.core.delivery import Delivery
from redisq_django.core.worker import Middleware


class DjangoDatabaseMiddleware(Middleware):
    """Closes stale or broken database connections around each fetched batch, as Django
    does around each request, so a long-running worker survives database restarts."""

    def before_batch(self, messages: Sequence[Delivery]) -> None:
        close_old_connections()

    def after_batch(self, messages: Sequence[Delivery]) -> None:
        close_old_connections()
